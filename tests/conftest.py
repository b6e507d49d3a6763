"""Shared fixtures: a private tmux server, a temporary HOME, the real-agent fixtures.

Every test that touches tmux gets its own server on its own socket
(``tmux -L <name>``), killed by pid afterwards. Nothing here mocks tmux,
processes or the filesystem.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MADOHUB_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """``../shared/fixtures``: real files written by real agents."""
    if not FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {FIXTURES}; set MADOHUB_SHARED")
    return FIXTURES


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME for this test (and the processes it starts)."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("TMUX", raising=False)
    return h


def _server_pid(socket_name: str) -> int | None:
    out = subprocess.run(
        ["tmux", "-L", socket_name, "display-message", "-p", "#{pid}"],
        capture_output=True,
        text=True,
    )
    text = out.stdout.strip()
    return int(text) if out.returncode == 0 and text.isdigit() else None


def kill_tree(pid: int, timeout_s: float = 3.0) -> None:
    """End ``pid`` and all its descendants (by pid; never by name)."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def tmux_socket(home: Path) -> Iterator[str]:
    """The name of a private tmux socket; the server is killed by pid at the end."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (make test installs it)")
    name = f"mh-test-{uuid.uuid4().hex[:10]}"
    conf = home / ".tmux.conf"
    conf.write_text("set -g focus-events on\nset -g history-limit 5000\n")
    yield name
    pid = _server_pid(name)
    if pid is not None:
        # Panes' processes first (they are the server's children), then the server.
        kill_tree(pid)


def wait_until(
    cond: Callable[[], object], timeout_s: float = 10.0, interval_s: float = 0.05, what: str = ""
) -> object:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what or cond}; last={last!r}")
