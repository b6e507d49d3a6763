"""The REAL OpenCode 1.18.33 started BY THE HUB with its native channel (issue 39), offline.

The hub starts OpenCode in a new pane (``--hostname 127.0.0.1 --port N``, the password in
its environment) against ``FakeOpenAIResponses``; a real Claude Code 2.1.197 against
``FakeAnthropic`` is adopted beside it. Both ways through the channel: the 120-line answer
whole, a prompt while busy as its own turn, an approval answered from ``hub.inbox``, the
person's draft left in the box, nothing left running after ``close()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import kill_tree, log_rows, wait_until

import madohub_nb as mh
from madohub_nb.io.agent_channels.base import ChannelTurn
from madohub_nb.pipeline.events import ChannelChanged
from madohub_nb.pipeline.inbox import ChannelPermissionAsk
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_anthropic import prompt_text as anthropic_prompt
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, prompt_text

from .conftest import REPLY_TIMEOUT_S, STARTUP_TIMEOUT_S, RealPane, RegistryTrap
from .test_real_routing import (
    OPENCODE_QUIET_ENV,
    OPENCODE_VERSION,
    OPENCODE_WIDTH,
    write_opencode_config,
)

pytestmark = pytest.mark.real_agents

ROUND_TIMEOUT_S = 120.0
COMMAND = "touch made_by_tool"
WHY = "Create the file made_by_tool"
LONG = "\n".join(f"line {i:03d} of the long answer" for i in range(1, 121))


def _reply(body: dict[str, Any]) -> str | dict[str, Any] | None:
    """The model: PERM calls ``bash`` once; LONG answers 120 lines; else the default."""
    prompt = prompt_text(body) or ""
    messages = body.get("messages") or [{}]
    if body.get("tools") and "PERM" in prompt and messages[-1].get("role") != "tool":
        return {
            "function_call": {"name": "bash", "arguments": {"command": COMMAND, "description": WHY}}
        }
    return LONG if "LONG" in prompt else None


@pytest.fixture
def asking_openai() -> Iterator[FakeOpenAIResponses]:
    with FakeOpenAIResponses(_reply) as fake:
        yield fake


def _tree(pid: int | None) -> set[int]:
    try:
        root = psutil.Process(pid or 0)
        return {root.pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.Error:
        return set()


def _left(pids: set[int]) -> list[str]:
    left = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {proc.name()}")
        except psutil.NoSuchProcess:
            continue
    return left


def test_real_opencode_started_by_the_hub_routes_both_ways_with_claude_through_its_channel(
    registry_trap: RegistryTrap,
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    real_claude_pane: Callable[..., RealPane],
    asking_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
) -> None:
    config = write_opencode_config(home, asking_openai.base_url)
    config.write_text(config.read_text().rstrip()[:-1] + ', "permission": {"bash": "ask"}}')
    cwd = Path(os.path.realpath(tmp_path / "proj-opencode"))
    cwd.mkdir()
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=1500, log_path=tmp_path / "r.sqlite3")
    pids: set[int] = set()
    try:
        oc = hub.tile(
            "opencode", agent="opencode", command=str(agent_bin("opencode", OPENCODE_VERSION)),
            cwd=cwd, env={"HOME": str(home), **OPENCODE_QUIET_ENV},
        )  # fmt: skip
        hub.runtime.tmux.run("resize-window", "-t", oc.pane_id, "-x", str(OPENCODE_WIDTH))
        wait_until(lambda: "Ask anything" in oc.screen(), STARTUP_TIMEOUT_S, what="home screen")
        wait_until(lambda: oc.channel is not None, STARTUP_TIMEOUT_S, what="its channel open")
        assert oc.channel is not None and oc.turn_signal == "channel"
        (opened,) = hub.runtime.tiles.channels._open.values()
        password = opened.endpoint.password or ""
        proc = oc.agent_process()
        assert proc is not None and password
        agent = psutil.Process(proc.pid)
        assert all(password not in " ".join(p.cmdline()) for p in [agent, *agent.children(True)])
        pids = _tree(oc.pane_pid)
        turns: list[ChannelTurn] = []
        oc.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
        claude = hub.tile("claude", pane=real_claude_pane().pane_id)

        # The person's half-typed draft: typed into the composer, no Enter.
        draft = "my half typed draft"
        hub.runtime.tmux.run("send-keys", "-t", oc.pane_id, "-l", draft)
        wait_until(lambda: draft in oc.screen(), 10, what="the draft in OpenCode's box")

        # Claude -> OpenCode: through the channel, never typed.
        into = hub.connect("claude", "opencode", template="Claude says:\n{output}", max_rounds=1)
        wait_until(lambda: into.ready.is_set(), 10)
        assert hub.send("claude", "Ping opencode").result(ROUND_TIMEOUT_S).status == "delivered"
        wait_until(lambda: into.last_status is not None, ROUND_TIMEOUT_S, what="claude->oc")
        (row,) = log_rows(hub, into)
        assert (row["status"], row["delivery_mode"]) == ("delivered", "channel"), row["error"]
        routed = "Claude says:\n" + default_answer("Ping opencode")
        wait_until(lambda: [t for t in turns if t.prompt == routed], ROUND_TIMEOUT_S,
                   what="OpenCode's turn on the routed prompt")  # fmt: skip
        into.stop()

        # A prompt while busy: its own turn, after the running one.
        first = hub.send("opencode", "first one [[sleep 3]]")
        wait_until(lambda: oc.state == "busy", 30, what="OpenCode busy")
        second = hub.send("opencode", "second one while busy")
        one, two = first.result(ROUND_TIMEOUT_S), second.result(ROUND_TIMEOUT_S)
        assert (one.delivery_mode, two.delivery_mode) == ("channel", "channel"), (one, two)
        wait_until(lambda: len(turns) >= 3, ROUND_TIMEOUT_S, what="the two turns")
        assert [t.answer for t in turns[1:3]] == [
            default_answer("first one [[sleep 3]]"), default_answer("second one while busy"),
        ]  # fmt: skip

        # OpenCode -> Claude: the channel ends the turn, its long answer whole.
        wait_until(lambda: claude.state == "idle", REPLY_TIMEOUT_S)
        out = hub.connect("opencode", "claude", template="From opencode:\n{output}", max_rounds=1)
        wait_until(lambda: out.ready.is_set(), 10)
        rec = hub.send("opencode", "Now the LONG one").result(ROUND_TIMEOUT_S)
        assert (rec.status, rec.delivery_mode) == ("delivered", "channel"), rec.error
        wait_until(lambda: out.last_status is not None, ROUND_TIMEOUT_S, what="oc->claude")
        (row,) = log_rows(hub, out)
        assert (row["turn_signal"], row["extraction_method"]) == ("channel", "channel"), row
        assert row["extracted"] == LONG and row["status"] == "delivered", row["error"]
        assert row["model"] == "fake-model" and row["input_tokens"] and row["output_tokens"]
        assert row["cost_usd"] is not None  # (OpenCode's figure: 0 for an unpriced model)
        wait_until(
            lambda: any(anthropic_prompt(r["body"]) == f"From opencode:\n{LONG}"
                        for r in fake_anthropic.requests),
            ROUND_TIMEOUT_S, what="the long answer whole at Claude's API",
        )  # fmt: skip
        out.stop()

        # An approval: in hub.inbox, answered with choose(), the dialog closes.
        done = len(turns)
        assert hub.send("opencode", "PERM please run it").result(ROUND_TIMEOUT_S).status == (
            "delivered"
        )
        wait_until(lambda: [a for a in hub.inbox if a.signal == "channel"], ROUND_TIMEOUT_S,
                   what="the ask in the inbox")  # fmt: skip
        (ask,) = [a for a in hub.inbox if a.signal == "channel"]
        assert isinstance(ask, ChannelPermissionAsk)
        assert (ask.command, ask.tool, ask.choices) == (
            COMMAND,
            "bash",
            ("once", "always", "reject"),
        )
        assert ask.choose("once").result(30).decision == "approved"
        wait_until(lambda: len(turns) > done, ROUND_TIMEOUT_S, what="the asking turn's end")
        assert (cwd / "made_by_tool").exists()
        wait_until(lambda: "Permission required" not in oc.screen(), 30, what="dialog closed")

        # The draft is still in the box: nothing was typed over it, nothing sent it.
        assert draft in oc.screen(), oc.screen()
        sent = [prompt_text(r["body"]) or "" for r in asking_openai.requests]
        assert not [p for p in sent if draft in p]
        asked = [r for r in asking_openai.requests if r["body"].get("tools")]
        assert [prompt_text(r["body"]) for r in asked].count(routed) == 1  # never typed as well
        assert registry_trap.requests == []
        pids |= _tree(oc.pane_pid)
    finally:
        hub.close()
    wait_until(lambda: not _left(pids), 15, what="OpenCode's processes to end")


def test_real_opencode_gone_is_an_event_and_a_clear_row_never_a_round_delivered_twice(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    asking_openai: FakeOpenAIResponses,
) -> None:
    write_opencode_config(home, asking_openai.base_url)
    cwd = Path(os.path.realpath(tmp_path / "proj-opencode"))
    cwd.mkdir()
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=1500, log_path=tmp_path / "r.sqlite3")
    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    pids: set[int] = set()
    try:
        oc = hub.tile(
            "opencode", agent="opencode", command=str(agent_bin("opencode", OPENCODE_VERSION)),
            cwd=cwd, env={"HOME": str(home), **OPENCODE_QUIET_ENV},
        )  # fmt: skip
        wait_until(lambda: oc.channel is not None, STARTUP_TIMEOUT_S, what="its channel open")
        pids = _tree(oc.pane_pid)
        proc = oc.agent_process()
        assert proc is not None
        kill_tree(proc.pid)  # OpenCode (and the server it is) gone
        wait_until(lambda: any(e.state == "broken" for e in events), REPLY_TIMEOUT_S,
                   what="the break told")  # fmt: skip
        assert oc.channel is not None and not oc.channel.alive and oc.turn_signal != "channel"
        rec = hub.send("opencode", "after it went").result(ROUND_TIMEOUT_S)
        assert rec.status == "error" and rec.delivery_mode != "channel", rec
        assert not [r for r in asking_openai.requests if "after it went" in str(r["body"])]
        (row,) = log_rows(hub)
        assert row["status"] == "error" and row["error"], row
    finally:
        hub.close()
    wait_until(lambda: not _left(pids), 15, what="OpenCode's processes to end")
