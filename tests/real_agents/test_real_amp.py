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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.testing.fake_amp import FakeAmp
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer

from .conftest import REPLY_TIMEOUT_S, STARTUP_TIMEOUT_S, RealPane, RegistryTrap

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
