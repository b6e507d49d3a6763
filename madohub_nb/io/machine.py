"""Machines: the one place that knows where a pane lives.

A tile asks its :class:`Machine` everything that depends on where its pane
runs: tmux commands and output (its ``tmux`` and ``watcher``), the
``/proc`` stats of several processes at once, a process's argv and a few
named environment variables, the files a process tree holds open, and
bounded reads of files. :class:`LocalMachine` answers from this machine
(psutil, ``/proc``, local files); ``SshMachine`` (io/remote.py) from a host
over ssh with bounded reads; ``MemoryMachine`` (madohub_nb.testing.memory)
from a table a test fills in. Agent logic (agents/) takes the plain data
these return, so it is written once for every machine.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import signal
import stat
import subprocess
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from ..agents.claude import read_small_regular_file
from ..agents.foreground import ProcStat
from ..agents.process_table import process_table
from ..defaults import AGENT_FILE_MAX_BYTES
from ..errors import MadohubValueError, TmuxError
from .tmux import PaneInfo, Tmux, client_environment
from .watch import OutputWatcher, PaneStream

T = TypeVar("T")

TREE_MAX_PROCS = 256
"""The most processes of a pane's tree that agent detection looks at on this machine."""
SCRIPT_TIMEOUT_S = 10.0
"""How long a script (a git snapshot, a worktree made or removed) may run."""
ENVIRON_MAX_BYTES = 256 * 1024
"""The most of a process's environment block read to find a few named variables."""


@dataclass(frozen=True)
class PaneRef:
    """Which pane, on which machine: ``PaneRef(None, "%3")`` here, ``PaneRef("box", "%3")``
    on host ``box``. Pane ids are unique per tmux server only, so the machine is part of it."""

    machine: str | None
    pane_id: str

    def __str__(self) -> str:
        return self.pane_id if self.machine is None else f"{self.pane_id} on {self.machine}"


@dataclass(frozen=True)
class OpenFile:
    """A file a process holds open."""

    pid: int
    path: str


class PaneTmux(Protocol):
    """The tmux commands tiles and delivery send to a pane's server (io/tmux.py's ``Tmux``)."""

    socket_name: str | None

    def run(self, *args: str, input: str | None = None, check: bool = True) -> str: ...
    def new_pane(
        self,
        session: str,
        command: str | None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        window_name: str | None = None,
        width: int = 200,
        height: int = 50,
    ) -> tuple[str, int]: ...
    def kill_session(self, name: str) -> None: ...
    def kill_pane(self, pane_id: str) -> None: ...
    def pane_info(self, target: str) -> PaneInfo | None: ...
    def resolve_pane(self, pane: str) -> PaneInfo: ...
    def capture(self, pane_id: str, ansi: bool = False, history_lines: int = 0) -> str: ...
    def cancel_copy_mode(self, pane_id: str) -> None: ...
    def paste(self, pane_id: str, text: str, bracketed: bool = True) -> bool: ...
    async def asend_guarded(self, pane_id: str, commands: list[str]) -> bool: ...


class PaneWatcher(Protocol):
    """Pushed output of a machine's panes (io/watch.py's ``OutputWatcher``)."""

    def stream(self, pane_id: str, session: str) -> PaneStream: ...
    async def watch(
        self, pane_id: str, session: str, pane_pid: int | None = None
    ) -> PaneStream: ...
    def last_output_mono(self, pane_id: str) -> float | None: ...
    def forget(self, pane_id: str) -> None: ...
    async def close(self) -> None: ...


class Machine(Protocol):
    """Where a pane lives, and every read about it that depends on that."""

    @property
    def name(self) -> str | None:
        """None for this machine; a host's name (``box``) otherwise."""
        ...

    @property
    def tmux(self) -> PaneTmux: ...

    @property
    def watcher(self) -> PaneWatcher: ...

    @property
    def reachable(self) -> bool:
        """False while the machine cannot be reached (its tiles read ``unreachable``)."""
        ...

    async def watch(self, pane_id: str, session: str, pane_pid: int | None = None) -> PaneStream:
        """Make sure the pane's output is streamed (engine loop); a host's waits until it is
        reachable. ``pane_pid``: the pane's process, watched for its exit where it can be."""
        ...

    @property
    def dir_scans(self) -> bool:
        """May directories be listed (a transcript found by its cwd)? Only where it is cheap
        and bounded: here, not on a host."""
        ...

    def terminal_command(self, command: str) -> str:
        """A shell command line run in a terminal here that runs ``command`` on this machine
        (itself here; ``ssh -t host '…'`` for a host)."""
        ...

    def stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]:
        """``/proc/<pid>/stat`` of several processes in one call (None: gone)."""
        ...

    def pane_processes(self, pane_pid: int) -> list[ProcStat]:
        """The pane's processes that may be its agent, in the order detection tries them."""
        ...

    def cmdline(self, pid: int) -> list[str]:
        """A process's argv ([] when gone or not ours to read)."""
        ...

    def environ(self, pid: int, names: Iterable[str]) -> dict[str, str]:
        """Only the named variables of a process's environment."""
        ...

    def cwd(self, pid: int) -> str | None:
        """A process's working directory, where directory scans are allowed; else None."""
        ...

    def started_at(self, pid: int) -> float | None:
        """A process's start (epoch s), where directory scans are allowed; else None."""
        ...

    def open_files(self, pids: Iterable[int], name_glob: str) -> list[OpenFile]:
        """Files whose name matches ``name_glob`` that ``pids`` or their descendants hold
        open, oldest first (by the machine's own measure)."""
        ...

    def read_head(self, path: str, max_bytes: int = AGENT_FILE_MAX_BYTES) -> bytes | None:
        """The first ``max_bytes`` of a regular file; None when it cannot be read."""
        ...

    def find_file(self, folder: str, name: str) -> str | None:
        """``<folder>/<any subfolder>/<name>`` (a regular file), or None."""
        ...

    def with_file(self, path: str, parse: Callable[[Path], T]) -> T | None:
        """``parse`` of the file at ``path``, read as a local file: the file itself here, a
        bounded tail of whole lines on a host. None when it cannot be read."""
        ...

    def run_script(
        self, script: str, cwd: str, timeout_s: float = SCRIPT_TIMEOUT_S
    ) -> subprocess.CompletedProcess[bytes]:
        """Run a short ``sh`` script built by this package (io/git.py) in ``cwd`` on this
        machine, bounded in time; a TmuxError when it cannot run at all."""
        ...


def check_pid(pid: object, what: str = "pane_pid") -> int:
    """``pid`` if it is a process id; else a teaching error."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
        raise MadohubValueError(f"{what} must be a process id (a whole number >= 1), got {pid!r}")
    return pid


class LocalMachine:
    """This machine: psutil, ``/proc`` and local files."""

    def __init__(self, tmux: Tmux | None = None, watcher: OutputWatcher | None = None) -> None:
        self._tmux = tmux
        self._watcher = watcher

    @property
    def name(self) -> str | None:
        return None

    @property
    def tmux(self) -> Tmux:
        if self._tmux is None:
            raise TmuxError("this LocalMachine was made without a tmux server")
        return self._tmux

    @property
    def watcher(self) -> OutputWatcher:
        if self._watcher is None:
            raise TmuxError("this LocalMachine was made without an output watcher")
        return self._watcher

    @property
    def reachable(self) -> bool:
        return True

    async def watch(self, pane_id: str, session: str, pane_pid: int | None = None) -> PaneStream:
        return await self.watcher.watch(pane_id, session, pane_pid)

    @property
    def dir_scans(self) -> bool:
        return True

    def terminal_command(self, command: str) -> str:
        return command

    # processes ------------------------------------------------------------------------
    def stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]:
        """From this machine's process table (``/proc``, else one ``ps`` for all of them)."""
        return process_table().stats([int(pid) for pid in pids])

    def pane_processes(self, pane_pid: int) -> list[ProcStat]:
        """The pane's whole process tree, breadth-first from its own process (children by
        pid), with the stats of all of them read at once."""
        import psutil

        try:
            root = psutil.Process(check_pid(pane_pid))
        except psutil.Error:
            return []
        order: list[int] = []
        queue: deque[psutil.Process] = deque([root])
        while queue and len(order) < TREE_MAX_PROCS:
            proc = queue.popleft()
            if proc.pid in order:
                continue
            order.append(proc.pid)
            try:
                queue.extend(sorted(proc.children(), key=lambda child: child.pid))
            except psutil.Error:
                continue
        stats = self.stats(order)
        return [st for pid in order if (st := stats.get(pid)) is not None]

    def cmdline(self, pid: int) -> list[str]:
        import psutil

        try:
            return list(psutil.Process(int(pid)).cmdline())
        except (psutil.Error, ValueError):
            return []

    def environ(self, pid: int, names: Iterable[str]) -> dict[str, str]:
        raw = _read_proc_file(int(pid), "environ", ENVIRON_MAX_BYTES)
        return environ_from_bytes(raw, names)

    def cwd(self, pid: int) -> str | None:
        import psutil

        try:
            return str(psutil.Process(int(pid)).cwd())
        except (psutil.Error, ValueError):
            return None

    def started_at(self, pid: int) -> float | None:
        import psutil

        try:
            return float(psutil.Process(int(pid)).create_time())
        except (psutil.Error, ValueError):
            return None

    def open_files(self, pids: Iterable[int], name_glob: str) -> list[OpenFile]:
        """Open files of the processes and all their descendants, oldest modified first."""
        import psutil

        procs: list[psutil.Process] = []
        for pid in pids:
            try:
                proc = psutil.Process(int(pid))
            except (psutil.Error, ValueError):
                continue
            procs.append(proc)
            with contextlib.suppress(psutil.Error):
                procs.extend(proc.children(recursive=True))
        found: dict[str, tuple[float, int]] = {}
        for p in procs:
            try:
                files = p.open_files()
            except psutil.Error:
                continue
            for f in files:
                if fnmatch.fnmatch(os.path.basename(f.path), name_glob):
                    try:
                        found[f.path] = (os.stat(f.path).st_mtime, p.pid)
                    except OSError:
                        continue
        ordered = sorted(found, key=lambda path: (found[path][0], path))
        return [OpenFile(found[path][1], path) for path in ordered]

    # files ---------------------------------------------------------------------------
    def read_head(self, path: str, max_bytes: int = AGENT_FILE_MAX_BYTES) -> bytes | None:
        return read_small_regular_file(Path(path), max_bytes)

    def find_file(self, folder: str, name: str) -> str | None:
        """One existence check per subfolder (no recursive glob); the newest if several."""
        best: tuple[float, str] | None = None
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return None
        for entry in entries:
            candidate = os.path.join(entry.path, name)
            try:
                if not entry.is_dir():
                    continue
                st = os.stat(candidate)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and (best is None or st.st_mtime > best[0]):
                best = (st.st_mtime, candidate)
        return best[1] if best is not None else None

    def with_file(self, path: str, parse: Callable[[Path], T]) -> T | None:
        return parse(Path(path))

    def run_script(
        self, script: str, cwd: str, timeout_s: float = SCRIPT_TIMEOUT_S
    ) -> subprocess.CompletedProcess[bytes]:
        """With :func:`script_environment` (no API keys for the programs a repository may
        start, no ``GIT_*``), in a process group of its own, all of which is killed when
        ``timeout_s`` runs out (git too, not only the shell)."""
        argv = ["sh", "-c", script]
        try:
            proc = subprocess.Popen(
                argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=script_environment(), start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise TmuxError(f"could not run a script in {cwd}: {exc}") from None
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise TmuxError(f"a script in {cwd} did not end within {timeout_s:.0f} s") from None
        finally:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def script_environment() -> dict[str, str]:
    """The environment of a script run here (git's, io/git.py): tmux's client environment
    (:func:`~madohub_nb.io.tmux.client_environment`, the hub's without its keys) without
    any ``GIT_*`` variable, which would point git at other repositories, configs or programs."""
    return {k: v for k, v in client_environment().items() if not k.startswith("GIT_")}


def _read_proc_file(pid: int, name: str, max_bytes: int) -> bytes:
    try:
        with open(f"/proc/{int(pid)}/{name}", "rb") as f:
            return f.read(max_bytes)
    except (OSError, ValueError):
        return b""


def environ_from_bytes(raw: bytes, names: Iterable[str]) -> dict[str, str]:
    """The named variables of a NUL-separated environment block (the rest is dropped at once)."""
    keep = set(names)
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and key in keep:
            out[key] = value
    return out


def argv_from_bytes(raw: bytes) -> list[str]:
    """A NUL-separated ``/proc/<pid>/cmdline`` as words."""
    return [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
