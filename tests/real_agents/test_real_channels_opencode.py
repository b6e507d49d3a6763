"""The real OpenCode 1.18.33 in a real tmux pane, driven through its native channel.

The pane runs the kind's channel layer as the hub would start it (``opencode --port N``,
OPENCODE_SERVER_PASSWORD in its environment: here from a 0600 file the pane's shell reads,
so the password is on no command line), offline against the fake OpenAI API. The channel
(opened directly, without the hub) hands prompts in, hears the turns end with their answers
and usage, and answers a permission ask; the pane shows it all live.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import kill_tree

from madohub_nb.agents.kinds.base import ChannelPlan
from madohub_nb.agents.kinds.opencode import channel_layer
from madohub_nb.agents.profiles import PROFILES
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
from madohub_nb.io.agent_channels.opencode import OpenCodeChannel
from madohub_nb.testing.fake_anthropic import default_answer
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, prompt_text

from .conftest import REPLY_TIMEOUT_S, STARTUP_TIMEOUT_S, RealPane, start_agent_pane
from .test_real_routing import (
    OPENCODE_QUIET_ENV,
    OPENCODE_VERSION,
    OPENCODE_WIDTH,
    write_opencode_config,
)

pytestmark = pytest.mark.real_agents

PASSWORD = "hub-password-" + os.urandom(8).hex()
ASK_PROMPT = "PERM please run it"
COMMAND = "touch made_by_tool"
WHY = "Create the file made_by_tool"
LONG_LINES = 120


def _reply(body: dict[str, Any]) -> str | dict[str, Any] | None:
    """The model: an asking prompt (PERM) calls ``bash`` once; LONG answers 120 lines."""
    prompt = prompt_text(body) or ""
    messages = body.get("messages") or [{}]
    if body.get("tools") and "PERM" in prompt and messages[-1].get("role") != "tool":
        return {
            "function_call": {"name": "bash", "arguments": {"command": COMMAND, "description": WHY}}
        }
    if "LONG" in prompt:
        return "\n".join(f"line {i:03d} of the long answer" for i in range(1, LONG_LINES + 1))
    return None


@pytest.fixture
def asking_openai() -> Iterator[FakeOpenAIResponses]:
    with FakeOpenAIResponses(_reply) as fake:
        yield fake


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tree(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def _left(pids: set[int]) -> list[str]:
    """Those of ``pids`` still running (a zombie waiting for tmux to reap it is not)."""
    left = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {proc.name()} {proc.status()}")
        except psutil.NoSuchProcess:
            continue
    return left


async def _until(test: Callable[[], bool], what: str, timeout_s: float = REPLY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@dataclass
class Started:
    """The real OpenCode started with the kind's channel layer, and its channel plan."""

    pane: RealPane
    plan: ChannelPlan
    port: int
    cwd: Path


async def _start(tmux_socket: str, home: Path, tmp_path: Path, exe: Path, base_url: str) -> Started:
    """OpenCode in a pane as the hub would start it with its channel (bash asks first); the
    password reaches it through a 0600 file its shell reads, never a command line."""
    config = write_opencode_config(home, base_url)
    config.write_text(config.read_text().rstrip()[:-1] + ', "permission": {"bash": "ask"}}')
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    port = _free_port()
    plan = channel_layer(ChannelEndpoint(str(folder), port=port, password=PASSWORD))
    secrets = folder / "env"
    secrets.touch(mode=0o600)
    secrets.write_text("".join(f"export {k}={v}\n" for k, v in plan.layer.env.items()))
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    start = f'. {secrets}; exec "$0" "$@"'
    pane = start_agent_pane(
        tmux_socket, ["bash", "-c", start, str(exe), *plan.layer.args], kind="opencode",
        version=OPENCODE_VERSION, cwd=cwd, home=home, env={"HOME": str(home), **OPENCODE_QUIET_ENV},
    )  # fmt: skip
    try:
        pane.tmux("resize-window", "-t", pane.pane_id, "-x", str(OPENCODE_WIDTH))
        await asyncio.to_thread(
            pane.wait_screen, lambda s: "Ask anything" in s, STARTUP_TIMEOUT_S, what="OpenCode"
        )
    except BaseException:
        pane.stop()
        raise
    return Started(pane, plan, port, cwd)


@pytest.mark.asyncio
async def test_real_opencode_takes_prompts_and_answers_asks_through_its_channel(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    asking_openai: FakeOpenAIResponses,
) -> None:
    exe = agent_bin("opencode", OPENCODE_VERSION)
    started = await _start(tmux_socket, home, tmp_path, exe, asking_openai.base_url)
    pane, plan, port, cwd = started.pane, started.plan, started.port, started.cwd
    channel: OpenCodeChannel | None = None
    try:
        agent = psutil.Process(pane.agent_pid())
        assert PASSWORD not in " ".join(agent.cmdline())
        assert all(PASSWORD not in " ".join(p.cmdline()) for p in agent.children(recursive=True))
        opened = plan.open(None)
        assert isinstance(opened, OpenCodeChannel)
        channel = opened
        seen: list[ChannelEvent] = []
        channel.subscribe(seen.append)
        await channel.attach(STARTUP_TIMEOUT_S)
        assert channel.directory == str(cwd)

        def of(kind: type[Any]) -> list[Any]:
            return [e for e in seen if isinstance(e, kind)]

        # An idle prompt, then one while it runs: each its own turn, with its own answer.
        handed_s = time.time()
        first = await channel.submit("first through the channel [[sleep 3]]", "p1")
        print(f"submit -> turn started (ack): {(first.at - handed_s) * 1000:.0f} ms")
        second = await channel.submit("LONG second, sent while busy", "p2")
        assert (first.queued, second.queued) == (False, True)
        await _until(lambda: len(of(ChannelTurn)) == 2, "both turns' ends")
        one, two = of(ChannelTurn)
        assert (one.prompt_id, one.status) == ("p1", "completed")
        assert one.answer == default_answer("first through the channel [[sleep 3]]")
        assert two.prompt_id == "p2"
        assert two.answer.splitlines() == [
            f"line {i:03d} of the long answer" for i in range(1, 121)
        ]
        assert one.input_tokens and one.output_tokens and one.cost_usd is not None
        assert [s.prompt_id for s in of(ChannelTurnStarted)] == ["p1", "p2"]
        screen = await asyncio.to_thread(
            pane.wait_screen, lambda s: "line 120 of the long answer" in s, REPLY_TIMEOUT_S,
            what="the long answer in the pane",
        )  # fmt: skip
        assert "LONG second, sent while busy" in screen or "line 120" in screen

        # A permission ask: answered through the channel, the dialog in the pane closes.
        handed_s = time.time()
        third = await channel.submit(ASK_PROMPT, "p3")
        print(f"submit -> turn started (ack), warm: {(third.at - handed_s) * 1000:.0f} ms")
        await _until(lambda: bool(of(ChannelAsk)), "the permission ask")
        (ask,) = of(ChannelAsk)
        assert (ask.tool, ask.command, ask.reason) == ("bash", COMMAND, WHY)
        assert ask.choices == ("once", "always", "reject")
        await asyncio.to_thread(
            pane.wait_screen, lambda s: "Permission required" in s, REPLY_TIMEOUT_S, what="dialog"
        )
        await channel.answer(ask.ask_id, "once")
        await _until(lambda: len(of(ChannelTurn)) == 3, "the asking turn's end")
        assert of(ChannelAskResolved) == [ChannelAskResolved(ask.ask_id, by="hub")]
        assert of(ChannelTurn)[2].answer == default_answer(ASK_PROMPT)
        assert (cwd / "made_by_tool").exists()
        await asyncio.to_thread(
            pane.wait_screen, lambda s: "Permission required" not in s
            and default_answer(ASK_PROMPT) in s, REPLY_TIMEOUT_S, what="the dialog gone",
        )  # fmt: skip

        # A prompt the person types in the pane: the same events, no prompt id of ours.
        pane.type("typed by the person")
        await asyncio.sleep(PROFILES["opencode"].pre_submit_delay_ms / 1000)  # as a person
        pane.press("Enter")
        await _until(lambda: len(of(ChannelTurn)) == 4, "the person's turn")
        typed = of(ChannelTurn)[3]
        assert (typed.prompt, typed.prompt_id) == ("typed by the person", None)
        assert typed.answer == default_answer("typed by the person")

        # An ask the person answers in the pane (Enter: "Allow once"): resolved by the agent.
        await channel.submit("PERM answered in the pane", "p5")
        await _until(lambda: len(of(ChannelAsk)) == 2, "the second ask")
        await asyncio.to_thread(
            pane.wait_screen, lambda s: "Permission required" in s, REPLY_TIMEOUT_S, what="dialog"
        )
        pane.press("Enter")
        await _until(lambda: len(of(ChannelTurn)) == 5, "the turn the pane's answer let go on")
        assert of(ChannelAskResolved)[1] == ChannelAskResolved(of(ChannelAsk)[1].ask_id, by="agent")
        print("events:", [type(e).__name__ for e in seen])

        # close(): the channel ends its connections; the TUI (the pane's) goes on.
        pids = _tree(pane.pane_pid)
        await channel.close()
        channel = None
        me = psutil.Process()
        assert not [c for c in me.net_connections() if c.raddr and c.raddr[1] == port]
        assert agent.is_running()
    finally:
        if channel is not None:
            await channel.close()
        pane.stop()
    await _until(lambda: not _left(pids), f"the pane's processes to end: {_left(pids)}", 10)


@pytest.mark.asyncio
async def test_real_opencode_gone_breaks_its_channel_and_submit_raises(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    asking_openai: FakeOpenAIResponses,
) -> None:
    exe = agent_bin("opencode", OPENCODE_VERSION)
    started = await _start(tmux_socket, home, tmp_path, exe, asking_openai.base_url)
    channel = started.plan.open(None)
    seen: list[ChannelEvent] = []
    channel.subscribe(seen.append)
    try:
        await channel.attach(STARTUP_TIMEOUT_S)
        assert channel.alive
        kill_tree(started.pane.agent_pid())
        await _until(lambda: any(isinstance(e, ChannelBroken) for e in seen), "the break")
        assert not channel.alive
        print("broken:", seen[-1])
        with pytest.raises(ChannelError, match="was not handed in"):
            await channel.submit("after the end", "p9")
        assert not [r for r in asking_openai.requests if r["body"].get("tools")]
    finally:
        await channel.close()
        started.pane.stop()
