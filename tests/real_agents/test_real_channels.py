"""The REAL Qwen Code 0.24.4 routed through its native channel (issue 39), offline.

The hub starts Qwen Code in a new pane (so it adds ``--input-file``/``--json-file`` in a
private folder) against ``FakeOpenAIResponses``; a real Claude Code 2.1.332 against
``FakeAnthropic`` is adopted beside it. Claude -> Qwen: the prompt goes in through the
channel (never typed); Qwen -> Claude: its turn's end, whole answer and usage come from
the channel.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.io.agent_channels.base import ChannelTurn
from madohub_nb.pipeline.inbox import ChannelPermissionAsk
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_anthropic import prompt_text as fake_anthropic_prompt
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, function_output, prompt_text

from .conftest import (
    QWEN_NO_UPDATE_SETTINGS,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    RegistryTrap,
)

pytestmark = pytest.mark.real_agents

QWEN_VERSION = "0.24.4"
ROUND_TIMEOUT_S = 90.0
LONG_LINES = 120


@pytest.fixture
def real_hub(tmux_socket: str, tmp_path: Path) -> Iterator[mh.Hub]:
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=1500, log_path=tmp_path / "rounds.sqlite3")
    yield hub
    hub.close()


def test_real_qwen_routes_both_ways_with_claude_through_its_channel(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    real_claude_pane: Callable[..., RealPane],
    fake_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
) -> None:
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}, "ui": {"hideTips": True}, **QWEN_NO_UPDATE_SETTINGS,
    }))  # fmt: skip
    cwd = tmp_path / "proj-qwen"
    cwd.mkdir()
    env = {
        "HOME": str(home), "OPENAI_API_KEY": "sk-fake-qwen",
        "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "fake-model",
    }  # fmt: skip
    exe = agent_bin("qwen", QWEN_VERSION)
    qwen = real_hub.tile("qwen", agent="qwen", command=str(exe), cwd=cwd, env=env)
    wait_until(lambda: qwen.channel is not None, STARTUP_TIMEOUT_S, what="Qwen's channel open")
    assert qwen.turn_signal == "channel"
    turns: list[ChannelTurn] = []
    assert qwen.channel is not None
    qwen.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
    real_hub.tile("claude", pane=real_claude_pane().pane_id)

    # Claude -> Qwen: through the channel.
    into = real_hub.connect("claude", "qwen", template="Claude says:\n{output}", max_rounds=1)
    wait_until(lambda: into.ready.is_set(), 10)
    assert real_hub.send("claude", "Ping qwen").result(ROUND_TIMEOUT_S).status == "delivered"
    wait_until(lambda: into.last_status is not None, ROUND_TIMEOUT_S, what="claude->qwen")
    (row,) = log_rows(real_hub, into)
    assert (row["status"], row["delivery_mode"]) == ("delivered", "channel"), row["error"]
    routed = "Claude says:\n" + default_answer("Ping qwen")
    wait_until(
        lambda: routed in [prompt_text(r["body"]) for r in fake_openai.requests],
        REPLY_TIMEOUT_S, what="the routed prompt at Qwen's API, once",
    )  # fmt: skip
    wait_until(lambda: [t for t in turns if t.prompt == routed], REPLY_TIMEOUT_S,
               what="Qwen's turn on the routed prompt ended")  # fmt: skip
    into.stop()

    # Qwen -> Claude: the channel ends the turn, its long answer whole.
    long = "\n".join(f"Line {i} of the long answer" for i in range(1, LONG_LINES + 1))
    fake_openai.reply = lambda body: long if "long one" in (prompt_text(body) or "") else None
    wait_until(lambda: real_hub.tiles["claude"].state == "idle", REPLY_TIMEOUT_S)
    out = real_hub.connect("qwen", "claude", template="From qwen:\n{output}", max_rounds=1)
    wait_until(lambda: out.ready.is_set(), 10)
    # The person's half-typed draft stays in Qwen's composer: nothing is typed.
    draft = "my half typed draft"
    real_hub.runtime.tmux.run("send-keys", "-t", qwen.pane_id, "-l", draft)
    wait_until(lambda: draft in qwen.screen(), 10, what="the draft in Qwen's box")
    rec = real_hub.send("qwen", "Now the long one").result(ROUND_TIMEOUT_S)
    assert (rec.status, rec.delivery_mode) == ("delivered", "channel"), rec.error
    wait_until(lambda: out.last_status is not None, ROUND_TIMEOUT_S, what="qwen->claude")
    (row,) = log_rows(real_hub, out)
    assert (row["turn_signal"], row["extraction_method"]) == ("channel", "channel"), row
    assert row["extracted"] == long and row["status"] == "delivered", row["error"]
    assert row["model"] == "fake-model" and row["output_tokens"], row
    wait_until(
        lambda: any(fake_anthropic_prompt(r["body"]) == f"From qwen:\n{long}"
                    for r in fake_anthropic.requests),
        ROUND_TIMEOUT_S, what="the long answer whole at Claude's API",
    )  # fmt: skip
    assert f"> {draft}" in qwen.screen()  # still in the box, not sent
    sent = [p for p in (prompt_text(r["body"]) for r in fake_openai.requests) if p == routed]
    assert len(sent) == 1  # never typed as well
    assert registry_trap.requests == []


ASKING = "PERM please run it"
TOOL_CALL = {"function_call": {"name": "run_shell_command", "arguments": {
    "command": "touch made_by_tool", "description": "Create the file made_by_tool",
    "is_background": False}}}  # fmt: skip
AFTER_TOOL = "Made it, the file is there."


def test_real_qwen_approval_through_its_channel_is_answered_from_the_inbox_and_routed_on(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    real_claude_pane: Callable[..., RealPane],
    fake_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
) -> None:
    """Qwen (started by the hub, its channel open, ``--approval-mode default``) asks to run
    a shell command: the ask comes through the channel into ``hub.inbox`` (one ask, though
    its dialog is on the screen too), ``choose("allow")`` answers it by the protocol, the
    tool runs, the turn ends by the channel and its answer is routed on to Claude."""
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}, "ui": {"hideTips": True}, **QWEN_NO_UPDATE_SETTINGS,
    }))  # fmt: skip
    cwd = tmp_path / "proj-qwen"
    cwd.mkdir()

    def reply(body: dict[str, Any]) -> Any:
        if ASKING not in (prompt_text(body) or "") or not body.get("tools"):
            return None
        return TOOL_CALL if function_output(body) is None else AFTER_TOOL

    fake_openai.reply = reply
    env = {
        "HOME": str(home), "OPENAI_API_KEY": "sk-fake-qwen",
        "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "fake-model",
    }  # fmt: skip
    exe = agent_bin("qwen", QWEN_VERSION)
    qwen = real_hub.tile(
        "qwen", agent="qwen", command=f"{exe} --approval-mode default", cwd=cwd, env=env
    )
    wait_until(lambda: qwen.channel is not None, STARTUP_TIMEOUT_S, what="Qwen's channel open")
    real_hub.tile("claude", pane=real_claude_pane().pane_id)
    wait_until(lambda: real_hub.tiles["claude"].state == "idle", REPLY_TIMEOUT_S)
    out = real_hub.connect("qwen", "claude", template="From qwen:\n{output}", max_rounds=1)
    wait_until(lambda: out.ready.is_set(), 10)

    rec = real_hub.send("qwen", ASKING).result(ROUND_TIMEOUT_S)
    assert (rec.status, rec.delivery_mode) == ("delivered", "channel"), rec.error
    wait_until(lambda: real_hub.inbox, REPLY_TIMEOUT_S, what="Qwen's ask in the inbox")
    (ask,) = real_hub.inbox
    assert isinstance(ask, ChannelPermissionAsk) and ask.signal == "channel", ask
    assert (ask.tile, ask.tool, ask.command) == ("qwen", "run_shell_command", "touch made_by_tool")
    assert ask.choices == ("allow", "deny") and "Create the file made_by_tool" in ask.text
    wait_until(lambda: "Allow execution of" in qwen.screen(), 10, what="its dialog on screen")
    assert real_hub.inbox == [ask] and not (cwd / "made_by_tool").exists()

    answered = ask.choose("allow").result(30)
    assert (answered.status, answered.transform, answered.prompt) == (
        "delivered", "channel", "allow",
    ), answered.error  # fmt: skip
    wait_until((cwd / "made_by_tool").exists, REPLY_TIMEOUT_S, what="the tool ran once allowed")
    wait_until(lambda: out.last_status is not None, ROUND_TIMEOUT_S, what="qwen->claude")
    (row,) = log_rows(real_hub, out)
    assert (row["turn_signal"], row["extraction_method"]) == ("channel", "channel"), row
    assert (row["status"], row["extracted"]) == ("delivered", AFTER_TOOL), row["error"]
    wait_until(
        lambda: any(fake_anthropic_prompt(r["body"]) == f"From qwen:\n{AFTER_TOOL}"
                    for r in fake_anthropic.requests),
        ROUND_TIMEOUT_S, what="Qwen's answer after the tool at Claude's API",
    )  # fmt: skip
    assert ask.state == "approved" and real_hub.inbox == []
    asked = [r for r in fake_openai.requests if reply(r["body"]) == TOOL_CALL]
    assert len(asked) == 1  # the prompt went in once

    channel = qwen.channel
    assert channel is not None
    (opened,) = real_hub.runtime.tiles.channels._open.values()
    folder = Path(opened.endpoint.folder)
    pane_pid = qwen.pane_info().pid
    real_hub.close()
    assert not channel.alive and not folder.exists()
    assert (
        not psutil.pid_exists(pane_pid) or psutil.Process(pane_pid).status() == psutil.STATUS_ZOMBIE
    )
    assert registry_trap.requests == []


def test_real_qwen_approval_answered_in_its_pane_leaves_the_inbox(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> None:
    """Qwen Code 0.24.4 mirrors an answer given in its dialog to its JSON file (a
    ``control_response``, its ``emitControlResponse``): the channel's ask closes as answered
    in the pane, and the hub sends nothing."""
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}, "ui": {"hideTips": True}, **QWEN_NO_UPDATE_SETTINGS,
    }))  # fmt: skip
    cwd = tmp_path / "proj-qwen"
    cwd.mkdir()

    def reply(body: dict[str, Any]) -> Any:
        if ASKING not in (prompt_text(body) or "") or not body.get("tools"):
            return None
        return TOOL_CALL if function_output(body) is None else AFTER_TOOL

    fake_openai.reply = reply
    env = {
        "HOME": str(home), "OPENAI_API_KEY": "sk-fake-qwen",
        "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "fake-model",
    }  # fmt: skip
    exe = agent_bin("qwen", QWEN_VERSION)
    qwen = real_hub.tile(
        "qwen", agent="qwen", command=f"{exe} --approval-mode default", cwd=cwd, env=env
    )
    wait_until(lambda: qwen.channel is not None, STARTUP_TIMEOUT_S, what="Qwen's channel open")
    assert real_hub.send("qwen", ASKING).result(ROUND_TIMEOUT_S).status == "delivered"
    wait_until(lambda: real_hub.inbox, REPLY_TIMEOUT_S, what="Qwen's ask in the inbox")
    (ask,) = real_hub.inbox
    assert isinstance(ask, ChannelPermissionAsk)
    wait_until(lambda: "Allow execution of" in qwen.screen(), 10, what="its dialog on screen")
    real_hub.runtime.tmux.run("send-keys", "-t", qwen.pane_id, "Enter")  # "1. Yes, allow once"
    wait_until(lambda: not ask.open, REPLY_TIMEOUT_S, what="the ask closed by the pane's answer")
    assert (ask.state, ask.reason) == ("answered", "answered in the pane"), ask.reason
    wait_until((cwd / "made_by_tool").exists, REPLY_TIMEOUT_S, what="the tool ran")
    assert (
        real_hub.inbox == [] and [r for r in log_rows(real_hub) if r["route_id"] == "inbox"] == []
    )
    assert registry_trap.requests == []


def test_real_qwen_killed_mid_turn_breaks_its_channel_and_nothing_is_typed_or_sent_twice(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> None:
    """The real Qwen killed (SIGKILL) while its turn runs, so it writes no ``session_end``: one
    ``ChannelChanged`` ``broken`` event, the prompt queued behind the turn fails with a
    row saying nothing was delivered, and its API saw each prompt once."""
    from madohub_nb.pipeline.events import ChannelChanged

    events: list[ChannelChanged] = []
    real_hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}, "ui": {"hideTips": True}, **QWEN_NO_UPDATE_SETTINGS,
    }))  # fmt: skip
    cwd = tmp_path / "proj-qwen"
    cwd.mkdir()
    env = {
        "HOME": str(home), "OPENAI_API_KEY": "sk-fake-qwen",
        "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "fake-model",
    }  # fmt: skip
    qwen = real_hub.tile(
        "qwen", agent="qwen", command=str(agent_bin("qwen", QWEN_VERSION)), cwd=cwd, env=env
    )
    wait_until(lambda: qwen.channel is not None, STARTUP_TIMEOUT_S, what="Qwen's channel open")
    first = "Think a while [[sleep 8]]"
    rec = real_hub.send("qwen", first).result(ROUND_TIMEOUT_S)
    assert (rec.status, rec.delivery_mode) == ("delivered", "channel"), rec.error
    wait_until(lambda: first in fake_openai.prompts, REPLY_TIMEOUT_S, what="the turn at its API")
    queued = real_hub.send("qwen", "Queued behind it")
    pane = qwen.pane_info()
    assert pane is not None
    root = psutil.Process(pane.pid)  # SIGKILL (on SIGTERM Qwen still writes session_end)
    for proc in [root, *root.children(recursive=True)]:
        proc.kill()
    rec = queued.result(30)
    assert rec.status == "error" and "its TUI is not there to type into" in (rec.error or ""), rec
    wait_until(lambda: [e for e in events if e.state == "broken"], 15, what="the break told")
    assert [e.state for e in events] == ["attached", "broken"]
    assert fake_openai.prompts.count(first) == 1 and "Queued behind it" not in fake_openai.prompts
    real_hub.close()
    assert registry_trap.requests == []
