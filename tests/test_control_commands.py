"""tmux commands over the control connection the hub already holds, with a process fallback.

Checked at the receiving end: the bytes a ``cat`` pane gets are exactly the
characters sent, however hostile to tmux's command parser.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from conftest import wait_until

import madohub_nb as mh
from madohub_nb.errors import TmuxError
from madohub_nb.io.tmux import command_line, quotable


def _cat(hub: mh.Hub, tmp_path: Path) -> tuple[mh.Tile, Path]:
    out = tmp_path / "received.txt"
    tile = hub.tile("cat", agent="shell", command=f"stty raw -echo; cat > {out}")
    tile.ready.result(10)
    wait_until(
        lambda: hub.runtime.tiles.watcher.client_pids() != [], 10, what="the control connection"
    )
    return tile, out


HOSTILE = 'it\'s; $HOME ~ #{pane_id} \\ "q" {x} ;; end;'


def test_commands_travel_over_the_control_connection_and_arrive_verbatim(
    hub: mh.Hub, tmp_path: Path
) -> None:
    tile, out = _cat(hub, tmp_path)
    before = hub.runtime.tmux.channel_commands
    hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "-l", "--", HOSTILE)
    hub.runtime.tmux.run(
        "send-keys", "-t", tile.pane_id, "-l", "a", ";", "send-keys", "-t", tile.pane_id, "-l", "b"
    )
    wait_until(lambda: out.exists() and out.read_text() == HOSTILE + "ab", 10, what="the bytes")
    assert hub.runtime.tmux.channel_commands == before + 2
    info = hub.runtime.tmux.pane_info(tile.pane_id)
    assert info is not None and info.pane_id == tile.pane_id
    assert hub.runtime.tmux.channel_commands == before + 3


def test_a_refused_command_is_an_error_or_empty_output(hub: mh.Hub, tmp_path: Path) -> None:
    _cat(hub, tmp_path)
    with pytest.raises(TmuxError, match="can't find pane"):
        hub.runtime.tmux.run("send-keys", "-t", "%9999", "x")
    assert hub.runtime.tmux.run("send-keys", "-t", "%9999", "x", check=False) == ""
    assert hub.runtime.tmux.pane_info("%9999") is None
    # An error ends a line of commands (tmux skips the rest): later commands still get
    # their own answers.
    with pytest.raises(TmuxError, match="can't find pane"):
        hub.runtime.tmux.run("display-message", "-p", "a", ";", "send-keys", "-t", "%9999", "x", ";",
                     "display-message", "-p", "never")  # fmt: skip
    assert hub.runtime.tmux.run("display-message", "-p", "next") == "next\n"


def test_when_the_control_connection_dies_commands_run_as_processes(
    hub: mh.Hub, tmp_path: Path
) -> None:
    tile, out = _cat(hub, tmp_path)
    (pid,) = hub.runtime.tiles.watcher.client_pids()
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: hub.runtime.tiles.watcher.client_pids() == [], 10, what="the connection to go"
    )
    before = hub.runtime.tmux.channel_commands
    hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "-l", "--", "after")
    wait_until(lambda: out.exists() and out.read_text() == "after", 10, what="the bytes")
    assert hub.runtime.tmux.channel_commands == before


def test_command_lines_quote_every_argument_and_count_commands() -> None:
    assert command_line(["send-keys", "-l", "it's"]) == ("'send-keys' '-l' 'it'\\''s'", 1)
    assert command_line(["a", ";", "b", ";", "c"])[1] == 3
    assert quotable(("send-keys", "ok"))
    assert not quotable(("send-keys", "two\nlines"))
    assert not quotable(())
    assert not quotable(("if-shell", "-F", "1", "a", "b"))
    assert not quotable(("display-message", ";", "run-shell", "x"))


def test_a_guarded_send_is_one_if_shell_over_the_connection_and_its_answers_stay_in_step(
    hub: mh.Hub, tmp_path: Path
) -> None:
    """The synchronize-panes guard and the keys go as one atomic ``if-shell -F`` line: the
    ``if-shell`` answers with a block per command it runs, counted in both branches, so
    a command written right behind it still gets its own answer."""
    import asyncio

    from madohub_nb.io.tmux import hex_keys_command, key_command

    tile, out = _cat(hub, tmp_path)
    tmux = hub.runtime.tmux
    keys = [hex_keys_command(tile.pane_id, "a;b"), key_command(tile.pane_id, "Tab")]

    async def send_then_ask() -> tuple[bool, str]:
        channel = tmux._channel
        assert channel is not None
        sent, answer = await asyncio.gather(
            tmux.asend_guarded(tile.pane_id, keys),
            channel.command(["display-message", "-p", "right behind"]),
        )
        return sent, answer

    before = tmux.channel_commands
    assert hub.engine.run_sync(send_then_ask(), 10) == (True, "right behind\n")
    wait_until(lambda: out.exists() and out.read_text() == "a;b\t", 10, what="the keys")
    assert tmux.channel_commands == before + 1  # one line, not a check and a send
    tmux.run("set-option", "-w", "-t", tile.pane_id, "synchronize-panes", "on")
    assert hub.engine.run_sync(send_then_ask(), 10) == (False, "right behind\n")
    assert tmux.run("display-message", "-p", "still in step") == "still in step\n"
    assert out.read_text() == "a;b\t"  # nothing typed while synchronized
