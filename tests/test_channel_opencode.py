"""OpenCode's native channel against the stand-in server (real HTTP and SSE on 127.0.0.1).

The stand-in (madohub_nb/testing/fake_opencode.py) is checked against the events the real
OpenCode 1.18.33 sent (tests/fixtures/opencode_channel/events-1.18.33.sse), and the channel
is fed that recording too; tests/real_agents/test_real_channels_opencode.py runs the real one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio

from madohub_nb.agents.kinds.opencode import KIND, channel_layer
from madohub_nb.io.agent_channels.base import (
    ChannelAsk,
    ChannelAskResolved,
    ChannelBroken,
    ChannelEndpoint,
    ChannelError,
    ChannelEvent,
    ChannelTurn,
    ChannelTurnStarted,
    ChannelUnsure,
)
from madohub_nb.io.agent_channels.opencode import PASSWORD_ENV, USERNAME, OpenCodeChannel
from madohub_nb.testing.fake_anthropic import default_answer
from madohub_nb.testing.fake_opencode import (
    ASK_COMMAND,
    ASK_DESCRIPTION,
    ASK_MARKER,
    CACHE_READ_TOKENS,
    STEP_COST_USD,
    FakeOpenCode,
)

PASSWORD = "hub-secret-0123456789"
FIXTURE = Path(__file__).parent / "fixtures" / "opencode_channel" / "events-1.18.33.sse"
LONG_LINES = 120
WAIT_S = 10.0


def _long_answer(prompt: str) -> str:
    if "LONG" in prompt:
        return "\n".join(f"line {i:03d} of the long answer" for i in range(1, LONG_LINES + 1))
    return default_answer(prompt)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeOpenCode]:
    with FakeOpenCode(PASSWORD, str(tmp_path), reply=_long_answer) as server:
        yield server


class Recorder:
    """Every event a channel reported, and a way to wait for one."""

    def __init__(self) -> None:
        self.events: list[ChannelEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: ChannelEvent) -> None:
        self.events.append(event)
        self._changed.set()

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait(self, test: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not test():
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; events: {self.events}")
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass


@pytest_asyncio.fixture
async def attached(fake: FakeOpenCode) -> AsyncIterator[tuple[OpenCodeChannel, Recorder]]:
    channel = OpenCodeChannel(fake.port, PASSWORD)
    recorder = Recorder()
    channel.subscribe(recorder)
    await channel.attach(WAIT_S)
    yield channel, recorder
    await channel.close()


# --------------------------------------------------------------------------- attach


@pytest.mark.asyncio
async def test_attach_makes_a_session_and_shows_it_in_the_tui(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    channel, _ = attached
    assert channel.alive
    assert channel.directory == fake.directory  # from GET /path
    assert channel.session_id in fake.sessions
    assert fake.selected == channel.session_id


@pytest.mark.asyncio
async def test_attach_takes_the_session_the_person_started_but_not_an_older_one(
    fake: FakeOpenCode,
) -> None:
    old = OpenCodeChannel(fake.port, PASSWORD)
    await old.attach(WAIT_S)
    await old.close()
    since = time.time()
    assert not [s for s in fake.sessions if s != old.session_id]
    persons = OpenCodeChannel(fake.port, PASSWORD)  # the person's first prompt made this one
    await persons.attach(WAIT_S)
    await persons.close()
    assert persons.session_id != old.session_id  # the older session was not taken over
    channel = OpenCodeChannel(fake.port, PASSWORD, since=since)
    await channel.attach(WAIT_S)
    await channel.close()
    assert channel.session_id == persons.session_id
    assert len(fake.sessions) == 2


@pytest.mark.asyncio
async def test_a_silent_event_stream_is_opened_again(fake: FakeOpenCode) -> None:
    fake.silent_streams = 1
    channel = OpenCodeChannel(fake.port, PASSWORD)
    await channel.attach(WAIT_S)
    try:
        assert channel.alive
        assert [r for r in fake.requests if r == ("GET", "/event")] == [("GET", "/event")] * 2
    finally:
        await channel.close()


@pytest.mark.asyncio
async def test_the_first_submit_shows_the_session_in_the_tui_again(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    """A TUI still starting when attach selected the session may have missed it."""
    channel, seen = attached
    assert fake.selects == [channel.session_id]
    await channel.submit("one", "p1")
    await channel.submit("two", "p2")
    assert fake.selects == [channel.session_id] * 2
    await seen.wait(lambda: len(seen.of(ChannelTurn)) == 2, "both turns")


@pytest.mark.asyncio
async def test_attach_that_finds_no_session_fails_and_is_not_alive(fake: FakeOpenCode) -> None:
    fake.failing.add(("POST", "/session"))
    channel = OpenCodeChannel(fake.port, PASSWORD)
    with pytest.raises(ChannelError, match=r"found no session.*POST /session with HTTP 500"):
        await channel.attach(WAIT_S)
    assert not channel.alive
    with pytest.raises(ChannelError, match="was not handed in"):
        await channel.submit("hello", "p1")


@pytest.mark.asyncio
async def test_a_wrong_password_is_refused_with_a_teaching_error(fake: FakeOpenCode) -> None:
    channel = OpenCodeChannel(fake.port, "not-the-password")
    with pytest.raises(ChannelError, match=rf"refused the hub's password.*{PASSWORD_ENV}") as err:
        await channel.attach(WAIT_S)
    assert "not-the-password" not in str(err.value)
    assert not channel.alive
    assert fake.requests == [("GET", "/path")]


@pytest.mark.asyncio
async def test_attach_to_no_server_fails_in_time(fake: FakeOpenCode) -> None:
    port = fake.port
    fake.kill()
    channel = OpenCodeChannel(port, PASSWORD)
    began = time.monotonic()
    with pytest.raises(ChannelError, match=rf"did not come up.*--port {port}"):
        await channel.attach(0.5)
    assert time.monotonic() - began < 3


def test_the_password_is_not_in_the_channels_repr() -> None:
    assert PASSWORD not in repr(OpenCodeChannel(1, PASSWORD))


# --------------------------------------------------------------------------- turns


@pytest.mark.asyncio
async def test_idle_submit_is_acked_with_its_turn_and_ends_with_its_answer_and_usage(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    channel, seen = attached
    ack = await channel.submit("hello through the channel", "p1")
    assert (ack.prompt_id, ack.queued) == ("p1", False)
    assert ack.turn_id is not None
    await seen.wait(lambda: bool(seen.of(ChannelTurn)), "the turn's end")
    (started,) = seen.of(ChannelTurnStarted)
    assert (started.turn_id, started.prompt_id) == (ack.turn_id, "p1")
    assert started.prompt == "hello through the channel"
    (turn,) = seen.of(ChannelTurn)
    assert (turn.turn_id, turn.prompt_id, turn.status) == (ack.turn_id, "p1", "completed")
    assert turn.answer == default_answer("hello through the channel")
    assert turn.input_tokens == len("hello through the channel") // 4 + 1
    assert turn.output_tokens == len(turn.answer) // 4 + 1
    assert turn.cache_read_tokens == CACHE_READ_TOKENS
    assert turn.cost_usd == pytest.approx(STEP_COST_USD)
    assert turn.model == "fake-model"
    assert turn.turn_ms is not None and turn.turn_ms >= 0
    assert fake.prompts == ["hello through the channel"]


@pytest.mark.asyncio
async def test_a_prompt_while_busy_is_queued_and_runs_as_its_own_turn(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    channel, seen = attached
    first = await channel.submit("first, slow [[sleep 1]]", "p1")
    second = await channel.submit("second, while busy", "p2")
    assert (first.queued, second.queued, second.turn_id) == (False, True, None)
    await seen.wait(lambda: len(seen.of(ChannelTurn)) == 2, "both turns' ends")
    turns = seen.of(ChannelTurn)
    assert [t.prompt_id for t in turns] == ["p1", "p2"]
    assert [t.answer for t in turns] == [
        default_answer("first, slow [[sleep 1]]"),
        default_answer("second, while busy"),
    ]
    assert turns[0].turn_id != turns[1].turn_id
    assert [s.prompt_id for s in seen.of(ChannelTurnStarted)] == ["p1", "p2"]
    kinds = [type(e).__name__ for e in seen.events]
    assert kinds == ["ChannelTurnStarted", "ChannelTurn"] * 2  # the second started after


@pytest.mark.asyncio
async def test_a_turn_the_person_typed_in_the_pane_is_seen_the_same_way(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    """The TUI sends the person's prompt to its own server: no message id of ours."""
    channel, seen = attached
    async with httpx2.AsyncClient(auth=(USERNAME, PASSWORD)) as tui:
        url = f"http://127.0.0.1:{fake.port}/session/{channel.session_id}/prompt_async"
        response = await tui.post(url, json={"parts": [{"type": "text", "text": "typed"}]})
    assert response.status_code == 204
    await seen.wait(lambda: bool(seen.of(ChannelTurn)), "the person's turn")
    (started,) = seen.of(ChannelTurnStarted)
    (turn,) = seen.of(ChannelTurn)
    assert (started.prompt, started.prompt_id) == ("typed", None)
    assert (turn.prompt, turn.prompt_id, turn.answer) == ("typed", None, default_answer("typed"))


@pytest.mark.asyncio
async def test_a_turn_interrupted_in_the_pane_ends_as_interrupted(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    channel, seen = attached
    await channel.submit("slow [[sleep 30]]", "p1")
    async with httpx2.AsyncClient(
        auth=(USERNAME, PASSWORD)
    ) as tui:  # an interrupt, as the real one took it
        await tui.post(f"http://127.0.0.1:{fake.port}/session/{channel.session_id}/abort")
    await seen.wait(lambda: bool(seen.of(ChannelTurn)), "the interrupted turn")
    (turn,) = seen.of(ChannelTurn)
    assert (turn.prompt_id, turn.status, turn.answer) == ("p1", "interrupted", "")


@pytest.mark.asyncio
async def test_a_120_line_answer_arrives_whole(
    attached: tuple[OpenCodeChannel, Recorder],
) -> None:
    channel, seen = attached
    await channel.submit("LONG answer please", "p1")
    await seen.wait(lambda: bool(seen.of(ChannelTurn)), "the long turn's end")
    (turn,) = seen.of(ChannelTurn)
    assert turn.answer == _long_answer("LONG")
    assert len(turn.answer.splitlines()) == LONG_LINES


@pytest.mark.asyncio
async def test_a_permission_ask_is_answered_through_the_channel_and_resolved(
    attached: tuple[OpenCodeChannel, Recorder],
) -> None:
    channel, seen = attached
    await channel.submit(f"run it {ASK_MARKER}", "p1")
    await seen.wait(lambda: bool(seen.of(ChannelAsk)), "the permission ask")
    (ask,) = seen.of(ChannelAsk)
    assert (ask.tool, ask.command, ask.reason) == ("bash", ASK_COMMAND, ASK_DESCRIPTION)
    assert (ask.choices, ask.rejects) == (("once", "always", "reject"), ("reject",))
    assert not seen.of(ChannelTurn)
    with pytest.raises(ValueError, match=r"once, always, reject.*'yes'"):
        await channel.answer(ask.ask_id, "yes")
    await channel.answer(ask.ask_id, "once")
    await seen.wait(lambda: bool(seen.of(ChannelTurn)), "the turn after the answer")
    assert seen.of(ChannelAskResolved) == [ChannelAskResolved(ask.ask_id, by="hub")]
    (turn,) = seen.of(ChannelTurn)
    assert turn.answer == default_answer(f"run it {ASK_MARKER}")  # the last step's text
    assert turn.cost_usd == pytest.approx(2 * STEP_COST_USD)  # both steps add up
    kinds = [type(e).__name__ for e in seen.events]
    assert kinds == ["ChannelTurnStarted", "ChannelAsk", "ChannelAskResolved", "ChannelTurn"]


@pytest.mark.asyncio
async def test_answering_an_ask_that_is_gone_raises(
    attached: tuple[OpenCodeChannel, Recorder],
) -> None:
    channel, _ = attached
    with pytest.raises(ChannelError, match=r"/permission/per_gone/reply with HTTP 404"):
        await channel.answer("per_gone", "once")


@pytest.mark.asyncio
async def test_a_killed_server_breaks_the_channel_and_submit_raises(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    channel, seen = attached
    fake.kill()
    await seen.wait(lambda: bool(seen.of(ChannelBroken)), "the channel's break")
    assert not channel.alive
    (broken,) = seen.of(ChannelBroken)
    assert "ended" in broken.reason
    with pytest.raises(ChannelError, match=r"stream ended.*p9 was not handed in"):
        await channel.submit("after the end", "p9")
    assert fake.prompts == []


@pytest.mark.asyncio
async def test_a_server_killed_before_the_ack_fails_that_submit(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    channel, seen = attached
    await channel.submit("slow [[sleep 5]]", "p1")
    second = asyncio.ensure_future(channel.submit("queued [[sleep 5]]", "p2"))
    await second  # queued: acked
    third = asyncio.ensure_future(channel.submit("never acked", "p3"))
    fake.kill()
    with pytest.raises(ChannelError):
        await third
    await seen.wait(lambda: bool(seen.of(ChannelBroken)), "the channel's break")
    assert not seen.of(ChannelTurn)


@pytest.mark.asyncio
async def test_a_prompt_taken_but_never_started_is_unsure_not_failed(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """OpenCode answered 204 and then said nothing: it may still run the prompt later, so
    the hub must not type it as well (ChannelUnsure), unlike a request never taken."""
    from madohub_nb.io.agent_channels import opencode as module

    monkeypatch.setattr(module, "ACK_TIMEOUT_S", 0.5)
    channel, _ = attached
    fake.unheard = 1
    with pytest.raises(ChannelUnsure, match=r"did not start prompt p1 .* may still run it"):
        await channel.submit("taken, never started", "p1")
    fake.failing.add(("POST", f"/session/{channel.session_id}/prompt_async"))
    with pytest.raises(ChannelError) as refused:
        await channel.submit("refused", "p2")
    assert not isinstance(refused.value, ChannelUnsure)  # HTTP 500: it took nothing


# --------------------------------------------------------------------------- the real recording


def _recorded() -> list[dict[str, Any]]:
    return [
        json.loads(line[5:])
        for line in FIXTURE.read_text().splitlines()
        if line.startswith("data:")
    ]


def _shape(events: list[dict[str, Any]]) -> list[str]:
    """Event types of one turn, with the message role and part type they are about."""
    shape = []
    for event in events:
        kind, props = event["type"], event["properties"]
        if kind == "message.updated":
            info = props["info"]
            done = "done" if info.get("time", {}).get("completed") else "open"
            kind += f":{info['role']}" + (
                f":{done}:{info.get('finish')}" if "parentID" in info else ""
            )
        elif kind == "message.part.updated":
            kind += f":{props['part']['type']}"
        elif kind == "session.status":
            kind += f":{props['status']['type']}"
        shape.append(kind)
    return shape


def _essential(shape: list[str]) -> list[str]:
    """What the channel reads, once each in order (the real one repeats busy and messages)."""
    skip = ("session.updated", "server.", "message.part.delta", "tui.")
    keep = [s for s in shape if not s.startswith(skip)]
    keep = [s for s in keep if s not in ("message.updated:user", "session.status:busy")]
    out: list[str] = []
    for s in keep:
        if not out or out[-1] != s:
            out.append(s)
    return out


def test_the_recording_of_the_real_opencode_has_what_the_channel_reads() -> None:
    events = _recorded()
    kinds = {e["type"] for e in events}
    assert {
        "server.connected",
        "message.updated",
        "permission.asked",
        "permission.replied",
    } <= kinds
    asked = next(e["properties"] for e in events if e["type"] == "permission.asked")
    assert set(asked) >= {"id", "sessionID", "permission", "patterns", "metadata", "tool"}
    done = [
        e["properties"]["info"] for e in events
        if e["type"] == "message.updated" and e["properties"]["info"].get("finish") == "stop"
    ]  # fmt: skip
    assert done and set(done[0]["tokens"]) >= {"input", "output", "reasoning", "cache"}


@pytest.mark.asyncio
async def test_the_stand_ins_turn_has_the_real_ones_shape(
    fake: FakeOpenCode, attached: tuple[OpenCodeChannel, Recorder]
) -> None:
    """One plain turn and one asking turn: the stand-in's events, as the channel reads them,
    come in the order the real OpenCode sent them (the recording's turns 1 and 4)."""
    channel, seen = attached
    raw: list[dict[str, Any]] = []
    original = fake.emit

    def tap(kind: str, properties: dict[str, Any]) -> None:
        raw.append({"type": kind, "properties": properties})
        original(kind, properties)

    fake.emit = tap  # type: ignore[method-assign]
    await channel.submit("hello", "p1")
    await seen.wait(lambda: len(seen.of(ChannelTurn)) == 1, "the plain turn")
    ask_from = len(raw)
    await channel.submit(f"PERM {ASK_MARKER}", "p2")
    await seen.wait(lambda: bool(seen.of(ChannelAsk)), "the ask")
    await channel.answer(seen.of(ChannelAsk)[0].ask_id, "once")
    await seen.wait(lambda: len(seen.of(ChannelTurn)) == 2, "the asking turn")
    real = _recorded()
    starts = [
        i for i, e in enumerate(real)
        if e["type"] == "message.updated" and e["properties"]["info"]["role"] == "user"
        and e["properties"]["info"]["id"] not in {
            x["properties"]["info"]["id"] for x in real[:i] if x["type"] == "message.updated"}
    ]  # fmt: skip
    real_plain = _essential(_shape(real[starts[0] : starts[1]]))
    idle = next(i for i in range(starts[3], len(real)) if real[i]["type"] == "session.idle")
    real_ask = _essential(_shape(real[starts[3] : idle + 1]))
    assert _essential(_shape(raw[:ask_from])) == real_plain
    assert _essential(_shape(raw[ask_from:])) == real_ask


@pytest.mark.asyncio
async def test_the_real_recording_fed_to_the_channel_gives_its_turns_and_ask() -> None:
    channel = OpenCodeChannel(1, PASSWORD)
    seen = Recorder()
    channel.subscribe(seen)
    for event in _recorded():
        channel.handle_event(event["type"], event["properties"])
    turns = seen.of(ChannelTurn)
    assert [t.answer for t in turns] == [
        "Done: hello there from the channel",
        "Done: first slow [[sleep 3]]",
        "Done: second while busy",
        "Done: PERM please run it",
        "",  # interrupted (POST /session/{id}/abort) before any text
    ]
    assert [t.status for t in turns] == ["completed"] * 4 + ["interrupted"]
    assert [t.input_tokens for t in turns] == [8125, 8157, 8186, 8214 + 8298, 0]
    assert [t.output_tokens for t in turns] == [8, 7, 5, 1 + 6, 0]
    assert len(seen.of(ChannelTurnStarted)) == 5
    (ask,) = seen.of(ChannelAsk)
    assert (ask.tool, ask.command) == ("bash", "touch made_by_tool")
    assert seen.of(ChannelAskResolved) == [ChannelAskResolved(ask.ask_id, by="agent")]


# --------------------------------------------------------------------------- the kind's layer


def test_the_kinds_layer_serves_the_api_from_the_tui_with_the_password_in_its_env(
    tmp_path: Path,
) -> None:
    endpoint = ChannelEndpoint(str(tmp_path), port=41234, password=PASSWORD)
    assert KIND.channel is channel_layer
    plan = channel_layer(endpoint)
    assert plan.server is None  # the TUI serves it: nothing else to start or end
    assert plan.layer.args == ("--hostname", "127.0.0.1", "--port", "41234")
    assert plan.layer.env == {PASSWORD_ENV: PASSWORD}
    assert PASSWORD not in " ".join(plan.layer.args)
    channel = plan.open(None)
    assert isinstance(channel, OpenCodeChannel)
    assert channel.port == 41234


def test_the_kinds_layer_needs_a_port_and_a_password(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"port and a password"):
        channel_layer(ChannelEndpoint(str(tmp_path), socket_path=str(tmp_path / "s")))
