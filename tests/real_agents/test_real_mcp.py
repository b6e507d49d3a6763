"""A real Claude Code lead, started by the hub with ``mcp=["reviewer"]``, asks a reviewer
through the hub's MCP server (issue 25): the fake API tells it to call
``mcp__madohub__ask``; the reviewer's answer comes back as the tool result, checked in
the lead's next API request. Both pinned versions (2.1.332 starts in ``auto``
permission mode, which refuses MCP calls offline unless the tools are pre-allowed)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, start_standin, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb.testing.fake_anthropic import FakeAnthropic, prompt_text, tool_result

from .conftest import (
    CLAUDE_VERSIONS,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    STARTUP_TIMEOUT_S,
    claude_env,
    write_claude_config,
)

pytestmark = pytest.mark.real_agents

ASK_TEXT = "Is slugify('A b') == 'a-b' right?"
TIMEOUT_S = 90.0


def _command(exe: Path) -> str:
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    return shlex.join(["env", *unset, str(exe)])


def _lead_model(body: dict[str, Any]) -> str | dict[str, Any] | None:
    """The lead's "model": a prompt saying ``ask the reviewer`` gets a call of the hub's
    ``ask`` tool; the request carrying its result gets ``Lead got: <result>``."""
    result = tool_result(body)
    if result is not None:
        return f"Lead got: {result}"
    if "ask the reviewer" in (prompt_text(body) or ""):
        call = {
            "type": "tool_use",
            "id": "toolu_fake_mcp_ask_01",
            "name": "mcp__madohub__ask",
            "input": {"to": "reviewer", "text": ASK_TEXT, "timeout_s": 60},
        }
        return {"content": [{"type": "text", "text": "Asking."}, call], "stop_reason": "tool_use"}
    return None


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_claude_asks_a_reviewer_through_the_hub_and_gets_its_answer(
    version: str,
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> None:
    exe = agent_bin("claude", version)
    cwd = tmp_path / "lead"
    cwd.mkdir()
    cwd = Path(os.path.realpath(cwd))
    write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    fake_anthropic.reply = _lead_model
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3")
    try:
        hub.mcp_cooldown_ms = 1000
        reviewer = start_standin(hub, "reviewer", cwd=tmp_path)
        lead = hub.tile(
            "lead", agent="claude", command=_command(exe), cwd=cwd, mcp=["reviewer"],
            env=claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY),
        )  # fmt: skip
        wait_until(lambda: lead.state == "idle", STARTUP_TIMEOUT_S, what="Claude Code idle")
        hub.send("lead", "Please ask the reviewer about slugify.").result(60)
        expected = f"Done: {ASK_TEXT}"

        def result_seen() -> bool:
            return any(tool_result(r["body"]) == expected for r in _posts(fake_anthropic))

        wait_until(result_seen, TIMEOUT_S, what="the reviewer's answer as the lead's tool result")
        assert user_prompts(reviewer) == [ASK_TEXT]
        wait_until(lambda: len(_mcp(hub)) == 2, 20, what="the ask's rows")
        asked, answered = _mcp(hub)
        assert asked["route_id"] == "mcp:lead->reviewer" and asked["source"] == "lead"
        assert (asked["prompt"], asked["status"]) == (ASK_TEXT, "delivered")
        assert (answered["source"], answered["extracted"]) == ("reviewer", expected)
        assert not (home / ".claude" / "settings.json").exists(), "the user's settings were written"
    finally:
        hub.close()


def _posts(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in list(fake.requests) if isinstance(r.get("body"), dict)]


def _mcp(hub: mh.Hub) -> list[dict[str, Any]]:
    return [r for r in log_rows(hub) if str(r["route_id"]).startswith("mcp:")]
