"""The inbox with the real Claude Code (both pinned versions), offline, against the fake API.

A Bash call in ``default`` permission mode (2.1.332 starts in ``auto`` mode and would not
ask: REAL-AGENTS.md "Hooks") shows its dialog: it appears in ``hub.inbox`` with the
choices the agent draws, ``choose`` answers it, and the agent goes on (its tool result
reaches the fake API). An approval route into a real Claude delivers the person's edit.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, start_standin, wait_until

from madohub_nb.testing.fake_anthropic import FakeAnthropic

from .conftest import (
    CLAUDE_VERSIONS,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    claude_env,
    write_claude_config,
)

pytestmark = pytest.mark.real_agents


def _real_claude(
    hub: Any, name: str, exe: Path, home: Path, cwd: Path, base_url: str, version: str
) -> Any:
    write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    command = shlex.join(["env", *unset, str(exe), "--permission-mode", "default"])
    env = claude_env(home, base_url, DEFAULT_API_KEY)
    tile = hub.tile(name, agent="claude", command=command, cwd=cwd, env=env, hooks=True)
    wait_until(lambda: tile.state == "idle", STARTUP_TIMEOUT_S, what=f"Claude Code {version} idle")
    return tile


def _project(tmp_path: Path, name: str) -> Path:
    cwd = tmp_path / name
    cwd.mkdir()
    return Path(os.path.realpath(cwd))


def _tool_results(fake: FakeAnthropic) -> list[Any]:
    return [
        b
        for r in list(fake.requests)
        if isinstance(r.get("body"), dict)
        for m in r["body"].get("messages", [])
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_permission_prompt_is_in_the_inbox_and_choose_lets_the_agent_go_on(
    hub: Any, home: Path, tmp_path: Path, version: str,
    agent_bin: Callable[[str, str], Path], fake_anthropic: FakeAnthropic,
) -> None:  # fmt: skip
    cwd = _project(tmp_path, "proj")
    tile = _real_claude(
        hub, "w", agent_bin("claude", version), home, cwd, fake_anthropic.base_url, version
    )
    hub.send("w", "run it [[bash touch made]]").result(REPLY_TIMEOUT_S)
    wait_until(lambda: hub.inbox, REPLY_TIMEOUT_S, what="the permission prompt in the inbox")
    (ask,) = hub.inbox
    assert (ask.kind, ask.tile) == ("permission", "w")
    # 2.1.197 shows 3 choices; 2.1.332 adds "Yes, and switch to auto mode · …" before "No"
    assert ask.choices[0] == "Yes" and ask.choices[-1] == "No" and len(ask.choices) >= 3, ask
    assert ask.choices[1].startswith("Yes, and always allow access to "), ask
    assert ask.text.startswith("Bash command") and ask.text.endswith("Do you want to proceed?")
    if version == "2.1.197":  # (2.1.332 shows the command above its dialog, not in it)
        assert "touch made" in ask.text, ask.text
    assert not (cwd / "made").exists() and _tool_results(fake_anthropic) == []
    rec = ask.choose("Yes").result(30)
    assert rec.status == "delivered", rec.error
    wait_until((cwd / "made").exists, REPLY_TIMEOUT_S, what="the tool ran once allowed")
    wait_until(
        lambda: _tool_results(fake_anthropic), REPLY_TIMEOUT_S, what="the tool result at the API"
    )
    wait_until(lambda: tile.state == "idle", REPLY_TIMEOUT_S, what="the agent went on to idle")
    assert ask.state == "approved" and hub.inbox == []
    assert [r["decision"] for r in log_rows(hub) if r["route_id"] == "inbox"] == ["approved"]


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_approval_route_delivers_the_edited_prompt(
    hub: Any, home: Path, tmp_path: Path, version: str,
    agent_bin: Callable[[str, str], Path], fake_anthropic: FakeAnthropic,
) -> None:  # fmt: skip
    start_standin(hub, "writer")
    cwd = _project(tmp_path, "rev")
    _real_claude(
        hub, "reviewer", agent_bin("claude", version), home, cwd, fake_anthropic.base_url, version
    )
    route = hub.connect("writer", "reviewer", template="Review: {output}", approve=True)
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("writer", "a first draft").result(30)
    wait_until(lambda: hub.inbox, 60, what="the route's prompt in the inbox")
    (ask,) = hub.inbox
    assert ask.kind == "approval" and ask.text.startswith("Review: ")
    assert fake_anthropic.prompts == []  # nothing typed before the person says so
    rec = ask.approve("Please review the draft in one line.").result(REPLY_TIMEOUT_S)
    assert (rec.status, rec.decision, rec.proposed_prompt) == ("delivered", "edited", ask.text), (
        rec.error
    )
    assert fake_anthropic.wait_for_prompts(1, REPLY_TIMEOUT_S) == [
        "Please review the draft in one line."
    ]
    (row,) = log_rows(hub, route)
    assert (row["decision"], row["proposed_prompt"], row["prompt"]) == (
        "edited", ask.text, "Please review the draft in one line.",
    )  # fmt: skip
