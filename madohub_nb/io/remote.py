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

import contextlib
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence

from ..agents.foreground import ProcStat, parse_stat
from ..errors import MadohubValueError, TmuxError
from ..settings import AGENT_FILE_MAX_BYTES
from .tmux import client_environment

HOST_RE = re.compile(
    r"^(?:[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}@)?[A-Za-z0-9_][A-Za-z0-9_.:%-]{0,252}$"
)
"""An ssh destination: ``box``, ``dev-1.example.org``, ``me@box``; never an option (``-o…``)."""
CONNECT_TIMEOUT_S = 10.0
"""How long reaching a host may take before it is an error (unknown, refused, hanging)."""
READ_TIMEOUT_S = 10.0
"""How long one bounded read on a host may take."""
STAT_MAX_BYTES = 4096
TAIL_MAX_BYTES = 1024 * 1024
"""The most of a transcript read from a host per extraction (its last bytes)."""
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
    if not isinstance(host, str) or not HOST_RE.match(host):
        raise MadohubValueError(
            f"host {host!r} is not an ssh destination; use a name from your ssh config or "
            "'user@hostname' (letters, digits, '.', '-', '_'; no spaces, not starting with '-')"
        )
    return host


def parse_ssh_command(value: object) -> list[str]:
    """The ``ssh_command`` setting split as a shell would (``"ssh -F /x/config"``)."""
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise MadohubValueError(f"ssh_command {value!r} cannot be split: {exc}") from None
    elif isinstance(value, (list, tuple)) and all(isinstance(w, str) for w in value):
        words = list(value)
    else:
        words = []
    if not words:
        raise MadohubValueError(
            f"ssh_command must be a command line such as 'ssh' or 'ssh -F ~/.ssh/config', "
            f"got {value!r}"
        )
    return words


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
        ssh handshake. False (and commands connect on their own) when it cannot be made."""
        self.stop_master()
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
                return True
            time.sleep(0.01)
        self.stop_master()
        return False

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
        self, shell: str, timeout_s: float = READ_TIMEOUT_S
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one bounded read (``shell``, built by this class) on the host."""
        self.reads += 1
        try:
            return subprocess.run(
                self.argv((), shell=shell),
                capture_output=True,
                env=client_environment(),
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise TmuxError(f"host {self.host!r} did not answer within {timeout_s:.0f} s") from None

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
        raw = self.read_head(f"/proc/{int(pid)}/cmdline", STAT_MAX_BYTES) or b""
        return [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]

    def read_environ(self, pid: int, names: Iterable[str]) -> dict[str, str]:
        """Only the named variables of a process's environment (the rest is dropped at once)."""
        raw = self.read_head(f"/proc/{int(pid)}/environ", 256 * 1024) or b""
        keep = set(names)
        out = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.decode("utf-8", "replace").partition("=")
            if sep and key in keep:
                out[key] = value
        return out

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
