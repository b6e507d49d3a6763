"""Real agents call the hub's hook command from their panes, and the channel hears them.

The hub-style setups of ``agents/hooks.py`` on the real CLIs in real tmux panes, offline
against the local fake APIs: Claude Code's ``--settings`` (Stop, Notification,
SessionStart command hooks running ``io/hooks/command.py``), Codex's ``-c notify``, Pi's
``-e`` extension (``agent_end``), Gemini CLI's and Qwen Code's system-defaults hooks, OpenCode's plugin
and Copilot CLI's hooks in a private COPILOT_HOME. One prompt each, and the channel gets
that pane's end of turn (with the turn's answer where the agent gives it). The user's
own settings files get no hook.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import wait_until

from madohub_nb.agents.hooks import hook_setup
from madohub_nb.agents.profiles import PROFILES, screen_state
from madohub_nb.engine import Engine
from madohub_nb.io.hooks.channel import HookChannel, HookEvent
from madohub_nb.io.hooks.command import command_argv
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_openai import FakeOpenAIResponses

from . import install
from .conftest import (
    CODEX_VERSION,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    PANE_HEIGHT,
    PANE_WIDTH,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    claude_env,
    claude_is_idle,
    codex_env,
    codex_is_idle,
    end_codex_daemons,
    write_claude_config,
    write_codex_config,
)
from .test_real_routing import (
    OPENCODE_QUIET_ENV,
    OPENCODE_VERSION,
    OPENCODE_WIDTH,
    write_opencode_config,
)

pytestmark = pytest.mark.real_agents

VERSION = "2.1.332"
PROMPT = "hello hooks"


@pytest.fixture
def channel() -> Iterator[tuple[HookChannel, queue.Queue[HookEvent]]]:
    engine = Engine("test-real-hooks")
    events: queue.Queue[HookEvent] = queue.Queue()
    hooks = HookChannel(events.put)
    engine.run_sync(hooks.start(), timeout_s=10)
    try:
        yield hooks, events
    finally:
        engine.run_sync(hooks.close(), timeout_s=10)
        engine.close()


def start_with_hooks(
    socket: str,
    exe: Path,
    args: tuple[str, ...],
    cwd: Path,
    home: Path,
    env: dict[str, str],
    kind: str = "claude",
    version: str = VERSION,
) -> RealPane:
    """An agent in a new tmux session, keeping the ``$TMUX_PANE`` tmux gives the pane.

    (``conftest.start_agent_pane`` unsets ``TMUX_PANE`` with the caller's leaky
    variables; a hook needs the pane's own.)
    """
    unset = [arg for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for arg in ("-u", var)]
    argv = ["env", *unset, *(f"{k}={v}" for k, v in env.items()), str(exe), *args]
    name = f"hooks-{os.urandom(3).hex()}"
    conf = home / ".tmux.conf"
    if not conf.exists():
        conf.write_text("set -g focus-events on\n")
    out = subprocess.run(
        [
            "tmux", "-L", socket, "-f", str(conf),
            "new-session", "-d", "-s", name, "-x", str(PANE_WIDTH), "-y", str(PANE_HEIGHT),
            "-c", str(cwd), "-P", "-F", "#{pane_id} #{pane_pid}", "--", *argv,
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    pane_id, pane_pid = out.stdout.split()
    return RealPane(kind, version, socket, name, pane_id, int(pane_pid), cwd, home, env)


def wait_for_stop(
    hooks: HookChannel, events: queue.Queue[HookEvent], pane: RealPane
) -> list[HookEvent]:
    """Every event up to and including the first ``stop`` (fails after REPLY_TIMEOUT_S)."""
    seen: list[HookEvent] = []
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while not any(e.kind == "stop" for e in seen):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(
                f"no stop hook within {REPLY_TIMEOUT_S}s; got {seen}, "
                f"counts {dict(hooks.counts)}\n--- screen ---\n{pane.screen()}"
            )
        try:
            seen.append(events.get(timeout=remaining))
        except queue.Empty:
            continue
    return seen


def test_real_claude_stop_hook_reaches_the_channel_with_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    hooks, events = channel
    exe = agent_bin("claude", VERSION)
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    write_claude_config(home, cwd, DEFAULT_API_KEY, VERSION)
    token = hooks.register(None, "claude")
    setup = hook_setup("claude", command_argv(), str(tmp_path / "private"))
    assert setup is not None and not setup.files and not setup.env
    env = {**claude_env(home, fake_anthropic.base_url), **hooks.env(token)}
    pane = start_with_hooks(tmux_socket, exe, setup.args, cwd, home, env)
    hooks.bind(token, pane.pane_id)  # before Claude is up (~1 s); an earlier hook is refused
    try:
        pane.wait_screen(claude_is_idle, STARTUP_TIMEOUT_S, what="Claude Code's idle screen")
        pane.submit(PROMPT)
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent, stop.token) == (pane.pane_id, "claude", token)
        assert stop.payload["hook_event_name"] == "Stop"
        assert stop.answer == default_answer(PROMPT)
        assert stop.transcript_path and stop.transcript_path.endswith(".jsonl")
        assert stop.session_id and stop.session_id in stop.transcript_path
        assert stop.peer_pid is not None
        (start,) = [e for e in seen if e.kind == "session_start"]  # bound before Claude was up
        assert start.payload["hook_event_name"] == "SessionStart"
        assert (start.pane, start.session_id) == (pane.pane_id, stop.session_id)
        assert hooks.counts["accepted"] == len(seen) and sum(hooks.counts.values()) == len(seen)
        assert not (home / ".claude" / "settings.json").exists(), "the user's settings were written"
    finally:
        pane.stop()


def test_real_claude_permission_prompt_comes_as_a_notification_with_its_message(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    """In ``default`` permission mode a Bash call asks first: the Notification hook says so."""
    hooks, events = channel
    exe = agent_bin("claude", VERSION)
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    write_claude_config(home, cwd, DEFAULT_API_KEY, VERSION)
    token = hooks.register(None, "claude")
    setup = hook_setup("claude", command_argv(), str(tmp_path / "private"))
    assert setup is not None
    env = {**claude_env(home, fake_anthropic.base_url), **hooks.env(token)}
    args = (*setup.args, "--permission-mode", "default")
    pane = start_with_hooks(tmux_socket, exe, args, cwd, home, env)
    hooks.bind(token, pane.pane_id)
    try:
        pane.wait_screen(claude_is_idle, STARTUP_TIMEOUT_S, what="Claude Code's idle screen")
        pane.submit("run it [[bash touch made]]")
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        note = None
        while note is None and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                event = events.get(timeout=1)
                note = event if event.kind == "notification" else None
        assert note is not None, f"no Notification hook; counts {dict(hooks.counts)}"
        assert note.pane == pane.pane_id
        assert note.payload["notification_type"] == "permission_prompt"
        assert note.message == "Claude needs your permission"
        assert note.answer is None
        assert not (cwd / "made").exists()  # it asked; nobody answered
    finally:
        pane.stop()


PI_VERSION = "0.73.1"


def cached_executable(
    agent_bin: Callable[[str, str], Path], name: str, version: str, package: str
) -> Path:
    """An agent the tier pins from issue 23.3 on: from install.py once it knows it, else
    from the agent cache where that install puts it."""
    if name in install.AGENT_PACKAGES:
        return agent_bin(name, version)
    exe = install.agent_cache_dir() / f"{name}-{version}" / "node_modules" / ".bin" / name
    if not exe.exists():
        pytest.fail(
            f"{name} {version} is not in the agent cache ({exe}); install "
            f"{package}@{version} there with npm",
            pytrace=False,
        )
    return exe


def test_real_pi_agent_end_extension_reaches_the_channel_with_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    hooks, events = channel
    exe = cached_executable(agent_bin, "pi", PI_VERSION, "@mariozechner/pi-coding-agent")
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    models = {
        "providers": {
            "fake": {
                "baseUrl": fake_anthropic.base_url,
                "api": "anthropic-messages",
                "apiKey": DEFAULT_API_KEY,
                "models": [{"id": "fake-model", "contextWindow": 128000, "maxTokens": 4096}],
            }
        }
    }
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    (agent_dir / "models.json").write_text(json.dumps(models))
    token = hooks.register(None, "pi")
    setup = hook_setup("pi", command_argv(), str(tmp_path / "private"))
    assert setup is not None
    for path, text in setup.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    env = {"HOME": str(home), "PI_OFFLINE": "1", **hooks.env(token)}
    args = ("--provider", "fake", "--model", "fake-model", *setup.args, PROMPT)
    pane = start_with_hooks(tmux_socket, exe, args, cwd, home, env, "pi", PI_VERSION)
    hooks.bind(token, pane.pane_id)
    try:
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent) == (pane.pane_id, "pi")
        assert stop.payload["hook_event_name"] == "agent_end"
        assert stop.answer == default_answer(PROMPT)
        record = stop.transcript_path
        assert record and Path(record).is_file() and Path(record).is_relative_to(agent_dir)
        assert not (agent_dir / "extensions").exists(), "the user's extensions were written"
    finally:
        pane.stop()


QWEN_VERSION = "0.24.4"


def test_real_qwen_stop_hook_from_the_system_defaults_layer_reaches_the_channel(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    """Qwen Code's Claude-style ``Stop`` hook, from the hub's QWEN_CODE_SYSTEM_DEFAULTS_PATH."""
    hooks, events = channel
    exe = agent_bin("qwen", QWEN_VERSION)
    user_settings = home / ".qwen" / "settings.json"
    user_settings.parent.mkdir(parents=True)
    user = {
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ui": {"hideTips": True},
        "general": {"enableAutoUpdate": False},  # no registry lookup at start
    }
    user_settings.write_text(json.dumps(user))
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    token = hooks.register(None, "qwen")
    setup = hook_setup("qwen", command_argv(), str(tmp_path / "private"))
    assert setup is not None
    for path, text in setup.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    env = {
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-fake-qwen",
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_MODEL": "fake-model",
        **setup.env,
        **hooks.env(token),
    }
    pane = start_with_hooks(tmux_socket, exe, setup.args, cwd, home, env, "qwen", QWEN_VERSION)
    hooks.bind(token, pane.pane_id)
    try:
        profile = PROFILES["qwen"]
        pane.wait_screen(
            lambda s: screen_state(profile, s) == "idle", STARTUP_TIMEOUT_S, what="Qwen idle"
        )
        pane.type(PROMPT)
        pane.press("Enter")
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent) == (pane.pane_id, "qwen")
        assert stop.payload["hook_event_name"] == "Stop"
        assert stop.answer == default_answer(PROMPT)
        # Qwen rewrites its own settings ($version, acknowledgements); no hook lands there.
        assert "hooks" not in json.loads(user_settings.read_text())
    finally:
        pane.stop()


def test_real_opencode_session_idle_plugin_reaches_the_channel(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    """OpenCode's ``session.idle`` through the hub's plugin, named in OPENCODE_CONFIG_CONTENT.

    OpenCode 1.18.33 still installs ``@opencode-ai/plugin`` into the HOME's config folder
    at start (issue 23.6, as for every OpenCode test of the tier until it is installed
    with the rest); the hub's plugin needs no package and adds no folder to install into.
    """
    hooks, events = channel
    exe = agent_bin("opencode", OPENCODE_VERSION)
    config = write_opencode_config(home, fake_openai.base_url)
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    token = hooks.register(None, "opencode")
    setup = hook_setup("opencode", command_argv(), str(tmp_path / "private"))
    assert setup is not None
    for path, text in setup.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    env = {
        "HOME": str(home),
        **OPENCODE_QUIET_ENV,
        **setup.env,
        **hooks.env(token),
    }
    pane = start_with_hooks(
        tmux_socket, exe, setup.args, cwd, home, env, "opencode", OPENCODE_VERSION
    )
    hooks.bind(token, pane.pane_id)
    try:
        pane.tmux("resize-window", "-t", pane.pane_id, "-x", str(OPENCODE_WIDTH))
        pane.wait_screen(lambda s: "Ask anything" in s, STARTUP_TIMEOUT_S, what="OpenCode home")
        pane.type(PROMPT)
        time.sleep(PROFILES["opencode"].pre_submit_delay_ms / 1000)
        pane.press("Enter")
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent) == (pane.pane_id, "opencode")
        assert stop.payload["hook_event_name"] == "session.idle"
        assert stop.session_id and stop.session_id.startswith("ses")
        assert "plugin" not in json.loads(config.read_text())  # OpenCode may rewrite it itself
        assert not (home / ".config" / "opencode" / "plugins").exists()
    finally:
        pane.stop()


COPILOT_VERSION = "1.0.102"


def test_real_copilot_agent_stop_hook_from_a_private_home_reaches_the_channel(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    """Copilot CLI's ``agentStop``, from ``hooks/`` of the private COPILOT_HOME the hub sets."""
    hooks, events = channel
    exe = cached_executable(agent_bin, "copilot", COPILOT_VERSION, "@github/copilot")
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    token = hooks.register(None, "copilot")
    setup = hook_setup("copilot", command_argv(), str(tmp_path / "private"))
    assert setup is not None and setup.private_home
    for path, text in setup.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    copilot_home = Path(setup.env["COPILOT_HOME"])
    # What answering its folder-trust dialog with "2. Yes, and remember" writes.
    (copilot_home / "config.json").write_text(json.dumps({"trustedFolders": [str(cwd)]}))
    env = {
        "HOME": str(home),
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_BASE_URL": fake_openai.base_url,
        "COPILOT_PROVIDER_TYPE": "openai",
        "COPILOT_PROVIDER_API_KEY": DEFAULT_API_KEY,
        "COPILOT_MODEL": "gpt-4.1",
        **setup.env,
        **hooks.env(token),
    }
    args = (*setup.args, "-i", PROMPT)
    pane = start_with_hooks(tmux_socket, exe, args, cwd, home, env, "copilot", COPILOT_VERSION)
    hooks.bind(token, pane.pane_id)
    try:
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent) == (pane.pane_id, "copilot")
        assert stop.payload["stopReason"] == "end_turn"
        assert stop.answer is None  # agentStop carries no text: its events.jsonl does
        record = stop.transcript_path
        assert record and Path(record).is_relative_to(copilot_home)
        # Observed: agentStop can run before Copilot has written events.jsonl at all.
        wait_until(lambda: Path(record).is_file(), 15, what="Copilot's events.jsonl")
        assert stop.session_id and stop.session_id in record
        assert not (home / ".copilot" / "hooks").exists()
    finally:
        pane.stop()


def test_real_codex_notify_reaches_the_channel_with_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    """Codex's ``notify`` from the hub's ``-c notify=[...]``: its JSON as the last argument."""
    hooks, events = channel
    exe = agent_bin("codex", CODEX_VERSION)
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    codex_home = home / ".codex"
    config = write_codex_config(codex_home, [cwd], fake_openai.base_url, daemon=False)
    token = hooks.register(None, "codex")
    setup = hook_setup("codex", command_argv(), str(tmp_path / "private"))
    assert setup is not None
    env = {**codex_env(home, codex_home), **hooks.env(token)}
    pane = start_with_hooks(tmux_socket, exe, setup.args, cwd, home, env, "codex", CODEX_VERSION)
    pane.codex_home = codex_home
    hooks.bind(token, pane.pane_id)
    try:
        pane.wait_screen(codex_is_idle, STARTUP_TIMEOUT_S, what="Codex's idle screen")
        pane.submit(PROMPT)
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent) == (pane.pane_id, "codex")
        assert stop.payload["type"] == "agent-turn-complete"
        assert stop.answer == default_answer(PROMPT)
        assert stop.session_id and stop.turn_id
        after = config.read_text()  # Codex rewrites it itself (its [tui] state)
        notify = [
            line for line in after.splitlines() if line.replace(" ", "").startswith("notify=")
        ]
        assert not notify, f"a notify landed in the user's config.toml:\n{after}"
    finally:
        pane.stop()
        end_codex_daemons(codex_home)


GEMINI_VERSION = "0.61.0"
GEMINI_MODEL = "gemini-2.5-flash"


class _GeminiStream(BaseHTTPRequestHandler):
    """``POST …:streamGenerateContent?alt=sse``: one SSE chunk with ``default_answer``.

    Enough of Gemini's API for one turn (REAL-AGENTS.md); the tier's own Gemini fake
    (issue 23.3) can take its place.
    """

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if ":streamGenerateContent" not in self.path:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        parts = [p for c in body.get("contents", []) for p in c.get("parts", []) if "text" in p]
        text = default_answer(parts[-1]["text"] if parts else "")
        chunk = {
            "candidates": [
                {"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP"}
            ],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2},
        }
        data = f"data: {json.dumps(chunk)}\r\n\r\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def gemini_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GeminiStream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def secure_private_dir() -> Iterator[Path]:
    """A private folder with no group- or other-writable folder above it (not /tmp)."""
    base = install.DEFAULT_CACHE_DIR.parent  # the real ~/.cache/madohub_nb, not the test HOME
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="hooks-test-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_real_gemini_after_agent_hook_from_the_system_defaults_layer_reaches_the_channel(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    gemini_api: str,
    secure_private_dir: Path,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    """Gemini CLI's ``AfterAgent`` from the hub's GEMINI_CLI_SYSTEM_DEFAULTS_PATH file."""
    hooks, events = channel
    exe = cached_executable(agent_bin, "gemini", GEMINI_VERSION, "@google/gemini-cli")
    user_settings = home / ".gemini" / "settings.json"
    user_settings.parent.mkdir(parents=True)
    user = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    user_settings.write_text(json.dumps(user))
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    token = hooks.register(None, "gemini")
    setup = hook_setup("gemini", command_argv(), str(secure_private_dir))
    assert setup is not None and setup.secure_dir
    for path, text in setup.files.items():
        Path(path).write_text(text)
    env = {
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": gemini_api,
        "GEMINI_API_KEY": DEFAULT_API_KEY,
        **setup.env,
        **hooks.env(token),
    }
    args = (*setup.args, "--model", GEMINI_MODEL, "-i", PROMPT)
    pane = start_with_hooks(tmux_socket, exe, args, cwd, home, env, "gemini", GEMINI_VERSION)
    hooks.bind(token, pane.pane_id)
    try:
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent) == (pane.pane_id, "gemini")
        assert stop.payload["hook_event_name"] == "AfterAgent"
        assert stop.payload["prompt"] == PROMPT
        assert stop.answer is None  # prompt_response is not trusted; the chat file is
        record = stop.transcript_path
        assert record and Path(record).is_relative_to(home / ".gemini")
        assert "hooks" not in json.loads(user_settings.read_text())
    finally:
        pane.stop()
