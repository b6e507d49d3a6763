"""This machine's process table: the few process fields the foreground check needs.

Two implementations behind one interface (:class:`ProcessTable`), chosen once:

- :class:`ProcFs` reads ``/proc/<pid>/stat`` (Linux): two small file reads per
  check, a few microseconds each, safe on the engine loop;
- :class:`PsTable` runs ``ps -o pid= -o pgid= … -o ucomm= -p …`` once
  for several pids, where there is no ``/proc`` (macOS, the BSDs): a process
  start per call, so checks run in a worker thread.

:func:`process_table` is the one in use: ``/proc`` when this machine has it, else
``ps``. :func:`use_process_table` forces one (tests run the ``ps`` path on Linux).
A pair of readings is only compared within one implementation: their start
times are in different units (clock ticks since boot, seconds since the epoch).
"""

from __future__ import annotations

import os
import subprocess
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from typing import Final, Literal, Protocol

from ..errors import MadohubValueError, TileError

TableName = Literal["proc", "ps"]
TABLE_NAMES: Final[tuple[TableName, ...]] = ("proc", "ps")

PS_FIELDS: Final = ("pid", "pgid", "tpgid", "stat", "tty", "lstart", "ucomm")
"""``ps -o`` fields, in the order :func:`parse_ps` reads them. ``ucomm`` (the accounting
name) goes last since it may hold spaces; both procps and BSD ps know every one."""
PS_ARGS: Final = ("ps", *(arg for name in PS_FIELDS for arg in ("-o", f"{name}=")))
"""One ``-o name=`` per field (``=``: no header): BSD ps takes everything after a ``=``
in one ``-o`` as that column's header."""
PS_TIMEOUT_S: Final = 5.0
_NO_TTY: Final = frozenset({"?", "??", "-", ""})
_MONTHS: Final = {
    m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)
}
"""``ps``'s month names under ``LC_ALL=C`` (``calendar`` is 5 ms of import, and its names follow the locale)."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of one process the foreground check needs."""

    pid: int
    comm: str
    state: str
    """One letter: ``R`` running, ``S`` sleeping, ``T`` stopped, ``Z`` zombie, …"""
    pgrp: int
    tty_nr: int
    """The controlling terminal's device number; 0 for none."""
    tpgid: int
    """The terminal's foreground process group (-1 or 0 without a terminal)."""
    start_ticks: int
    """When it started, to tell a reused pid: ``/proc``: clock ticks since boot;
    ``ps``: seconds since the epoch (so a pid reused within the same second is not seen)."""


class ProcessTable(Protocol):
    """Reads :class:`ProcStat` of several processes at once; None for a process that is gone."""

    name: TableName
    quick: bool
    """True when a read is a few microseconds of file reads (done on the engine loop)."""

    def stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]: ...


# --- /proc ------------------------------------------------------------------------------------


class ProcFs:
    """``/proc/<pid>/stat``: field 5 the process group, 7 the terminal, 8 its foreground
    group, 22 the start time in clock ticks since boot."""

    name: TableName = "proc"
    quick = True

    def stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]:
        return {pid: self._read(pid) for pid in pids}

    @staticmethod
    def _read(pid: int) -> ProcStat | None:
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


# --- ps ---------------------------------------------------------------------------------------


class PsTable:
    """One ``ps`` call for all the pids asked about, in the C locale and UTC."""

    name: TableName = "ps"
    quick = False

    def stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]:
        wanted = sorted({int(pid) for pid in pids if int(pid) > 0})
        found: dict[int, ProcStat | None] = dict.fromkeys(wanted)
        if not wanted:
            return found
        try:
            done = subprocess.run(
                [*PS_ARGS, "-p", ",".join(map(str, wanted))],
                capture_output=True,
                timeout=PS_TIMEOUT_S,
                env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TileError(
                f"cannot read process states with `ps` ({exc}); the foreground check needs "
                "/proc or a working `ps` on PATH"
            ) from exc
        # ps exits 1 when none of the pids exists: that is an answer, not a failure.
        for pid, st in parse_ps(done.stdout).items():
            if pid in found:
                found[pid] = st
        return found


def parse_ps(raw: bytes) -> dict[int, ProcStat]:
    """The lines of :data:`PS_ARGS` (run with ``LC_ALL=C TZ=UTC``), by pid."""
    found: dict[int, ProcStat] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        words = line.split(None, 10)
        if len(words) < 10:
            continue
        pid, pgid, tpgid, stat, tty, _weekday, month, day, clock, year = words[:10]
        try:
            hour, minute, second = (int(x) for x in clock.split(":"))
            when = datetime(
                int(year), _MONTHS[month], int(day), hour, minute, second, tzinfo=timezone.utc
            )
            started = int(when.timestamp())
            found[int(pid)] = ProcStat(
                pid=int(pid),
                comm=words[10] if len(words) > 10 else "",
                state=stat[:1],
                pgrp=int(pgid),
                tty_nr=tty_number(tty),
                tpgid=int(tpgid),
                start_ticks=started,
            )
        except (KeyError, ValueError):
            continue
    return found


@cache
def tty_number(name: str) -> int:
    """The device number of the terminal ps names (``pts/3``, ``ttys003``); 0 for none.

    ``/dev/<name>``'s device number is what ``/proc`` says too, so both tables agree.
    A name that is not under /dev still gets a number of its own (never 0).
    """
    if name in _NO_TTY:
        return 0
    try:
        return os.stat(f"/dev/{name}").st_rdev or -1
    except OSError:
        return -1 - zlib.crc32(name.encode())


# --- the one in use ---------------------------------------------------------------------------

TABLES: Final[dict[TableName, ProcessTable]] = {"proc": ProcFs(), "ps": PsTable()}


def automatic_table() -> ProcessTable:
    """``/proc`` where this machine has it, ``ps`` elsewhere."""
    return TABLES["proc" if os.path.exists("/proc/self/stat") else "ps"]


_in_use: list[ProcessTable] = [automatic_table()]


def process_table() -> ProcessTable:
    """The process table this machine's checks read."""
    return _in_use[0]


def use_process_table(name: TableName | None) -> ProcessTable:
    """Read processes through ``"proc"`` or ``"ps"`` from now on (None: the automatic choice).

    For tests, which run the ``ps`` path on Linux too. Readers pinned through one table
    are checked through the same table (:attr:`madohub_nb.agents.foreground.Reader.table`).
    """
    if name is None:
        chosen = automatic_table()
    elif name in TABLES:
        chosen = TABLES[name]
    else:
        raise MadohubValueError(
            f"process table {name!r} is not known; use one of {', '.join(TABLES)} "
            "(or None for the automatic choice)"
        )
    if chosen.name == "proc" and not os.path.exists("/proc/self/stat"):
        raise MadohubValueError("this machine has no /proc; use 'ps' (or None)")
    _in_use[0] = chosen
    return chosen
