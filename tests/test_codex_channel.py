"""Codex's native channel against the stand-in ``codex app-server`` (a real process on a real
unix socket, WebSocket and JSON-RPC as Codex 0.171.0 speaks them), and the real messages
recorded from Codex (``tests/fixtures/codex_app_server/``) replayed through the channel."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_asyncio
from conftest import kill_tree

from madohub_nb.agents.kinds.codex import KIND
from madohub_nb.io.agent_channels.base import (
    ChannelAsk,
    ChannelAskResolved,
    ChannelBroken,
    ChannelEndpoint,
    ChannelError,
    ChannelEvent,
    ChannelTurn,
    ChannelTurnStarted,
)
from madohub_nb.io.agent_channels.codex import CodexChannel
from madohub_nb.io.agent_channels.websocket import (
    OP_CONT,
    OP_TEXT,
    UnixWebSocket,
    encode_frame,
    read_frame,
)
from madohub_nb.testing import fake_codex_app_server as fake

FIXTURE = Path(__file__).parent / "fixtures" / "codex_app_server" / "codex-0.171.0.jsonl"
WAIT_S = 10.0
LONG_LINES = 120


class Events:
    """What a channel reported, with waits on conditions."""

    def __init__(self) -> None:
        self.seen: list[ChannelEvent] = []
        self.changed = asyncio.Event()

    def __call__(self, event: ChannelEvent) -> None:
        self.seen.append(event)
        self.changed.set()

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.seen if isinstance(e, kind)]

    async def until(self, cond: Callable[[], object], what: str) -> None:
        async def wait() -> None:
            while not cond():
                self.changed.clear()
                await self.changed.wait()

        try:
            await asyncio.wait_for(wait(), WAIT_S)
        except asyncio.TimeoutError:
            raise AssertionError(f"no {what} in {WAIT_S} s; events: {self.seen}") from None


def start_standin(socket_path: str) -> subprocess.Popen[bytes]:
    """The stand-in app-server as a process of its own (killed by pid in the tests)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    argv = [sys.executable, "-m", fake.__name__, "app-server", "--listen", f"unix://{socket_path}"]
    return subprocess.Popen(argv, env=env)


@pytest.fixture
def socket_path(tmp_path: Path) -> str:
    folder = tmp_path / "channel"
    folder.mkdir(mode=0o700)
    return str(folder / "codex.sock")


@pytest_asyncio.fixture
async def server(socket_path: str) -> AsyncIterator[subprocess.Popen[bytes]]:
    proc = start_standin(socket_path)
    yield proc
    kill_tree(proc.pid)
    proc.wait(5)


@pytest_asyncio.fixture
async def channel(
    server: subprocess.Popen[bytes], socket_path: str
) -> AsyncIterator[tuple[CodexChannel, Events]]:
    chan = CodexChannel(socket_path, server_pid=server.pid, ack_timeout_s=WAIT_S)
    events = Events()
    chan.subscribe(events)
    await chan.attach(WAIT_S)
    yield chan, events
    await chan.close()


@pytest.mark.asyncio
async def test_idle_submit_acks_when_its_turn_started_and_reports_answer_and_usage(
    channel: tuple[CodexChannel, Events],
) -> None:
    chan, events = channel
    assert chan.alive and chan.thread_id and not chan.subscribed  # no rollout before turn 1
    ack = await chan.submit("hello there", "p1")
    assert (ack.prompt_id, ack.queued) == ("p1", False) and ack.turn_id
    await events.until(lambda: events.of(ChannelTurn), "turn end")
    (started,) = events.of(ChannelTurnStarted)
    assert (started.turn_id, started.prompt, started.prompt_id) == (
        ack.turn_id,
        "hello there",
        "p1",
    )
    (turn,) = events.of(ChannelTurn)
    usage = fake.usage_for("hello there", "Done: hello there")
    assert (turn.turn_id, turn.answer, turn.prompt_id, turn.status) == (
        ack.turn_id, "Done: hello there", "p1", "completed",
    )  # fmt: skip
    assert turn.input_tokens == usage["inputTokens"] - usage["cachedInputTokens"]
    assert (turn.cache_read_tokens, turn.output_tokens) == (900, usage["outputTokens"])
    assert chan.subscribed


@pytest.mark.asyncio
async def test_a_prompt_while_busy_is_queued_and_runs_as_its_own_turn(
    channel: tuple[CodexChannel, Events],
) -> None:
    chan, events = channel
    first = await chan.submit("slow one [[sleep 1]]", "p1")
    second = await chan.submit("next one", "p2")
    assert not first.queued and (second.queued, second.turn_id) == (True, None)
    await events.until(lambda: len(events.of(ChannelTurn)) == 2, "two turn ends")
    one, two = events.of(ChannelTurn)
    assert one.turn_id == first.turn_id and two.turn_id != one.turn_id
    assert (one.answer, one.prompt_id) == ("Done: slow one [[sleep 1]]", "p1")
    assert (two.answer, two.prompt_id, two.prompt) == ("Done: next one", "p2", "next one")
    assert [e.prompt_id for e in events.of(ChannelTurnStarted)] == ["p1", "p2"]


@pytest.mark.asyncio
async def test_a_long_answer_arrives_whole(channel: tuple[CodexChannel, Events]) -> None:
    chan, events = channel
    await chan.submit(f"write [[lines {LONG_LINES}]]", "p1")
    await events.until(lambda: events.of(ChannelTurn), "turn end")
    (turn,) = events.of(ChannelTurn)
    lines = turn.answer.splitlines()
    assert len(lines) == LONG_LINES and turn.answer == fake.answer_for(f"[[lines {LONG_LINES}]]")


@pytest.mark.asyncio
async def test_an_ask_is_reported_answered_through_the_channel_and_resolved(
    channel: tuple[CodexChannel, Events],
) -> None:
    chan, events = channel
    await chan.submit("warm up", "p0")  # subscribed from here on
    await events.until(lambda: events.of(ChannelTurn), "turn end")
    await chan.submit("PERM please run it", "p1")
    await events.until(lambda: events.of(ChannelAsk), "ask")
    (ask,) = events.of(ChannelAsk)
    assert (ask.tool, ask.command, ask.reason) == ("shell", fake.COMMAND, fake.REASON)
    assert ask.choices == ("accept", "acceptWithExecpolicyAmendment", "cancel")
    assert ask.rejects == ("cancel",)
    with pytest.raises(ChannelError, match="choose one of"):
        await chan.answer(ask.ask_id, "maybe")
    await chan.answer(ask.ask_id, "cancel")
    await events.until(lambda: len(events.of(ChannelTurn)) == 2, "turn end")
    assert events.of(ChannelAskResolved) == [ChannelAskResolved(ask.ask_id, "hub")]
    assert events.of(ChannelTurn)[-1].answer == "Declined: PERM please run it"
    with pytest.raises(ChannelError, match="no open Codex approval"):
        await chan.answer(ask.ask_id, "accept")


@pytest.mark.asyncio
async def test_an_ask_answered_in_the_pane_is_resolved_by_the_agent(
    channel: tuple[CodexChannel, Events], socket_path: str
) -> None:
    chan, events = channel
    await chan.submit("warm up", "p0")
    await events.until(lambda: events.of(ChannelTurn), "turn end")
    await chan.submit("PERM please", "p1")
    await events.until(lambda: events.of(ChannelAsk), "ask")
    pane = await UnixWebSocket.connect(socket_path)  # the TUI's answer ("y" in the pane)
    await pane.send(json.dumps({"id": 1, "method": "fake/answerInPane", "params": {
        "threadId": chan.thread_id, "decision": "accept"}}))  # fmt: skip
    await events.until(lambda: events.of(ChannelAskResolved), "resolved")
    await pane.close()
    (ask,) = events.of(ChannelAsk)
    assert events.of(ChannelAskResolved) == [ChannelAskResolved(ask.ask_id, "agent")]


async def fake_call(socket_path: str, method: str, params: dict[str, Any]) -> None:
    """Call the stand-in as another client would (the TUI: what the person does there)."""
    other = await UnixWebSocket.connect(socket_path)
    await other.send(json.dumps({"id": 1, "method": method, "params": params}))
    await other.recv()
    await other.close()


@pytest.mark.asyncio
async def test_a_turn_the_person_types_first_is_seen_without_a_prompt_id(
    channel: tuple[CodexChannel, Events], socket_path: str
) -> None:
    chan, events = channel
    assert not chan.subscribed  # no rollout yet: subscribed once the turn runs
    await fake_call(socket_path, "fake/typeInPane", {"threadId": chan.thread_id,
                                                    "text": "typed [[sleep 0.5]]"})  # fmt: skip
    await events.until(lambda: events.of(ChannelTurn), "the typed turn's end")
    (started,) = events.of(ChannelTurnStarted)
    (turn,) = events.of(ChannelTurn)
    assert (started.prompt_id, turn.prompt_id, turn.answer) == (
        None,
        None,
        "Done: typed [[sleep 0.5]]",
    )
    assert chan.subscribed and turn.input_tokens


@pytest.mark.asyncio
async def test_a_prompt_that_does_not_start_is_taken_off_the_queue_and_raises(
    channel: tuple[CodexChannel, Events], socket_path: str
) -> None:
    """Never both: an error from submit means Codex will not run the prompt."""
    chan, events = channel
    chan.ack_timeout_s = 0.5
    await fake_call(socket_path, "fake/hold", {"threadId": chan.thread_id, "held": True})
    with pytest.raises(ChannelError, match="taken off its queue"):
        await chan.submit("never runs", "p1")
    await fake_call(socket_path, "fake/hold", {"threadId": chan.thread_id, "held": False})
    ack = await chan.submit("runs [[sleep 0.5]]", "p2")  # (running when the channel resumes)
    await events.until(lambda: events.of(ChannelTurn), "turn end")
    assert [t.prompt_id for t in events.of(ChannelTurn)] == [ack.prompt_id] == ["p2"], events.seen


@pytest.mark.asyncio
async def test_a_killed_server_breaks_the_channel_and_submit_raises(
    channel: tuple[CodexChannel, Events], server: subprocess.Popen[bytes]
) -> None:
    chan, events = channel
    server.kill()
    server.wait(5)
    await events.until(lambda: events.of(ChannelBroken), "ChannelBroken")
    assert not chan.alive and len(events.of(ChannelBroken)) == 1
    with pytest.raises(ChannelError, match="not open"):
        await chan.submit("lost?", "p1")


@pytest.mark.asyncio
async def test_close_ends_the_server_by_pid(
    server: subprocess.Popen[bytes], socket_path: str
) -> None:
    chan = CodexChannel(socket_path, server_pid=server.pid)
    await chan.attach(WAIT_S)
    await chan.close()
    assert server.wait(5) is not None
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == "zombie"


@pytest.mark.asyncio
async def test_attach_without_a_server_teaches(socket_path: str) -> None:
    with pytest.raises(ChannelError, match="codex app-server"):
        await CodexChannel(socket_path).attach(0.3)


def test_the_codex_kind_plans_its_channel(tmp_path: Path) -> None:
    assert KIND.channel is not None
    folder = tmp_path / "ch"
    plan = KIND.channel(ChannelEndpoint(str(folder), socket_path=str(folder / "c.sock")))
    url = f"unix://{folder / 'c.sock'}"
    assert plan.server is not None
    assert list(plan.server.argv[:4]) == ["codex", "app-server", "--listen", url]
    assert "features.daemon_auto_start=false" in plan.server.argv
    assert plan.layer.args[:2] == ("--remote", url)
    assert isinstance(plan.open(123), CodexChannel) and plan.open(123).server_pid == 123


# --- the WebSocket framing ------------------------------------------------------------------
@pytest.mark.asyncio
@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 200_000])
async def test_frames_round_trip_masked_and_fragmented(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    reader = asyncio.StreamReader()
    reader.feed_data(encode_frame(OP_TEXT, payload[: size // 2], fin=False))
    reader.feed_data(encode_frame(OP_CONT, payload[size // 2 :], mask=False))
    first, second = await read_frame(reader), await read_frame(reader)
    assert (first[0], first[1], second[0], second[1]) == (False, OP_TEXT, True, OP_CONT)
    assert first[2] + second[2] == payload


# --- the real messages ------------------------------------------------------------------------
def real_messages() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


@pytest.mark.asyncio
async def test_the_real_codex_messages_replayed_give_turns_usage_and_an_ask() -> None:
    chan = CodexChannel("/nonexistent")
    events = Events()
    chan.subscribe(events)
    incoming = [m["msg"] for m in real_messages() if m["dir"] == "in"]
    thread = next(
        m["params"]["thread"]["id"] for m in incoming if m.get("method") == "thread/started"
    )
    chan.thread_id, chan.subscribed = thread, True
    for message in incoming:
        if "method" in message:
            chan._dispatch(message)
    answers = [t.answer for t in events.of(ChannelTurn)]
    assert answers[:3] == ["Done: hello one [[sleep 3]]", "Done: second prompt",
                           "Done: PERM please run it"]  # fmt: skip
    assert all(t.input_tokens is not None and t.cache_read_tokens for t in events.of(ChannelTurn))
    (ask,) = events.of(ChannelAsk)
    assert ask.choices == ("accept", "acceptWithExecpolicyAmendment", "cancel")
    assert events.of(ChannelAskResolved) == [ChannelAskResolved(ask.ask_id, "agent")]


SHAPED = (
    "thread/started", "thread/status/changed", "turn/started", "item/started", "item/completed",
    "thread/tokenUsage/updated", "turn/completed", "item/commandExecution/requestApproval",
    "serverRequest/resolved", "item/agentMessage/delta",
)  # fmt: skip


def _keys(value: Any, prefix: str = "") -> set[str]:
    """The key paths of a JSON value (lists: their items' keys)."""
    if isinstance(value, dict):
        out = set()
        for key, inner in value.items():
            out.add(prefix + key)
            out |= _keys(inner, prefix + key + ".")
        return out
    if isinstance(value, list):
        return set().union(*(_keys(v, prefix) for v in value)) if value else set()
    return set()


@pytest.mark.asyncio
async def test_the_standin_speaks_the_real_messages_shapes(
    server: subprocess.Popen[bytes], socket_path: str
) -> None:
    """Every key the stand-in sends in a message also appears in the real Codex's message
    of that method (the stand-in sends less, never something else)."""
    real: dict[str, set[str]] = {}
    for entry in real_messages():
        msg = entry["msg"]
        if entry["dir"] == "in" and msg.get("method") in SHAPED:
            real.setdefault(msg["method"], set()).update(_keys(msg))
    chan = CodexChannel(socket_path)
    seen: list[dict[str, Any]] = []
    original = chan._dispatch
    chan._dispatch = lambda m: (seen.append(m), original(m))[1]  # type: ignore[method-assign]
    events = Events()
    chan.subscribe(events)
    chan.subscribe(lambda e: asyncio.ensure_future(chan.answer(e.ask_id, "accept"))
                   if isinstance(e, ChannelAsk) else None)  # fmt: skip
    await chan.attach(WAIT_S)
    await chan.submit("one", "p1")
    await chan.submit("PERM two", "p2")
    await events.until(lambda: len(events.of(ChannelTurn)) == 2, "two turn ends")
    await chan.close()
    sent = {m["method"] for m in seen if m.get("method") in SHAPED}
    assert sent == set(SHAPED), set(SHAPED) - sent
    for message in seen:
        method = message.get("method")
        if method in SHAPED:
            extra = _keys(message) - real[method]
            assert not extra, f"{method}: the stand-in sends {sorted(extra)}, the real Codex not"
