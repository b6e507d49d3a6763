"""The real Codex 0.171.0 through its native channel: ``codex app-server`` started as the
hub would (the kind's :class:`ChannelPlan`), the real ``codex --remote`` TUI in a real tmux
pane, and :class:`CodexChannel` opened directly (the hub's plumbing is another issue item).

Offline, against ``fake_openai``. It checks: a prompt handed in through the channel shows in
the pane and its whole 120-line answer and usage come back; a prompt sent while a turn runs
is queued and runs as its own turn; an approval is asked through the channel and answered
there; a turn the person types in the pane is seen, and an approval answered there with ``y``
leaves the channel's asks; after ``close()`` no process of the app-server is left (by pid) and no daemon either.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import kill_tree

from madohub_nb.agents.kinds.codex import KIND
from madohub_nb.io.agent_channels.base import (
    ChannelAsk,
    ChannelAskResolved,
    ChannelEndpoint,
    ChannelEvent,
    ChannelTurn,
    ChannelTurnStarted,
)
from madohub_nb.io.agent_channels.codex import CodexChannel
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, prompt_text

from .conftest import (
    CODEX_VERSION,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    codex_daemons,
    codex_env,
    codex_is_idle,
    end_codex_daemons,
    start_agent_pane,
    write_codex_config,
)
from .long_answer import LONG, MARKER, long_reply, missing_lines

pytestmark = pytest.mark.real_agents

COMMAND = "touch made_by_channel"
ASKING = "PERM please run it"
TOOL_CALL = {"function_call": {"name": "exec_command", "arguments": {
    "cmd": COMMAND, "sandbox_permissions": "require_escalated", "justification": "make it"}}}  # fmt: skip


def reply(body: dict[str, Any]) -> Any:
    """The long answer to its marker; a shell call that asks for approval to a ``PERM``
    prompt (once: not once its output, the request's last item, came back)."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    answered = bool(items) and items[-1].get("type") == "function_call_output"
    if "PERM" in (prompt_text(body) or "") and not answered and body.get("tools"):
        return TOOL_CALL
    return long_reply(body)


@pytest.fixture
def fake() -> Iterator[FakeOpenAIResponses]:
    with FakeOpenAIResponses(reply) as server:
        yield server


def test_real_codex_channel_prompt_answer_usage_queue_ask_and_close(
    tmux_socket: str, home: Path, tmp_path: Path, agent_bin: Callable[[str, str], Path],
    fake: FakeOpenAIResponses,
) -> None:  # fmt: skip
    exe = agent_bin("codex", CODEX_VERSION)
    cwd = tmp_path / "proj"
    cwd.mkdir()
    codex_home = home / ".codex"
    config = write_codex_config(codex_home, [cwd], fake.base_url)  # (daemon on by default)
    config.write_text(
        'approval_policy = "on-request"\nsandbox_mode = "read-only"\n' + config.read_text()
    )
    folder = tmp_path / "channel"
    folder.mkdir(mode=0o700)
    assert KIND.channel is not None
    plan = KIND.channel(ChannelEndpoint(str(folder), socket_path=str(folder / "codex.sock")))
    assert plan.server is not None
    env = codex_env(home, codex_home)
    server = subprocess.Popen(
        [str(exe), *plan.server.argv[1:]], cwd=cwd, start_new_session=True,
        env={"PATH": os.environ["PATH"], **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server_tree: list[int] = []
    pane = start_agent_pane(
        tmux_socket, [str(exe), *plan.layer.args], kind="codex", version=CODEX_VERSION,
        cwd=cwd, home=home, env=env,
    )  # fmt: skip
    try:
        pane.wait_screen(codex_is_idle, STARTUP_TIMEOUT_S, what="the remote TUI's idle screen")
        channel = plan.open(server.pid)
        assert isinstance(channel, CodexChannel)
        events: list[ChannelEvent] = []

        async def until(cond: Callable[[], object], what: str) -> None:
            async def wait() -> None:
                while not cond():
                    await asyncio.sleep(0.05)

            try:
                await asyncio.wait_for(wait(), REPLY_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise AssertionError(f"no {what}; events: {events}") from None

        def turns() -> list[ChannelTurn]:
            return [e for e in events if isinstance(e, ChannelTurn)]

        async def scenario() -> None:
            channel.subscribe(events.append)
            await channel.attach(STARTUP_TIMEOUT_S)
            ack = await channel.submit(f"Please answer {MARKER} [[sleep 2]]", "p1")
            assert not ack.queued and ack.turn_id
            queued = await channel.submit("and a second one", "p2")
            assert queued.queued, queued
            await until(lambda: len(turns()) == 2, "two turn ends")
            first, second = turns()
            assert (first.turn_id, first.prompt_id, second.prompt_id) == (ack.turn_id, "p1", "p2")
            assert second.turn_id != first.turn_id
            assert not missing_lines(first.answer) and first.answer.strip() == LONG.strip()
            assert (
                first.input_tokens and first.output_tokens and first.cache_read_tokens is not None
            )
            assert second.answer and second.input_tokens
            started = [e.prompt_id for e in events if isinstance(e, ChannelTurnStarted)]
            assert started == ["p1", "p2"]
            await channel.submit(ASKING, "p3")
            await until(lambda: any(isinstance(e, ChannelAsk) for e in events), "the ask")
            ask = next(e for e in events if isinstance(e, ChannelAsk))
            assert COMMAND in ask.command and ask.choices[0] == "accept", ask
            await channel.answer(ask.ask_id, "accept")
            await until(lambda: len(turns()) == 3, "the asking turn's end")
            assert ChannelAskResolved(ask.ask_id, "hub") in events
            assert (cwd / "made_by_channel").exists()
            (cwd / "made_by_channel").unlink()
            # the person: a turn typed in the pane, an approval answered there with "y"
            await asyncio.to_thread(pane.submit, "PERM typed by the person")
            await until(lambda: sum(isinstance(e, ChannelAsk) for e in events) == 2, "ask 2")
            asks = [e for e in events if isinstance(e, ChannelAsk)]
            await asyncio.to_thread(
                pane.wait_screen, lambda s: "Yes, proceed (y)" in s, what="the TUI's dialog"
            )
            pane.press("y")
            await until(
                lambda: ChannelAskResolved(asks[1].ask_id, "agent") in events, "pane answer"
            )
            await until(lambda: len(turns()) == 4, "the typed turn's end")
            typed = turns()[3]
            assert (typed.prompt, typed.prompt_id) == ("PERM typed by the person", None)
            assert (cwd / "made_by_channel").exists()
            server_tree[:] = [
                server.pid,
                *(p.pid for p in psutil.Process(server.pid).children(True)),
            ]
            await channel.close()

        asyncio.run(scenario())
        screen = pane.screen() + pane.tmux("capture-pane", "-p", "-S", "-400", "-t", pane.pane_id)
        assert "and a second one" in screen and "LAST-LINE-9d2b" in screen
        assert len(server_tree) >= 2  # node and its native codex child
        assert not [pid for pid in server_tree if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE], server_tree  # fmt: skip
        assert not codex_daemons(codex_home)
    finally:
        pane.stop()
        kill_tree(server.pid)
        server.wait(5)
        end_codex_daemons(codex_home)
