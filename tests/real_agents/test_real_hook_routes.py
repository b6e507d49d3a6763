"""Real Claude Code and Codex tiles made by the hub with hooks: their own hook ends the turn.

The hub starts the real CLI in its own pane (``hub.tile(..., command=...)``, hooks on by
default) and adds the agent's hook on its command line (Claude ``--settings``, Codex
``-c notify``). The idle delay is set far beyond the test's waits, so a round within
them can only come from the hook; its row says ``turn_signal == "hook"`` and its
answer is the hook's payload (method ``hook``). Offline, against the local fakes.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_openai import FakeOpenAIResponses

from .conftest import (
    CLAUDE_VERSIONS,
    CODEX_VERSION,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    claude_env,
    codex_env,
    end_codex_daemons,
    write_claude_config,
    write_codex_config,
)

pytestmark = pytest.mark.real_agents

SLOW_IDLE_MS = 120_000
"""Far beyond every wait here: only the agent's own hook can end a turn in time."""
ROUND_TIMEOUT_S = 60.0


def _command(exe: Path) -> str:
    """The agent's command as the hub runs it, without the caller's leaky variables (the
    pane's own ``$TMUX_PANE`` stays: the hook needs it)."""
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    return shlex.join(["env", *unset, str(exe)])


@pytest.fixture
def slow_hub(tmux_socket: str, tmp_path: Path) -> mh.Hub:
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=SLOW_IDLE_MS, log_path=tmp_path / "rounds.sqlite3"
    )
    yield hub  # type: ignore[misc]
    hub.close()


def _project(tmp_path: Path, name: str) -> Path:
    cwd = tmp_path / name
    cwd.mkdir()
    return Path(os.path.realpath(cwd))


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_claude_tile_made_by_the_hub_routes_on_its_stop_hook(
    version: str,
    slow_hub: mh.Hub,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> None:
    exe = agent_bin("claude", version)
    cwd = _project(tmp_path, "writer")
    write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    env = claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY)
    writer = slow_hub.tile(
        "writer", agent="claude", command=_command(exe), cwd=cwd, env=env, hooks=True
    )
    assert writer.turn_signal == "hook"
    sink = slow_hub.tile("sink", agent="shell", command="bash --norc --noprofile")
    wait_until(lambda: writer.state == "idle", STARTUP_TIMEOUT_S, what="Claude Code idle")
    wait_until(lambda: sink.state == "idle", 15, what="the sink's prompt")
    route = slow_hub.connect("writer", "sink", dispatch="shadow", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 20)
    prompt = "hello from the hub's own pane"
    slow_hub.send("writer", prompt).result(REPLY_TIMEOUT_S)
    wait_until(lambda: route.rounds == 1 and route.last_status, ROUND_TIMEOUT_S, what="round 1")
    (row,) = log_rows(slow_hub, route.id)
    assert row["turn_signal"] == "hook", row
    assert row["extraction_method"] == "hook"
    assert row["extracted"] == default_answer(prompt)
    # 2.1.197 writes turn_duration after its Stop hook, and at times its first prompt line
    # after the answer (issue 38): the round waits for the duration (HOOK_RECORD_WAIT_MS), else
    # measures the turn (under load the hook's own process can outlast the wait).
    assert row["turn_ms"] > 0, row["meta"]
    assert row["meta"]["turn_ms_source"] in ("record", "measured"), row["meta"]
    assert fake_anthropic.prompts == [prompt]
    assert not (home / ".claude" / "settings.json").exists(), "the user's settings were written"


def test_real_codex_tile_made_by_the_hub_routes_on_notify_to_real_claude(
    slow_hub: mh.Hub,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
    real_claude_pane: Callable[..., RealPane],
) -> None:
    exe = agent_bin("codex", CODEX_VERSION)
    cwd = _project(tmp_path, "coder")
    codex_home = home / ".codex"
    config = write_codex_config(codex_home, [cwd], fake_openai.base_url, daemon=False)
    try:
        coder = slow_hub.tile(
            "coder", agent="codex", command=_command(exe), cwd=cwd,
            env=codex_env(home, codex_home), hooks=True,
            channel=False,  # (its notify is what this is about; the channel: test_real_channels_codex)
        )  # fmt: skip
        assert coder.turn_signal == "hook"
        cl = real_claude_pane()
        claude = slow_hub.tile("claude", pane=cl.pane_id)
        assert claude.hooks is None and claude.turn_signal == "status"  # adopted: no hooks
        wait_until(lambda: coder.state == "idle", STARTUP_TIMEOUT_S, what="Codex ready")
        route = slow_hub.connect(
            "coder", "claude", template="From Codex:\n{output}", max_rounds=1, cooldown_ms=1000
        )
        wait_until(lambda: route.ready.is_set(), 20)
        prompt = "Start the relay"
        slow_hub.send("coder", prompt).result(REPLY_TIMEOUT_S)
        for_claude = f"From Codex:\n{default_answer(prompt)}"
        assert fake_anthropic.wait_for_prompts(1, ROUND_TIMEOUT_S) == [for_claude]
        wait_until(lambda: route.rounds == 1 and route.last_status, ROUND_TIMEOUT_S)
        (row,) = [r for r in log_rows(slow_hub, route.id) if r["status"] != "exhausted"]
        assert (row["turn_signal"], row["extraction_method"], row["status"]) == (
            "hook",
            "hook",
            "delivered",
        ), row["error"]
        assert row["extracted"] == default_answer(prompt)
        notify = [
            ln
            for ln in config.read_text().splitlines()
            if ln.replace(" ", "").startswith("notify=")
        ]
        assert not notify, "a notify landed in the user's config.toml"
    finally:
        end_codex_daemons(codex_home)
