"""OpenCode's native channel THROUGH THE HUB, on a real tmux server: a stand-in OpenCode
(tests/standin_opencode.py) whose TUI serves the same API as the real one's on the port and
password the hub gives it (``--hostname 127.0.0.1 --port N``, OPENCODE_SERVER_PASSWORD)."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest
from conftest import alive, log_rows, start_standin, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb.io.agent_channels.base import ChannelTurn, ChannelTurnStarted
from madohub_nb.pipeline.events import ChannelChanged
from madohub_nb.pipeline.inbox import ChannelPermissionAsk
from madohub_nb.pipeline.tile import Tile
from madohub_nb.testing.fake_opencode import ASK_COMMAND, STEP_COST_USD

STANDIN = Path(__file__).parent / "standin_opencode.py"
LONG = "\n".join(f"Line {i} of a long answer" for i in range(1, 121))


def opencode_command(tmp_path: Path) -> str:
    """The stand-in, started as a program called ``opencode`` (its process name)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "opencode"
    exe.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(STANDIN)!r}, run_name='__main__')\n"
    )
    exe.chmod(0o755)
    return str(exe)


def opencode_tile(hub: mh.Hub, tmp_path: Path, home: Path, **kwargs: object) -> Tile:
    """A hub-started stand-in OpenCode whose channel attached."""
    cwd = tmp_path / "proj-opencode"
    cwd.mkdir(exist_ok=True)
    tile = hub.tile(
        "opencode", agent="opencode", command=opencode_command(tmp_path), cwd=cwd,
        env={"HOME": str(home)}, **kwargs,
    )  # fmt: skip
    wait_until(lambda: tile.state == "idle", 15, what="stand-in opencode idle")
    wait_until(lambda: tile.channel is not None, 15, what="the opencode channel attached")
    return tile


def turns_of(tile: Tile) -> list[ChannelTurn]:
    """Every turn ``tile``'s channel reports from now on."""
    turns: list[ChannelTurn] = []
    assert tile.channel is not None
    tile.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
    return turns


def test_routes_go_through_the_opencode_channel_both_ways_with_usage_and_cost(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    oc = opencode_tile(hub, tmp_path, home)
    assert oc.channel is not None and oc.channel.name == "opencode server"
    assert oc.turn_signal == "channel"
    turns = turns_of(oc)
    claude = start_standin(hub, "claude")

    # Claude -> OpenCode: the prompt goes in through the channel, never typed.
    into = hub.connect("claude", "opencode", template="Claude says: {output}", max_rounds=1)
    wait_until(lambda: into.ready.is_set(), 10)
    hub.send("claude", "Ping opencode").result(30)
    wait_until(lambda: into.last_status is not None, 30, what="claude->opencode round")
    (row,) = log_rows(hub, into)
    assert (row["status"], row["delivery_mode"]) == ("delivered", "channel"), row["error"]
    assert row["meta"]["channel_turn_id"]
    wait_until(lambda: turns, 15, what="opencode's turn of claude's words")
    assert turns[0].prompt is not None and turns[0].prompt.startswith("Claude says:")
    into.stop()

    # OpenCode -> Claude: the turn ends by the channel, its 120-line answer whole, its usage
    # and the cost OpenCode itself reported.
    wait_until(lambda: claude.state == "idle", 30, what="claude idle")
    out = hub.connect("opencode", "claude", template="From opencode:\n{output}", max_rounds=1)
    wait_until(lambda: out.ready.is_set(), 10)
    rec = hub.send("opencode", "Write it out [[lines 120]]").result(30)
    assert rec.delivery_mode == "channel" and rec.meta["channel_turn_id"]
    wait_until(lambda: out.last_status is not None, 30, what="opencode->claude round")
    (row,) = log_rows(hub, out)
    assert row["status"] == "delivered", row["error"]
    assert (row["turn_signal"], row["extraction_method"]) == ("channel", "channel"), row
    assert row["extracted"] == LONG
    assert row["model"] == "fake-model"
    assert row["input_tokens"] == len("Write it out [[lines 120]]") // 4 + 1
    assert row["output_tokens"] == len(LONG) // 4 + 1 and row["cache_read_tokens"] == 7
    assert row["cost_usd"] == pytest.approx(STEP_COST_USD)  # OpenCode's figure, no price table
    assert row["meta"]["agent_cost_usd"] == pytest.approx(STEP_COST_USD)
    assert row["turn_ms"] is not None and row["turn_ms"] >= 0  # its steps' own times
    assert row["meta"]["turn_ms_source"] == "measured"
    wait_until(lambda: user_prompts(claude)[-1:] == [f"From opencode:\n{LONG}"], 15)


def test_a_prompt_while_opencode_is_busy_runs_as_its_own_turn_and_the_draft_stays(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    oc = opencode_tile(hub, tmp_path, home)
    turns = turns_of(oc)
    hub.runtime.tmux.run("send-keys", "-t", oc.pane_id, "-l", "my half-typed draft")
    wait_until(lambda: "my half-typed draft" in oc.screen(), 10, what="the person's draft")
    first = hub.send("opencode", "First [[sleep 2]]")
    wait_until(lambda: oc.state == "busy", 10, what="opencode busy")
    second = hub.send("opencode", "Second while busy")
    one, two = first.result(30), second.result(30)
    assert (one.status, one.delivery_mode, two.status, two.delivery_mode) == (
        "delivered", "channel", "delivered", "channel",
    ), (one.error, two.error)  # fmt: skip
    assert (one.meta["channel_queued"], two.meta["channel_queued"]) == (False, True)
    wait_until(lambda: len(turns) >= 2, 30, what="two turns")
    assert [t.answer for t in turns] == ["Done: First [[sleep 2]]", "Done: Second while busy"]
    assert len({t.turn_id for t in turns}) == 2
    assert "my half-typed draft" in oc.screen()  # (never typed over, never submitted)


def test_a_turn_typed_in_the_opencode_pane_arrives_through_the_channel(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    oc = opencode_tile(hub, tmp_path, home)
    started: list[ChannelTurnStarted] = []
    assert oc.channel is not None
    oc.channel.subscribe(lambda e: started.append(e) if isinstance(e, ChannelTurnStarted) else None)
    turns = turns_of(oc)
    hub.runtime.tmux.run("send-keys", "-t", oc.pane_id, "-l", "typed by a person")
    hub.runtime.tmux.run("send-keys", "-t", oc.pane_id, "Enter")
    wait_until(lambda: turns, 15, what="the person's turn")
    assert (turns[0].prompt, turns[0].prompt_id) == ("typed by a person", None)
    assert started[0].prompt_id is None


def test_an_opencode_permission_ask_waits_in_the_inbox_and_choose_answers_it(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    oc = opencode_tile(hub, tmp_path, home)
    turns = turns_of(oc)
    rec = hub.send("opencode", "Make the file [[ask]]").result(30)
    assert rec.delivery_mode == "channel", rec.error
    wait_until(lambda: [a for a in hub.inbox if a.signal == "channel"], 15, what="the ask")
    (ask,) = hub.inbox
    assert isinstance(ask, ChannelPermissionAsk)
    assert (ask.tile, ask.command, ask.tool) == ("opencode", ASK_COMMAND, "bash")
    assert ask.choices == ("once", "always", "reject") and ask.rejects == ("reject",)
    answered = ask.choose("once").result(30)
    assert (answered.status, answered.decision) == ("delivered", "approved"), answered.error
    wait_until(lambda: turns, 15, what="the turn after the approval")
    assert turns[0].status == "completed" and turns[0].answer.startswith("Done: Make the file")
    wait_until(lambda: hub.inbox == [], 10, what="the answered ask left the inbox")


def test_a_prompt_opencode_took_but_never_started_is_not_typed_as_well(
    hub: mh.Hub, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from madohub_nb.io.agent_channels import opencode as channel_module

    monkeypatch.setattr(channel_module, "ACK_TIMEOUT_S", 1.0)
    oc = opencode_tile(hub, tmp_path, home)
    rec = hub.send("opencode", "held [[unheard]]").result(30)
    assert rec.status == "error" and "not typed as well" in (rec.error or ""), rec
    assert rec.delivery_mode == "channel" and rec.meta["channel_unsure"], rec
    assert "held [[unheard]]" not in oc.screen()  # nothing typed into the box


def test_the_server_gone_is_an_event_a_clear_row_and_the_tui_is_typed_into_once(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    oc = opencode_tile(hub, tmp_path, home)
    assert [e.state for e in events] == ["attached"]
    hub.runtime.tmux.run("send-keys", "-t", oc.pane_id, "C-k")  # its server ends, its TUI stays
    wait_until(lambda: any(e.state == "broken" for e in events), 15, what="the break told")
    assert oc.channel is not None and not oc.channel.alive
    assert oc.turn_signal != "channel"
    rec = hub.send("opencode", "after the server went").result(30)
    assert (rec.status, rec.delivery_mode) == ("delivered", "typed"), rec.error
    wait_until(lambda: "Done: after the server went" in oc.screen(), 15, what="typed answer")
    assert oc.screen().count("┃  after the server went") == 1  # delivered once
    (row,) = [r for r in log_rows(hub) if r["prompt"] == "after the server went"]
    assert row["delivery_mode"] == "typed" and row["status"] == "delivered"


def test_close_leaves_nothing_running_and_the_password_never_reaches_the_log(
    tmux_socket: str, tmp_path: Path, home: Path
) -> None:
    log_path = tmp_path / "rounds.sqlite3"
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=300, log_path=log_path)
    try:
        oc = opencode_tile(hub, tmp_path, home)
        (opened,) = hub.runtime.tiles.channels._open.values()
        password, port = opened.endpoint.password, opened.endpoint.port
        assert password and port
        proc = oc.agent_process()
        assert proc is not None
        agent = psutil.Process(proc.pid)
        assert password not in " ".join(agent.cmdline())  # (in its environment only)
        assert f"--port {port}" in " ".join(agent.cmdline())
        hub.send("opencode", f"please repeat {password}").result(30)
        wait_until(lambda: log_rows(hub), 15, what="the round logged")
        folder = Path(opened.endpoint.folder)
    finally:
        hub.close()
    assert not alive(proc.pid) and not folder.exists()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("rounds.sqlite3*"))
    assert raw and password.encode() not in raw
