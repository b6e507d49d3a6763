"""Qwen Code's approvals through its file channel, end to end on the fast tier (issue 39).

Real tmux; the Qwen stand-in (tests/standin_qwen.py) started by the hub with its channel
asks as the real Qwen Code 0.24.4 does (``control_request`` ``can_use_tool`` in OUT, the
dialog on its screen) when a prompt holds ``[[ask CMD]]``. The inbox watches the channel
because the hub attached it (its ``ChannelChanged`` event): no test here calls
``watch_channel``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from conftest import kill_tree, log_rows, start_standin, wait_until
from test_channels import qwen_tile

from madohub_nb.io.agent_channels.base import ChannelTurn, ChannelTurnStarted
from madohub_nb.pipeline.events import ChannelChanged
from madohub_nb.pipeline.inbox import ChannelPermissionAsk
from madohub_nb.pipeline.tile import Tile


def _qwen(hub: Any, tmp_path: Path, home: Path) -> tuple[Tile, list[ChannelTurn]]:
    """The stand-in Qwen with its channel attached, and the turns its channel reports."""
    qwen = qwen_tile(hub, tmp_path, home)
    wait_until(lambda: qwen.channel is not None, 15, what="the qwen channel attached")
    turns: list[ChannelTurn] = []
    assert qwen.channel is not None
    qwen.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
    return qwen, turns


def _ask(hub: Any, timeout_s: float = 15) -> ChannelPermissionAsk:
    wait_until(lambda: hub.inbox, timeout_s, what="an ask in the inbox")
    (ask,) = hub.inbox
    assert isinstance(ask, ChannelPermissionAsk), ask
    return ask


def _only_this_ask(hub: Any, ask: ChannelPermissionAsk, window_s: float) -> None:
    """Watch ``window_s`` that the inbox holds ``ask`` alone (no second ask off the screen)."""
    until = time.monotonic() + window_s
    while time.monotonic() < until:
        assert hub.inbox == [ask], hub.inbox
        time.sleep(0.05)


def test_a_qwen_approval_waits_in_the_inbox_and_allow_goes_through_its_channel(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    qwen, turns = _qwen(hub, tmp_path, home)
    rec = hub.send("qwen", "Make it [[ask touch made_by_tool]]").result(30)
    assert (rec.status, rec.delivery_mode) == ("delivered", "channel"), rec.error
    ask = _ask(hub)
    assert (ask.tile, ask.kind, ask.signal) == ("qwen", "permission", "channel")
    assert (ask.channel, ask.tool, ask.command) == (
        "qwen input-file", "run_shell_command", "touch made_by_tool",
    )  # fmt: skip
    assert ask.choices == ("allow", "deny") and ask.rejects == ("deny",)
    assert "Run touch made_by_tool" in ask.text  # (the agent's reason)
    # The dialog is on the tile's screen too: it opens no second ask.
    wait_until(lambda: "Allow execution of: 'touch'?" in qwen.screen(), 10, what="the dialog")
    _only_this_ask(hub, ask, 1.5)
    assert not (tmp_path / "proj-qwen" / "made_by_tool").exists()

    answered = ask.choose("allow").result(15)
    assert (answered.status, answered.route_id, answered.transform) == (
        "delivered", "inbox", "channel",
    ), answered.error  # fmt: skip
    assert (answered.prompt, answered.decision) == ("allow", "approved")
    assert answered.meta["ask_id"] == ask.request.ask_id
    wait_until(lambda: turns, 15, what="the turn went on and ended")
    assert turns[0].answer == "Ran: touch made_by_tool" and turns[0].prompt_id
    assert (tmp_path / "proj-qwen" / "made_by_tool").exists()
    assert ask.state == "approved" and hub.inbox == []
    assert [r["prompt"] for r in log_rows(hub) if r["route_id"] == "inbox"] == ["allow"]


def test_reject_sends_deny_and_qwen_goes_on_without_running_it(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    _, turns = _qwen(hub, tmp_path, home)
    hub.send("qwen", "Try [[ask touch denied_file]]").result(30)
    ask = _ask(hub)
    rec = ask.reject().result(15)
    assert (rec.status, rec.prompt, rec.decision) == ("delivered", "deny", "rejected"), rec.error
    wait_until(lambda: turns, 15, what="the turn ended")
    assert turns[0].answer == "Denied: touch denied_file"
    assert not (tmp_path / "proj-qwen" / "denied_file").exists()
    assert ask.state == "rejected" and hub.inbox == []


def test_an_approval_answered_in_qwens_pane_leaves_the_inbox_and_nothing_is_sent(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    """Qwen mirrors a pane's answer to OUT (``control_response``): the ask closes."""
    qwen, turns = _qwen(hub, tmp_path, home)
    hub.send("qwen", "Make [[ask touch by_hand]]").result(30)
    ask = _ask(hub)
    hub.runtime.tmux.run("send-keys", "-t", qwen.pane_id, "1")  # "Yes, allow once"
    wait_until(lambda: not ask.open, 15, what="the ask closed")
    assert ask.state == "answered" and ask.reason == "answered in the pane", ask.reason
    assert hub.inbox == []
    wait_until(lambda: turns, 15, what="the turn ended")
    assert turns[0].answer == "Ran: touch by_hand"
    assert [r for r in log_rows(hub) if r["route_id"] == "inbox"] == []  # nothing was sent


def test_an_approval_route_and_its_budget_work_beside_a_qwen_channel_ask(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    """A budgeted approval route into Qwen while Qwen asks through its channel: each waits
    in the inbox and is answered its own way; the route's prompt goes in by the channel
    once Qwen's asking turn ended, and the channel's answer is no round of the route."""
    qwen, turns = _qwen(hub, tmp_path, home)
    start_standin(hub, "writer")
    route = hub.connect(
        "writer", "qwen", template="Review: {output}", approve=True, max_tokens=10**6
    )
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("qwen", "First [[ask touch beside]]").result(30)
    asked = _ask(hub)
    hub.send("writer", "draft one").result(30)
    wait_until(lambda: [a for a in hub.inbox if a.kind == "approval"], 30, what="the approval")
    assert [a.kind for a in hub.inbox] == ["permission", "approval"]
    (approval,) = [a for a in hub.inbox if a.kind == "approval"]
    assert approval.tile == "qwen" and approval.route == route.id
    pending = approval.approve()  # (Qwen is still asking: the prompt waits its turn)
    assert asked.choose("allow").result(15).status == "delivered"
    rec = pending.result(30)
    assert (rec.status, rec.decision, rec.delivery_mode) == ("delivered", "approved", "channel")
    wait_until(lambda: len(turns) == 2, 15, what="the route's prompt as its own turn")
    assert turns[0].answer == "Ran: touch beside"
    assert turns[1].prompt == approval.text and turns[1].prompt_id
    wait_until(lambda: route.rounds == 1 and route.spent_tokens > 0, 15, what="the budget")
    assert route.state == "active"
    assert [r["route_id"] for r in log_rows(hub, route)] == [route.id]
    assert hub.inbox == []


def test_the_inbox_watches_the_channel_the_hub_attaches_after_the_tiles_start(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    """The channel opens once the agent is up, after the tile's start: its ``attached``
    event is what makes the inbox watch it (the asks then come from the channel alone)."""
    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    qwen, _ = _qwen(hub, tmp_path, home)
    assert [e.state for e in events] == ["attached"]
    assert qwen.name in hub.runtime.inbox._channels
    assert hub.runtime.inbox._channels[qwen.name].channel is qwen.channel


def test_qwen_killed_mid_turn_breaks_its_channel_once_and_nothing_is_typed_or_sent_twice(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    """Killed, Qwen writes no ``session_end``: its tile seen exited breaks the channel (one
    ``broken`` event); the prompt queued behind the running turn fails at once with a row
    that says nothing was delivered (its pane is dead: no typing), and was never written."""
    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    qwen, _ = _qwen(hub, tmp_path, home)
    started: list[ChannelTurnStarted] = []
    assert qwen.channel is not None
    qwen.channel.subscribe(
        lambda e: started.append(e) if isinstance(e, ChannelTurnStarted) else None
    )
    hub.send("qwen", "Long one [[sleep 30]]").result(30)
    wait_until(lambda: qwen.state == "busy", 10, what="qwen busy")
    queued = hub.send("qwen", "Queued behind it")  # (waits on the hub's side for the turn)
    kill_tree(qwen.pane_info().pid)  # the agent dies mid-turn, no session_end line
    rec = queued.result(30)
    assert rec.status == "error" and "its TUI is not there to type into" in (rec.error or ""), rec
    assert "qwen exited" in (rec.error or "") and "nothing was delivered" in (rec.error or "")
    wait_until(lambda: [e for e in events if e.state == "broken"], 15, what="the break told")
    (broken,) = [e for e in events if e.state == "broken"]
    assert broken.tile == "qwen" and broken.why
    assert qwen.channel is not None and not qwen.channel.alive
    after = hub.send("qwen", "After it died").result(30)
    assert after.status == "error" and "nothing was typed" in (after.error or ""), after
    assert [s.prompt for s in started] == ["Long one [[sleep 30]]"]  # nothing twice
    (opened,) = hub.runtime.tiles.channels._open.values()
    in_lines = (Path(opened.endpoint.folder) / "in.jsonl").read_text().splitlines()
    assert in_lines == ['{"type": "submit", "text": "Long one [[sleep 30]]"}']  # written once


def test_qwen_killed_while_it_asks_closes_the_ask_and_nothing_is_sent(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    qwen, _ = _qwen(hub, tmp_path, home)
    hub.send("qwen", "Make [[ask touch never_made]]").result(30)
    ask = _ask(hub)
    kill_tree(qwen.pane_info().pid)
    wait_until(lambda: not ask.open, 15, what="the ask closed with its agent")
    assert ask.state == "expired" and "'qwen' exited" in (ask.reason or ""), ask.reason
    assert hub.inbox == [] and [r for r in log_rows(hub) if r["route_id"] == "inbox"] == []
    assert not (tmp_path / "proj-qwen" / "never_made").exists()


def test_an_answer_qwen_refuses_is_an_error_row_saying_why(
    hub: Any, tmp_path: Path, home: Path
) -> None:
    """Qwen acknowledges each ``confirmation_response`` with a ``control_response``; one it
    cannot take (the ask unknown to it, or answered in its pane a moment before) is an
    ``error``: the inbox's row says so, and nothing more is sent."""
    import json

    _qwen(hub, tmp_path, home)
    (opened,) = hub.runtime.tiles.channels._open.values()
    ghost = {
        "type": "control_request", "request_id": "ghost-1",
        "request": {"subtype": "can_use_tool", "tool_name": "run_shell_command",
                    "input": {"command": "touch ghost", "description": "Never asked"}},
    }  # fmt: skip
    with open(Path(opened.endpoint.folder) / "out.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(ghost) + "\n")  # (an ask Qwen itself does not know)
    ask = _ask(hub)
    rec = ask.choose("allow").result(15)
    assert rec.status == "error" and "refused the answer" in (rec.error or ""), rec.error
    assert "unknown request_id" in (rec.error or "") and hub.inbox == []
    assert not (tmp_path / "proj-qwen" / "ghost").exists()


def test_qwen_reader_keeps_an_answer_qwen_refused_and_does_not_close_the_ask_for_it() -> None:
    """The real 0.24.4's two ``control_response`` shapes (chunk ``emitControlResponse`` /
    ``emitControlError``): success resolves the ask, error is kept for the answer waiting."""
    import json

    from madohub_nb.io.agent_channels.base import ChannelAskResolved
    from madohub_nb.io.agent_channels.qwen import QwenReader

    reader = QwenReader()
    refused = reader.line(json.dumps({"type": "control_response", "response": {
        "subtype": "error", "request_id": "r1",
        "error": "unknown request_id (already resolved, cancelled, or never issued)"}}), 1.0)  # fmt: skip
    assert refused == [] and "unknown request_id" in (reader.responses["r1"] or "")
    taken = reader.line(json.dumps({"type": "control_response", "response": {
        "subtype": "success", "request_id": "r2", "response": {"allowed": True}}}), 1.0)  # fmt: skip
    assert taken == [ChannelAskResolved("r2")] and reader.responses["r2"] is None
