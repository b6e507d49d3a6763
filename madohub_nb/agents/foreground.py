"""Who reads what is typed into a pane: the terminal's foreground process group.

Typed text goes to the foreground process group of the pane's terminal, not
to "the agent". When the agent is suspended (Ctrl-Z, SIGTSTP), killed, or put
in the background, its shell is in the foreground and runs every line typed
"into the agent" (Claude's newline key C-j is accept-line in bash;
REAL-AGENTS.md, Safety facts). Delivery asks :func:`check_reader` before each
line and before each submit key.

Everything is read from the process table without opening the terminal
(:mod:`madohub_nb.agents.process_table`: ``/proc/<pid>/stat`` on Linux, ``ps``
elsewhere): each process's group, controlling terminal, the terminal's
foreground process group, and its start time (to notice a reused pid).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from .process_table import ProcessTable, ProcStat, parse_stat, process_table
from .profile import is_command_reader

__all__ = [
    "DEAD_STATES",
    "STOPPED_STATES",
    "ProcStat",
    "Reader",
    "StatsReader",
    "check_reader",
    "expected_reader",
    "foreground_pgrp",
    "is_stopped",
    "local_stats",
    "parse_stat",
    "process_group",
    "read_stat",
    "reads_commands",
]

STOPPED_STATES: Final = frozenset("Tt")
"""``T`` stopped by a signal (SIGTSTP, SIGSTOP), ``t`` stopped by a tracer."""
DEAD_STATES: Final = frozenset("ZXx")


_VALUE_OPTIONS: Final = frozenset(
    {"-o", "+o", "-O", "+O", "--rcfile", "--init-file", "-W", "-X", "-I", "-r", "--require"}
)
"""Options of shells and interpreters whose value is the next word, not a script."""
_SHORT_OPTIONS: Final = re.compile(r"-[A-Za-z]+")


def reads_commands(comm: str, argv: Sequence[str]) -> bool:
    """True when a process runs what is typed as commands: a shell or an interpreter at
    its prompt, by its own program name (``comm``) or ``argv[0]``.

    A shell or interpreter given a script or a command (``bash x.sh``, ``node codex.js``,
    ``python -m aider``, ``bash -c …``) runs that program instead, unless told to be
    interactive (``-i``). An unreadable argv counts as a prompt.
    """
    if not (is_command_reader(comm) or (argv and is_command_reader(argv[0]))):
        return False
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in ("-i", "--interactive") or (_SHORT_OPTIONS.fullmatch(arg) and "i" in arg):
            return True
        elif arg in _VALUE_OPTIONS:
            skip = True
        elif not arg.startswith(("-", "+")):
            return False  # a script, or the program given to -c / -e / -m
    return True


def read_stat(pid: int) -> ProcStat | None:
    """One process's stats from this machine's process table, or None when it is gone."""
    return process_table().stats([int(pid)]).get(int(pid))


@dataclass(frozen=True)
class Reader:
    """The process that should read typed input in one pane, pinned by its start time."""

    pane_pid: int
    pid: int
    start_ticks: int
    what: str
    """How messages name it: ``"agent 'claude' (pid 123)"``, ``"the shell (pid 45)"``."""
    read_stats: StatsReader | None = field(default=None, compare=False, repr=False)
    """Where its processes run: None here; a remote host's batched reader otherwise."""
    table: ProcessTable = field(default_factory=process_table, compare=False, repr=False)
    """This machine's process table when it was pinned: its start time is in that table's
    units, so it is checked through the same one."""
    comm: str = ""
    """Its program's name when it was pinned."""
    runs_commands: bool = False
    """A shell or an interpreter at its prompt (:func:`reads_commands`): what is typed runs
    as a command, so typing there needs the user's opt-in whatever the tile's profile."""

    @property
    def quick(self) -> bool:
        """True when a check is a few microseconds of local file reads (fine on the loop)."""
        return self.read_stats is None and self.table.quick

    def stats(self, pids: Iterable[int]) -> Mapping[int, ProcStat | None]:
        """Where this reader's processes are read: its host's reader, or the pinned table."""
        return self.table.stats(pids) if self.read_stats is None else self.read_stats(pids)


StatsReader = Callable[[Iterable[int]], Mapping[int, "ProcStat | None"]]
"""Reads the stats of several processes at once (one ssh call for a remote host)."""


def local_stats(pids: Iterable[int]) -> dict[int, ProcStat | None]:
    """Several processes of this machine, in one read of its process table."""
    return process_table().stats(pids)


def expected_reader(
    pane_pid: int,
    pid: int,
    what: str,
    read_stats: StatsReader | None = None,
    *,
    argv: Sequence[str] = (),
) -> Reader | None:
    """Pin ``pid`` as the reader of ``pane_pid``'s terminal; None when it is already gone.

    ``argv``: its command line, which tells a shell's prompt from a script it runs.
    """
    table = process_table()
    st = (table.stats if read_stats is None else read_stats)([pid]).get(pid)
    if st is None or st.state in DEAD_STATES:
        return None
    return Reader(
        pane_pid, pid, st.start_ticks, what, read_stats, table,
        comm=st.comm, runs_commands=reads_commands(st.comm, argv),
    )  # fmt: skip


def check_reader(reader: Reader) -> str | None:
    """Why typing into the pane now would reach someone else, or None when it is safe.

    Safe means: the reader still runs (same pid, same start time), has not
    become a shell or an interpreter (``exec bash`` keeps both), is not stopped
    or a zombie, sits on the pane's terminal, and its process group is the
    terminal's foreground process group.
    """
    read = reader.stats
    stats = read([reader.pid, reader.pane_pid])  # one read (one ps, one ssh call)
    st = stats.get(reader.pid)
    if st is None or st.start_ticks != reader.start_ticks or st.state in DEAD_STATES:
        return f"{reader.what} has exited"
    if (
        reader.comm
        and not reader.runs_commands
        and st.comm != reader.comm
        and is_command_reader(st.comm)
    ):
        return f"{reader.what} now runs {st.comm!r}, which would run typed text as commands"
    if st.state in STOPPED_STATES:
        return f"{reader.what} is stopped (suspended, e.g. by Ctrl-Z / SIGTSTP)"
    pane = stats.get(reader.pane_pid)
    if pane is None:
        return "the pane's own process has exited"
    if st.tty_nr != pane.tty_nr or pane.tty_nr == 0:
        return f"{reader.what} is no longer on the pane's terminal"
    if pane.tpgid != st.pgrp:
        leader = read([pane.tpgid]).get(pane.tpgid) if pane.tpgid > 0 else None
        who = (
            f"{leader.comm!r} (process group {pane.tpgid})"
            if leader
            else f"process group {pane.tpgid}"
        )
        return f"{reader.what} is not the terminal's foreground process; {who} is"
    return None


def foreground_pgrp(pane_pid: int) -> int | None:
    """The foreground process group of the terminal ``pane_pid`` runs on, or None."""
    st = read_stat(pane_pid)
    if st is None or st.tty_nr == 0 or st.tpgid <= 0:
        return None
    return st.tpgid


def process_group(pid: int) -> int | None:
    """The process group of ``pid``, or None when it is gone."""
    st = read_stat(pid)
    return st.pgrp if st is not None else None


def is_stopped(pid: int) -> bool:
    """True while ``pid`` is stopped (SIGTSTP, SIGSTOP, a tracer)."""
    st = read_stat(pid)
    return st is not None and st.state in STOPPED_STATES
