"""The REAL Codex 0.171.0 started by the hub with its native channel (issue 39), offline.

The hub starts ``codex app-server --listen unix://PATH`` (by the tile's own executable) and
the pane runs the real ``codex --remote unix://PATH`` TUI, against ``FakeOpenAIResponses``;
a real Claude Code 2.1.332 against ``FakeAnthropic`` is adopted beside it. Claude -> Codex:
the prompt goes in through the channel (never typed, the person's draft stays in the
composer); Codex -> Claude: the turn's end, whole answer and usage come from the channel;
a prompt while busy runs as its own turn; an approval waits in ``hub.inbox`` and is
answered there; a killed server is an event and error rows (the ``--remote`` TUI stays,
nothing is typed into it); after ``close()`` no process of the server or the TUI is left (by pid).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.io.agent_channels.base import ChannelTurn
from madohub_nb.pipeline.events import ChannelChanged
from madohub_nb.pipeline.inbox import ChannelPermissionAsk
from madohub_nb.testing.fake_anthropic import FakeAnthropic
from madohub_nb.testing.fake_anthropic import prompt_text as fake_anthropic_prompt
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, prompt_text

from .conftest import (
    CODEX_VERSION,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    codex_daemons,
    codex_env,
    end_codex_daemons,
    write_codex_config,
)
from .long_answer import LONG, MARKER, long_reply

pytestmark = pytest.mark.real_agents

ROUND_TIMEOUT_S = 120.0
COMMAND = "touch made_by_channel"
TOOL_CALL = {"function_call": {"name": "exec_command", "arguments": {
    "cmd": COMMAND, "sandbox_permissions": "require_escalated", "justification": "make it"}}}  # fmt: skip


def reply(body: dict[str, Any]) -> Any:
    """The long answer to its marker; a shell call that asks for approval to a ``PERM``
    prompt (once: not once its output came back)."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    answered = bool(items) and items[-1].get("type") == "function_call_output"
    if "PERM" in (prompt_text(body) or "") and not answered and body.get("tools"):
        return TOOL_CALL
    return long_reply(body)


@pytest.fixture
def real_hub(tmux_socket: str, tmp_path: Path) -> Iterator[mh.Hub]:
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=1500, log_path=tmp_path / "rounds.sqlite3")
    yield hub
    hub.close()


def _tree(pid: int) -> list[int]:
    try:
        return [pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_real_codex_routes_both_ways_with_claude_through_its_channel(
    real_hub: mh.Hub, home: Path, tmp_path: Path, agent_bin: Callable[[str, str], Path],
    real_claude_pane: Callable[..., RealPane], fake_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
) -> None:  # fmt: skip
    fake_openai.reply = reply
    cwd = tmp_path / "proj-codex"
    cwd.mkdir()
    codex_home = home / ".codex"
    config = write_codex_config(codex_home, [cwd], fake_openai.base_url)
    config.write_text(
        'approval_policy = "on-request"\nsandbox_mode = "read-only"\n' + config.read_text()
    )
    exe = agent_bin("codex", CODEX_VERSION)
    try:
        codex = real_hub.tile(
            "codex", agent="codex", command=str(exe), cwd=cwd, env=codex_env(home, codex_home)
        )
        wait_until(lambda: codex.channel is not None, STARTUP_TIMEOUT_S, what="Codex's channel")
        assert codex.turn_signal == "channel"
        (server_pid,) = real_hub.runtime.tiles.channels.server_pids()
        turns: list[ChannelTurn] = []
        assert codex.channel is not None
        codex.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
        real_hub.tile("claude", pane=real_claude_pane().pane_id)

        # The person's half-typed draft in Codex's composer stays there: nothing is typed.
        draft = "my half typed draft"
        real_hub.runtime.tmux.run("send-keys", "-t", codex.pane_id, "-l", draft)
        wait_until(lambda: draft in codex.screen(), 10, what="the draft in Codex's composer")

        # Claude -> Codex: through the channel.
        into = real_hub.connect("claude", "codex", template="Claude says:\n{output}", max_rounds=1)
        wait_until(lambda: into.ready.is_set(), 10)
        assert real_hub.send("claude", "Ping codex").result(ROUND_TIMEOUT_S).status == "delivered"
        wait_until(lambda: into.last_status is not None, ROUND_TIMEOUT_S, what="claude->codex")
        (row,) = log_rows(real_hub, into)
        assert (row["status"], row["delivery_mode"]) == ("delivered", "channel"), row["error"]
        wait_until(lambda: [t for t in turns if (t.prompt or "").startswith("Claude says:")],
                   REPLY_TIMEOUT_S, what="Codex's turn on the routed prompt")  # fmt: skip
        into.stop()

        # Codex -> Claude: the channel ends the turn, its long answer whole, its usage.
        wait_until(lambda: real_hub.tiles["claude"].state == "idle", REPLY_TIMEOUT_S)
        out = real_hub.connect("codex", "claude", template="From codex:\n{output}", max_rounds=1)
        wait_until(lambda: out.ready.is_set(), 10)
        rec = real_hub.send("codex", f"Please answer {MARKER} [[sleep 2]]").result(ROUND_TIMEOUT_S)
        assert (rec.status, rec.delivery_mode) == ("delivered", "channel"), rec.error
        # A prompt while that turn runs: queued, its own turn, never steering it.
        busy = real_hub.send("codex", "and a second one").result(ROUND_TIMEOUT_S)
        assert (busy.status, busy.delivery_mode) == ("delivered", "channel"), busy.error
        wait_until(lambda: out.last_status is not None, ROUND_TIMEOUT_S, what="codex->claude")
        row = log_rows(real_hub, out)[0]
        assert (row["turn_signal"], row["extraction_method"]) == ("channel", "channel"), row
        assert row["extracted"].strip() == LONG.strip() and row["status"] == "delivered", row
        assert row["input_tokens"] and row["output_tokens"], row
        wait_until(
            lambda: any((fake_anthropic_prompt(r["body"]) or "").strip() == f"From codex:\n{LONG}"
                        for r in fake_anthropic.requests),
            ROUND_TIMEOUT_S, what="the long answer whole at Claude's API",
        )  # fmt: skip
        wait_until(lambda: [t for t in turns if t.prompt == "and a second one"],
                   ROUND_TIMEOUT_S, what="the queued prompt's own turn")  # fmt: skip
        (second,) = [t for t in turns if t.prompt == "and a second one"]
        (first,) = [t for t in turns if MARKER in (t.prompt or "")]
        assert second.turn_id != first.turn_id and MARKER not in second.answer
        out.stop()

        # An approval: in hub.inbox with Codex's own choices, answered there.
        wait_until(lambda: codex.state == "idle", REPLY_TIMEOUT_S, what="codex idle")
        real_hub.send("codex", "PERM please run it").result(ROUND_TIMEOUT_S)
        wait_until(lambda: [a for a in real_hub.inbox if a.signal == "channel"],
                   REPLY_TIMEOUT_S, what="the ask in the inbox")  # fmt: skip
        (ask,) = [a for a in real_hub.inbox if a.signal == "channel"]
        assert isinstance(ask, ChannelPermissionAsk)
        assert COMMAND in ask.command and ask.choices[0] == "accept", ask
        assert ask.choose("accept").result(ROUND_TIMEOUT_S).status == "delivered"
        wait_until(lambda: (cwd / "made_by_channel").exists(), REPLY_TIMEOUT_S, what="the file")
        wait_until(lambda: not [a for a in real_hub.inbox if a.signal == "channel"], 10)

        # The draft is still in the composer, not sent; no prompt was typed as well.
        wait_until(lambda: codex.state == "idle", REPLY_TIMEOUT_S, what="codex idle again")
        composer = [line for line in codex.screen().splitlines() if line.startswith("› ")][-1]
        assert composer.rstrip() == f"› {draft}", codex.screen()
        asked = [prompt_text(r["body"]) or "" for r in fake_openai.requests]
        assert not [p for p in asked if draft in p]
        assert len({t.turn_id for t in turns if (t.prompt or "").startswith("Claude says:")}) == 1

        pane_pid = real_hub.runtime.tmux.pane_info(codex.pane_id).pid
        processes = _tree(server_pid) + _tree(pane_pid)
        assert len(_tree(server_pid)) >= 2  # node and its native codex child

        # The server killed: an event, then error rows; the --remote TUI stays, untyped into.
        events: list[ChannelChanged] = []
        real_hub.events.subscribe(
            lambda e: events.append(e) if isinstance(e, ChannelChanged) else None
        )
        for pid in _tree(server_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: any(e.state == "broken" for e in events), 30, what="the break told")
        rec = real_hub.send("codex", "after the server died").result(ROUND_TIMEOUT_S)
        assert rec.status == "error" and "nothing was delivered" in (rec.error or ""), rec
        assert not real_hub.runtime.tmux.pane_info(codex.pane_id).dead  # (the TUI stays)
        assert "after the server died" not in codex.screen()
        real_hub.close()
        wait_until(lambda: not _running(processes), 15, what="every codex process ended")
        assert not codex_daemons(codex_home)
    finally:
        real_hub.close()
        end_codex_daemons(codex_home)
