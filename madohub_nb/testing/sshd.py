"""A throwaway OpenSSH server on 127.0.0.1 for tests and benchmarks of remote hosts.

``SshServer(tmp_dir).start()`` makes a host key and a user key (``ssh-keygen``),
writes its own ``sshd_config`` (listening on 127.0.0.1 only, keys only, no PAM)
and an ``ssh_config`` with these hosts:

- ``box``: the server, host key pinned (``StrictHostKeyChecking yes``), ``BatchMode yes``;
- ``box2``: the same server under a second name (two hosts in one test, e.g. an
  experiment's ``hosts=``);
- ``refused``: the same server with a key it does not accept;
- ``notmux``: the same server on a second port where ``PATH`` holds no tmux;
- ``noforward``: the same server on a third port that refuses remote TCP forwards
  (``AllowTcpForwarding local``; Unix socket forwards still work);
- ``nohost``: a name that does not resolve;
- ``hang``: a port that accepts connections and never answers.

``box`` sends ``ANTHROPIC_API_KEY`` and ``OPENAI_API_KEY`` (``SendEnv``) and the
server accepts them (``AcceptEnv``): only the hub's own scrubbing keeps them home.

It runs as the current user in the foreground (``sshd -D``), ended by pid in
:meth:`stop`. :meth:`drop_sessions` kills every per-connection sshd process (a
dropped link). Needs Debian's ``openssh-server`` (``make system-deps``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "madohub-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text().strip()


class SshServer:
    """One private sshd; ``ssh_command`` is what a hub's ``ssh_command`` setting should be."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.port = 0
        self.notmux_port = 0
        self.noforward_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._hang: socket.socket | None = None
        self.config = self.root / "ssh_config"
        self.home = self.root / "home"
        """The HOME of sessions on the server."""

    @property
    def ssh_command(self) -> str:
        return f"ssh -F {self.config}"

    def start(self, timeout_s: float = 10.0) -> SshServer:
        if not os.path.exists(SSHD) or shutil.which("ssh") is None:
            raise RuntimeError("openssh-server is not installed (make system-deps installs it)")
        self.root.mkdir(parents=True, exist_ok=True)
        host_pub = _keygen(self.root / "host_key")
        user_pub = _keygen(self.root / "id_user")
        _keygen(self.root / "id_other")
        (self.root / "authorized_keys").write_text(user_pub + "\n")
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir
        self.port, self.notmux_port, self.noforward_port = free_port(), free_port(), free_port()
        self.home.mkdir(exist_ok=True)
        nobin = self.root / "nobin"
        nobin.mkdir(exist_ok=True)
        (self.root / "sshd_config").write_text(
            f"Port {self.port}\nPort {self.notmux_port}\nPort {self.noforward_port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.root / 'host_key'}\nPidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\n"
            "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\nPermitUserEnvironment no\nPrintMotd no\n"
            "LogLevel ERROR\nAcceptEnv ANTHROPIC_API_KEY OPENAI_API_KEY\n"
            # The host's user gets a HOME of its own: no login files of this machine's user
            # (a slow ~/.bashrc would be timed as ssh), no ~/.tmux.conf of theirs.
            f"SetEnv HOME={self.home}\n"
            f"Match LocalPort {self.notmux_port}\n  SetEnv PATH={nobin} HOME={self.home}\n"
            f"Match LocalPort {self.noforward_port}\n  AllowTcpForwarding local\n"
        )
        user = os.environ.get("USER") or psutil.Process().username()
        common = (
            f"  HostName 127.0.0.1\n  User {user}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.root / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n  LogLevel ERROR\n"
        )
        (self.root / "known_hosts").write_text(
            f"[127.0.0.1]:{self.port} {host_pub}\n[127.0.0.1]:{self.notmux_port} {host_pub}\n"
            f"[127.0.0.1]:{self.noforward_port} {host_pub}\n"
        )
        self._hang = socket.socket()
        self._hang.bind(("127.0.0.1", 0))
        self._hang.listen(16)  # never accepted: the kernel completes connections, nobody speaks
        hang_port = self._hang.getsockname()[1]
        self.config.write_text(
            f"Host box\n  Port {self.port}\n  IdentityFile {self.root / 'id_user'}\n"
            f"  SendEnv ANTHROPIC_API_KEY OPENAI_API_KEY\n{common}"
            f"Host box2\n  Port {self.port}\n  IdentityFile {self.root / 'id_user'}\n{common}"
            f"Host hang\n  Port {hang_port}\n  IdentityFile {self.root / 'id_user'}\n{common}"
            f"Host refused\n  Port {self.port}\n  IdentityFile {self.root / 'id_other'}\n{common}"
            f"Host notmux\n  Port {self.notmux_port}\n  IdentityFile {self.root / 'id_user'}\n"
            f"{common}"
            f"Host noforward\n  Port {self.noforward_port}\n"
            f"  IdentityFile {self.root / 'id_user'}\n{common}"
            f"Host nohost\n  HostName nohost.invalid\n{common.split(chr(10), 1)[1]}"
        )
        self.config.chmod(0o600)
        with open(self.root / "sshd.log", "wb") as log:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()[-500:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("sshd did not start listening")

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener), by pid."""
        if self.proc is None:
            return []
        try:
            return [p.pid for p in psutil.Process(self.proc.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def drop_sessions(self) -> list[int]:
        """Kill every open ssh connection's sshd process (SIGKILL, by pid): the link drops."""
        pids = self.session_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def stop(self) -> None:
        """End the listener and its connections by pid (what they started on the host stays)."""
        if self._hang is not None:
            self._hang.close()
            self._hang = None
        if self.proc is None:
            return
        self.drop_sessions()
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
