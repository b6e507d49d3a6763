"""Real Claude Code calls the hub's hook command from its pane, and the channel hears it.

The hub-style ``--settings`` of ``agents/hooks.py`` (Stop, Notification, SessionStart
command hooks running ``io/hookcall.py``) on the real CLI in a real tmux pane, offline
against the fake Anthropic API: one prompt, and the channel gets that pane's ``Stop``
with the turn's answer. The user's own settings file is never written.
"""

from __future__ import annotations

import os
import queue
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from madohub_nb.agents.hooks import hook_setup
from madohub_nb.engine import Engine
from madohub_nb.io.hookcall import command_argv
from madohub_nb.io.hooks import HookChannel, HookEvent
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer

from .conftest import (
    DEFAULT_API_KEY,
    LEAKY_ENV,
    PANE_HEIGHT,
    PANE_WIDTH,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    claude_env,
    claude_is_idle,
    write_claude_config,
)

pytestmark = pytest.mark.real_agents

VERSION = "2.1.332"
PROMPT = "hello hooks"


@pytest.fixture
def channel() -> Iterator[tuple[HookChannel, queue.Queue[HookEvent]]]:
    engine = Engine("test-real-hooks")
    events: queue.Queue[HookEvent] = queue.Queue()
    hooks = HookChannel(events.put)
    engine.run_sync(hooks.start(), timeout_s=10)
    try:
        yield hooks, events
    finally:
        engine.run_sync(hooks.close(), timeout_s=10)
        engine.close()


def start_claude_with_hooks(
    socket: str, exe: Path, args: tuple[str, ...], cwd: Path, home: Path, env: dict[str, str]
) -> RealPane:
    """Claude in a new tmux session, keeping the ``$TMUX_PANE`` tmux gives the pane.

    (``conftest.start_agent_pane`` unsets ``TMUX_PANE`` with the caller's leaky
    variables; a hook needs the pane's own.)
    """
    unset = [arg for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for arg in ("-u", var)]
    argv = ["env", *unset, *(f"{k}={v}" for k, v in env.items()), str(exe), *args]
    name = f"hooks-{os.urandom(3).hex()}"
    conf = home / ".tmux.conf"
    if not conf.exists():
        conf.write_text("set -g focus-events on\n")
    out = subprocess.run(
        [
            "tmux", "-L", socket, "-f", str(conf),
            "new-session", "-d", "-s", name, "-x", str(PANE_WIDTH), "-y", str(PANE_HEIGHT),
            "-c", str(cwd), "-P", "-F", "#{pane_id} #{pane_pid}", "--", *argv,
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    pane_id, pane_pid = out.stdout.split()
    return RealPane("claude", VERSION, socket, name, pane_id, int(pane_pid), cwd, home, env)


def test_real_claude_stop_hook_reaches_the_channel_with_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    channel: tuple[HookChannel, queue.Queue[HookEvent]],
) -> None:
    hooks, events = channel
    exe = agent_bin("claude", VERSION)
    cwd = Path(os.path.realpath(tmp_path / "proj"))
    cwd.mkdir()
    write_claude_config(home, cwd, DEFAULT_API_KEY, VERSION)
    token = hooks.register(None, "claude")
    setup = hook_setup("claude", command_argv(), str(tmp_path / "private"))
    assert setup is not None and not setup.files and not setup.env
    env = {**claude_env(home, fake_anthropic.base_url), **hooks.env(token)}
    pane = start_claude_with_hooks(tmux_socket, exe, setup.args, cwd, home, env)
    hooks.bind(token, pane.pane_id)  # before Claude is up (~1 s); an earlier hook is refused
    try:
        pane.wait_screen(claude_is_idle, STARTUP_TIMEOUT_S, what="Claude Code's idle screen")
        pane.submit(PROMPT)
        seen: list[HookEvent] = []
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while not any(e.kind == "stop" for e in seen):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(
                    f"no Stop hook within {REPLY_TIMEOUT_S}s; got {seen}, "
                    f"refused {dict(hooks.counts)}\n--- screen ---\n{pane.screen()}"
                )
            try:
                seen.append(events.get(timeout=remaining))
            except queue.Empty:
                continue
        (stop,) = [e for e in seen if e.kind == "stop"]
        assert (stop.pane, stop.agent, stop.token) == (pane.pane_id, "claude", token)
        assert stop.payload["hook_event_name"] == "Stop"
        assert stop.answer == default_answer(PROMPT)
        assert stop.transcript_path and stop.transcript_path.endswith(".jsonl")
        assert stop.session_id and stop.session_id in stop.transcript_path
        assert stop.peer_pid is not None
        (start,) = [e for e in seen if e.kind == "session_start"]  # bound before Claude was up
        assert start.payload["hook_event_name"] == "SessionStart"
        assert (start.pane, start.session_id) == (pane.pane_id, stop.session_id)
        assert hooks.counts["accepted"] == len(seen) and sum(hooks.counts.values()) == len(seen)
        assert not (home / ".claude" / "settings.json").exists(), "the user's settings were written"
    finally:
        pane.stop()
