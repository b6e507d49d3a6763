"""How a kind's own record of its conversation is found on the tile's machine and read.

A kind's :class:`RecordReader` locates the record (from the agent's process, its
environment and its machine), reads its last answer (with the turn's usage) and tells
whether its turn finished. The formats themselves are read by ``io/transcripts.py``
(Claude Code, Codex) and ``io/agent_records/<kind>.py`` (the others); this module holds
what the kinds' locators share. Every look-up is bounded: a few file reads or one listing
of one folder (listings only where the machine allows them).
"""

from __future__ import annotations

import posixpath
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from ...io import agent_records

if TYPE_CHECKING:
    from ...io.records import Extraction

T = TypeVar("T")

START_SLACK_S: Final = 1.0
"""A record modified up to this long before its agent's start may still be its own
(clocks and mtimes are coarse); an older one is another session's."""


class AgentPid(Protocol):
    """The agent's process, as the kinds need it (``agents/detect.py``'s ``AgentProcess``)."""

    @property
    def pid(self) -> int: ...
    @property
    def start_ticks(self) -> int: ...


class HeldFile(Protocol):
    """A file a process holds open (``io/machine.py``'s ``OpenFile``)."""

    @property
    def path(self) -> str: ...


class ProcessId(Protocol):
    """A process's stats, as far as the locators read them (``ProcStat``)."""

    @property
    def pid(self) -> int: ...


class RecordMachine(Protocol):
    """What the locators ask of the tile's machine (``io/machine.py``'s ``Machine``: this
    machine or a host), every read bounded."""

    @property
    def name(self) -> str | None: ...
    @property
    def dir_scans(self) -> bool: ...
    def pane_processes(self, pane_pid: int) -> Sequence[ProcessId]: ...
    def cmdline(self, pid: int) -> list[str]: ...
    def cwd(self, pid: int) -> str | None: ...
    def started_at(self, pid: int) -> float | None: ...
    def open_files(self, pids: Iterable[int], name_glob: str) -> Sequence[HeldFile]: ...
    def read_head(self, path: str) -> bytes | None: ...
    def find_file(self, folder: str, name: str) -> str | None: ...
    def with_file(self, path: str, parse: Callable[[Path], T]) -> T | None: ...


class RecordSource(Protocol):
    """What a record reader asks of the tile: its machine and the agent's variables."""

    @property
    def machine(self) -> RecordMachine: ...
    def agent_environ(self, proc: AgentPid, names: tuple[str, ...]) -> dict[str, str]:
        """The agent's variables of ``names`` (read once per process, once found)."""
        ...

    def forget_environ(self) -> None:
        """Read the agent's environment again next time (a launcher may exec it anew)."""
        ...

    def pane_path(self) -> str | None:
        """The pane's working directory as tmux reports it."""
        ...

    def claude_home(self) -> str | None:
        """The hub's fallback Claude config directory (the ``claude_home`` setting)."""
        ...


@dataclass(frozen=True)
class RecordRef:
    """An agent's own record on the tile's machine, and what narrows it to the agent's session."""

    path: str
    fmt: str
    """Its format (``madohub_nb.io.agent_records``): ``opencode``, ``qwen``, ``aider``..."""
    session_id: str | None = None
    cwd: str | None = None
    """OpenCode: its database serves every OpenCode of the user; the agent's session is the
    newest one run in this folder."""


@dataclass(frozen=True)
class RecordReader:
    """How one kind's record is found and read (``locate`` on the tile's machine; ``read``
    and ``turn_finished`` on the file, a local copy when the machine is a host)."""

    locate: Callable[[RecordSource, AgentPid], RecordRef | None]
    read: Callable[[Path, RecordRef], Extraction | None]
    turn_finished: Callable[[Path, RecordRef], bool | None]
    env_names: tuple[str, ...] = ()
    """The agent's variables that move its record (``CLAUDE_CONFIG_DIR``, ``HOME``...)."""


def read_session_record(path: Path, ref: RecordRef) -> Extraction | None:
    """The last answer in an agent's own record (``io/agent_records``, by its format)."""
    return agent_records.read_record(path, fmt=ref.fmt, session_id=ref.session_id, cwd=ref.cwd)


def session_turn_finished(path: Path, ref: RecordRef) -> bool | None:
    """The end-of-turn evidence of an agent's own record (``io/agent_records``)."""
    found = agent_records.record_turn_finished
    return found(path, fmt=ref.fmt, session_id=ref.session_id, cwd=ref.cwd)


def newest_regular_file(paths: Iterable[Path], since: float | None = None) -> Path | None:
    """The most recently modified regular file of ``paths`` (modified at ``since`` or
    later, when given), or None.

    Anything else (a dangling or looping link, a directory, a FIFO, a file gone
    since it was listed) is no transcript: an agent's folder is not ours to trust.
    """
    best: tuple[float, Path] | None = None
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or (since is not None and st.st_mtime < since):
            continue
        if best is None or st.st_mtime > best[0]:
            best = (st.st_mtime, path)
    return best[1] if best is not None else None


def is_regular_file(path: Path) -> bool:
    """True for a regular file (not a link to one elsewhere's FIFO, not a folder)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def newest_since_start(
    source: RecordSource, proc: AgentPid, folder: str | None, pattern: str, fmt: str
) -> RecordRef | None:
    """The newest record in ``folder`` written since the agent started (where folders may be
    listed): the agent writes one file per session there and holds none open."""
    machine = source.machine
    if folder is None or not machine.dir_scans:
        return None
    started = machine.started_at(proc.pid)
    # (an older session's record is not this agent's: it has written nothing yet)
    since = started - START_SLACK_S if started is not None else None
    found = newest_regular_file(Path(folder).glob(pattern), since=since)
    if found is None:
        return None
    return RecordRef(posixpath.normpath(str(found)), fmt)


def descendants(source: RecordSource, proc: AgentPid) -> list[int]:
    """The agent's pid, then those of the processes under it (a launcher's native child)."""
    machine = source.machine
    return [proc.pid, *(st.pid for st in machine.pane_processes(proc.pid) if st.pid != proc.pid)]
