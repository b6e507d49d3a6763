"""Native channels (issue 39): Qwen Code's file channel read from what the real Qwen Code
0.24.4 wrote (tests/fixtures/channels), and the channel plumbing on a real tmux server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import log_rows, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.errors import MadohubError
from madohub_nb.io.agent_channels.base import (
    ChannelAsk,
    ChannelAskResolved,
    ChannelBroken,
    ChannelTurn,
    ChannelTurnStarted,
)
from madohub_nb.io.agent_channels.qwen import QwenReader
from madohub_nb.pipeline.tile import Tile

FIXTURES = Path(__file__).parent / "fixtures" / "channels"


def _events(reader: QwenReader, lines: list[str]) -> list[object]:
    return [e for raw in lines for e in reader.line(raw, 1.0)]


def test_qwen_reader_turns_real_out_lines_into_turns_with_answer_and_usage() -> None:
    lines = (FIXTURES / "qwen-0.24.4-out.jsonl").read_text().splitlines()
    reader = QwenReader(expected=[("Third long", "p3")])
    events = _events(reader, lines)
    assert reader.started
    started = [e for e in events if isinstance(e, ChannelTurnStarted)]
    turns = [e for e in events if isinstance(e, ChannelTurn)]
    assert [s.prompt for s in started] == ["First prompt [[sleep 3]]", "Third long"]
    assert [s.prompt_id for s in started] == [None, "p3"]  # the first: not one the hub wrote
    # Qwen glued the answer of a prompt submitted while busy to the running turn's (why the
    # channel writes a prompt only once the turn ended).
    assert turns[0].answer == "Done: First prompt [[sleep 3]]Done: Second while busy"
    assert turns[1].answer == "\n".join(f"Answer line {i}" for i in range(30))
    assert turns[1].prompt_id == "p3" and turns[1].model == "fake-model"
    assert (turns[1].input_tokens, turns[1].output_tokens) == (21582, 109)
    assert isinstance(events[-1], ChannelBroken) and not reader.busy


def test_qwen_reader_a_real_approval_stays_in_its_turn_and_is_an_ask() -> None:
    lines = (FIXTURES / "qwen-0.24.4-approval-out.jsonl").read_text().splitlines()
    reader = QwenReader(expected=[("PERM please run it", "p1")])
    events = _events(reader, lines)
    (started,) = [e for e in events if isinstance(e, ChannelTurnStarted)]  # (not the tool result)
    (ask,) = [e for e in events if isinstance(e, ChannelAsk)]
    (turn,) = [e for e in events if isinstance(e, ChannelTurn)]
    assert started.prompt_id == "p1"
    assert (ask.tool, ask.command, ask.reason) == (
        "run_shell_command", "touch made_by_tool", "Create the file made_by_tool",
    )  # fmt: skip
    assert any(isinstance(e, ChannelAskResolved) and e.ask_id == ask.ask_id for e in events)
    assert (turn.answer, turn.prompt_id, turn.output_tokens) == ("Made it.", "p1", 3)


def test_qwen_reader_a_tool_call_does_not_end_the_turn_and_asks_carry_choices() -> None:
    def line(**msg: object) -> str:
        return json.dumps(msg)

    reader = QwenReader()
    stop = line(type="stream_event", event={"type": "message_stop"})
    ask = line(
        type="control_request", request_id="r1",
        request={"subtype": "can_use_tool", "tool_name": "run_shell_command",
                 "input": {"command": "touch x", "description": "make x"}},
    )  # fmt: skip
    events = _events(reader, [
        line(type="user", uuid="u1", message={"role": "user", "content": [{"type": "text", "text": "go"}]}),
        line(type="assistant", message={"content": [{"type": "tool_use", "name": "run_shell_command"}],
                                        "usage": {"input_tokens": 10, "output_tokens": 2}}),
        stop, ask, line(type="control_response", request_id="r1"),
        line(type="assistant", message={"content": [{"type": "text", "text": "made"}],
                                        "usage": {"input_tokens": 12, "output_tokens": 3}}),
        stop,
    ])  # fmt: skip
    asks = [e for e in events if isinstance(e, ChannelAsk)]
    assert asks and asks[0].command == "touch x" and asks[0].choices == ("allow", "deny")
    assert any(isinstance(e, ChannelAskResolved) for e in events)
    (turn,) = [e for e in events if isinstance(e, ChannelTurn)]
    assert (turn.answer, turn.input_tokens, turn.output_tokens) == ("made", 22, 5)


# --------------------------------------------------------------- the plumbing, real tmux

STANDIN = Path(__file__).parent / "standin_qwen.py"


def qwen_command(tmp_path: Path) -> str:
    """The stand-in, started as a program called ``qwen`` (its process name)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "qwen"
    exe.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(STANDIN)!r}, run_name='__main__')\n"
    )
    exe.chmod(0o755)
    return str(exe)


def qwen_tile(
    hub: mh.Hub, tmp_path: Path, home: Path, env: dict[str, str] | None = None, **kwargs: object
) -> Tile:
    cwd = tmp_path / "proj-qwen"
    cwd.mkdir(exist_ok=True)
    tile = hub.tile(
        "qwen", agent="qwen", command=qwen_command(tmp_path), cwd=cwd,
        env={"HOME": str(home), "MADOHUB_STANDIN_THINK_S": "0.3", **(env or {})}, **kwargs,
    )  # fmt: skip
    wait_until(lambda: tile.state == "idle", 15, what="stand-in qwen idle")
    return tile


def test_routes_go_through_the_qwen_channel_both_ways(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    qwen = qwen_tile(hub, tmp_path, home)
    wait_until(lambda: qwen.channel is not None, 15, what="the qwen channel attached")
    assert qwen.channel is not None and qwen.channel.name == "qwen input-file"
    assert qwen.turn_signal == "channel"
    turns: list[ChannelTurn] = []
    qwen.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
    claude = start_standin(hub, "claude")

    # Claude -> Qwen: the prompt goes in through the channel, never typed.
    into = hub.connect("claude", "qwen", template="Claude says: {output}", max_rounds=1)
    wait_until(lambda: into.ready.is_set(), 10)
    hub.send("claude", "Ping qwen").result(30)
    wait_until(lambda: into.last_status is not None, 30, what="claude->qwen round")
    (row,) = log_rows(hub, into)
    assert (row["status"], row["delivery_mode"]) == ("delivered", "channel"), row["error"]
    assert row["meta"]["channel_turn_id"]
    into.stop()

    # Qwen -> Claude: the turn ends by the channel, its long answer whole, its usage.
    wait_until(lambda: turns and claude.state == "idle", 30, what="qwen's turn ended")
    out = hub.connect("qwen", "claude", template="From qwen:\n{output}", max_rounds=1)
    wait_until(lambda: out.ready.is_set(), 10)
    rec = hub.send("qwen", "Write it out [[lines 120]]").result(30)
    assert rec.delivery_mode == "channel" and rec.meta["channel_turn_id"]
    wait_until(lambda: out.last_status is not None, 30, what="qwen->claude round")
    (row,) = log_rows(hub, out)
    assert (row["turn_signal"], row["extraction_method"]) == ("channel", "channel"), row
    assert row["extracted"] == "\n".join(f"Line {i} of a long answer" for i in range(1, 121))
    assert row["input_tokens"] == len("Write it out [[lines 120]]") and row["output_tokens"]
    assert row["turn_ms"] >= 300 and row["meta"]["turn_ms_source"] == "measured"  # (thinks 0.3 s)
    assert row["status"] == "delivered", row["error"]


def test_prompts_sent_while_qwen_is_busy_run_as_turns_of_their_own(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    qwen = qwen_tile(hub, tmp_path, home)
    wait_until(lambda: qwen.channel is not None, 15, what="the qwen channel attached")
    turns: list[ChannelTurn] = []
    assert qwen.channel is not None
    qwen.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
    first = hub.send("qwen", "First [[sleep 2]]")
    wait_until(lambda: qwen.state == "busy", 10, what="qwen busy")
    second = hub.send("qwen", "Second while busy")
    assert first.result(30).status == "delivered" and second.result(30).status == "delivered"
    wait_until(lambda: len(turns) >= 2, 30, what="two turns")
    assert [t.answer for t in turns] == ["Done: First [[sleep 2]]", "Done: Second while busy"]


def test_a_turn_typed_in_the_pane_arrives_through_the_channel(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    qwen = qwen_tile(hub, tmp_path, home)
    wait_until(lambda: qwen.channel is not None, 15, what="the qwen channel attached")
    turns: list[ChannelTurn] = []
    assert qwen.channel is not None
    qwen.channel.subscribe(lambda e: turns.append(e) if isinstance(e, ChannelTurn) else None)
    hub.runtime.tmux.run("send-keys", "-t", qwen.pane_id, "-l", "typed by a person")
    hub.runtime.tmux.run("send-keys", "-t", qwen.pane_id, "Enter")
    wait_until(lambda: turns, 15, what="the person's turn")
    assert (turns[0].prompt, turns[0].prompt_id) == ("typed by a person", None)


def test_channel_false_or_the_setting_off_types_and_channel_true_refuses_what_cannot(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    qwen = qwen_tile(hub, tmp_path, home, channel=False)
    assert qwen.channel is None and qwen.channel_ready is None
    rec = hub.send("qwen", "typed prompt").result(30)
    assert (rec.status, rec.delivery_mode) == ("delivered", "typed"), rec.error
    hub.channels = False
    other = hub.tile("q2", agent="qwen", command=qwen_command(tmp_path), env={"HOME": str(home)})
    assert other.channel_ready is None
    with pytest.raises(MadohubError, match="channel=True, but agent 'claude' has no native"):
        hub.tile("c", agent="claude", command="claude", channel=True)
    with pytest.raises(MadohubError, match="an adopted pane's prompts are typed"):
        hub.tile("adopted", pane=qwen.pane_id, channel=True)


def test_close_ends_the_channel_and_removes_its_private_folder(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    qwen = qwen_tile(hub, tmp_path, home)
    wait_until(lambda: qwen.channel is not None, 15, what="the qwen channel attached")
    channel = qwen.channel
    assert channel is not None and channel.alive
    (opened,) = hub.runtime.tiles.channels._open.values()
    folder = Path(opened.endpoint.folder)
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert opened.endpoint.socket_path.startswith(str(folder)) and opened.endpoint.port
    password = opened.endpoint.password
    assert password and password not in hub.runtime.log.redact_text(f"x {password} y")
    hub.close()
    assert not channel.alive and not folder.exists()


def test_a_channel_that_fails_before_taking_the_prompt_falls_back_to_typing_once(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    qwen = qwen_tile(hub, tmp_path, home)
    wait_until(lambda: qwen.channel is not None, 15, what="the qwen channel attached")
    started: list[ChannelTurnStarted] = []
    assert qwen.channel is not None
    qwen.channel.subscribe(
        lambda e: started.append(e) if isinstance(e, ChannelTurnStarted) else None
    )
    (opened,) = hub.runtime.tiles.channels._open.values()
    in_file = Path(opened.endpoint.folder) / "in.jsonl"
    in_file.unlink()
    in_file.mkdir()  # the channel cannot write its prompt: it took nothing
    rec = hub.send("qwen", "after the break").result(30)
    assert (rec.status, rec.delivery_mode) == ("delivered", "typed"), rec.error
    assert "input file" in rec.meta["channel_error"]
    wait_until(lambda: started, 15, what="the typed turn, seen through the channel")
    assert [(s.prompt, s.prompt_id) for s in started] == [("after the break", None)]


def test_a_channel_server_starts_with_the_panes_environment_and_ends_by_pid_at_close(
    tmp_path: Path,
) -> None:
    import asyncio

    import psutil

    from madohub_nb.agents.kinds.base import ChannelPlan
    from madohub_nb.agents.launch import LaunchLayer
    from madohub_nb.channel_plumbing import ChannelPlumbing, TileChannel
    from madohub_nb.io.agent_channels.base import ChannelEndpoint, ChannelServer

    folder = tmp_path / "channel"
    folder.mkdir(mode=0o700)
    seen = tmp_path / "env.txt"
    server = ChannelServer([sys.executable, "-c", (
        "import os, time; open(os.environ['SEEN'], 'w').write(os.environ['CHANNEL_SECRET']); "
        "time.sleep(300)"
    )])  # fmt: skip
    plan = ChannelPlan(LaunchLayer("qwen"), server, lambda pid: None)  # type: ignore[arg-type,return-value]
    plumbing = ChannelPlumbing(
        session_name="s", enabled=lambda: True, on_secret=lambda s: None, emit=lambda e: None
    )
    tc = TileChannel(ChannelEndpoint(str(folder)), plan)
    plumbing.start("t", tc, {"SEEN": str(seen), "CHANNEL_SECRET": "from-the-pane-env"}, None)
    (pid,) = plumbing.server_pids()
    wait_until(lambda: seen.exists() and seen.read_text() == "from-the-pane-env", 10)
    assert psutil.Process(pid).is_running()
    asyncio.run(plumbing.close())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not folder.exists() and plumbing.server_pids() == []


def test_a_channel_that_does_not_attach_is_an_event_and_the_tile_types(
    hub: mh.Hub, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from madohub_nb import channel_plumbing
    from madohub_nb.pipeline.events import ChannelChanged

    monkeypatch.setattr(channel_plumbing, "ATTACH_TIMEOUT_S", 2.0)
    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    qwen = qwen_tile(hub, tmp_path, home, env={"STANDIN_QWEN_NO_CHANNEL": "1"})
    rec = hub.send("qwen", "typed after all").result(30)  # (waits for the attach to fail)
    assert (rec.status, rec.delivery_mode) == ("delivered", "typed"), rec.error
    assert qwen.channel is None and qwen.turn_signal != "channel"
    wait_until(lambda: events, 5, what="the channel's failure told")
    assert events[0].state == "failed" and "did not open its JSON file" in (events[0].why or "")


def test_a_channel_that_breaks_is_an_event_and_its_tile_is_typed_into_no_more_by_it(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    from madohub_nb.pipeline.events import ChannelChanged

    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    qwen = qwen_tile(hub, tmp_path, home)
    wait_until(lambda: qwen.channel is not None, 15, what="the qwen channel attached")
    hub.runtime.tmux.run("send-keys", "-t", qwen.pane_id, "C-c")  # the agent exits
    wait_until(lambda: any(e.state == "broken" for e in events), 15, what="the break told")
    assert qwen.channel is not None and not qwen.channel.alive
    assert qwen.turn_signal != "channel"
    rec = hub.send("qwen", "after it exited").result(30)
    assert rec.status == "error" and rec.delivery_mode != "channel", rec


def test_what_cannot_have_a_channel_says_why() -> None:
    from madohub_nb.channel_plumbing import channel_refused

    assert channel_refused("qwen", "qwen --model x", None) is None
    assert "remote host" in (channel_refused("qwen", "qwen", "box") or "")
    assert "not one program's" in (channel_refused("qwen", "qwen; ls", None) or "")
    assert "needs the agent's command" in (channel_refused("qwen", None, None) or "")
    why = channel_refused("claude", "claude", None) or ""
    assert "no native channel" in why and "qwen" in why
