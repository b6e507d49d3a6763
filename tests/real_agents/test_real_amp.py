"""The REAL Amp, routed both ways with a real Claude Code, offline.

Amp's agent loop runs in its backend, so Amp talks to ``FakeAmp`` (its HTTP routes and the
thread's JSON-RPC WebSocket), beside a real Claude Code 2.1.332 against ``FakeAnthropic``.
Both panes are ADOPTED into a hub, which detects Amp from the pane's real process; a route
from Amp to Claude and one from Claude to Amp each deliver a round, checked at the fakes
(each prompt arrives once, whole) and in the round log. Amp keeps no local record of its
answers (they live in its backend), so its answer is read from the screen: ``terminal``.
"""

from __future__ import annotations

import os
import queue
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.agents.hooks import hook_setup
from madohub_nb.agents.profiles import PROFILES
from madohub_nb.agents.screen import terminal_last_response
from madohub_nb.engine import Engine
from madohub_nb.io.hooks.channel import HookChannel, HookEvent
from madohub_nb.io.hooks.command import command_argv
from madohub_nb.testing.fake_amp import FakeAmp
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer

from .conftest import (
    AMP_VERSION,
    LEAKY_ENV,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    RegistryTrap,
    amp_env,
    write_amp_config,
)
from .long_answer import LONG, MARKER, missing_lines
from .test_real_hooks import start_with_hooks, wait_for_stop

pytestmark = pytest.mark.real_agents

CLAUDE_VERSION = "2.1.332"
IDLE_DELAY_MS = 1500
ROUND_TIMEOUT_S = 90.0


@pytest.fixture
def screens_dir(tmp_path: Path) -> Path:
    env = os.environ.get("MADOHUB_REAL_SCREENS")
    return Path(env) if env else tmp_path / "screens"


@pytest.fixture
def real_hub(tmux_socket: str, tmp_path: Path) -> Iterator[mh.Hub]:
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=IDLE_DELAY_MS, log_path=tmp_path / "rounds.sqlite3"
    )
    yield hub
    hub.close()


def _save(path: Path, screen: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(screen)


def test_amp_routes_both_ways_with_claude(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    real_amp_pane: Callable[..., RealPane],
    fake_amp: FakeAmp,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    pane = real_amp_pane()
    agent = real_hub.tile("amp", pane=pane.pane_id)
    assert agent.agent == "amp"  # detected from the pane's real process
    proc = agent.agent_process()
    assert proc is not None and proc.pid == pane.agent_pid()
    wait_until(lambda: agent.state == "idle", STARTUP_TIMEOUT_S, what="amp idle")
    cl = real_claude_pane(CLAUDE_VERSION)
    claude = real_hub.tile("claude", pane=cl.pane_id)
    assert claude.agent == "claude"

    # Amp -> Claude: its answer (read from its screen), wrapped, becomes Claude's prompt.
    out_route = real_hub.connect("amp", "claude", template="From amp: {output}", max_rounds=1)
    wait_until(out_route.ready.is_set, 20, what="the route to listen")
    first = "Say hi [[sleep 2]]"
    rec = real_hub.send("amp", first).result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered" and rec.meta["submit_verified"] is True, rec.error
    wait_until(lambda: agent.state == "busy", REPLY_TIMEOUT_S, what="amp busy")
    _save(screens_dir / "amp_busy.txt", agent.screen())
    for_claude = f"From amp: {default_answer(first)}"
    assert fake_anthropic.wait_for_prompts(1, ROUND_TIMEOUT_S) == [for_claude]
    wait_until(lambda: out_route.last_status == "delivered", ROUND_TIMEOUT_S, what="the round")
    (row,) = [r for r in log_rows(real_hub, out_route) if r["status"] != "exhausted"]
    assert (row["status"], row["extracted"], row["prompt"]) == (
        "delivered",
        default_answer(first),
        for_claude,
    ), row["error"]
    assert row["extraction_method"] == "terminal"  # its answers live in its backend only
    _save(screens_dir / "amp_after_answer.txt", agent.screen())
    out_route.stop()

    # Claude -> Amp: Claude's transcript answer typed into Amp's box (two lines, one submit).
    wait_until(lambda: claude.state == "idle", REPLY_TIMEOUT_S, what="Claude idle")
    wait_until(lambda: agent.state == "idle", REPLY_TIMEOUT_S, what="amp idle")
    in_route = real_hub.connect("claude", "amp", template="Claude says:\n{output}", max_rounds=1)
    wait_until(in_route.ready.is_set, 20, what="the route to listen")
    ping = "Ping amp"
    rec = real_hub.send("claude", ping).result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: in_route.last_status == "delivered", ROUND_TIMEOUT_S, what="claude->amp")
    routed = f"Claude says:\n{default_answer(ping)}"
    wait_until(
        lambda: routed in fake_amp.prompts, REPLY_TIMEOUT_S, what="the prompt at Amp's backend"
    )
    assert fake_amp.prompts == [first, routed]  # each prompt once, whole
    (back,) = log_rows(real_hub, in_route)
    assert (back["status"], back["extraction_method"], back["prompt"]) == (
        "delivered",
        "jsonl",
        routed,
    ), back["error"]
    # Amp answers the routed prompt; its last response (from the screen) is that answer.
    answer = default_answer(routed)
    found = wait_until(
        lambda: (got := agent.last_response()) is not None and got.text == answer and got,
        REPLY_TIMEOUT_S,
        what="amp's answer to the routed prompt",
    )
    assert isinstance(found, mh.Extraction) and found.method == "terminal"
    _save(screens_dir / "amp_after_route.txt", agent.screen())
    assert registry_trap.requests == []  # nothing looked up in a package registry


def test_a_long_amp_answer_arrives_whole(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_amp: FakeAmp,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    """Amp answers about 120 lines of markdown (issue 23.4). Its screen cannot give them:
    it draws on the alternate screen (no tmux scrollback), shows 40 lines, and renders the
    markdown (no ``#``, tables boxed, quotes barred). Started by the hub with its hook, its
    answer comes in the plugin's ``agent.end`` payload; the routed prompt at Claude Code's
    API holds every line."""
    fake_amp.reply = lambda prompt: LONG if MARKER in prompt else None
    settings = write_amp_config(home, fake_amp.base_url)
    env = {**amp_env(home, fake_amp.base_url), "AMP_SETTINGS_FILE": str(settings)}
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    command = shlex.join(["env", *unset, str(agent_bin("amp", AMP_VERSION))])
    agent = real_hub.tile("amp", agent="amp", command=command, cwd=cwd, env=env, hooks=True)
    assert agent.turn_signal == "hook"
    wait_until(lambda: "Welcome to Amp" in agent.screen(), STARTUP_TIMEOUT_S, what="Amp ready")
    wait_until(lambda: agent.state == "idle", STARTUP_TIMEOUT_S, what="amp idle")
    cl = real_claude_pane(CLAUDE_VERSION)
    real_hub.tile("claude", pane=cl.pane_id)
    route = real_hub.connect("amp", "claude", template="{output}", max_rounds=1)
    wait_until(route.ready.is_set, 20, what="the route to listen")
    rec = real_hub.send("amp", f"{MARKER} please write the long markdown answer").result(
        ROUND_TIMEOUT_S
    )
    assert rec.status == "delivered", rec.error
    wait_until(lambda: route.last_status == "delivered", 2 * ROUND_TIMEOUT_S, what="amp -> claude")
    _save(screens_dir / "amp_long_answer.txt", agent.screen())
    (row,) = [r for r in log_rows(real_hub, route) if r["status"] != "exhausted"]
    assert (row["turn_signal"], row["extraction_method"]) == ("hook", "hook"), row["error"]
    (prompt,) = fake_anthropic.wait_for_prompts(1, ROUND_TIMEOUT_S)
    assert missing_lines(prompt) == []
    # What the screen shows of it: far from whole (the reason for the hook's answer).
    screen = terminal_last_response(agent.screen(), PROFILES["amp"])
    assert len(missing_lines(screen)) > 50
    assert not (home / ".config" / "amp" / "plugins").exists(), "the user's plugins written"
    assert registry_trap.requests == []


def test_real_amp_agent_end_plugin_reaches_the_channel_with_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_amp: FakeAmp,
    registry_trap: RegistryTrap,
) -> None:
    """The hub's Amp setup (its plugin in a private XDG_CONFIG_HOME) on the real Amp: the
    backend's ``agent.end`` plugin request runs the plugin, whose hook brings the answer."""
    engine = Engine("test-real-amp-hooks")
    events: queue.Queue[HookEvent] = queue.Queue()
    hooks = HookChannel(events.put)
    engine.run_sync(hooks.start(), timeout_s=10)
    settings = write_amp_config(home, fake_amp.base_url)
    token = hooks.register(None, "amp")
    setup = hook_setup("amp", command_argv(), str(tmp_path / "private"))
    assert setup is not None and setup.private_home
    for path, text in setup.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    # The user's settings file named again (the private XDG_CONFIG_HOME hides it).
    env = {
        **amp_env(home, fake_amp.base_url),
        **setup.env,
        "AMP_SETTINGS_FILE": str(settings),
        **hooks.env(token),
    }
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    exe = agent_bin("amp", AMP_VERSION)
    pane = start_with_hooks(tmux_socket, exe, (), cwd, home, env, "amp", AMP_VERSION)
    hooks.bind(token, pane.pane_id)
    try:
        pane.wait_screen(lambda s: "Welcome to Amp" in s, STARTUP_TIMEOUT_S, what="Amp ready")
        pane.type("hello hooks")
        time.sleep(0.5)
        pane.press("Enter")
        seen = wait_for_stop(hooks, events, pane)
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent) == (pane.pane_id, "amp")
        assert stop.payload["hook_event_name"] == "agent.end"
        assert stop.answer == default_answer("hello hooks")
        assert stop.payload["session_id"] == fake_amp.threads[-1]
        assert not (home / ".config" / "amp" / "plugins").exists(), "the user's plugins written"
        assert registry_trap.requests == []
    finally:
        pane.stop()
        engine.run_sync(hooks.close(), timeout_s=10)
        engine.close()
