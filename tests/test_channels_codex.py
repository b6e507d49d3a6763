"""The Codex channel through the hub (issue 39), fast tier: the codex stand-in is started as
the hub starts the real one: its app-server (``codex app-server --listen unix://PATH``, the
scripted :mod:`madohub_nb.testing.fake_codex_app_server`) by the tile's own program, its TUI
as that server's client (``codex --remote unix://PATH``) in a real tmux pane, and the hub's
:class:`~madohub_nb.io.agent_channels.codex.CodexChannel` a second client of the server."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
from conftest import log_rows, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.channel_plumbing import (
    SOCKET_PATH_MAX,
    ChannelPlumbing,
    server_of,
    short_private_folder,
)
from madohub_nb.io.agent_channels.base import ChannelServer, ChannelTurn, ChannelTurnStarted
from madohub_nb.pipeline.events import ChannelChanged
from madohub_nb.pipeline.inbox import ChannelPermissionAsk
from madohub_nb.pipeline.tile import Tile


def codex_tile(hub: mh.Hub, name: str = "coder", think_s: float = 0.3, **kwargs: object) -> Tile:
    """A stand-in Codex started by the hub, idle, its channel attached."""
    tile = start_standin(hub, name, kind="codex", think_s=think_s, **kwargs)
    wait_until(lambda: tile.channel is not None, 15, what="the codex channel attached")  # type: ignore[attr-defined]
    return tile  # type: ignore[return-value]


def turns_of(tile: Tile) -> list[ChannelTurn]:
    """The turns ``tile``'s channel reports from now on (a list that fills)."""
    seen: list[ChannelTurn] = []
    assert tile.channel is not None
    tile.channel.subscribe(lambda e: seen.append(e) if isinstance(e, ChannelTurn) else None)
    return seen


def test_the_server_is_started_by_the_tiles_own_program() -> None:
    server = ChannelServer(("codex", "app-server", "--listen", "unix:///s"))
    assert server_of(server, "codex --model m").argv == (
        "codex",
        "app-server",
        "--listen",
        "unix:///s",
    )
    assert server_of(server, "env A=1 codex -c x=y").argv[:4] == (
        "env",
        "A=1",
        "codex",
        "app-server",
    )
    assert server_of(server, "A=1 my-wrapper --x").argv[:4] == (
        "env",
        "A=1",
        "my-wrapper",
        "app-server",
    )


def test_a_wrapper_before_the_program_starts_the_server_too(tmp_path: Path) -> None:
    exe = tmp_path / "bin" / "codex"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    config = tmp_path / "config" / "codex"  # (a folder named like it is not the program)
    config.mkdir(parents=True)
    command = f"mh-setenv CODEX_HOME {config} {exe} --persona echo"
    server = server_of(ChannelServer(("codex", "app-server")), command)
    assert server.argv == ("mh-setenv", "CODEX_HOME", str(config), str(exe), "app-server")


def test_a_socket_path_too_long_to_bind_gets_a_short_private_folder(
    hub: mh.Hub, tmp_path: Path
) -> None:
    folder = short_private_folder()
    assert folder is not None
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    os.rmdir(folder)
    plumbing: ChannelPlumbing = hub.runtime.tiles.channels
    tc = plumbing.plan("t", "codex", "codex", None, None)
    assert tc is not None
    try:
        assert len(os.fsencode(tc.endpoint.socket_path or "")) <= SOCKET_PATH_MAX
        assert oct(os.stat(tc.endpoint.folder).st_mode & 0o777) == "0o700"
    finally:
        tc.drop()


def test_routes_go_through_the_codex_channel_both_ways(hub: mh.Hub, project: Path) -> None:
    coder = codex_tile(hub, cwd=project)
    assert coder.channel is not None and coder.channel.name == "codex app-server"
    assert coder.turn_signal == "channel"
    turns = turns_of(coder)
    claude = start_standin(hub, "claude", cwd=project)

    # Claude -> Codex: the prompt goes in through the channel, never typed.
    into = hub.connect("claude", "coder", template="Claude says: {output}", max_rounds=1)
    wait_until(lambda: into.ready.is_set(), 10)
    hub.send("claude", "Ping codex").result(30)
    wait_until(lambda: into.last_status is not None, 30, what="claude->codex round")
    (row,) = log_rows(hub, into)
    assert (row["status"], row["delivery_mode"]) == ("delivered", "channel"), row["error"]
    assert row["meta"]["channel_turn_id"]
    wait_until(lambda: turns, 30, what="codex's turn")
    assert turns[0].prompt == "Claude says: Done: Ping codex" and turns[0].prompt_id
    wait_until(lambda: "Claude says: Done: Ping codex" in coder.screen(), 10, what="shown")
    into.stop()

    # Codex -> Claude: the turn ends by the channel, its long answer whole, its usage.
    wait_until(lambda: claude.state == "idle" and coder.state == "idle", 30, what="both idle")  # type: ignore[attr-defined]
    out = hub.connect("coder", "claude", template="From codex:\n{output}", max_rounds=1)
    wait_until(lambda: out.ready.is_set(), 10)
    prompt = "Write it out [[lines 120]]"
    rec = hub.send("coder", prompt).result(30)
    assert rec.delivery_mode == "channel" and rec.meta["channel_turn_id"]
    wait_until(lambda: out.last_status is not None, 30, what="codex->claude round")
    (row,) = log_rows(hub, out)
    assert (row["turn_signal"], row["extraction_method"]) == ("channel", "channel"), row
    long = "\n".join(f"line {i:03d} of 120: the long answer" for i in range(1, 121))
    assert row["extracted"] == long
    # The fake's usage: input 1000 + len(prompt), 900 of it cached; output len(answer)//4+1.
    assert row["input_tokens"] == 1000 + len(prompt) - 900
    assert row["cache_read_tokens"] == 900 and row["output_tokens"] == len(long) // 4 + 1
    assert row["cost_usd"] != row["cost_usd"] or row["cost_usd"] is None  # (Codex sends none)
    assert row["status"] == "delivered", row["error"]


def test_a_prompt_sent_while_codex_is_busy_runs_as_its_own_turn(hub: mh.Hub, project: Path) -> None:
    coder = codex_tile(hub, cwd=project)
    turns = turns_of(coder)
    first = hub.send("coder", "First [[sleep 2]]").result(30)
    assert (first.status, first.delivery_mode) == ("delivered", "channel"), first.error
    wait_until(lambda: coder.state == "busy", 10, what="codex busy")
    second = hub.send("coder", "Second while busy").result(30)
    assert (second.status, second.delivery_mode) == ("delivered", "channel"), second.error
    assert second.meta["channel_queued"] is True
    wait_until(lambda: len(turns) >= 2, 30, what="two turns")
    assert [t.answer for t in turns] == ["Done: First [[sleep 2]]", "Done: Second while busy"]
    assert turns[0].turn_id != turns[1].turn_id


def test_an_approval_from_the_channel_is_answered_from_the_inbox(
    hub: mh.Hub, project: Path
) -> None:
    coder = codex_tile(hub, cwd=project)
    turns = turns_of(coder)
    hub.send("coder", "PERM make the file").result(30)
    wait_until(lambda: [a for a in hub.inbox if a.signal == "channel"], 15, what="the ask")
    (ask,) = [a for a in hub.inbox if a.signal == "channel"]
    assert isinstance(ask, ChannelPermissionAsk)
    assert ask.command == "/bin/bash -lc 'touch made_by_tool'"
    assert ask.choices == ("accept", "acceptWithExecpolicyAmendment", "cancel")
    wait_until(lambda: "Would you like to run" in coder.screen(), 10, what="the dialog shown")
    wait_until(lambda: coder.state == "waiting", 10, what="the tile waiting on its dialog")
    assert hub.inbox == [ask]  # (asked once: not again from the dialog on the screen)
    rec = ask.choose("accept").result(30)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: turns, 15, what="the turn's end")
    assert turns[0].answer == "Done: PERM make the file"
    wait_until(lambda: "Would you like to run" not in coder.screen(), 10, what="dialog gone")
    assert hub.inbox == []


def test_an_approval_answered_in_the_pane_leaves_the_inbox(hub: mh.Hub, project: Path) -> None:
    coder = codex_tile(hub, cwd=project)
    turns = turns_of(coder)
    hub.send("coder", "PERM make the file").result(30)
    wait_until(lambda: "Would you like to run" in coder.screen(), 15, what="the dialog shown")
    wait_until(lambda: [a for a in hub.inbox if a.signal == "channel"], 15, what="the ask")
    hub.runtime.tmux.run("send-keys", "-t", coder.pane_id, "-l", "y")
    wait_until(lambda: turns, 15, what="the turn's end")
    wait_until(lambda: not [a for a in hub.inbox if a.signal == "channel"], 10, what="ask gone")


def test_a_killed_server_is_an_event_and_a_clear_row_never_delivered_twice(
    hub: mh.Hub, project: Path
) -> None:
    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    coder = codex_tile(hub, cwd=project)
    started: list[ChannelTurnStarted] = []
    assert coder.channel is not None
    coder.channel.subscribe(
        lambda e: started.append(e) if isinstance(e, ChannelTurnStarted) else None
    )
    (pid,) = hub.runtime.tiles.channels.server_pids()
    first = hub.send("coder", "First [[sleep 5]]").result(30)
    assert first.delivery_mode == "channel" and first.status == "delivered"
    os.kill(pid, signal.SIGKILL)  # mid-turn
    wait_until(lambda: any(e.state == "broken" for e in events), 15, what="the break told")
    assert not coder.channel.alive and coder.turn_signal != "channel"
    rec = hub.send("coder", "after the server died").result(30)
    # The remote TUI stays, but has no server: typing there would go nowhere.
    assert rec.status == "error" and rec.delivery_mode != "channel", rec
    assert "its channel is not open" in (rec.error or ""), rec.error
    assert "client of the server the hub started (codex app-server)" in (rec.error or "")
    assert "nothing was delivered" in (rec.error or "")
    assert "after the server died" not in coder.screen()
    assert [s.prompt for s in started] == ["First [[sleep 5]]"]  # (once, never again)
    wait_until(lambda: "Disconnected" in coder.screen(), 10, what="the TUI says so")


def test_close_ends_the_app_server_by_pid(hub: mh.Hub, project: Path) -> None:
    coder = codex_tile(hub, cwd=project)
    (pid,) = hub.runtime.tiles.channels.server_pids()
    tree = [pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))]
    channel = coder.channel
    assert channel is not None and channel.alive
    hub.close()
    assert not channel.alive

    def gone(p: int) -> bool:
        try:
            return psutil.Process(p).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    assert all(gone(p) for p in tree), tree


def test_channel_false_types_into_the_codex_stand_in(hub: mh.Hub, project: Path) -> None:
    coder = start_standin(hub, "coder", kind="codex", cwd=project, channel=False)
    assert coder.channel is None and coder.channel_ready is None  # type: ignore[attr-defined]
    rec = hub.send("coder", "typed prompt").result(30)
    assert (rec.status, rec.delivery_mode) == ("delivered", "typed"), rec.error
    assert hub.runtime.tiles.channels.server_pids() == []


def test_the_app_server_gets_the_mcp_and_notify_overrides_it_runs(
    hub: mh.Hub, project: Path
) -> None:
    """With ``--remote`` the app-server runs Codex's core (its MCP servers, its notify): the
    tile's MCP and hooks ``-c`` words go to the server too (without them a real Codex
    through its channel had no hub tools: tests/real_agents/test_real_mcp.py)."""
    start_standin(hub, "reviewer", cwd=project)
    codex_tile(hub, "cx", cwd=project, mcp=["reviewer"])
    argv = hub.runtime.tiles.channels._open["cx"].server_argv
    assert argv[argv.index("app-server") - 1].endswith("/codex")
    overrides = [argv[i + 1] for i, word in enumerate(argv) if word == "-c"]
    assert f'mcp_servers.madohub.url="{hub.mcp.url}"' in overrides
    assert any(o.startswith("notify=") for o in overrides), overrides
    assert "features.daemon_auto_start=false" in overrides
    token = hub.mcp.token("cx")
    assert token is not None and token not in " ".join(argv)  # (in its environment only)


def test_an_app_server_that_does_not_start_fails_fast_and_nothing_is_typed(
    hub: mh.Hub, project: Path
) -> None:
    from madohub_nb.demo.standin_codex import NO_SERVER_ENV

    events: list[ChannelChanged] = []
    hub.events.subscribe(lambda e: events.append(e) if isinstance(e, ChannelChanged) else None)
    from madohub_nb.demo import standin_command

    env = {NO_SERVER_ENV: "1", "MADOHUB_STANDIN_THINK_S": "0.3"}
    coder = hub.tile("coder", agent="codex", command=standin_command("codex"), cwd=project, env=env)
    wait_until(lambda: events, 10, what="the failed attach told (long before 30 s)")
    assert events[0].state == "failed" and "exited before it listened" in (events[0].why or "")
    rec = hub.send("coder", "nobody serves this").result(30)
    assert rec.status == "error" and "nothing was delivered" in (rec.error or ""), rec
    assert "exited before it listened" in (rec.error or "")
    assert "nobody serves this" not in coder.screen()
