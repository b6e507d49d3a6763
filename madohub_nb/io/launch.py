"""How a tile's command reaches its pane without ever being in a process's argv.

tmux runs a new pane's command as ``default-shell -c COMMAND``: the shell's argv,
which every user of the machine can read in ``ps``, would hold the command (and
any ``export TOKEN=…`` in it) for as long as the shell lives. Instead the command
goes into a tmux buffer of its own (``set-buffer``, over the control connection or
on a tmux client's stdin), and the pane's shell runs a fixed :func:`launcher` that
reads the buffer, deletes it and ``eval``\\ s it. The shell is still tmux's
``default-shell`` in the pane's cwd with its env, so the command means what it
meant before.

``eval`` loses one thing ``sh -c`` did: bash (and zsh) ``exec`` the last command of
a ``-c`` string, so that the agent *is* the pane's process (its ``pane_pid``, the
foreground name tmux reports). :func:`with_exec` puts that ``exec`` in where it is
plainly safe: the last command of a list of simple commands, naming a program.
"""

from __future__ import annotations

import re

LAUNCH_BUFFER_PREFIX = "madohub-command-"
"""Names of the tmux buffers that carry a new pane's command (deleted once read)."""

_SHELL_WORDS = frozenset(
    "! { } [[ ]] if then else elif fi case esac for select while until do done in function "
    "time coproc repeat foreach end "
    ". : [ alias bg bind break builtin caller cd chdir command compgen complete compopt "
    "continue declare dirs disown echo emulate enable eval exec exit export false fc fg "
    "getopts hash help history jobs kill let local logout mapfile popd print printf pushd "
    "pwd read readarray readonly return set setopt shift shopt source suspend test times "
    "trap true type typeset ulimit umask unalias unset unsetopt wait whence autoload noglob "
    "nocorrect".split()
)
"""Reserved words and builtins of sh, bash and zsh: ``exec`` cannot run these."""

_PROGRAM_RE = re.compile(r"[A-Za-z0-9_./+@%:,-]+(?=\s|$)")
_NEVER_EXEC = ("trap", "alias", "function")
"""A command using these may rely on the shell staying (an EXIT trap, an alias, a function)."""


def launch_buffer_name() -> str:
    """A new, unguessable buffer name for one pane's command."""
    import uuid

    return f"{LAUNCH_BUFFER_PREFIX}{uuid.uuid4().hex}"


def launcher(buffer: str) -> str:
    """The pane's command line: read ``buffer``, delete it, run what it held.

    The pane's own ``tmux`` client finds the server through ``$TMUX`` (tmux sets it
    in every pane); its argv holds the buffer's name, never the command.
    """
    return f'eval "$(tmux show-buffer -b {buffer} \\; delete-buffer -b {buffer})"'


def with_exec(command: str) -> str:
    """``command`` with ``exec`` before its last command, when that changes only which
    process runs it (as ``bash -c`` does by itself); else ``command`` unchanged.

    Only a list (``;``, ``&&``, ``||``, line breaks) of simple commands qualifies, whose
    last names a program: no pipes, background jobs, subshells, braces, substitutions,
    here-documents, comments, keywords or builtins, no assignment before it.
    """
    start = _last_command_start(command)
    if start is None:
        return command
    tail = command[start:]
    words = tail.lstrip()
    program = _PROGRAM_RE.match(words)
    if program is None or "=" in program.group() or program.group() in _SHELL_WORDS:
        return command
    if any(re.search(rf"(^|[;&|\n])\s*{w}\b", command) for w in _NEVER_EXEC):
        return command
    return command[:start] + tail[: len(tail) - len(words)] + "exec " + words


def _last_command_start(command: str) -> int | None:
    """Where the last command of a plain list of simple commands starts; None if ``command``
    is anything else (or has a construct this reading does not follow)."""
    i, n, start = 0, len(command), 0
    while i < n:
        c = command[i]
        pair = command[i : i + 2]
        if c == "\\":
            i += 2
        elif c == "'":
            end = command.find("'", i + 1)
            if end < 0:
                return None
            i = end + 1
        elif c == '"':
            i += 1
            while i < n and command[i] != '"':
                if command[i] == "`" or command[i : i + 2] == "$(":
                    return None
                i += 2 if command[i] == "\\" else 1
            if i >= n:
                return None
            i += 1
        elif pair in ("&&", "||"):
            start = i = i + 2
        elif pair in (">&", "&>"):
            i += 2
        elif pair == "<<" or pair == ";;" or pair == "$(" or c in "`(){}|&#":
            return None
        elif c in ";\n":
            start = i = i + 1
        else:
            i += 1
    return start if command[start:].strip() else None
