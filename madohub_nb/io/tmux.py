"""The tmux adapter: every tmux command the toolkit runs goes through here.

Two channels:
- output is *pushed*: one control-mode client (``tmux -C attach``) per tmux
  session streams ``%output`` events of the panes someone needs (the others are
  paused for it, see :mod:`madohub_nb.io.watch`), so watching idle panes costs
  nothing and silence is measured from the bytes themselves;
- commands (``capture-pane``, ``send-keys``, ``display-message`` …) go over
  that same control connection once it exists (a command line, answered by a
  ``%begin``…``%end`` block: about 0.1 ms), else as short ``tmux -L <socket>``
  processes (about 2.5 ms each). A command whose connection closed before it
  was written runs as a process instead; one that was written is never sent
  twice (it may have run).

Text a pane sets (its screen, title, working directory, command name) is never
read as protocol: tmux sends a command's answer inside its ``%begin``…``%end``
block unescaped, so a pane printing ``%end …`` could end the block early and
make what follows look like events of other panes. Such answers are *framed*
(see :func:`pane_free`): the command is followed by a second one printing a
random marker, and everything up to the marker is the answer; a pane cannot
print a marker it never saw.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from ..agents.regex import lazy_compile
from ..defaults import check_socket_name
from ..engine import spawn
from ..errors import MadohubValueError, TmuxError
from ..secrets import SECRET_ENV_VARS
from .launch import launch_buffer_name, launcher, with_exec

PANE_ID_RE = lazy_compile(r"^%\d+\Z")
SYNCHRONIZED_REPLY = "madohub-refused-synchronized-panes"
"""What a guarded send prints instead of typing when the window has synchronize-panes on."""
_PLAIN_KEY_RE = lazy_compile(r"^[A-Za-z0-9-]+\Z")
TARGET_RE = lazy_compile(r"^[^:\s]+(:[^.\s]*(\.\d+)?)?\Z")

_PANE_FIELDS = (
    "#{pane_id}", "#{pane_pid}", "#{pane_dead}", "#{pane_current_command}", "#{session_name}",
    "#{pane_in_mode}", "#{pane_width}", "#{pane_height}", "#{pane_current_path}",
    "#{pane_dead_status}", "#{pane_title}",
)  # fmt: skip
"""What :meth:`Tmux.pane_info` asks for. A pane chooses its command name, path and title,
and any of them may hold tabs or line breaks: the fields are joined by a separator made
for each call, which the pane cannot know."""


@dataclass(frozen=True)
class PaneInfo:
    """What tmux says about one pane right now."""

    pane_id: str
    pid: int
    dead: bool
    current_command: str
    session: str
    in_mode: bool
    width: int
    height: int
    current_path: str
    dead_status: int | None
    title: str = ""


def _parse_pane_info(answer: str, separator: str) -> PaneInfo | None:
    parts = answer.split(separator)
    if len(parts) != len(_PANE_FIELDS) or not parts[1].isdigit():
        return None
    return PaneInfo(
        pane_id=parts[0],
        pid=int(parts[1]),
        dead=parts[2] == "1",
        current_command=parts[3],
        session=parts[4],
        in_mode=parts[5] == "1",
        width=int(parts[6]) if parts[6].isdigit() else 0,
        height=int(parts[7]) if parts[7].isdigit() else 0,
        current_path=parts[8],
        dead_status=int(parts[9]) if parts[9].lstrip("-").isdigit() else None,
        title=parts[10],
    )


class Tmux:
    """One tmux server, addressed by socket name (``tmux -L``); None is the default server."""

    def __init__(self, socket_name: str | None = None, remote: RemoteShell | None = None) -> None:
        import shutil

        self.socket_name = check_socket_name(socket_name)
        self.remote = remote
        """A remote host's tmux (``ssh host tmux …``, see io/remote.py); None: this machine's."""
        if remote is None and shutil.which("tmux") is None:
            raise TmuxError("tmux is not installed; install it (e.g. `apt-get install tmux`)")
        self._channel: ControlClient | None = None
        self.channel_commands = 0
        """Commands answered over the control connection (the rest ran as processes)."""
        self._launch_buffers: dict[str, str] = {}
        """The buffer that carried each new pane's command (its shell deletes it on reading)."""

    def argv(self, *args: str) -> list[str]:
        """The full command line for a tmux command on this server."""
        base = ["tmux"]
        if self.socket_name:
            base += ["-L", self.socket_name]
        if self.remote is not None:  # -u: UTF-8 (an ssh session may have no locale)
            return self.remote.argv([base[0], "-u", *base[1:], *args])
        return [*base, *args]

    def server_wall_time(self) -> float:
        """The server's wall clock now (epoch s), never ahead of it.

        This machine's clock for a local server. A remote host's clock may differ from
        ours: its time is the stamp of the last ``%begin`` it sent (whole seconds, so
        the floor of its time), moved on by our monotonic clock since; with no stamp
        yet, the earliest time it can be (0), so nothing measured against it looks old.
        """
        if self.remote is None:
            return time.time()
        channel = self._channel
        stamp = channel.server_clock if channel is not None else None
        if stamp is None:
            return 0.0
        seconds, mono = stamp
        return seconds + (time.monotonic() - mono)

    # the control connection ---------------------------------------------------
    def use_channel(self, client: ControlClient) -> None:
        """Send commands through ``client`` (a control-mode connection) from now on."""
        if self._channel is None or not self._channel.alive:
            self._channel = client

    @property
    def channel_up(self) -> bool:
        """Commands go over a live control connection now (not as short processes)."""
        channel = self._channel
        return channel is not None and channel.alive

    def drop_channel(self, client: ControlClient) -> None:
        """``client`` is going away: commands fall back to short tmux processes."""
        if self._channel is client:
            self._channel = None

    def _usable_channel(self, args: tuple[str, ...], input: str | None) -> ControlClient | None:
        channel = self._channel
        if channel is None or not channel.alive or input is not None or not channel_ok(args):
            return None
        return channel

    def run(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """Run one tmux command and return its stdout; raise TmuxError when it fails.

        Over the control connection when there is one (about 0.1 ms a command,
        against about 2.5 ms for a new ``tmux`` process), else as a process.
        """
        channel = self._channel_from_here(args, input)
        if channel is not None and channel.loop is not None:
            future = asyncio.run_coroutine_threadsafe(channel.command(args, check), channel.loop)
            try:
                out = future.result(COMMAND_TIMEOUT_S)
                self.channel_commands += 1
                return out
            except TmuxError:
                self.channel_commands += 1  # answered (with %error) over the connection
                raise
            except concurrent.futures.TimeoutError as exc:
                raise TmuxError(
                    f"tmux {args[0]} did not answer within {COMMAND_TIMEOUT_S:.0f} s"
                ) from exc
            except ChannelClosed:
                pass  # closed before the command was sent: run it the other way
        return self._run_process(*args, input=input, check=check)

    def _channel_from_here(self, args: tuple[str, ...], input: str | None) -> ControlClient | None:
        """The control connection :meth:`run` sends ``args`` over from this thread, or None
        (a process: no connection, or this is its loop's thread, which must not wait on it)."""
        channel = self._usable_channel(args, input)
        if channel is None or channel.loop is None or channel.on_loop_thread():
            return None
        return channel

    def _run_unlisted(self, *args: str) -> str:
        """:meth:`run` for a command whose arguments may hold secrets (a tile's ``env``, its
        command): never in a process's argv, which every user of the machine (or host) can
        read, and which the tmux server a client starts keeps as its own for its lifetime.

        Over the control connection when it takes the command, else as text on the
        stdin of ``tmux start-server ; source-file -`` (through ssh for a host); line
        breaks are written as escapes (:func:`command_line`), so nothing goes in argv.
        """
        if self._channel_from_here(args, None) is not None:
            return self.run(*args)
        line, _ = command_line(args)
        return self.run("start-server", ";", "source-file", "-", input=line + "\n")

    def _run_process(self, *args: str, input: str | None = None, check: bool = True) -> str:
        try:
            proc = subprocess.run(
                self.argv(*args),
                env=client_environment(),
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,  # (ssh would read it)
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=COMMAND_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise TmuxError(
                f"tmux {args[0]} did not answer within {COMMAND_TIMEOUT_S:.0f} s"
            ) from exc
        if check and proc.returncode != 0:
            raise TmuxError(
                f"tmux {' '.join(args[:3])} failed: {proc.stderr.strip() or proc.returncode}"
            )
        return proc.stdout

    async def arun(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """:meth:`run` without blocking the event loop (over the control connection if any)."""
        channel = self._usable_channel(args, input)
        if channel is not None and channel.on_loop_thread():
            try:
                out = await channel.command(args, check)
                self.channel_commands += 1
                return out
            except TmuxError:
                self.channel_commands += 1  # answered (with %error) over the connection
                raise
            except ChannelClosed:
                pass  # closed before the command was sent: run it the other way
        return await asyncio.to_thread(self._run_process, *args, input=input, check=check)

    # server and sessions ------------------------------------------------
    def server_pid(self) -> int | None:
        out = self.run("display-message", "-p", "#{pid}", check=False).strip()
        return int(out) if out.isdigit() else None

    def has_session(self, name: str) -> bool:
        try:
            proc = subprocess.run(
                self.argv("has-session", "-t", f"={name}"),
                capture_output=True,
                env=client_environment(),
                stdin=subprocess.DEVNULL,
                timeout=COMMAND_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise TmuxError(
                f"tmux has-session did not answer within {COMMAND_TIMEOUT_S:.0f} s"
            ) from None
        return proc.returncode == 0

    def new_pane(
        self,
        session: str,
        command: str | None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        window_name: str | None = None,
        width: int = 200,
        height: int = 50,
    ) -> tuple[str, int]:
        """Start ``command`` in a new window of ``session`` (created if needed).

        Returns the new pane's id and pid. Each tile gets a window of its own so
        that panes keep a stable size. The command reaches the pane's shell through a
        buffer of its own, never in argv (see :mod:`madohub_nb.io.launch`).
        """
        opts: list[str] = ["-P", "-F", "#{pane_id} #{pane_pid}"]
        if cwd:
            opts += ["-c", cwd]
        for key, value in (env or {}).items():
            opts += ["-e", f"{key}={value}"]
        if window_name:
            opts += ["-n", window_name]
        cmd: list[str] = []
        carry: list[str] = []  # the command, into its buffer, before the pane starts
        buffer = None
        if command:
            buffer = launch_buffer_name()
            carry = ["set-buffer", "-b", buffer, "--", with_exec(command), ";"]
            cmd = [launcher(buffer)]
        if not self.has_session(session):
            # The options go in the same tmux call, so that they apply before a command that
            # exits at once is reaped: its pane then stays, dead, with its exit status.
            out = self._run_unlisted(
                *carry,
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                str(width),
                "-y",
                str(height),
                *opts,
                *cmd,
                ";",
                "set-option",
                "-t",
                session,
                "remain-on-exit",
                "on",
                ";",
                # remain-on-exit is a window option: later windows get it from this hook,
                # applied before a command that exits at once is reaped (tmux 3.3a).
                "set-hook",
                "-t",
                session,
                "after-new-window",
                "set-option -w remain-on-exit on",
                ";",
                "set-option",
                "-t",
                session,
                "window-size",
                "manual",
                ";",
                "set-option",
                "-t",
                session,
                "status",
                "off",
                ";",
                "set-option",
                "-g",
                "focus-events",
                "on",
            )
            pane_id, pid = _pane_and_pid(out)
        else:
            out = self._run_unlisted(*carry, "new-window", "-d", "-t", f"{session}:", *opts, *cmd)
            pane_id, pid = _pane_and_pid(out)
            self.run(
                "resize-window", "-t", pane_id, "-x", str(width), "-y", str(height), check=False
            )
        if buffer is not None:
            self._launch_buffers[pane_id] = buffer
        return pane_id, pid

    def kill_session(self, name: str) -> None:
        self.run("kill-session", "-t", f"={name}", check=False)

    def kill_pane(self, pane_id: str) -> None:
        buffer = self._launch_buffers.pop(pane_id, None)
        if buffer is not None:  # (its shell never read it if it could not start)
            self.run("delete-buffer", "-b", buffer, check=False)
        self.run("kill-pane", "-t", pane_id, check=False)

    # panes --------------------------------------------------------------
    def pane_info(self, target: str) -> PaneInfo | None:
        """Facts about a pane (by ``%N`` id or ``session:window.pane`` target); None if gone."""
        import uuid

        separator = f"|{uuid.uuid4().hex}|"
        out = self.run(
            "display-message", "-p", "-t", target, separator.join(_PANE_FIELDS), check=False
        )
        answer = out.removesuffix("\n")  # (a title holds no line break)
        if not answer.strip():
            return None
        info = _parse_pane_info(answer, separator)
        if info is None or (PANE_ID_RE.fullmatch(target) and info.pane_id != target):
            # display-message falls back to the current pane for unknown ids.
            return None
        return info

    def capture(self, pane_id: str, ansi: bool = False, history_lines: int = 0) -> str:
        """The pane's visible screen (plus ``history_lines`` of scrollback)."""
        args = ["capture-pane", "-p", "-J", "-t", pane_id]
        if ansi:
            args.append("-e")
        if history_lines:
            args += ["-S", str(-history_lines)]
        return self.run(*args)

    def cancel_copy_mode(self, pane_id: str) -> None:
        self.run("send-keys", "-t", pane_id, "-X", "cancel", check=False)

    def paste(self, pane_id: str, text: str, bracketed: bool = True) -> bool:
        """Paste ``text`` through a uniquely named buffer (buffers are server-wide).

        Like :meth:`send_guarded`, nothing is pasted (and False returned) while
        the pane's window has synchronize-panes on.
        """
        import uuid

        name = f"madohub-{uuid.uuid4().hex}"
        self.run("load-buffer", "-b", name, "-", input=text)
        paste = f"paste-buffer {'-p ' if bracketed else ''}-d -b {name} -t {pane_id}"
        try:
            return self.send_guarded(pane_id, [paste])
        finally:
            self.run("delete-buffer", "-b", name, check=False)

    def send_guarded(self, pane_id: str, commands: list[str]) -> bool:
        """Run tmux ``commands`` (strings) only if ``pane_id``'s window is not synchronized.

        With synchronize-panes on, every key sent to one pane is typed into all
        the panes of its window, so nothing is sent and False is returned. The
        check and the sending are one tmux invocation (``if-shell -F``): no
        extra process per line, and no window for the option to change between.
        """
        return SYNCHRONIZED_REPLY not in self.run(*_guarded(pane_id, commands))

    async def asend_guarded(self, pane_id: str, commands: list[str]) -> bool:
        """:meth:`send_guarded` without blocking the loop.

        Over the control connection it is the same atomic ``if-shell -F``, one line and
        one round trip (about 0.1 ms; a check and a send as two round trips cost twice
        that, and left a moment between them for the option to change). ``if-shell``
        answers with a block of its own and one per command it runs, so both of its
        branches run as many commands (the refusal prints its reply once per command):
        its answer is always ``1 + len(commands)`` blocks. Without a connection, the
        ``if-shell`` runs as a process.
        """
        channel = self._usable_channel(("display-message",), None)
        countable = all(_one_plain_command(c) for c in commands)
        if channel is not None and channel.on_loop_thread() and countable and commands:
            try:
                line, _ = command_line(_guarded(pane_id, commands))
                out = await channel.command_line(line, 1 + len(commands), True, "if-shell")
                self.channel_commands += 1
                return SYNCHRONIZED_REPLY not in out
            except ChannelClosed:
                pass
        return SYNCHRONIZED_REPLY not in await asyncio.to_thread(
            self.run, *_guarded(pane_id, commands)
        )

    def resolve_pane(self, pane: str) -> PaneInfo:
        """Check an adopted pane reference and return its info, or raise a teaching error."""
        if not isinstance(pane, str) or not (
            PANE_ID_RE.fullmatch(pane) or TARGET_RE.fullmatch(pane)
        ):
            raise MadohubValueError(
                f"pane {pane!r} is not a tmux pane reference; use a pane id like '%3' "
                "or a target like 'session:window.pane'"
            )
        info = self.pane_info(pane)
        if info is None:
            where = (
                f"tmux server {self.socket_name!r}"
                if self.socket_name
                else "the default tmux server"
            )
            raise MadohubValueError(
                f"pane {pane!r} does not exist on {where}; list panes with `tmux list-panes -a`"
            )
        return info


def _retrieve(future: asyncio.Future[str]) -> None:
    if not future.cancelled():
        future.exception()


def _guarded(pane_id: str, commands: list[str]) -> tuple[str, ...]:
    """``if-shell`` arguments that run ``commands`` unless the pane's window is synchronized
    (then as many ``display-message`` of the refusal: the same number of answer blocks)."""
    refusal = f"display-message -p {SYNCHRONIZED_REPLY}"
    return (
        "if-shell", "-F", "-t", pane_id, "#{pane_synchronized}",
        " ; ".join([refusal] * max(1, len(commands))), " ; ".join(commands),
    )  # fmt: skip


def _one_plain_command(command: str) -> bool:
    """Is ``command`` (a command string) one command that queues no others, on one line?
    Then it answers a control connection with exactly one block."""
    words = command.split()
    return (
        bool(words)
        and words[0] not in NESTING_COMMANDS
        and not any(c in command for c in ";\n\r\0")
    )


def _pane_and_pid(out: str) -> tuple[str, int]:
    """``"%3 4242"`` (what ``-P -F '#{pane_id} #{pane_pid}'`` prints) → ``("%3", 4242)``."""
    first = out.strip().splitlines()[0] if out.strip() else ""
    pane_id, _, pid = first.partition(" ")
    if not PANE_ID_RE.fullmatch(pane_id) or not pid.isdigit():
        raise TmuxError(f"tmux did not report the new pane (it printed {out.strip()!r})")
    return pane_id, int(pid)


COMMAND_TIMEOUT_S = 15.0
"""How long one tmux command may take before it is an error."""


class ChannelClosed(Exception):
    """The control connection closed before a command was written to it (safe to retry)."""


NESTING_COMMANDS = frozenset(
    {"if-shell", "if", "run-shell", "run", "source-file", "source", "confirm-before",
     "command-prompt", "display-menu", "display-popup"}
)  # fmt: skip
"""Commands that queue other commands: in control mode each of those answers with a block
of its own, which a caller cannot count in advance; they run as processes instead."""


QUIET_COMMANDS = frozenset(
    {"send-keys", "refresh-client", "resize-window", "resize-pane", "kill-pane", "kill-window",
     "kill-session", "set-option", "set-window-option", "set-hook", "paste-buffer",
     "delete-buffer", "set-buffer", "select-pane", "select-window", "set-environment",
     "start-server", "has-session", "clear-history"}
)  # fmt: skip
"""Commands that print nothing when they succeed (an error names only their arguments)."""

FORMAT_COMMANDS = frozenset({"display-message", "list-panes", "new-window", "new-session"})
"""Commands whose answer is the expansion of a format (and of nothing else, given ``-F``)."""

PANE_FREE_FORMATS = frozenset(
    {"pane_id", "pane_pid", "pid", "pane_dead", "pane_dead_status", "pane_in_mode",
     "pane_width", "pane_height", "pane_synchronized", "history_size", "cursor_x", "cursor_y",
     "window_activity", "window_id", "session_id"}
)  # fmt: skip
"""Format variables no pane can set (numbers, flags, ids): not its text, title, path or
command name, which a program in the pane chooses and may fill with protocol lines."""

_FORMAT_VARIABLE_RE = lazy_compile(r"#\{([a-z_]+)\}")


def split_commands(args: tuple[str, ...] | list[str]) -> list[list[str]]:
    """``args`` cut at each lone ``;`` into the commands of one tmux command line."""
    commands: list[list[str]] = [[]]
    for arg in args:
        if arg == ";":
            commands.append([])
        else:
            commands[-1].append(arg)
    return [c for c in commands if c]


def pane_free(args: tuple[str, ...] | list[str]) -> bool:
    """Can tmux's answer to ``args`` hold nothing a pane sets? Only then may it be read as a
    plain ``%begin``…``%end`` block; any other answer is framed (see :class:`ControlClient`)."""
    for command in split_commands(args):
        name, rest = command[0], command[1:]
        if name in QUIET_COMMANDS:
            continue
        if name not in FORMAT_COMMANDS or (
            "-F" not in rest and ("-P" in rest or name == "list-panes")
        ):
            return False  # (without -F, new-window -P and list-panes print their own formats)
        if any("#" in _FORMAT_VARIABLE_RE.sub(_pane_free_variable, a) for a in rest):
            return False
    return True


def _pane_free_variable(m: re.Match[str]) -> str:
    return "" if m.group(1) in PANE_FREE_FORMATS else "#"


def one_line(args: tuple[str, ...] | list[str]) -> bool:
    """Can ``args`` be written as one tmux command line? (No line break, no NUL.)"""
    return not any("\n" in a or "\r" in a or "\0" in a for a in args)


def quotable(args: tuple[str, ...] | list[str]) -> bool:
    """Can ``args`` go on one control-mode command line? (No line breaks, no NUL, no nesting.)"""
    return (
        bool(args)
        and one_line(args)
        and not any(a in NESTING_COMMANDS for a in args[:1])
        and not any(args[i + 1] in NESTING_COMMANDS for i, a in enumerate(args[:-1]) if a == ";")
    )


def channel_ok(args: tuple[str, ...] | list[str]) -> bool:
    """Can ``args`` go over a control connection? One line, no nesting, and either one
    command (its answer then framed if need be) or commands that print no pane text."""
    return quotable(args) and (len(split_commands(args)) == 1 or pane_free(args))


def command_line(args: tuple[str, ...] | list[str]) -> tuple[str, int]:
    """``args`` as one tmux command line (each argument single-quoted) and how many commands.

    A lone ``;`` argument separates commands, as on tmux's own command line.
    Inside single quotes tmux takes every character literally (``;``, ``$``,
    ``~``, ``#{…}``, backslashes); a quote is written ``'\\''``. A control
    character (a line break) is written as an octal escape in double quotes
    (``'a'"\\012"'b'``), so that any argument fits on one line.
    """
    words = []
    commands = 1
    for arg in args:
        if arg == ";":
            words.append(";")
            commands += 1
        else:
            quoted = "'" + arg.replace("'", "'\\''") + "'"
            words.append(_CONTROL_RE.sub(_escaped_controls, quoted))
    return " ".join(words), commands


_CONTROL_RE = lazy_compile(r"[\x00-\x1f\x7f]+")


def _escaped_controls(m: re.Match[str]) -> str:
    """A run of control characters inside single quotes: close them, escape, reopen."""
    return "'\"" + "".join(f"\\{ord(c):03o}" for c in m.group()) + "\"'"


_KEY_NAMES = {"\r": "C-m", "\n": "C-j", "\t": "Tab"}


def key_name(key: str) -> str:
    """The tmux key name for a control character profiles use (``\\r`` → ``C-m``)."""
    return _KEY_NAMES.get(key, key)


def hex_keys_command(pane_id: str, text: str) -> str:
    """A ``send-keys -H`` command string that types ``text``'s UTF-8 bytes exactly.

    Hex keys need no quoting inside a tmux command string (no ``;``, quote,
    ``#``, ``~`` or ``$`` is ever seen by tmux's parser); tmux writes each byte
    to the pane as is (``KEYC_LITERAL``), so multi-byte characters arrive whole.
    """
    return f"send-keys -t {pane_id} -H " + " ".join(f"{b:02x}" for b in text.encode("utf-8"))


def key_command(pane_id: str, key: str) -> str:
    """A ``send-keys`` command string pressing one key (a profile key or a control character)."""
    name = key_name(key)
    if _PLAIN_KEY_RE.fullmatch(name):
        return f"send-keys -t {pane_id} {name}"
    return hex_keys_command(pane_id, key)


def client_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for tmux client processes: ``environ`` without secrets.

    The first tmux client starts the server, whose global environment (and so
    every pane) is a copy of the client's: the hub's API keys would reach every
    agent and shell. A tile that needs one names it in its ``env``.
    """
    env = dict(os.environ if environ is None else environ)
    for name in SECRET_ENV_VARS:
        env.pop(name, None)
    return env


_OCTAL_RE = re.compile(rb"\\([0-7]{3})|\\\\")
_COMMON_ESCAPES: Final = tuple(
    (b"\\%03o" % code, bytes([code])) for code in (0o12, 0o15, 0o11, 0o33, 0o10, 0o7)
)
"""Newline, return, tab, escape, backspace, bell: (not the backslash, whose byte would
start a false escape for the next replacement)."""


def decode_control_output(data: bytes) -> bytes:
    """Undo tmux control mode's octal escaping of ``%output`` data."""
    if b"\\" not in data:
        return data
    if b"\\\\" not in data:
        # Every backslash starts a \ooo escape: the common ones are replaced in C (a
        # flood of short lines has one per few bytes; a Python call each fell behind).
        for escaped, byte in _COMMON_ESCAPES:
            data = data.replace(escaped, byte)
        if b"\\" not in data:
            return data

    def repl(m: re.Match[bytes]) -> bytes:
        return bytes([int(m.group(1), 8)]) if m.group(1) else b"\\"

    return _OCTAL_RE.sub(repl, data)


OutputCallback = Callable[[str, bytes], None]

YIELD_EVERY_BYTES = 64 * 1024
"""Output read in one go before the reader lets other tasks (routes reading it) run."""


class RemoteShell(Protocol):
    """Runs a command on another machine (io/remote.py's ``SshHost``)."""

    def argv(self, words: Iterable[str]) -> list[str]: ...


@dataclass
class _Pending:
    """A command written to the control connection, waiting for its answer block(s).

    It leaves the queue only when its answer has been read (or the connection ended), even
    when its caller gave up: the reader must still know which block is whose, and which
    answer is framed.
    """

    blocks: int
    future: asyncio.Future[str]
    check: bool
    name: str
    marker: bytes | None = None
    """The random line that ends a framed answer (see :meth:`ControlClient.command_line`)."""
    lines: list[bytes] = field(default_factory=list)
    error: bool = False


def _answer_end(line: bytes, number: list[bytes]) -> bool:
    """Is ``line`` the ``%end``/``%error`` of the block numbered ``number``?"""
    return line.startswith((b"%end ", b"%error ")) and line.split(b" ")[2:3] == number


class ControlClient:
    """A ``tmux -C attach`` client for one session: streams ``%output`` events.

    ``on_output(pane_id, data)`` and ``on_exit()`` are called on the event loop;
    ``data`` is as tmux sent it, octal-escaped: only its consumers pay for
    :func:`decode_control_output` (a chatty pane nobody routes costs less).
    It also carries commands (:meth:`command`); the hub's sessions have
    ``window-size manual``, so the attached client never resizes their windows.
    """

    def __init__(
        self,
        tmux: Tmux,
        session: str,
        on_output: OutputCallback,
        on_exit: Callable[[], None],
    ) -> None:
        self.tmux = tmux
        self.session = session
        self._on_output = on_output
        self._on_exit = on_exit
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._broken = False
        self.server_clock: tuple[int, float] | None = None
        """(the server's epoch second, our monotonic time) from the last ``%begin`` read."""
        self._pending: deque[_Pending] = deque()
        """Commands written and not yet answered, oldest first (tmux answers in order)."""
        # What the reader is inside of: a plain block (its lines, number, whether ours), or a
        # framed answer (its raw lines up to the marker, and its first block's number).
        self._block: list[bytes] | None = None
        self._number: list[bytes] = []
        self._ours = False
        self._framed: list[bytes] | None = None
        self._unyielded = 0

    @property
    def alive(self) -> bool:
        proc = self._proc
        return (
            proc is not None
            and proc.returncode is None
            and not self._stopping
            and not self._broken
            and proc.stdin is not None
            and not proc.stdin.is_closing()
        )

    def on_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    async def command(self, args: tuple[str, ...] | list[str], check: bool = True) -> str:
        """Run tmux ``args`` over this connection; its output, as ``tmux`` would print it.

        Raises ``ChannelClosed`` if the connection was gone before the command was
        written (nothing ran) or the command cannot go over it (several commands, one
        of which may print pane text), ``TmuxError`` if tmux refused it (when
        ``check``) or the connection closed while it ran.
        """
        line, blocks = command_line(args)
        framed = not pane_free(args)
        if framed and blocks > 1:
            raise ChannelClosed()
        return await self.command_line(line, blocks, check, args[0], framed=framed)

    async def command_line(
        self, line: str, blocks: int, check: bool, name: str, *, framed: bool = False
    ) -> str:
        """Run one ready-made tmux command line of ``blocks`` commands (none may nest others).

        ``framed``: its answer may hold text a pane set (one command only). The line is
        followed by ``display-message -p MARKER`` (a random word, on a line of its own
        so that it runs even if the command fails): the answer is everything read up to
        the marker, however many ``%end`` lines the pane printed.
        """
        import uuid

        proc = self._proc
        if not self.alive or proc is None or proc.stdin is None:
            raise ChannelClosed()
        marker = f"madohub-{uuid.uuid4().hex}" if framed else None
        pending = _Pending(
            blocks, asyncio.get_running_loop().create_future(), check, name,
            marker.encode() if marker else None,
        )  # fmt: skip
        # A caller cancelled while it waits (the hub closing) leaves the answer unread.
        pending.future.add_done_callback(_retrieve)
        self._pending.append(pending)
        data = line + "\n" + (f"display-message -p {marker}\n" if marker else "")
        try:
            proc.stdin.write(data.encode("utf-8", "surrogateescape"))
        except (ConnectionError, RuntimeError) as exc:
            self._pending.remove(pending)
            raise ChannelClosed() from exc
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), COMMAND_TIMEOUT_S)
        except asyncio.TimeoutError:
            # Answers come in order: without this one, the next would be misread. Stop
            # using this connection for commands (it still streams output).
            self._broken = True
            self.tmux.drop_channel(self)
            self._fail_pending()
            raise TmuxError(f"tmux {name} got no answer within {COMMAND_TIMEOUT_S:.0f} s") from None

    def _answered(self, lines: list[bytes], error: bool) -> None:
        """One ``%begin``…``%end``/``%error`` block of ours: it answers the oldest command."""
        if not self._pending:
            return
        pending = self._pending[0]
        pending.lines += lines
        pending.error = pending.error or error
        pending.blocks -= 1
        if pending.blocks > 0 and not error:  # an error ends the line: tmux skips the rest
            return
        self._pending.popleft()
        if pending.future.done():
            return
        text = "".join(ln.decode("utf-8", "replace") + "\n" for ln in pending.lines)
        if pending.error and pending.check:
            pending.future.set_exception(
                TmuxError(f"tmux {pending.name} failed: {text.strip() or 'error'}")
            )
        else:
            pending.future.set_result("" if pending.error else text)

    def _fail_pending(self, forget: bool = False) -> None:
        """Fail every waiting command; ``forget``: the connection ended, drop them too."""
        for pending in self._pending:
            if not pending.future.done():
                pending.future.set_exception(
                    TmuxError(f"tmux {pending.name}: the control connection closed while it ran")
                )
        if forget:
            self._pending.clear()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        argv = self.tmux.argv("-C", "attach-session", "-t", f"={self.session}")
        self._proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**client_environment(), "TMUX": ""},
            limit=16 * 1024 * 1024,
        )
        self._task = spawn(self._read(), name=f"control client {self.session}")

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        try:
            while True:
                line = await stdout.readline()
                if not line or not self._line(line.rstrip(b"\r\n")):
                    break
                if self._unyielded > YIELD_EVERY_BYTES:
                    # A flood is read without ever waiting: let listeners take their bytes
                    # before their bounded buffers drop some.
                    self._unyielded = 0
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            self._fail_pending(forget=True)
            return
        except ValueError:  # a line over the stream limit; the stream is unusable
            pass
        self._fail_pending(forget=True)
        if self._stopping:
            return
        # The server or session is gone: reap the client so its transport closes cleanly.
        proc = self._proc
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            await proc.wait()
        self._on_exit()

    def _line(self, body: bytes) -> bool:
        """Read one line of the control stream; False when tmux said the client exits."""
        if self._framed is not None:  # inside a framed answer: nothing is protocol
            pending = self._pending[0] if self._pending else None
            if pending is None or body != pending.marker:
                self._framed.append(body)
            else:
                self._end_framed(self._framed)
            return True
        if self._block is not None:  # inside a command's answer: every line is output
            if _answer_end(body, self._number):
                if self._ours:
                    self._answered(self._block, body.startswith(b"%error"))
                self._block = None
            else:
                self._block.append(body)
        elif body.startswith(b"%output "):
            pane_id, _, data = body[len(b"%output ") :].partition(b" ")
            self._on_output(pane_id.decode(), data)  # still escaped: see decode_control_output
            self._unyielded += len(data)
        elif body.startswith(b"%begin "):
            fields = body.split(b" ")
            if fields[1].isdigit():
                self.server_clock = (int(fields[1]), time.monotonic())
            ours = fields[3:4] == [b"1"]
            if ours and self._pending and self._pending[0].marker is not None:
                self._framed, self._number = [], fields[2:3]
            else:
                self._block, self._number, self._ours = [], fields[2:3], ours
        elif body.startswith(b"%exit"):
            return False
        return True

    def _end_framed(self, lines: list[bytes]) -> None:
        """The marker was read: ``lines`` are the command's block, then what tmux sent between
        it and the marker's block, then that block's ``%begin``.

        The command's block ends at the *last* ``%end``/``%error`` of its number: the pane's
        text (which may forge any line) comes before it, and after it only tmux writes.
        """
        self._framed = None
        ends = [i for i, ln in enumerate(lines[:-1]) if _answer_end(ln, self._number)]
        if not ends or not lines[-1].startswith(b"%begin "):
            # tmux always closes a block before the next begins: this stream is not what we
            # think, so its answers cannot be trusted (its output still flows).
            self._broken = True
            self.tmux.drop_channel(self)
            self._fail_pending(forget=True)
            return
        end = ends[-1]
        self._answered(lines[:end], lines[end].startswith(b"%error"))
        marker_number = lines[-1].split(b" ")[2:3]
        for between in lines[end + 1 : -1]:  # events tmux wrote between the two answers
            self._line(between)
        # The marker's own block closes with the next line; it answers nobody.
        self._block, self._number, self._ours = [], marker_number, False

    async def stop(self) -> None:
        self._stopping = True
        self.tmux.drop_channel(self)
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 2)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
