"""Remote hosts: tmux on another machine, reached through the user's own ``ssh``.

A host is an ssh destination (an alias of ``~/.ssh/config``, ``user@name``).
Nothing of ours runs there: the hub runs ``tmux`` (one control-mode client per
host streams output and carries commands, as locally) and bounded reads
(``head -c N`` of ``/proc/<pid>/stat``, a session file; ``tail -c N`` of a
transcript; ``readlink`` of a process tree's first fds), never a whole file. Host keys are checked as ssh checks them
(the user's config decides); the ssh process gets the hub's environment
without its secrets (:func:`~madohub_nb.io.tmux.client_environment`), so no
``SendEnv`` can forward a key.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import math
import os
import selectors
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

from ..agents.foreground import ProcStat, parse_stat
from ..agents.regex import lazy_compile
from ..defaults import AGENT_FILE_MAX_BYTES
from ..errors import MadohubValueError, TmuxError
from .machine import SCRIPT_TIMEOUT_S, OpenFile, argv_from_bytes, environ_from_bytes
from .tmux import Tmux, client_environment
from .watch import OutputWatcher, PaneStream

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
"""Both ends of a forwarded TCP port: the host's loopback and this machine's."""
HOST_RE = lazy_compile(
    r"^(?:[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}@)?[A-Za-z0-9_][A-Za-z0-9_.:%-]{0,252}\Z"
)
"""An ssh destination: ``box``, ``dev-1.example.org``, ``me@box``; never an option (``-o…``)."""
CONNECT_TIMEOUT_S = 10.0
"""How long reaching a host may take before it is an error (unknown, refused, hanging)."""
READ_TIMEOUT_S = 10.0
"""How long one bounded read on a host may take."""
STAT_MAX_BYTES = 4096
TAIL_MAX_BYTES = 1024 * 1024
"""The most of a transcript read from a host per extraction (its last bytes)."""
ANSWER_MAX_BYTES = TAIL_MAX_BYTES + 64 * 1024
"""The most a host may answer to one bounded read (a tail read's bytes, its path and size)."""
STDERR_MAX_BYTES = 64 * 1024
"""The most of ssh's (or the host's) complaints kept from one read."""
OPEN_FILES_MAX_PROCS = 64
"""The most processes (an agent and its descendants) whose open files one read looks at."""
OPEN_FILES_MAX_FDS = 256
"""The most file descriptors per process whose targets one read resolves (``readlink``)."""

_OPEN_FILES_SCRIPT = r"""
todo="$*"; n=0
while [ -n "$todo" ] && [ "$n" -lt "$MH_PROCS" ]; do
  set -- $todo; [ "$#" -gt 0 ] || break
  p=$1; shift; todo="$*"; n=$((n+1))
  kids=$(head -q -c 4096 /proc/"$p"/task/*/children 2>/dev/null)
  todo="$todo $kids"
  fds=""; i=0
  for f in /proc/"$p"/fd/*; do
    i=$((i+1)); [ "$i" -gt "$MH_FDS" ] && break
    fds="$fds $f"
  done
  [ -n "$fds" ] || continue
  readlink -- $fds 2>/dev/null | while IFS= read -r l; do
    case $l in $MH_GLOB) printf '%s %s\n' "$p" "$l";; esac
  done
done
"""
"""Walks a process tree breadth-first (``/proc/<pid>/task/*/children``, ``head -c``) and
resolves the first fds of each process (``readlink``): reads only, bounded in processes and
fds, printing ``pid path`` for the targets matching ``$MH_GLOB``. Run by ``sh -c`` so the
user's login shell (zsh, fish) does not change how words split."""


def check_host(host: object) -> str:
    """``host`` if it is a plain ssh destination, else a one-line error saying what is allowed."""
    if not isinstance(host, str) or not HOST_RE.fullmatch(host):
        raise MadohubValueError(
            f"host {host!r} is not an ssh destination; use a name from your ssh config or "
            "'user@hostname' (letters, digits, '.', '-', '_'; no spaces, not starting with '-')"
        )
    return host


class SshHost:
    """One remote machine: how to run a command there (``ssh … host 'words'``) and read from it."""

    def __init__(self, host: str, ssh_command: Sequence[str] = ("ssh",)) -> None:
        self.host = check_host(host)
        self.ssh = list(ssh_command)
        self.reads = 0
        """Bounded reads run on this host (tests and benchmarks count them)."""
        self._master: subprocess.Popen[bytes] | None = None
        self._control_dir: str | None = None
        self._stopping = threading.Lock()
        self._closed = False
        self._forwards: dict[str, str] = {}
        """Unix sockets forwarded from the host to here (host path → local path); every
        master this host starts carries them (a reconnect makes a new master)."""
        self.forward_error: str | None = None
        """Why the last forward failed (ssh's last line), else None."""
        self._asked: dict[int, int] = {}
        """The host port each TCP forward of the master that runs now asked for (0: any)."""
        self._ports: dict[int, int] = {}
        """TCP ports forwarded from the host's 127.0.0.1 to this machine's (local → host
        port): a reconnect asks the new master for the same host port again."""

    # one shared connection ---------------------------------------------------------------
    @property
    def control_path(self) -> str | None:
        """The socket of our own ssh master connection while it runs, else None."""
        master, folder = self._master, self._control_dir
        if master is None or folder is None or master.poll() is not None:
            return None
        return os.path.join(folder, "c")

    def start_master(self) -> bool:
        """Open one ssh connection that later commands share (``ssh -M -N``, our child, ended
        by pid in :meth:`stop_master`): a bounded read then costs milliseconds, not a new
        ssh handshake. False (and commands connect on their own) when it cannot be made.
        A master that still runs is kept: restarting it would end every client sharing it.
        After :meth:`close` none is made (a reconnect's probe may still run then). The
        interpreter's exit ends it, whether or not the hub was closed."""
        import tempfile

        if self._closed:
            return False
        if self.control_path is not None:
            return True
        self.stop_master()
        atexit.register(self.close)
        folder = self._control_dir or tempfile.mkdtemp(prefix="mh-ssh-")
        self._control_dir = folder
        path = os.path.join(folder, "c")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        argv = self.argv((), shell="")[:-3]  # the options, without "--", host and command
        self._master = subprocess.Popen(
            [*argv, "-M", "-N", "-S", path, "-o", "ControlPersist=no", "--", self.host],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=client_environment(),
        )
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while time.monotonic() < deadline and self._master.poll() is None:
            if os.path.exists(path):
                for remote, local in list(self._forwards.items()):
                    self._forward(remote, local)
                for port, there in list(self._ports.items()):
                    self._forward_tcp(port, there)
                return True
            time.sleep(0.01)
        self.stop_master()
        return False

    def forward_socket(self, remote: str, local: str) -> bool:
        """Carry connections to the Unix socket ``remote`` on the host to ``local`` here,
        over our ssh master (``ssh -O forward -R``), now and after every reconnect. The
        host's sshd makes the socket 0600 (``StreamLocalBindMask``); put it in a 0700
        folder. False when the master does not run or the host refused the forward."""
        self._forwards[remote] = local
        self.forward_error = None if self.control_path is not None else "no ssh master runs"
        return self.control_path is not None and self._forward(remote, local)

    def forward_port(self, port: int) -> int | None:
        """Carry connections to a port of the host's 127.0.0.1 to ``port`` on this machine's
        127.0.0.1, over our ssh master (``ssh -O forward -R 127.0.0.1:0:127.0.0.1:PORT``),
        now and after every reconnect (on the same host port). The host's port (the same
        one when asked again), or None: no master runs or the host refused the forward
        (:attr:`forward_error` says why). Bound to the host's loopback only."""
        there = self._ports.get(port)
        if there is not None and self.control_path is not None:
            return there
        self.forward_error = None if self.control_path is not None else "no ssh master runs"
        got = self._forward_tcp(port, 0) if self.control_path is not None else None
        if got is not None:
            self._ports[port] = got
        return got

    def cancel_port(self, port: int) -> None:
        """End the forward of :meth:`forward_port` (best effort: the master may be gone,
        which ended it already); it is not made again after a reconnect."""
        there = self._ports.pop(port, None)
        path = self.control_path
        if there is None or path is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(
                [*self.ssh, "-S", path, "-O", "cancel", "-R", self._tcp_spec(port, there),
                 "--", self.host],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=READ_TIMEOUT_S,
                env=client_environment(), check=False,
            )  # fmt: skip

    def _tcp_spec(self, port: int, there: int) -> str:
        # (A forward is cancelled by the spec it was asked with: the first one asked port 0.)
        asked = self._asked.get(port, there)
        return f"{LOOPBACK}:{asked}:{LOOPBACK}:{port}"

    def _forward_tcp(self, port: int, there: int) -> int | None:
        path = self.control_path
        if path is None:
            return None
        spec = f"{LOOPBACK}:{there}:{LOOPBACK}:{port}"
        try:
            done = subprocess.run(
                [*self.ssh, "-S", path, "-O", "forward", "-R", spec, "--", self.host],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=READ_TIMEOUT_S,
                env=client_environment(), check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            self.forward_error = f"ssh -O forward did not answer within {READ_TIMEOUT_S:g} s"
            return None
        if done.returncode != 0:
            # (ssh's first line says why; its last only that the master's request failed)
            why = done.stderr.decode(errors="replace").strip().splitlines()
            self.forward_error = why[0].strip() if why else f"exit status {done.returncode}"
            return None
        self.forward_error = None
        self._asked[port] = there
        if there != 0:
            return there
        said = done.stdout.decode(errors="replace").strip()
        if not said.isdigit():
            self.forward_error = f"ssh named no port for the forward (it said {said!r})"
            return None
        return int(said)

    # private files on the host (hook set-ups) ----------------------------------------------
    def make_private_folder(self, base: str, prefix: str) -> str:
        """A fresh 0700 folder on the host under ``base`` (``~`` is the host's home), made
        with ``mktemp -d``; its path. A TmuxError when the host cannot make one."""
        script = (
            f"umask 077 && mkdir -p {_home_path(base)} && "
            f"mktemp -d {_home_path(base)}/{shlex.quote(prefix)}XXXXXXXX"
        )
        proc = self.run(script, max_bytes=STAT_MAX_BYTES)
        folder = proc.stdout.decode(errors="replace").strip()
        if proc.returncode != 0 or not folder.startswith("/"):
            raise TmuxError(
                f"host {self.host!r} could not make a private folder under {base}: "
                f"{_last_line(proc.stderr) or 'no path came back'}"
            )
        return folder

    def write_private(self, files: Mapping[str, str]) -> None:
        """Write ``files`` (absolute host paths → text) on the host, 0600 in 0700 folders.

        Each text travels on ssh's stdin to ``cat`` (one bounded call per file), never in a
        command line: a token in one would be in the argv of the local ssh and of the
        host's shell, which every user of either machine can read (``ps``).
        """
        for path, text in files.items():
            folder = shlex.quote(os.path.dirname(path))
            proc = self.run(
                f"umask 077 && mkdir -p {folder} && cat > {shlex.quote(path)}",
                max_bytes=STAT_MAX_BYTES,
                input=text.encode(),
            )
            if proc.returncode != 0:
                raise TmuxError(
                    f"host {self.host!r} could not write {path}: "
                    f"{_last_line(proc.stderr) or f'exit status {proc.returncode}'}"
                )

    def remove_trees(self, paths: Iterable[str], timeout_s: float = 3.0) -> None:
        """Remove folders this hub made on the host, in one call (best effort, bounded: the
        host may be gone)."""
        quoted = " ".join(shlex.quote(p) for p in paths)
        with contextlib.suppress(TmuxError):
            self.run(f"rm -rf -- {quoted}", timeout_s=timeout_s, max_bytes=STAT_MAX_BYTES)

    def which(self, program: str) -> str | None:
        """The host's path of ``program`` (``command -v``), or None."""
        try:
            proc = self.run(f"command -v {shlex.quote(program)}", max_bytes=STAT_MAX_BYTES)
        except TmuxError:
            return None
        found = proc.stdout.decode(errors="replace").strip()
        return found if proc.returncode == 0 and found.startswith("/") else None

    def _forward(self, remote: str, local: str) -> bool:
        # A socket left by an earlier master would make the host's bind fail.
        with contextlib.suppress(TmuxError):
            self.run(f"rm -f {shlex.quote(remote)}")
        path = self.control_path
        if path is None:
            return False
        try:
            done = subprocess.run(
                [*self.ssh, "-S", path, "-O", "forward", "-R", f"{remote}:{local}", "--",
                 self.host],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=READ_TIMEOUT_S,
                env=client_environment(), check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        self.forward_error = _last_line(done.stderr) if done.returncode != 0 else None
        return done.returncode == 0

    def close(self) -> None:
        """End our ssh master for good and remove its socket folder; no master is made again."""
        import shutil

        self._closed = True
        atexit.unregister(self.close)
        self.stop_master()
        folder, self._control_dir = self._control_dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def stop_master(self) -> None:
        """End our ssh master by pid. A second caller waits until the first has ended it."""
        with self._stopping:
            master, self._master = self._master, None
            if master is not None and master.poll() is None:
                master.terminate()
                try:
                    master.wait(2)
                except subprocess.TimeoutExpired:
                    master.kill()
                    master.wait()

    def argv(self, words: Iterable[str], *, shell: str | None = None) -> list[str]:
        """ssh's argv running ``words`` (each quoted for the remote shell) on the host.

        ``shell``: a ready-made remote command line instead (only for the globs
        of bounded reads, built here). ConnectTimeout bounds an unreachable host;
        the keepalives notice a dead connection within about 15 s.
        """
        remote = shell if shell is not None else " ".join(shlex.quote(w) for w in words)
        path = self.control_path
        shared = ["-o", "ControlMaster=no", "-S", path] if path else []
        return [
            *self.ssh,
            *shared,
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S:.0f}",
            "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3",
            "-T", "--", self.host, remote,
        ]  # fmt: skip

    def run(
        self,
        shell: str,
        timeout_s: float = READ_TIMEOUT_S,
        max_bytes: int = ANSWER_MAX_BYTES,
        input: bytes | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one bounded read (``shell``, built by this class) on the host.

        Bounded in time (``timeout_s``) and in bytes: a host answering more than
        ``max_bytes`` (or :data:`STDERR_MAX_BYTES` of complaints) is cut off at once,
        with a TmuxError, so a hostile host cannot fill memory for the whole timeout.
        ``input`` goes to the command's stdin (the way for anything secret: never argv).
        """
        self.reads += 1
        argv = self.argv((), shell=shell)
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=client_environment(),
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        out, err = bytearray(), bytearray()
        limits = {
            proc.stdout.fileno(): (out, max_bytes),
            proc.stderr.fileno(): (err, STDERR_MAX_BYTES),
        }
        pending = memoryview(input or b"")
        deadline = time.monotonic() + timeout_s
        try:
            with selectors.DefaultSelector() as selector:
                for pipe in (proc.stdout, proc.stderr):
                    selector.register(pipe, selectors.EVENT_READ)
                if proc.stdin is not None:
                    os.set_blocking(proc.stdin.fileno(), False)
                    selector.register(proc.stdin, selectors.EVENT_WRITE)
                while selector.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TmuxError(
                            f"host {self.host!r} did not answer within {timeout_s:.0f} s"
                        )
                    for key, _ in selector.select(left):
                        if key.fileobj is proc.stdin:
                            pending = _feed(selector, proc.stdin, pending)
                            continue
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            selector.unregister(key.fileobj)
                            continue
                        buffer, limit = limits[key.fd]
                        buffer += chunk
                        if len(buffer) > limit:
                            raise TmuxError(
                                f"host {self.host!r} answered more than {limit} bytes to a "
                                "bounded read; it was cut off (is something on the host "
                                "writing into its files or shell start-up?)"
                            )
            returncode = proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise TmuxError(f"host {self.host!r} did not answer within {timeout_s:.0f} s") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        return subprocess.CompletedProcess(argv, returncode, bytes(out), bytes(err))

    # bounded reads ---------------------------------------------------------------
    def read_stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]:
        """``/proc/<pid>/stat`` of several processes in one ssh call (None: gone)."""
        wanted = sorted({int(p) for p in pids if int(p) > 0})
        found: dict[int, ProcStat | None] = dict.fromkeys(wanted)
        if not wanted:
            return found
        files = " ".join(f"/proc/{p}/stat" for p in wanted)
        proc = self.run(f"head -q -c {STAT_MAX_BYTES} {files} 2>/dev/null")
        if proc.returncode == 255:
            raise TmuxError(ssh_problem(self.host, proc.stderr))
        for line in proc.stdout.splitlines():
            pid_text = line.partition(b" ")[0]
            if pid_text.isdigit() and int(pid_text) in found:
                found[int(pid_text)] = parse_stat(int(pid_text), line)
        return found

    def read_stat(self, pid: int) -> ProcStat | None:
        return self.read_stats([pid]).get(int(pid))

    def read_head(self, path: str, max_bytes: int = AGENT_FILE_MAX_BYTES) -> bytes | None:
        """The first ``max_bytes`` of a file on the host; None when it cannot be read."""
        proc = self.run(f"head -c {int(max_bytes)} -- {shlex.quote(path)}")
        return proc.stdout if proc.returncode == 0 else None

    def read_tail(
        self, shell_path: str, max_bytes: int = TAIL_MAX_BYTES
    ) -> tuple[str, bytes, bool] | None:
        """The last ``max_bytes`` of a regular file (``shell_path`` quoted, may hold a glob: the
        first match): its path, those bytes, and whether that is the whole file; or None."""
        proc = self.run(
            f'for f in {shell_path}; do [ -f "$f" ] && printf \'%s\\n\' "$f" && '
            f'wc -c < "$f" && tail -c {int(max_bytes)} -- "$f"; break; done'
        )
        path, _, rest = proc.stdout.partition(b"\n")
        size, nl, data = rest.partition(b"\n")
        if proc.returncode != 0 or not nl or not size.strip().isdigit():
            return None
        return path.decode("utf-8", "replace"), data, int(size) <= max_bytes

    def read_open_files(
        self,
        pids: Iterable[int],
        name_glob: str,
        max_procs: int = OPEN_FILES_MAX_PROCS,
        max_fds: int = OPEN_FILES_MAX_FDS,
    ) -> list[tuple[int, str]]:
        """(pid, path) of the files matching ``name_glob`` (a shell ``case`` pattern such as
        ``*/rollout-*.jsonl``) that ``pids`` or their descendants hold open: one ssh call,
        ``readlink`` of at most ``max_fds`` fds of at most ``max_procs`` processes."""
        wanted = [str(int(p)) for p in pids if int(p) > 0]
        if not wanted:
            return []
        script = _OPEN_FILES_SCRIPT.replace("$MH_PROCS", str(int(max_procs)))
        script = script.replace("$MH_FDS", str(int(max_fds))).replace("$MH_GLOB", name_glob)
        proc = self.run(" ".join(["sh", "-c", shlex.quote(script), "sh", *wanted]))
        if proc.returncode == 255:
            raise TmuxError(ssh_problem(self.host, proc.stderr))
        found = []
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            pid_text, _, path = line.partition(" ")
            if pid_text.isdigit() and path.startswith("/"):
                found.append((int(pid_text), path))
        return found

    def read_cmdline(self, pid: int) -> list[str]:
        return argv_from_bytes(self.read_head(f"/proc/{int(pid)}/cmdline", STAT_MAX_BYTES) or b"")

    def read_environ(self, pid: int, names: Iterable[str]) -> dict[str, str]:
        """Only the named variables of a process's environment (the rest is dropped at once)."""
        raw = self.read_head(f"/proc/{int(pid)}/environ", 256 * 1024) or b""
        return environ_from_bytes(raw, names)

    def find_first(self, folder: str, name: str) -> str | None:
        """The first regular file ``<folder>/*/<name>`` on the host (one bounded read), or None."""
        pattern = f"{shlex.quote(folder)}/*/{shlex.quote(name)}"
        proc = self.run(
            f'for f in {pattern}; do [ -f "$f" ] && printf \'%s\\n\' "$f" && break; done'
        )
        found = proc.stdout.decode("utf-8", "replace").partition("\n")[0]
        return found if proc.returncode == 0 and found.startswith("/") else None

    def probe(self, socket_name: str | None) -> None:
        """Check the host answers and has tmux, within the connect timeout; one-line errors."""
        tmux = ["tmux", *(["-L", socket_name] if socket_name else []), "-V"]
        proc = self.run(" ".join(shlex.quote(w) for w in tmux), CONNECT_TIMEOUT_S + 2)
        if proc.returncode == 255:
            raise TmuxError(ssh_problem(self.host, proc.stderr))
        if proc.returncode == 127:
            raise TmuxError(
                f"host {self.host!r} has no tmux (`tmux -V` failed there: "
                f"{_last_line(proc.stderr) or 'command not found'}); install tmux on it"
            )
        if proc.returncode != 0 or not proc.stdout.startswith(b"tmux"):
            said = _last_line(proc.stderr) or _last_line(proc.stdout) or "no output"
            raise TmuxError(
                f"`tmux -V` failed on host {self.host!r} (status {proc.returncode}): {said}"
            )


class SshMachine(SshHost):
    """A remote host as a :class:`~madohub_nb.io.machine.Machine`: its tmux (commands over
    the control connection), its output watcher, and every read bounded and over ssh.

    Directory scans are not done here (no bounded read lists a folder of transcripts).
    ``reachable`` is kept by the host's link (pipeline/hosts.py), which reconnects.
    """

    def __init__(
        self,
        host: str,
        ssh_command: Sequence[str] = ("ssh",),
        socket_name: str | None = None,
        on_output: Callable[[str, int], None] | None = None,
        on_client_exit: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(host, ssh_command)
        self.socket_name = socket_name
        self._tmux = Tmux(socket_name, remote=self)
        self._watcher = OutputWatcher(
            self._tmux, on_output=on_output, on_client_exit=on_client_exit
        )
        self.reachable = True
        """False from a dropped control connection until the host answers again."""
        self.closing = False
        """Set by close(): nothing waits for the host any more."""
        self._back: asyncio.Event | None = None
        self._checking = False
        self._gone_sessions: set[str] = set()

    def checking(self) -> None:
        """A control client ended and the link is finding out whether the host or only a
        session went: watches wait meanwhile; tiles still read the host (loop)."""
        self._checking = True
        self._new_wait()

    def went_down(self) -> None:
        """The host does not answer: it reads unreachable; watches wait for it (loop)."""
        self.reachable, self._checking = False, False
        self._new_wait()

    def came_back(self) -> None:
        """The host answers (again): watches waiting for it go on (loop)."""
        self.reachable, self._checking = True, False
        if self._back is not None:
            self._back.set()

    def _new_wait(self) -> None:
        if self._back is None or self._back.is_set():
            self._back = asyncio.Event()

    def stop_waiting(self) -> None:
        """Closing: watches waiting for the host end their wait (loop)."""
        self.closing = True
        if self._back is not None:
            self._back.set()

    def forget_session(self, session: str) -> None:
        """``session`` ended on the host: its panes are no longer streamed, nor ever watched
        again (a client attached to a session that is gone would exit at once, for ever)."""
        self._gone_sessions.add(session)
        for stream in list(self._watcher.streams.values()):
            if stream.session == session:
                self._watcher.forget(stream.pane_id)

    def session_gone(self, session: str) -> bool:
        return session in self._gone_sessions

    def has_session(self, session: str) -> bool:
        """Does ``session`` exist on the host's tmux (one bounded read)? A TmuxError when the
        host cannot be reached."""
        words = ["tmux", *(["-L", self.socket_name] if self.socket_name else [])]
        words += ["has-session", "-t", f"={session}"]
        proc = self.run(" ".join(shlex.quote(w) for w in words))
        if proc.returncode == 255:
            raise TmuxError(ssh_problem(self.host, proc.stderr))
        return proc.returncode == 0

    async def watch(self, pane_id: str, session: str, pane_pid: int | None = None) -> PaneStream:
        """Stream a pane of this host, waiting for the host while it is unreachable.
        (``pane_pid`` is not watched: a process on another host has no pidfd here.)"""
        while (not self.reachable or self._checking) and not self.closing:
            back = self._back
            if back is None:
                break
            await back.wait()
        if session in self._gone_sessions:
            raise TmuxError(
                f"the tmux session {session!r} on host {self.host!r} has ended, and pane "
                f"{pane_id} with it"
            )
        return await self._watcher.watch(pane_id, session)

    @property
    def name(self) -> str | None:
        return self.host

    @property
    def tmux(self) -> Tmux:
        return self._tmux

    @property
    def watcher(self) -> OutputWatcher:
        return self._watcher

    @property
    def dir_scans(self) -> bool:
        return False

    def terminal_command(self, command: str) -> str:
        ssh = " ".join(shlex.quote(w) for w in self.ssh)
        return f"{ssh} -t {shlex.quote(self.host)} {shlex.quote(command)}"

    def stats(self, pids: Iterable[int]) -> dict[int, ProcStat | None]:
        return self.read_stats(pids)

    def pane_processes(self, pane_pid: int) -> list[ProcStat]:
        """The pane's own process and its terminal's foreground leader (two bounded reads;
        a walk of the whole tree would read every process's argv over ssh)."""
        pane = self.read_stats([pane_pid]).get(pane_pid)
        if pane is None:
            return []
        found = [pane]
        if pane.tpgid > 0 and pane.tpgid != pane.pid:
            leader = self.read_stats([pane.tpgid]).get(pane.tpgid)
            if leader is not None:
                found.append(leader)
        return found

    def cmdline(self, pid: int) -> list[str]:
        return self.read_cmdline(pid)

    def environ(self, pid: int, names: Iterable[str]) -> dict[str, str]:
        return self.read_environ(pid, names)

    def cwd(self, pid: int) -> str | None:
        return None

    def started_at(self, pid: int) -> float | None:
        return None

    def open_files(self, pids: Iterable[int], name_glob: str) -> list[OpenFile]:
        """Open files of the process tree (one bounded read), oldest by name first: a
        rollout's name starts with its start time."""
        found = self.read_open_files(pids, f"*/{name_glob}")
        return [OpenFile(pid, path) for pid, path in sorted(found, key=lambda f: (f[1], f[0]))]

    def find_file(self, folder: str, name: str) -> str | None:
        return self.find_first(folder, name)

    def with_file(self, path: str, parse: Callable[[Path], T]) -> T | None:
        """``parse`` of the file's last :data:`TAIL_MAX_BYTES` (whole lines) copied into a
        local temporary file."""
        import tempfile

        got = self.read_tail(shlex.quote(path))
        if got is None:
            return None
        _, data, whole = got
        if not whole:
            data = data.partition(b"\n")[2]  # the first line is cut: drop it
        fd, name = tempfile.mkstemp(prefix="madohub-tail-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return parse(Path(name))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)

    def run_script(
        self, script: str, cwd: str, timeout_s: float = SCRIPT_TIMEOUT_S
    ) -> subprocess.CompletedProcess[bytes]:
        """The script in ``cwd`` on the host (``~`` is the host's home), in one bounded call;
        under the host's ``timeout`` where it has one, which kills the script's whole process
        group (git too) when its time is up: ending ssh here would leave them running there."""
        q = shlex.quote(script)
        limit_s = max(1, math.ceil(timeout_s))
        return self.run(
            f"cd {_home_path(cwd)} && if command -v timeout >/dev/null 2>&1; "
            f"then exec timeout -s KILL {limit_s} sh -c {q}; else exec sh -c {q}; fi",
            timeout_s=timeout_s,
        )


def _home_path(path: str) -> str:
    """``path`` for the host's shell: a leading ``~/`` is its ``$HOME``, the rest quoted."""
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def _feed(selector: selectors.BaseSelector, pipe: IO[bytes], pending: memoryview) -> memoryview:
    """Write what ``pipe`` takes of ``pending`` (non-blocking); close it once all is written
    (the command reads end of file) or the reader has gone. What is left to write."""
    try:
        pending = pending[os.write(pipe.fileno(), pending[:65536]) :] if pending else pending
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        pending = pending[:0]
    if not pending:
        selector.unregister(pipe)
        pipe.close()
    return pending


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def ssh_problem(host: str, stderr: bytes) -> str:
    """ssh's own complaint (its last line of stderr) as a one-line error about ``host``."""
    said = _last_line(stderr) or "ssh exited with status 255"
    hint = ""
    if "Permission denied" in said:
        hint = "; the host refused the key (check IdentityFile and authorized_keys)"
    elif "Could not resolve" in said or "Name or service not known" in said:
        hint = "; no such host (check the name or your ssh config's Host entries)"
    elif "timed out" in said:
        hint = "; it did not answer (is it up, and the port right?)"
    elif "Host key verification failed" in said:
        hint = "; its host key is not the one known for it (see known_hosts)"
    return f"cannot reach host {host!r} over ssh: {said}{hint}"
