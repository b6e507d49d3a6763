"""Approvals through a native channel: an agent's ``ChannelAsk`` waits in ``hub.inbox`` with
its command, its reason and its own choices, and is answered by the protocol.

Real tmux, real stand-in agents in their tiles; the channel is the in-process stand-in
(:mod:`madohub_nb.testing.channel_standin`), watched the way the hub's tile start watches a
tile's channel (``hub.runtime.inbox.watch_channel``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, start_standin, user_prompts, wait_until

from madohub_nb.demo import standin_command
from madohub_nb.errors import MadohubError, MadohubValueError
from madohub_nb.io.agent_channels.base import ChannelAsk
from madohub_nb.pipeline.inbox import Ask, ChannelPermissionAsk, PermissionAsk
from madohub_nb.testing.channel_standin import StandinChannel

CODEX_CHOICES = ("accept", "acceptForSession", "decline", "cancel")
"""Codex app-server's answers to ``item/commandExecution/requestApproval``."""
OPENCODE_CHOICES = ("once", "always", "reject")
"""OpenCode's answers to ``permission.asked``."""


def _with_channel(hub: Any, tile: Any) -> tuple[StandinChannel, Callable[[], None]]:
    """Give ``tile`` a stand-in channel and watch it, on the engine loop (what tile start
    does once the agent's channel is attached)."""

    async def attach() -> tuple[StandinChannel, Callable[[], None]]:
        channel = StandinChannel(asyncio.get_running_loop())
        await channel.attach(5)
        tile.channel = channel
        return channel, hub.runtime.inbox.watch_channel(tile, channel)

    result: tuple[StandinChannel, Callable[[], None]] = hub.engine.run_sync(attach(), 10)
    return result


def _unwatch(hub: Any, unwatch: Callable[[], None]) -> None:
    async def stop() -> None:
        unwatch()

    hub.engine.run_sync(stop(), 10)


def _channel_ask(hub: Any, timeout_s: float = 10) -> ChannelPermissionAsk:
    wait_until(
        lambda: [a for a in hub.inbox if a.signal == "channel"], timeout_s, what="a channel ask"
    )
    (ask,) = [a for a in hub.inbox if a.signal == "channel"]
    assert isinstance(ask, ChannelPermissionAsk)
    return ask


def _channel_tile(hub: Any, name: str, cwd: Path) -> tuple[Any, StandinChannel, Any]:
    """A stand-in Claude Code (hooks on, Bash tools run once allowed) with a channel."""
    tile = hub.tile(
        name, agent="claude", command=standin_command("claude", persona="echo"), cwd=cwd,
        env={"MADOHUB_STANDIN_THINK_S": "0.2", "MADOHUB_STANDIN_ALLOW_BASH": "1"},
    )  # fmt: skip
    wait_until(lambda: tile.state == "idle", 15, what=f"{name} idle")
    channel, unwatch = _with_channel(hub, tile)
    return tile, channel, unwatch


def test_a_channel_ask_shows_command_reason_and_choices_and_choose_answers_it_once(
    hub: Any, project: Path
) -> None:
    _, channel, _ = _channel_tile(hub, "w", project)
    sent = channel.ask(
        "touch made_by_tool", reason="Create the file made_by_tool", choices=CODEX_CHOICES,
        rejects=("decline", "cancel"),
    )  # fmt: skip
    ask = _channel_ask(hub)
    assert (ask.kind, ask.tile, ask.route, ask.state) == ("permission", "w", None, "open")
    assert isinstance(ask, PermissionAsk) and ask.signal == "channel"
    assert ask.choices == CODEX_CHOICES and ask.rejects == ("decline", "cancel")
    assert (ask.command, ask.tool, ask.request.reason) == (
        "touch made_by_tool", "shell", "Create the file made_by_tool",
    )  # fmt: skip
    assert ask.text == "Create the file made_by_tool\nshell: touch made_by_tool"
    assert ask.channel == channel.name
    shown = repr(ask)
    assert "shell: touch made_by_tool" in shown and str(list(CODEX_CHOICES)) in shown
    rec = ask.choose("acceptForSession").result(30)
    assert (rec.status, rec.route_id, rec.prompt, rec.decision, rec.transform) == (
        "delivered", "inbox", "acceptForSession", "approved", "channel",
    )  # fmt: skip
    assert rec.meta["ask_id"] == sent.ask_id and rec.meta["channel"] == channel.name
    assert channel.answers == [(sent.ask_id, "acceptForSession")]
    assert ask.state == "approved" and ask.choice == "acceptForSession"
    wait_until(lambda: hub.inbox == [], 10, what="the answered ask left the inbox")
    with pytest.raises(MadohubError, match="no longer open"):
        ask.choose(0)
    assert channel.answers == [(sent.ask_id, "acceptForSession")]  # (nothing sent twice)
    assert [r["route_id"] for r in log_rows(hub)].count("inbox") == 1


def test_reject_sends_the_agents_first_reject_and_a_number_picks_a_choice(
    hub: Any, project: Path
) -> None:
    _, channel, _ = _channel_tile(hub, "w", project)
    first = channel.ask("rm -rf build", choices=OPENCODE_CHOICES, rejects=("reject",))
    ask = _channel_ask(hub)
    rec = ask.reject("not now").result(30)
    assert (rec.status, rec.prompt, rec.decision) == ("delivered", "reject", "rejected")
    assert channel.answers == [(first.ask_id, "reject")]
    second = channel.ask("make test", choices=OPENCODE_CHOICES, rejects=("reject",))
    wait_until(lambda: [a for a in hub.inbox if a is not ask], 10, what="the second ask")
    (again,) = hub.inbox
    assert isinstance(again, ChannelPermissionAsk)
    with pytest.raises(MadohubValueError, match=r"'never' is not a choice.*0: 'once'"):
        again.choose("never")
    rec = again.choose("2").result(30)  # the number the inbox shows (its buttons: "2. always")
    assert (rec.prompt, rec.decision) == ("always", "approved")
    assert channel.answers[-1] == (second.ask_id, "always")


def test_answered_in_the_pane_closes_the_channel_ask_and_nothing_is_sent(
    hub: Any, project: Path
) -> None:
    _, channel, _ = _channel_tile(hub, "w", project)
    sent = channel.ask("touch never_made")
    ask = _channel_ask(hub)
    channel.answer_in_pane(sent.ask_id)  # the person pressed y in the agent's own TUI
    wait_until(lambda: ask.state == "answered", 10, what="the ask closed itself")
    assert ask.reason == "answered in the pane" and hub.inbox == []
    with pytest.raises(MadohubError, match="answered in the pane"):
        ask.choose("accept")
    assert channel.answers == []
    assert [r for r in log_rows(hub) if r["route_id"] == "inbox"] == []


def test_a_tile_that_has_its_channel_once_started_is_watched_without_a_call(
    hub: Any, project: Path
) -> None:
    """The tile's start sets ``tile.channel`` before the tile is ready (its start-up check
    runs 0.5 s): the inbox watches it by itself then."""
    tile = hub.tile(
        "w", agent="claude", command=standin_command("claude", persona="echo"), cwd=project
    )
    channel = StandinChannel(hub.engine.loop)
    tile.channel = channel
    assert not tile.ready.done(), "the start-up check ended before the channel was set"
    wait_until(lambda: channel.listeners, 15, what="the inbox listening to the channel")
    sent = channel.ask("touch z")
    ask = _channel_ask(hub)
    assert ask.choose("accept").result(30).status == "delivered"
    assert channel.answers == [(sent.ask_id, "accept")]


def test_a_broken_channel_drops_its_asks_saying_why(hub: Any, project: Path) -> None:
    _, channel, _ = _channel_tile(hub, "w", project)
    channel.ask("touch a")
    ask = _channel_ask(hub)
    channel.break_("its server exited (pid 4242)")
    wait_until(lambda: ask.state == "expired", 10, what="the ask dropped")
    assert hub.inbox == []
    assert "stand-in channel of 'w' broke (its server exited (pid 4242))" in (ask.reason or "")
    with pytest.raises(MadohubError, match="broke"):
        ask.approve()
    assert channel.answers == []


def test_an_answer_the_channel_refuses_is_an_error_row_not_a_retry(hub: Any, project: Path) -> None:
    """The pane answered it a moment before our answer arrived: the channel refuses, the
    round says so, and nothing is typed instead."""
    _, channel, _ = _channel_tile(hub, "w", project)
    sent = channel.ask("touch late")
    ask = _channel_ask(hub)
    with channel._lock:  # (answered in the pane; its event not yet heard)
        del channel._pending[sent.ask_id]
    rec = ask.choose("accept").result(30)
    assert rec.status == "error" and "no ask" in (rec.error or "")
    assert "nothing was sent" in (rec.error or "") and channel.answers == []
    assert hub.inbox == []


def _no_screen_ask_for(hub: Any, name: str, window_s: float) -> None:
    """Watch ``window_s`` that no ask read off ``name``'s screen appears."""
    until = time.monotonic() + window_s
    while time.monotonic() < until:
        screen = [a for a in hub.inbox if a.tile == name and a.signal in ("hook", "screen")]
        assert screen == [], screen
        time.sleep(0.05)


def test_while_a_channel_is_watched_its_tiles_dialog_is_asked_once(hub: Any, project: Path) -> None:
    """The channel's ask takes precedence: the dialog on the tile's screen (and its hooks)
    open no second ask; once the channel is no longer watched, the screen is read again."""
    tile, channel, unwatch = _channel_tile(hub, "w", project)
    # The person types it in the pane (a hub.send would go in through the channel).
    tile.tmux.run("send-keys", "-t", tile.pane_id, "-l", "please [[bash touch made_by_tool]]")
    tile.tmux.run("send-keys", "-t", tile.pane_id, "Enter")
    wait_until(lambda: tile.state == "waiting", 15, what="the dialog on screen")
    channel.ask("touch made_by_tool")  # (the same request, as the agent's protocol says it)
    ask = _channel_ask(hub)
    _no_screen_ask_for(hub, "w", 2.0)
    assert hub.inbox == [ask]
    _unwatch(hub, unwatch)
    assert ask.state == "expired" and "no longer watched" in (ask.reason or "")
    wait_until(lambda: [a for a in hub.inbox if a.signal in ("hook", "screen")], 15)
    (screen_ask,) = hub.inbox
    assert "touch made_by_tool" in screen_ask.text


def test_watching_a_channel_closes_the_screen_ask_it_takes_over(hub: Any, project: Path) -> None:
    tile = hub.tile(
        "w", agent="claude", command=standin_command("claude", persona="echo"), cwd=project,
        env={"MADOHUB_STANDIN_THINK_S": "0.2"},
    )  # fmt: skip
    wait_until(lambda: tile.state == "idle", 15, what="w idle")
    hub.send("w", "please [[bash touch x]]").result(30)
    wait_until(lambda: hub.inbox, 20, what="the screen's ask")
    (screen_ask,) = hub.inbox
    _with_channel(hub, tile)
    assert screen_ask.state == "answered" and "stand-in channel" in (screen_ask.reason or "")
    assert hub.inbox == []


def test_an_approval_route_and_its_budget_work_beside_a_channel_ask(hub: Any) -> None:
    """A budgeted approval route to a tile whose channel asks too: both wait in the inbox,
    each is answered its own way, and the channel's answer is no round of the route (its
    budget and round count do not move)."""
    start_standin(hub, "writer")
    reviewer = start_standin(hub, "reviewer")
    channel, _ = _with_channel(hub, reviewer)
    route = hub.connect(
        "writer", "reviewer", template="Review: {output}", approve=True, max_tokens=10**6
    )
    wait_until(lambda: route.ready.is_set(), 5)
    sent = channel.ask("git push", reason="Publish the review", choices=CODEX_CHOICES,
                       rejects=("decline", "cancel"))  # fmt: skip
    asked = _channel_ask(hub)
    hub.send("writer", "draft one").result(30)
    wait_until(lambda: [a for a in hub.inbox if a.kind == "approval"], 30, what="the approval")
    assert [a.kind for a in hub.inbox] == ["permission", "approval"]
    (approval,) = [a for a in hub.inbox if a.kind == "approval"]
    assert (approval.tile, approval.route) == ("reviewer", route.id)
    rec = approval.approve().result(30)
    assert (rec.status, rec.decision, rec.route_id) == ("delivered", "approved", route.id)
    # (the reviewer has a channel: the approved prompt goes in through it, never typed)
    wait_until(lambda: channel.prompts, 15, what="the approved prompt delivered")
    assert [text for _, text in channel.prompts] == [approval.text] and not user_prompts(reviewer)
    assert rec.delivery_mode == "channel"
    assert route.state == "active" and route.rounds == 1
    spent = route.spent_tokens
    assert spent > 0, route.budget_spent  # the budget counted the round the approval let by
    assert asked.open and hub.inbox == [asked]  # (the approval did not touch the channel's)
    rec = asked.reject().result(30)
    assert (rec.route_id, rec.prompt, rec.decision) == ("inbox", "decline", "rejected")
    assert channel.answers == [(sent.ask_id, "decline")]
    assert (route.rounds, route.spent_tokens, route.state) == (1, spent, "active")
    assert [r["route_id"] for r in log_rows(hub, route)] == [route.id]
    assert hub.inbox == []


def test_a_channel_ask_closes_when_its_agent_exits(hub: Any, project: Path) -> None:
    """As an approval expires with its target, a channel's ask closes with its agent."""
    from conftest import kill_tree

    tile, channel, _ = _channel_tile(hub, "w", project)
    channel.ask("touch y")
    ask = _channel_ask(hub)
    kill_tree(tile.pane_info().pid)
    wait_until(lambda: ask.state == "expired", 15, what="the ask closed with its tile")
    assert "'w' exited" in (ask.reason or "") and hub.inbox == []


def test_inbox_widget_shows_a_channel_ask_and_its_buttons_answer_through_the_channel(
    hub: Any, project: Path
) -> None:
    from madohub_nb.notebook.widgets import InboxView

    _, channel, _ = _channel_tile(hub, "w", project)
    view = InboxView(hub)
    try:
        sent = channel.ask("touch by_button", reason="Make the file", choices=OPENCODE_CHOICES,
                           rejects=("reject",))  # fmt: skip
        wait_until(lambda: view.count == 1, 10, what="the ask in the widget")
        (row,) = view.rows.values()
        assert [b.description for b in row.buttons] == ["1. once", "2. always", "3. reject"]
        snapshot = view.snapshot_html()
        assert "Make the file" in snapshot and "shell: touch by_button" in snapshot
        assert "once / always / reject" in snapshot
        row.buttons[1].click()
        wait_until(lambda: channel.answers, 10, what="the answer through the channel")
        assert channel.answers == [(sent.ask_id, "always")]
        wait_until(lambda: view.count == 0, 10, what="the answered ask left the widget")
    finally:
        view.close()


# --- the ask alone (pure) ------------------------------------------------------------------------
def _bare(request: ChannelAsk) -> tuple[ChannelPermissionAsk, list[tuple[str, object]]]:
    answered: list[tuple[str, object]] = []

    def on_answer(ask: Ask, state: str, how: object) -> concurrent.futures.Future[Any]:
        answered.append((state, how))
        return concurrent.futures.Future()

    return ChannelPermissionAsk("w", request, channel="c", on_answer=on_answer), answered


def test_a_channel_ask_without_rejects_says_no_by_label_or_refuses_saying_what_to_do() -> None:
    ask, answered = _bare(ChannelAsk("1", "bash", "ls", choices=("allow", "deny")))
    ask.reject()
    assert answered == [("rejected", 1)] and ask.choice == "deny"
    lone, _ = _bare(ChannelAsk("2", "bash", "ls", choices=("ok",)))
    with pytest.raises(MadohubValueError, match=r"no choice that says no \(\['ok'\]\)"):
        lone.reject()
    assert lone.open
    first, answered = _bare(ChannelAsk("3", "bash", "ls", choices=("accept", "decline")))
    first.approve()  # (the agent's first choice)
    assert answered == [("approved", 0)]
    assert ChannelPermissionAsk.__mro__[1] is PermissionAsk
