"""Tiles on a real tmux server: creation, adoption, state, screen and extraction."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import start_standin, user_prompts, wait_until

import madohub_nb as mh


def test_created_tile_runs_its_agent_and_reads_idle(hub: mh.Hub, project: Path) -> None:
    tile = start_standin(hub, "writer", cwd=project)
    assert tile.agent == "claude"
    assert tile.pane_id.startswith("%")
    # Its sessions file says idle from its first moment, before its first paint: under load
    # the screen can still be blank when the state reads idle, so the prompt is waited for.
    wait_until(lambda: "❯" in tile.screen(), 10, what="the prompt on its screen")
    assert hub.tiles["writer"] is tile
    assert tile.agent_process() is not None and "claude" in tile.agent_process().comm


def test_last_response_comes_from_the_transcript(hub: mh.Hub, project: Path) -> None:
    tile = start_standin(hub, "writer", cwd=project)
    hub.send("writer", "Explain tiles in one line").result(30)
    found = wait_until(
        lambda: (r := tile.last_response()) and r.method == "jsonl" and r, 15, what="an answer"
    )
    assert found.text == "Done: Explain tiles in one line"
    assert found.path is not None and found.path.suffix == ".jsonl"
    assert user_prompts(tile) == ["Explain tiles in one line"]


def test_codex_tile_answers_from_its_rollout(hub: mh.Hub, project: Path) -> None:
    tile = start_standin(
        hub, "coder", kind="codex", cwd=project, channel=False
    )  # (typed, its rollout)
    hub.send("coder", "Codex prompt one").result(30)
    found = wait_until(lambda: (r := tile.last_response()) and r.method == "rollout" and r, 15)
    assert found.text == "Done: Codex prompt one"


def test_shell_tile_answers_from_the_screen(hub: mh.Hub, project: Path) -> None:
    tile = hub.tile("sh", agent="shell", command="bash --norc --noprofile", cwd=project)
    wait_until(lambda: tile.state == "idle", 10, what="shell prompt")
    hub.send("sh", "echo madohub-$((40+2))", allow_shell=True).result(20)
    wait_until(lambda: "madohub-42" in tile.screen(), 10)
    found = tile.last_response()
    assert found is not None and found.method == "terminal"


def test_adopting_a_pane_detects_the_agent(hub: mh.Hub, tmux_socket: str, project: Path) -> None:
    from madohub_nb.demo import standin_command

    # The agent as a child of the pane's shell, in a session the hub did not make.
    subprocess.run(
        [
            "tmux",
            "-L",
            tmux_socket,
            "new-session",
            "-d",
            "-s",
            "mine",
            "-x",
            "160",
            "-y",
            "40",
            "bash --norc",
        ],
        check=True,
    )
    subprocess.run(
        ["tmux", "-L", tmux_socket, "send-keys", "-t", "mine", standin_command("claude"), "Enter"],
        check=True,
    )
    pane = subprocess.run(
        ["tmux", "-L", tmux_socket, "display", "-p", "-t", "mine", "#{pane_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    wait_until(
        lambda: (
            "❯"
            in subprocess.run(
                ["tmux", "-L", tmux_socket, "capture-pane", "-p", "-t", pane],
                capture_output=True,
                text=True,
            ).stdout
        ),
        15,
    )
    tile = hub.tile("adopted", pane=pane)
    assert tile.agent == "claude"
    assert tile.pane_id == pane
    assert not tile.created
    with pytest.raises(ValueError, match="already the tile"):
        hub.tile("twice", pane="mine:0.0")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"agent": "gpt"},
            "unknown agent kind 'gpt'; allowed: claude, codex, amp, opencode, qwen, aider, gemini, copilot, pi, shell, terminal",
        ),
        ({"pane": "%999"}, "does not exist"),
        ({"pane": "not a pane!"}, "not a tmux pane reference"),
        ({"command": "true", "cwd": "/no/such/dir"}, "is not an existing directory"),
        ({"pane": "%1", "command": "bash"}, "only apply to new panes"),
    ],
)
def test_bad_tile_arguments_are_value_errors(
    hub: mh.Hub, kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        hub.tile("t", **kwargs)
    assert "t" not in hub.tiles


def test_duplicate_tile_name_is_refused(hub: mh.Hub) -> None:
    hub.tile("a", agent="shell", command="bash --norc")
    with pytest.raises(ValueError, match="'a' already exists"):
        hub.tile("a", agent="shell", command="bash --norc")


@pytest.mark.parametrize("first", [True, False], ids=["first-tile", "later-tile"])
def test_command_that_exits_at_once_is_a_clear_error(hub: mh.Hub, first: bool) -> None:
    if not first:  # later tiles are new windows of the hub's session
        hub.tile("a", agent="shell", command="bash --norc")
    # hub.tile() returns at once; the start-up check reports on the tile's ready future.
    # The status is in the message when tmux has reaped the child by then (almost always).
    expected = "exited at once( with status 3)?; it printed: boom"
    tile = hub.tile("dies", agent="shell", command="sh -c 'echo boom; exit 3'")
    with pytest.raises(mh.TileError, match=expected):
        tile.ready.result(10)
    assert tile.error is not None and re.search(expected, tile.error)
    assert tile.state == "exited"
    # A round aimed at it says why, and types nothing.
    rec = hub.send("dies", "echo hi", allow_shell=True).result(20)
    assert rec.status == "error" and re.search(expected, rec.error or "")
    # The name is free again for a corrected command.
    again = hub.tile("dies", agent="shell", command="bash --norc")
    assert hub.tiles["dies"] is again and again.ready.result(10) is again


def test_exited_agent_reads_exited(hub: mh.Hub, project: Path) -> None:
    tile = hub.tile("brief", agent="shell", command="sh -c 'sleep 1.5'")
    wait_until(lambda: tile.state == "exited", 10)


def test_close_kills_created_tiles_but_not_adopted_ones(
    tmux_socket: str, home: Path, tmp_path: Path
) -> None:
    subprocess.run(
        ["tmux", "-L", tmux_socket, "new-session", "-d", "-s", "keep", "bash --norc"], check=True
    )
    hub = mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "l.sqlite3")
    made = hub.tile("made", agent="shell", command="bash --norc")
    hub.tile("kept", pane="keep:0.0", agent="shell")
    hub.close()
    panes = subprocess.run(
        ["tmux", "-L", tmux_socket, "list-panes", "-a", "-F", "#{pane_id}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert made.pane_id not in panes
    assert len(panes) == 1
    hub.close()  # twice is fine


def test_a_libtmux_pane_is_adopted_when_it_is_on_the_hubs_server(
    session: Any, tmp_path: Path, home: Path
) -> None:
    """libtmux's own pytest plugin gives the server; its Pane objects are accepted as is."""
    pane = session.active_window.active_pane
    hub = mh.Hub(socket_name=session.server.socket_name, log_path=tmp_path / "l.sqlite3")
    try:
        tile = hub.tile("lt", pane=pane, agent="shell")
        assert tile.pane_id == pane.pane_id and not tile.created
        hub.send("lt", "echo from-libtmux-$((6*7))", allow_shell=True).result(30)
        wait_until(lambda: "from-libtmux-42" in "\n".join(pane.capture_pane()), 10)
    finally:
        hub.close()
    assert pane.pane_id in [p.pane_id for p in session.server.panes]  # adopted: left alone
    other = mh.Hub(socket_name=f"{session.server.socket_name}-other", log_path=tmp_path / "o.db")
    try:
        with pytest.raises(ValueError, match="belongs to tmux server"):
            other.tile("lt", pane=pane, agent="shell")
    finally:
        other.close()


def test_tilde_is_expanded_in_hub_paths(tmux_socket: str, home: Path) -> None:
    from madohub_nb.agents.kinds.claude import claude_config_dir

    (home / "proj").mkdir()
    hub = mh.Hub(socket_name=tmux_socket, log_path="~/logs/rounds.sqlite3", claude_home="~/cfg")
    try:
        assert Path(hub.log_path) == home / "logs" / "rounds.sqlite3"
        assert (home / "logs" / "rounds.sqlite3").exists()
        assert hub.claude_home == str(home / "cfg")
        assert claude_config_dir(None, "~/cfg") == home / "cfg"
        sh = hub.tile("sh", agent="shell", command="bash --norc --noprofile", cwd="~/proj")
        wait_until(lambda: sh.state == "idle", 10, what="shell prompt")
        hub.send("sh", "pwd > where.txt", allow_shell=True).result(30)
        wait_until(lambda: (home / "proj" / "where.txt").exists(), 10, what="pwd in ~/proj")
        wait_until(lambda: (home / "proj" / "where.txt").read_text().strip(), 10)
        assert (
            Path((home / "proj" / "where.txt").read_text().strip()).resolve()
            == (home / "proj").resolve()
        )
    finally:
        hub.close()
