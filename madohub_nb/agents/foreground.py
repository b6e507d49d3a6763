"""Who reads what is typed into a pane: the terminal's foreground process group.

Typed text goes to the foreground process group of the pane's terminal, not
to "the agent". When the agent is suspended (Ctrl-Z, SIGTSTP), killed, or put
in the background, its shell is in the foreground and runs every line typed
"into the agent" (Claude's newline key C-j is accept-line in bash;
REAL-AGENTS.md, Safety facts). Delivery asks :func:`check_reader` before each
line and before each submit key.

Everything is read from ``/proc/<pid>/stat`` without opening the terminal:
field 5 is the process group, 7 the controlling terminal, 8 (``tpgid``) the
terminal's foreground process group, 22 the start time (to notice a reused
pid). One check is two small file reads (a few microseconds each).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

STOPPED_STATES: Final = frozenset("Tt")
"""``T`` stopped by a signal (SIGTSTP, SIGSTOP), ``t`` stopped by a tracer."""
DEAD_STATES: Final = frozenset("ZXx")


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the foreground check needs."""

    pid: int
    comm: str
    state: str
    pgrp: int
    tty_nr: int
    tpgid: int
    start_ticks: int


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or None when the process is gone (or not Linux)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            raw = f.read(4096)
    except (OSError, ValueError):
        return None
    return parse_stat(int(pid), raw)


def parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    """One ``/proc/<pid>/stat`` line parsed (read here or on a remote host), or None."""
    # comm is in parentheses and may itself hold spaces and ')': split at the last ')'.
    head, sep, tail = raw.rpartition(b")")
    if not sep:
        return None
    fields = tail.split()
    try:
        return ProcStat(
            pid=pid,
            comm=head.partition(b"(")[2].decode("utf-8", "replace"),
            state=fields[0].decode("ascii", "replace"),
            pgrp=int(fields[2]),
            tty_nr=int(fields[4]),
            tpgid=int(fields[5]),
            start_ticks=int(fields[19]),
        )
    except (IndexError, ValueError):
        return None


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


StatsReader = Callable[[Iterable[int]], Mapping[int, "ProcStat | None"]]
"""Reads several ``/proc/<pid>/stat`` at once (one ssh call for a remote host)."""


def local_stats(pids: Iterable[int]) -> dict[int, ProcStat | None]:
    return {pid: read_stat(pid) for pid in pids}


def expected_reader(
    pane_pid: int, pid: int, what: str, read_stats: StatsReader | None = None
) -> Reader | None:
    """Pin ``pid`` as the reader of ``pane_pid``'s terminal; None when it is already gone."""
    st = read_stat(pid) if read_stats is None else read_stats([pid]).get(pid)
    if st is None or st.state in DEAD_STATES:
        return None
    return Reader(pane_pid, pid, st.start_ticks, what, read_stats)


def check_reader(reader: Reader) -> str | None:
    """Why typing into the pane now would reach someone else, or None when it is safe.

    Safe means: the reader still runs (same pid, same start time), is not
    stopped or a zombie, sits on the pane's terminal, and its process group is
    the terminal's foreground process group.
    """
    read = reader.read_stats or local_stats
    stats = read([reader.pid, reader.pane_pid])  # one read on a remote host
    st = stats.get(reader.pid)
    if st is None or st.start_ticks != reader.start_ticks or st.state in DEAD_STATES:
        return f"{reader.what} has exited"
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
