"""Hands on the panes: keys pressed by name, panes ended at exit, demo agents kept private."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import (
    REPO,
    alive,
    kill_tree,
    standin_from_bash,
    start_recorder,
    start_standin,
    user_prompts,
    wait_until,
)

from madohub_nb.agents.foreground import read_stat
from madohub_nb.demo import private_config_dir, standin_command
from madohub_nb.errors import MadohubValueError
from madohub_nb.notebook.widgets import TileView
from madohub_nb.pipeline.keys import check_keys


def test_key_names_are_allow_listed_and_named_for_tmux() -> None:
    assert check_keys(["enter", "Esc", "c-c", "1", "y", "N"]) == [
        "Enter",
        "Escape",
        "C-c",
        "1",
        "y",
        "N",
    ]
    with pytest.raises(MadohubValueError, match=r"key 'rm -rf' is not allowed; allowed: .*Enter"):
        check_keys(["rm -rf"])
    with pytest.raises(MadohubValueError, match="at least one key"):
        check_keys([])


def test_keys_arrive_as_key_bytes_and_are_logged_as_a_keys_round(
    hub: object, tmp_path: Path
) -> None:
    out = tmp_path / "typed.bin"
    start_recorder(hub, "rec", out)
    before = out.read_bytes()
    rec = hub.keys("rec", "Escape", "C-c", "1", "y", "Enter").result(15)  # type: ignore[attr-defined]
    wait_until(lambda: len(out.read_bytes()) >= len(before) + 5, 10, what="the keys")
    assert out.read_bytes()[len(before) :] == b"\x1b\x031y\r"
    assert (rec.route_id, rec.transform, rec.status, rec.target) == (
        "keys",
        "keys",
        "delivered",
        "rec",
    )
    assert rec.prompt == "Escape C-c 1 y Enter"
    logged = hub.log.df  # type: ignore[attr-defined]
    assert list(logged[logged["transform"] == "keys"]["round_id"]) == [rec.round_id]


def test_keys_are_not_pressed_into_a_shell_that_took_the_foreground(
    hub: object, tmp_path: Path
) -> None:
    """Ctrl-Z'd agent, bash in front with a command on its prompt line: hub.keys and the
    widget's key buttons refuse, naming the check, and bash never gets the Enter."""
    tile = standin_from_bash(hub, "tgt", cwd=tmp_path)
    proc = tile.agent_process()  # type: ignore[attr-defined]
    os.kill(proc.pid, signal.SIGTSTP)
    wait_until(lambda: getattr(read_stat(proc.pid), "state", "") == "T", 10, what="stopped")
    wait_until(lambda: "Stopped" in tile.screen(), 10, what="bash took the terminal back")  # type: ignore[attr-defined]
    marker = tmp_path / "ENTER-REACHED-BASH"
    hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "-l", "--", f"touch {marker}")  # type: ignore[attr-defined]
    wait_until(lambda: f"touch {marker}" in tile.screen(), 10, what="the line at bash's prompt")  # type: ignore[attr-defined]
    view = TileView(hub, "tgt")  # type: ignore[arg-type]
    try:
        records = [
            hub.keys("tgt", "Enter").result(15),  # type: ignore[attr-defined]
            view.press("Enter").result(15),
        ]
    finally:
        view.close()
    for rec in records:
        assert rec.status == "error"
        assert "is stopped (suspended" in (rec.error or ""), rec.error
        assert "no key was pressed" in (rec.error or "")
    # bash would run the line at once on Enter: run something after it to be sure it did not.
    probe = tmp_path / "probe"
    hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "C-u")  # type: ignore[attr-defined]
    hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "-l", "--", f"touch {probe}")  # type: ignore[attr-defined]
    hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "Enter")  # type: ignore[attr-defined]
    wait_until(probe.exists, 10, what="bash runs what is typed at its prompt")
    assert not marker.exists()
    os.kill(proc.pid, signal.SIGKILL)


def test_keys_refuse_an_unknown_tile_and_key_at_once(hub: object) -> None:
    with pytest.raises(MadohubValueError, match="no target tile named 'nope'"):
        hub.keys("nope", "Enter")  # type: ignore[attr-defined]


def test_demo_agents_keep_their_files_out_of_the_users_claude_dir(
    hub: object, home: Path, project: Path
) -> None:
    tile = start_standin(hub, "w", persona="echo", cwd=project)
    hub.send("w", "hello private world").result(30)  # type: ignore[attr-defined]
    wait_until(lambda: "hello private world" in user_prompts(tile), 15, what="the transcript")
    assert not (home / ".claude").exists()
    assert any(private_config_dir("claude").glob("projects/*/*.jsonl"))


def test_a_demo_command_takes_the_config_dir_the_user_gives(tmp_path: Path) -> None:
    command = standin_command("codex", bin_dir=tmp_path, config_dir=tmp_path / "mine")
    assert f"mh-setenv CODEX_HOME {tmp_path / 'mine'} {tmp_path / 'codex'} --persona" in command
    plain = standin_command("claude", bin_dir=tmp_path, private_config=False)
    assert "mh-setenv" not in plain and "CLAUDE_CONFIG_DIR" not in plain


CHILD = """
import sys, time
import madohub_nb as mh
socket, log, keep, adopt = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
hub = mh.Hub(socket_name=socket, log_path=log, keep_panes=keep)
made = hub.tile("made", agent="shell", command="sleep 600")
made.ready.result(15)
hub.tile("adopted", agent="shell", pane=adopt)
print("PANE", made.pane_pid, flush=True)
# exits without hub.close()
"""


def _run_child(tmux_socket: str, tmp_path: Path, keep: bool) -> int:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    out = subprocess.run(
        [sys.executable, str(script), tmux_socket, str(tmp_path / "r.db"), "1" if keep else "0",
         "adoptme:0.0"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return int(next(line for line in out.stdout.splitlines() if line.startswith("PANE")).split()[1])


@pytest.mark.parametrize("keep", [False, True])
def test_created_panes_end_at_interpreter_exit_unless_kept_and_adopted_ones_never(
    tmux_socket: str, tmp_path: Path, keep: bool
) -> None:
    subprocess.run(
        ["tmux", "-L", tmux_socket, "new-session", "-d", "-s", "adoptme", "sleep 600"], check=True
    )
    adopted = int(
        subprocess.run(
            ["tmux", "-L", tmux_socket, "display", "-p", "-t", "adoptme:0.0", "#{pane_pid}"],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    made = _run_child(tmux_socket, tmp_path, keep)
    try:
        if keep:
            assert alive(made), "keep_panes=True: the pane the hub made must outlive it"
        else:
            wait_until(lambda: not alive(made), 10, what="the created pane to end at exit")
        assert alive(adopted), "an adopted pane is never ended"
    finally:
        kill_tree(made)
        kill_tree(adopted)
