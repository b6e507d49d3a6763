"""Shared fixtures: a private tmux server, a temporary HOME, the real-agent fixtures.

Every test that touches tmux gets its own server on its own socket
(``tmux -L <name>``), killed by pid afterwards. Nothing here mocks tmux,
processes or the filesystem.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MADOHUB_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C interrupts the suite even when it was started in the background.

    A shell without job control starts a background command with SIGINT ignored, and
    Python then leaves it ignored: so does `make pytest`'s first tier, and so does a
    suite run from such a shell. The tests that interrupt a call (an experiment's
    Ctrl-C) would see nothing, and the person pressing Ctrl-C would leave that tier
    running. Python's own handler is put back.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``: its stdout; a failure raises."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path, home: Path) -> Path:
    """A repository with one commit (README, 2 lines) and a clean working tree."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "t@example.invalid")
    git(r, "config", "user.name", "t")
    (r / "README").write_text("one\ntwo\n")
    git(r, "add", "README")
    git(r, "commit", "-q", "-m", "first")
    return r


def tmux_server_pid(socket_name: str) -> int | None:
    """The pid of the tmux server on ``socket_name`` as tmux reports it; None if none answers."""
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
    deadline = time.monotonic() + timeout_s
    alive = procs
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.02)
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
    end_tmux_server(name)


def end_tmux_server(name: str) -> None:
    """Kill the tmux server on socket ``name`` and its panes, by pid."""
    pid = tmux_server_pid(name) or _server_pid_by_process(name)
    if pid is None:
        return
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    # kill-server ends the server at once and hangs up every pane; then make sure by pid.
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)
    # tmux 3.3a leaves its socket file behind after kill-server.
    Path(f"/tmp/tmux-{os.getuid()}/{name}").unlink(missing_ok=True)
    deadline = time.monotonic() + 1.0
    alive = procs
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.02)
    for p in alive:
        kill_tree(p.pid, timeout_s=1.0)


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[object]:
    """A private OpenSSH server on 127.0.0.1 (madohub_nb.testing.sshd); ended by pid."""
    from madohub_nb.testing.sshd import SshServer

    server = SshServer(tmp_path / "sshd").start()
    yield server
    server.stop()


@pytest.fixture
def remote_socket(home: Path) -> Iterator[str]:
    """The tmux socket of the "remote" host's server (another server than the hub's own)."""
    name = f"mh-remote-{uuid.uuid4().hex[:10]}"
    yield name
    end_tmux_server(name)


def _server_pid_by_process(socket_name: str) -> int | None:
    """The server's pid when its socket file is gone: the tmux process started with ``-L name``."""
    for proc in psutil.process_iter(["name", "cmdline", "ppid"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["name"] == "tmux" and socket_name in cmd and proc.info["ppid"] in (0, 1):
            return proc.pid
    return None


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (nobody may reap an orphaned tmux server here)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


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


# --- the round log ----------------------------------------------------------
_LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@contextmanager
def write_lock_held(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds the SQLite write lock of ``path`` (``BEGIN IMMEDIATE``) inside."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the holder rolls back and exits
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)


def log_rows(hub: Any, route: Any = None) -> list[dict[str, Any]]:
    """The hub's logged rounds as dicts, oldest first: all, or one route's (a Route or its id)."""
    df = hub.log.df
    if route is not None:
        df = df[df["route_id"] == (route if isinstance(route, str) else route.id)]
    return [{str(k): v for k, v in row.items()} for row in df.to_dict("records")]


def alive(pid: int) -> bool:
    """The process runs and is not a zombie (ended, but its parent has not reaped it yet)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def send_hook(path: str, data: bytes) -> None:
    """Write one message to a hook channel's socket at ``path``, as the hook command does."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)


def post_json(url: str, body: dict[str, Any]) -> tuple[int, str]:
    """POST ``body`` as JSON to a local fake server: its status and text, error answers too."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def forget_user_agents() -> Iterator[None]:
    """Agent kinds a test registers are unregistered after it, so the next test sees the
    built-in table (a module asks for it with ``pytestmark = usefixtures(...)``)."""
    from madohub_nb.agents.profiles import PROFILES
    from madohub_nb.agents.registry import unregister_agent

    before = set(PROFILES)
    yield
    for kind in set(PROFILES) - before:
        unregister_agent(kind)


# --- hubs and stand-in agents (lead) -----------------------------------------
FAST_IDLE_MS = 700
"""Idle delay used by routing tests: long enough to see silence, short enough to be quick."""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory for agents."""
    p = tmp_path / "proj"
    p.mkdir()
    return p


@pytest.fixture
def hub(tmux_socket: str, home: Path, tmp_path: Path) -> Iterator[object]:
    """A Hub on a private tmux socket with its log in a temporary file; closed afterwards."""
    import madohub_nb as mh

    h = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=tmp_path / "rounds.sqlite3"
    )
    yield h
    h.close()


class SkippedTurns:
    """The hub's ``turn_skipped`` events: a route's trigger saw a finished turn and let it go.

    A positive signal for "nothing fired": instead of sleeping past the idle delay
    and hoping a re-fire would have shown, wait until the route says it skipped.
    """

    def __init__(self, hub: object) -> None:
        self.events: list[tuple[str, str]] = []  # (route id, reason), in order
        self.unsubscribe = hub.events.subscribe(self._on_event)  # type: ignore[attr-defined]

    def _on_event(self, event: object) -> None:
        from madohub_nb.pipeline.events import TurnSkipped

        if isinstance(event, TurnSkipped):
            self.events.append((event.route_id, event.why))

    def count(self, route: object) -> int:
        return sum(1 for rid, _ in list(self.events) if rid == route.id)  # type: ignore[attr-defined]

    def wait(self, route: object, after: int, timeout_s: float = 30.0) -> str:
        """Wait for the route's skip number ``after + 1``; return its reason."""
        wait_until(
            lambda: self.count(route) > after,
            timeout_s,
            what=f"route {route.id} to skip a turn",  # type: ignore[attr-defined]
        )
        return [reason for rid, reason in list(self.events) if rid == route.id][after]  # type: ignore[attr-defined]


def repaint(hub: object, tile: object) -> None:
    """Output on the tile's screen that is no new turn: a key typed, seen, then deleted.

    Both keys sent at once may be read by the agent in one go, and then its screen never
    changes: no output, and no route looks at the turn at all.
    """
    pane = tile.pane_id  # type: ignore[attr-defined]
    before = tile.screen()  # type: ignore[attr-defined]
    hub.runtime.tmux.run("send-keys", "-t", pane, "-l", "--", "x")  # type: ignore[attr-defined]
    typed = wait_until(
        lambda: (s := tile.screen()) != before and s,  # type: ignore[attr-defined]
        10,
        what="x typed on the screen",
    )
    hub.runtime.tmux.run("send-keys", "-t", pane, "BSpace")  # type: ignore[attr-defined]
    wait_until(lambda: tile.screen() != typed, 10, what="x deleted from the screen")  # type: ignore[attr-defined]


def start_standin(
    hub: object,
    name: str,
    kind: str = "claude",
    persona: str = "echo",
    cwd: Path | None = None,
    think_s: float = 0.3,
    **tile_kwargs: object,
) -> object:
    """A stand-in agent in a new tile of ``hub``, waited for until idle."""
    from madohub_nb.demo import standin_command

    env = {"MADOHUB_STANDIN_THINK_S": str(think_s)}
    tile = hub.tile(  # type: ignore[attr-defined]
        name,
        agent=kind,
        command=standin_command(kind, persona=persona),
        cwd=cwd,
        env=env,
        **tile_kwargs,
    )
    wait_until(lambda: tile.state == "idle", 15, what=f"{name} idle")
    return tile


BASH = "env PS1='$ ' bash --norc --noprofile"
"""An interactive bash with a bare prompt, as a user's shell in a pane."""


def shell_tile(hub: Any, name: str, **kwargs: Any) -> Any:
    """A shell tile running ``BASH`` (``kwargs`` go to ``hub.tile``), once its prompt shows."""
    tile = hub.tile(name, agent="shell", command=BASH, **kwargs)
    wait_until(lambda: "$" in tile.screen(), 10, what=f"{name}'s prompt")
    return tile


def one_round(hub: Any, route: Any, prompt: str = "draft please") -> dict[str, Any]:
    """Send ``prompt`` into the route's source once the route is ready; its one logged round."""
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send(route.source, prompt).result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 30, what="one round")
    return log_rows(hub, route)[-1]


def bash_pane(hub: object, name: str, cwd: Path | None = None, history: Path | None = None) -> str:
    """A bash prompt in a new pane of the hub's tmux server (not a tile yet).

    ``history``: bash appends every line it runs to this file before its next
    prompt, so a test reads at the receiving end what bash ran.
    """
    command = BASH
    if history is not None:
        command = f"env HISTFILE={history} PROMPT_COMMAND='history -a' {BASH.removeprefix('env ')}"
    pane, _ = hub.runtime.tmux.new_pane(  # type: ignore[attr-defined]
        hub.session_name,  # type: ignore[attr-defined]
        command,
        cwd=str(cwd) if cwd is not None else None,
        window_name=name,
    )
    wait_until(lambda: "$" in hub.runtime.tmux.capture(pane), 10, what="bash prompt")  # type: ignore[attr-defined]
    return pane


def type_at_prompt(hub: object, pane: str, command: str) -> None:
    """What a user does: type a command at the bash prompt and press Enter."""
    hub.runtime.tmux.run("send-keys", "-t", pane, "-l", "--", command)  # type: ignore[attr-defined]
    hub.runtime.tmux.run("send-keys", "-t", pane, "Enter")  # type: ignore[attr-defined]


def standin_from_bash(
    hub: object,
    name: str,
    cwd: Path | None = None,
    think_s: float = 0.2,
    history: Path | None = None,
) -> object:
    """A stand-in Claude Code started from a bash prompt (a job of the pane's bash, which
    stays the pane's own process), adopted as a tile, idle."""
    from madohub_nb.agents.detect import detect_kind
    from madohub_nb.demo import standin_command
    from madohub_nb.io.machine import LocalMachine

    pane = bash_pane(hub, name, cwd=cwd, history=history)
    command = standin_command("claude", persona="echo")
    type_at_prompt(hub, pane, f"MADOHUB_STANDIN_THINK_S={think_s} {command}")
    pid = hub.runtime.tmux.pane_info(pane).pid  # type: ignore[attr-defined]
    wait_until(
        lambda: detect_kind(LocalMachine(), pid) == "claude", 15, what="claude in the foreground"
    )
    tile = hub.tile(name, pane=pane)  # type: ignore[attr-defined]
    assert tile.agent == "claude"
    wait_until(lambda: tile.state == "idle", 15, what=f"{name} idle")
    return tile


def user_prompts(tile: object) -> list[str]:
    """The prompts a Claude-like tile has received, read from its own transcript."""
    import json

    from madohub_nb.pipeline.extract import transcript_path

    path = transcript_path(tile)  # type: ignore[arg-type]
    if path is None:
        return []
    prompts = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") != "user" or rec.get("isSidechain") or rec.get("isMeta"):
            continue
        content = rec.get("message", {}).get("content")
        if isinstance(content, str):
            prompts.append(content)
        elif isinstance(content, list):
            texts = [
                b.get("text", "")
                for b in content
                if isinstance(b, dict) and b.get("type") == "text"
            ]
            if texts:
                prompts.append("\n".join(texts))
    return prompts


# --- byte recorder targets (reliability tests) ----------------------------------
RECORDER_SCRIPT = '''\
"""Write every byte typed into this terminal (raw mode) to a file, unaltered."""
import os
import sys
import tty

out, paste = sys.argv[1], "--paste" in sys.argv[2:]
tty.setraw(0)
with open(out, "ab", buffering=0) as f:
    os.write(1, (b"\\x1b[?2004h" if paste else b"") + b"recorder ready\\r\\n")
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        f.write(data)
'''


def start_recorder(hub: object, name: str, out: Path, *, paste: bool = False) -> object:
    """A target tile that records the raw bytes it receives into ``out``.

    It reads as an ``amp`` agent (its script is named ``amp-recorder.py``, and
    Amp's profile has no idle marker: a quiet screen is idle), so the full
    agent-aware delivery path types into it. ``paste=True`` turns bracketed
    paste on, as real TUIs do.
    """
    import shlex
    import sys

    script = out.parent / "amp-recorder.py"
    script.write_text(RECORDER_SCRIPT)
    command = " ".join(shlex.quote(a) for a in (sys.executable, str(script), str(out)))
    tile = hub.tile(name, agent="amp", command=command + (" --paste" if paste else ""))  # type: ignore[attr-defined]
    wait_until(lambda: out.exists() and tile.state == "idle", 15, what=f"recorder {name} ready")
    return tile
