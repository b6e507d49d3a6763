"""An in-memory :class:`~madohub_nb.io.machine.Machine`: panes, processes and files a test sets.

For fast unit tests of what sits above the machine (delivery's decisions, a
route's loop) without tmux; the real-tmux tests stay the integration layer.
A :class:`MemoryMachine` holds panes (the screen text the test sets, every
piece of text and every key "typed" recorded in order), a process table (argv,
environment, process group, the terminal's foreground group, stopped or not)
and files; :meth:`MemoryMachine.output` pushes output to the pane's watchers
as tmux's control client would.

    machine = MemoryMachine()
    pane = machine.add_pane("%1", screen="$ ", comm="bash")
    tile = Tile("sh", pane.pane_id, "shell", machine, session="s", created=False)
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..agents.foreground import ProcStat
from ..defaults import AGENT_FILE_MAX_BYTES
from ..errors import MadohubValueError, TmuxError
from ..io.machine import Machine, OpenFile
from ..io.tmux import PaneInfo
from ..io.watch import PaneStream

T = TypeVar("T")

_SEND_KEYS_RE = re.compile(r"^send-keys -t (%\d+) (-H (?P<hex>[0-9a-f ]+)|(?P<key>[A-Za-z0-9-]+))$")
_PASTE_RE = re.compile(r"^paste-buffer (?:-p )?-d -b (\S+) -t (%\d+)$")


@dataclass
class MemoryProcess:
    """One process of the table: what ``/proc/<pid>/stat``, ``cmdline`` and ``environ`` say."""

    pid: int
    comm: str
    argv: list[str]
    parent: int = 0
    pgrp: int = 0
    """Its process group (0: its own pid)."""
    tty_nr: int = 0
    """Its controlling terminal (0: none); a pane's processes share the pane's."""
    state: str = "S"
    """``S`` running or sleeping, ``T`` stopped, ``Z`` zombie."""
    environ: dict[str, str] = field(default_factory=dict)
    start_ticks: int = 1
    open_files: list[str] = field(default_factory=list)


@dataclass
class MemoryPane:
    """One pane: its screen (set by the test) and what was typed into it."""

    pane_id: str
    session: str
    pid: int
    screen: str = ""
    current_command: str = "bash"
    dead: bool = False
    in_mode: bool = False
    synchronized: bool = False
    """The window has synchronize-panes on: guarded sends refuse, as tmux's check does."""
    title: str = ""
    typed: list[str] = field(default_factory=list)
    """Each ``send-keys -H`` piece as text, each key by its tmux name, each paste, in order."""

    @property
    def text(self) -> str:
        """Everything typed as one string (keys shown as ``<Name>``)."""
        return "".join(self.typed)


class MemoryTmux:
    """The tmux commands a tile and delivery send, answered from the machine's panes."""

    def __init__(self, machine: MemoryMachine) -> None:
        self.socket_name: str | None = None
        self._machine = machine
        self._buffers: dict[str, str] = {}
        self.commands: list[str] = []
        """Every guarded command string sent, in order."""

    def _pane(self, target: str) -> MemoryPane:
        pane = self._machine.panes.get(target)
        if pane is None:
            raise TmuxError(f"can't find pane: {target}")
        return pane

    def run(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """The few commands tiles run as words: display-message (history size, cursor row),
        load-buffer, delete-buffer."""
        if args[:1] == ("load-buffer",) and input is not None:
            self._buffers[args[2]] = input
            return ""
        if args[:1] == ("delete-buffer",):
            self._buffers.pop(args[2], None)
            return ""
        if args[:3] == ("display-message", "-p", "-t"):
            pane = self._pane(args[3])
            if args[4] == "#{history_size} #{cursor_y}":
                return f"0 {max(len(pane.screen.splitlines()) - 1, 0)}"
            if args[4] == "#{history_size}":
                return "0"
            if args[4] == "#{window_activity}":
                return str(int(time.time()))
        if args[:1] == ("capture-pane",):
            return self._pane(args[args.index("-t") + 1]).screen
        return ""

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
        pane = self._machine.add_pane(session=session, environ=dict(env or {}))
        return pane.pane_id, pane.pid

    def kill_session(self, name: str) -> None:
        for pane in list(self._machine.panes.values()):
            if pane.session == name:
                self.kill_pane(pane.pane_id)

    def kill_pane(self, pane_id: str) -> None:
        pane = self._machine.panes.pop(pane_id, None)
        if pane is not None:
            self._machine.processes.pop(pane.pid, None)

    def pane_info(self, target: str) -> PaneInfo | None:
        pane = self._machine.panes.get(target)
        if pane is None:
            return None
        return PaneInfo(
            pane_id=pane.pane_id, pid=pane.pid, dead=pane.dead,
            current_command=pane.current_command, session=pane.session, in_mode=pane.in_mode,
            width=200, height=50, current_path="/", dead_status=None, title=pane.title,
        )  # fmt: skip

    def resolve_pane(self, pane: str) -> PaneInfo:
        info = self.pane_info(pane)
        if info is None:
            raise MadohubValueError(f"pane {pane!r} does not exist on the memory machine")
        return info

    def capture(self, pane_id: str, ansi: bool = False, history_lines: int = 0) -> str:
        return self._pane(pane_id).screen

    def cancel_copy_mode(self, pane_id: str) -> None:
        self._pane(pane_id).in_mode = False

    def paste(self, pane_id: str, text: str, bracketed: bool = True) -> bool:
        pane = self._pane(pane_id)
        if pane.synchronized:
            return False
        pane.typed.append(text)
        self._machine.typed(pane, text)
        return True

    async def asend_guarded(self, pane_id: str, commands: list[str]) -> bool:
        pane = self._pane(pane_id)
        if pane.synchronized:
            return False
        for command in commands:
            self.commands.append(command)
            found = _SEND_KEYS_RE.match(command)
            if found is None or found.group(1) != pane_id:
                raise TmuxError(f"the memory machine does not know the command {command!r}")
            if found.group("hex") is not None:
                text = bytes.fromhex(found.group("hex")).decode("utf-8")
            else:
                text = f"<{found.group('key')}>"
            pane.typed.append(text)
            self._machine.typed(pane, text)
        return True


class MemoryWatcher:
    """Output streams of the machine's panes; output arrives by :meth:`MemoryMachine.output`."""

    def __init__(self) -> None:
        self.streams: dict[str, PaneStream] = {}
        self.closed = False

    def stream(self, pane_id: str, session: str) -> PaneStream:
        stream = self.streams.get(pane_id)
        if stream is None:
            stream = self.streams[pane_id] = PaneStream(pane_id, session)
        return stream

    async def watch(self, pane_id: str, session: str, pane_pid: int | None = None) -> PaneStream:
        return self.stream(pane_id, session)

    def last_output_mono(self, pane_id: str) -> float | None:
        stream = self.streams.get(pane_id)
        return stream.last_output_mono if stream is not None else None

    def forget(self, pane_id: str) -> None:
        stream = self.streams.pop(pane_id, None)
        if stream is not None:
            stream.end()

    async def close(self) -> None:
        self.closed = True
        for stream in self.streams.values():
            stream.end()


class MemoryMachine:
    """A machine held in memory; see the module's docstring."""

    def __init__(self, name: str = "memory") -> None:
        self._name = name
        self.panes: dict[str, MemoryPane] = {}
        self.processes: dict[int, MemoryProcess] = {}
        self.files: dict[str, bytes] = {}
        self.reachable = True
        self.on_typed: Callable[[MemoryPane, str], None] | None = None
        """Called after each piece of text or key reaches a pane (a test's agent reacts)."""
        self._tmux = MemoryTmux(self)
        self._watcher = MemoryWatcher()
        self._next_pid = 1000
        self._next_pane = 1
        self._foreground: dict[int, int] = {}
        """The foreground process group of each terminal given away (else its pane's own)."""

    # what a test sets up ---------------------------------------------------------------
    def add_pane(
        self,
        pane_id: str | None = None,
        *,
        session: str = "s",
        screen: str = "",
        comm: str = "bash",
        argv: list[str] | None = None,
        environ: dict[str, str] | None = None,
    ) -> MemoryPane:
        """A pane whose own process (``comm``) leads its terminal's foreground group."""
        if pane_id is None:
            pane_id = f"%{self._next_pane}"
        self._next_pane = max(self._next_pane, int(pane_id[1:])) + 1
        tty = 34816 + int(pane_id[1:])
        proc = self.add_process(comm, argv, tty_nr=tty, environ=environ)
        pane = MemoryPane(pane_id, session, proc.pid, screen=screen, current_command=comm)
        self.panes[pane_id] = pane
        return pane

    def add_process(
        self,
        comm: str,
        argv: list[str] | None = None,
        *,
        parent: int = 0,
        tty_nr: int | None = None,
        pgrp: int = 0,
        environ: dict[str, str] | None = None,
    ) -> MemoryProcess:
        """A process (a child of ``parent`` shares its terminal); its own group unless given."""
        self._next_pid += 1
        pid = self._next_pid
        if tty_nr is None:
            tty_nr = self.processes[parent].tty_nr if parent in self.processes else 0
        proc = MemoryProcess(
            pid, comm, argv or [comm], parent=parent, pgrp=pgrp or pid, tty_nr=tty_nr,
            environ=dict(environ or {}), start_ticks=pid * 10,
        )  # fmt: skip
        self.processes[pid] = proc
        return proc

    def foreground(self, pane: MemoryPane, pgrp: int) -> None:
        """Give the pane's terminal to process group ``pgrp`` (as a shell does for a job)."""
        self._foreground[self.processes[pane.pid].tty_nr] = pgrp

    def output(self, pane_id: str, data: bytes) -> None:
        """The pane printed ``data``: its stream's listeners hear it (engine loop)."""
        stream = self._watcher.streams.get(pane_id)
        if stream is not None:
            stream.feed(data.replace(b"\\", b"\\134"), time.monotonic())

    def typed(self, pane: MemoryPane, text: str) -> None:
        if self.on_typed is not None:
            self.on_typed(pane, text)

    # the Machine protocol ---------------------------------------------------------------
    @property
    def name(self) -> str | None:
        return self._name

    @property
    def tmux(self) -> MemoryTmux:
        return self._tmux

    @property
    def watcher(self) -> MemoryWatcher:
        return self._watcher

    @property
    def dir_scans(self) -> bool:
        return False

    async def watch(self, pane_id: str, session: str, pane_pid: int | None = None) -> PaneStream:
        return await self._watcher.watch(pane_id, session, pane_pid)

    def terminal_command(self, command: str) -> str:
        return command

    def _stat(self, proc: MemoryProcess) -> ProcStat:
        tpgid = -1
        if proc.tty_nr:
            leaders = [
                self.processes[p.pid].pgrp
                for p in self.panes.values()
                if p.pid in self.processes and self.processes[p.pid].tty_nr == proc.tty_nr
            ]
            tpgid = self._foreground.get(proc.tty_nr, leaders[0] if leaders else -1)
        return ProcStat(
            proc.pid, proc.comm, proc.state, proc.pgrp, proc.tty_nr, tpgid, proc.start_ticks
        )

    def stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]:
        return {
            int(pid): self._stat(self.processes[int(pid)]) if int(pid) in self.processes else None
            for pid in pids
        }

    def pane_processes(self, pane_pid: int) -> list[ProcStat]:
        """The pane's process tree breadth-first (children by pid), as here."""
        found: list[ProcStat] = []
        queue = [pane_pid] if pane_pid in self.processes else []
        while queue:
            pid = queue.pop(0)
            found.append(self._stat(self.processes[pid]))
            queue += sorted(p.pid for p in self.processes.values() if p.parent == pid)
        return found

    def cmdline(self, pid: int) -> list[str]:
        proc = self.processes.get(int(pid))
        return list(proc.argv) if proc is not None else []

    def environ(self, pid: int, names: Iterable[str]) -> dict[str, str]:
        proc = self.processes.get(int(pid))
        keep = set(names)
        return {k: v for k, v in proc.environ.items() if k in keep} if proc is not None else {}

    def cwd(self, pid: int) -> str | None:
        return None

    def started_at(self, pid: int) -> float | None:
        return None

    def open_files(self, pids: Iterable[int], name_glob: str) -> list[OpenFile]:
        todo, found = [int(p) for p in pids], []
        while todo:
            pid = todo.pop(0)
            proc = self.processes.get(pid)
            if proc is None:
                continue
            found += [OpenFile(pid, f) for f in proc.open_files if fnmatch.fnmatch(f, name_glob)]
            todo += [p.pid for p in self.processes.values() if p.parent == pid]
        return sorted(found, key=lambda f: f.path)

    def read_head(self, path: str, max_bytes: int = AGENT_FILE_MAX_BYTES) -> bytes | None:
        data = self.files.get(path)
        return data[:max_bytes] if data is not None else None

    def find_file(self, folder: str, name: str) -> str | None:
        found = sorted(
            p
            for p in self.files
            if p.startswith(folder.rstrip("/") + "/") and p.endswith("/" + name)
        )
        return found[-1] if found else None

    def with_file(self, path: str, parse: Callable[[Path], T]) -> T | None:
        data = self.files.get(path)
        if data is None:
            return None
        fd, name = tempfile.mkstemp(prefix="madohub-memory-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return parse(Path(name))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)

    def run_script(
        self, script: str, cwd: str, timeout_s: float = 10.0
    ) -> subprocess.CompletedProcess[bytes]:
        """No programs run in memory: every script fails, as in a folder outside git."""
        return subprocess.CompletedProcess(["sh", "-c", script], 127, b"", b"no shell in memory")


def as_machine(machine: MemoryMachine) -> Machine:
    """``machine`` typed as a :class:`~madohub_nb.io.machine.Machine` (mypy checks it is one)."""
    return machine
