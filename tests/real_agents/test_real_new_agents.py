"""The REAL Gemini CLI, Copilot CLI and Pi, each routed both ways with a real Claude Code, offline.

Each agent runs in a pane of a private tmux server against a local fake (Gemini CLI against
``FakeGemini``; Copilot CLI and Pi against ``FakeOpenAIResponses``' chat completions), beside a
real Claude Code 2.1.332 against ``FakeAnthropic``. Both panes are ADOPTED into a hub, which
detects the agent from the pane's real process tree; then a route from the agent to Claude
and one from Claude to the agent each deliver a round, checked at the fake APIs (each
prompt arrives once, whole) and in the round log. Screens go to ``$MADOHUB_REAL_SCREENS``
(or the test's tmp folder).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.agents.profiles import screen_state
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_gemini import FakeGemini
from madohub_nb.testing.fake_openai import FakeOpenAIResponses

from .conftest import (
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    RegistryTrap,
    copilot_prompt,
    process_tree,
)

pytestmark = pytest.mark.real_agents

CLAUDE_VERSION = "2.1.332"
IDLE_DELAY_MS = 1500
ROUND_TIMEOUT_S = 90.0
NEW_KINDS = ("gemini", "copilot", "pi")
API_FIXTURE = {"gemini": "fake_gemini", "copilot": "fake_copilot_api", "pi": "fake_openai"}

ANSWER_METHODS = ("session",)
"""How these agents' answers are read: from their own records (issue 23, item 2), never the
screen."""


@pytest.fixture
def screens_dir(tmp_path: Path) -> Path:
    """Where this test saves the screens it sees."""
    env = os.environ.get("MADOHUB_REAL_SCREENS")
    return Path(env) if env else tmp_path / "screens"


@pytest.fixture
def real_hub(tmux_socket: str, tmp_path: Path) -> Iterator[mh.Hub]:
    """A hub on the real agents' tmux server, with a short idle delay; closed afterwards."""
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=IDLE_DELAY_MS, log_path=tmp_path / "rounds.sqlite3"
    )
    yield hub
    hub.close()


def _api_prompts(kind: str, fake: FakeGemini | FakeOpenAIResponses) -> list[str]:
    """The prompts the agent's API received, as typed (Copilot's date prefix taken off)."""
    if kind == "copilot":
        return [p for p in (copilot_prompt(p) for p in fake.prompts) if p is not None]
    return list(fake.prompts)


def _save(path: Path, screen: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(screen)


def _start(kind: str, request: pytest.FixtureRequest, hub: mh.Hub, screens: Path) -> mh.Tile:
    """The agent's pane, adopted as tile ``kind`` and idle. Copilot's first-run trust dialog
    is seen by the hub as ``waiting`` and answered ``1. Yes``."""
    start: Callable[..., RealPane] = request.getfixturevalue(f"real_{kind}_pane")
    if kind != "copilot":
        pane = start()
        tile = hub.tile(kind, pane=pane.pane_id)
    else:
        pane = start(trust=False)
        tile = hub.tile(kind, pane=pane.pane_id)
        wait_until(lambda: tile.state == "waiting", STARTUP_TIMEOUT_S, what="the trust dialog")
        _save(screens / "copilot_trust.txt", pane.screen())
        pane.press("1")
    assert tile.agent == kind  # detected from the pane's real processes
    proc = tile.agent_process()
    assert proc is not None and proc.pid == pane.agent_pid()  # the top one (Gemini has two)
    wait_until(lambda: tile.state == "idle", STARTUP_TIMEOUT_S, what=f"{kind} idle")
    assert screen_state(tile.profile, tile.screen()) == "idle"
    return tile


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_new_agent_routes_both_ways_with_claude(
    kind: str,
    request: pytest.FixtureRequest,
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    fake: FakeGemini | FakeOpenAIResponses = request.getfixturevalue(API_FIXTURE[kind])
    agent = _start(kind, request, real_hub, screens_dir)
    cl = real_claude_pane(CLAUDE_VERSION)
    claude = real_hub.tile("claude", pane=cl.pane_id)
    assert claude.agent == "claude"

    # The agent -> Claude: its answer, wrapped, becomes Claude's prompt.
    out_route = real_hub.connect(kind, "claude", template=f"From {kind}: {{output}}", max_rounds=1)
    wait_until(out_route.ready.is_set, 20, what="the route to listen")
    first = "Say hi [[sleep 2]]"
    rec = real_hub.send(kind, first).result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered" and rec.meta["submit_verified"] is True, rec.error
    wait_until(lambda: agent.state == "busy", REPLY_TIMEOUT_S, what=f"{kind} busy")
    _save(screens_dir / f"{kind}_busy.txt", agent.screen())
    for_claude = f"From {kind}: {default_answer(first)}"
    assert fake_anthropic.wait_for_prompts(1, ROUND_TIMEOUT_S) == [for_claude]
    wait_until(lambda: out_route.last_status == "delivered", ROUND_TIMEOUT_S, what="the round")
    (row,) = [r for r in log_rows(real_hub, out_route) if r["status"] != "exhausted"]
    assert (row["status"], row["extracted"], row["prompt"]) == (
        "delivered",
        default_answer(first),
        for_claude,
    ), row["error"]
    assert row["extraction_method"] in ANSWER_METHODS
    assert row["meta"]["submit_verified"] is True
    _save(screens_dir / f"{kind}_after_answer.txt", agent.screen())
    out_route.stop()

    # Claude -> the agent: Claude's transcript answer, typed into the agent's box (two lines,
    # joined by the profile's newline key, one submit).
    wait_until(lambda: claude.state == "idle", REPLY_TIMEOUT_S, what="Claude idle")
    wait_until(lambda: agent.state == "idle", REPLY_TIMEOUT_S, what=f"{kind} idle")
    in_route = real_hub.connect("claude", kind, template="Claude says:\n{output}", max_rounds=1)
    wait_until(in_route.ready.is_set, 20, what="the route to listen")
    ping = f"Ping {kind}"
    rec = real_hub.send("claude", ping).result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: in_route.last_status == "delivered", ROUND_TIMEOUT_S, what="claude->agent")
    routed = f"Claude says:\n{default_answer(ping)}"
    wait_until(
        lambda: routed in _api_prompts(kind, fake), REPLY_TIMEOUT_S, what="the prompt at its API"
    )
    assert _api_prompts(kind, fake) == [first, routed]  # each prompt once, whole
    (back,) = log_rows(real_hub, in_route)
    assert (back["status"], back["extraction_method"], back["prompt"]) == (
        "delivered",
        "jsonl",
        routed,
    ), back["error"]
    assert back["meta"]["submit_verified"] is True
    # The agent answers the routed prompt; its last response is that answer.
    wait_until(lambda: agent.state == "idle", REPLY_TIMEOUT_S, what=f"{kind} idle again")
    answer = default_answer(routed)
    found = wait_until(
        lambda: (got := agent.last_response()) is not None and got.text == answer and got,
        REPLY_TIMEOUT_S,
        what=f"{kind}'s answer to the routed prompt",
    )
    assert isinstance(found, mh.Extraction) and found.method in ANSWER_METHODS
    _save(screens_dir / f"{kind}_after_route.txt", agent.screen())
    assert registry_trap.requests == []  # nothing looked up in a package registry


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_new_agent_started_from_a_shell_is_detected_as_the_shells_child(
    kind: str, request: pytest.FixtureRequest, real_hub: mh.Hub
) -> None:
    start: Callable[..., RealPane] = request.getfixturevalue(f"real_{kind}_pane")
    pane = start(via_shell=True, **({"trust": False} if kind == "copilot" else {}))
    tile = real_hub.tile(kind, pane=pane.pane_id)
    assert tile.agent == kind
    proc = tile.agent_process()
    # bash -> the agent's first process (Gemini: the launcher node, not its re-executed child).
    assert proc is not None and proc.pid == pane.agent_pid() != pane.pane_pid
    tree = process_tree(pane.pane_pid)
    assert (proc.pid, pane.pane_pid) in [(pid, ppid) for pid, ppid, _ in tree]
    if kind == "gemini":  # the launcher re-executes itself: a second node under the first
        nodes = [(pid, ppid) for pid, ppid, name in tree if name == "node"]
        assert nodes[0][0] == proc.pid and (nodes[1][1], len(nodes)) == (proc.pid, 2)
