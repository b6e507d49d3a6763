"""Typed text goes only to the tile's agent: the foreground checks of delivery (issue 11).

Each test puts a real program between the hub and the pane the way a user
would: a stand-in Claude Code started from a bash prompt (its newline key C-j
is accept-line in bash), a background job, synchronized panes. What arrives is
checked where it arrives: files that bash would create if it ran a typed line,
and the raw bytes a recorder pane reads.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path

import psutil
import pytest
from conftest import (
    BASH,
    bash_pane,
    kill_tree,
    standin_from_bash,
    start_recorder,
    type_at_prompt,
    wait_until,
)

import madohub_nb as mh
from madohub_nb.agents.detect import detect_kind
from madohub_nb.agents.foreground import Reader, check_reader, expected_reader, read_stat
from madohub_nb.io.machine import LocalMachine
from madohub_nb.pipeline.deliver import Deliverer
from madohub_nb.settings import TYPING_DELAY_MS

_bash_pane = bash_pane
_type_at_prompt = type_at_prompt


def _claude_from_bash(hub: mh.Hub, name: str) -> mh.Tile:
    """A stand-in Claude Code started from a bash prompt, adopted as a tile, idle."""
    return standin_from_bash(hub, name)  # type: ignore[return-value]


def _agent_pid(tile: mh.Tile) -> int:
    proc = tile.agent_process()
    assert proc is not None
    return proc.pid


def _signal_during_typing(hub: mh.Hub, pid: int, sig: int, after_lines: int) -> None:
    """Make the hub's deliverer send ``sig`` to ``pid`` in the pause after ``after_lines`` lines.

    The signal lands between two typed lines, like a user's Ctrl-Z or a crash
    while a long prompt is typed, but at a point the test controls.
    """
    low, high = TYPING_DELAY_MS
    pauses = 0

    async def sleep(seconds: float) -> None:
        nonlocal pauses
        if low / 1000 <= seconds <= high / 1000:
            pauses += 1
            if pauses == after_lines:
                os.kill(pid, sig)
                want = "T" if sig == signal.SIGTSTP else None
                for _ in range(200):  # until the kernel shows it stopped / gone
                    st = read_stat(pid)
                    if st is None or st.state in ("Z", "X") or st.state == want:
                        break
                    await asyncio.sleep(0.01)
        await asyncio.sleep(seconds)

    hub.deliverer = Deliverer(rng=random.Random(1), sleep=sleep)


def _marks(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("mark-*"))


# --- 1. a suspended agent --------------------------------------------------------------------


def test_suspended_agent_is_not_idle_and_nothing_is_typed_into_its_shell(
    hub: mh.Hub, tmp_path: Path
) -> None:
    tile = _claude_from_bash(hub, "tgt")
    pid = _agent_pid(tile)
    os.kill(pid, signal.SIGTSTP)  # what Ctrl-Z does; bash takes the terminal back
    wait_until(lambda: read_stat(pid) and read_stat(pid).state == "T", 10, what="stopped")  # type: ignore[union-attr]
    wait_until(lambda: "Stopped" in tile.screen(), 10, what="bash saw the job stop")
    # Its sessions file still says idle: the process state must win.
    assert tile.state != "idle"
    marker = tmp_path / "MARKER"
    rec = hub.send("tgt", f"touch {marker}").result(60)
    assert rec.status == "error"
    assert "stopped" in (rec.error or "") and "nothing was typed" in (rec.error or "")
    assert not marker.exists()
    assert f"touch {marker}" not in tile.screen()
    os.kill(pid, signal.SIGCONT)


def test_agent_suspended_while_typing_gets_no_more_lines_and_no_submit(
    hub: mh.Hub, tmp_path: Path
) -> None:
    tile = _claude_from_bash(hub, "tgt")
    pid = _agent_pid(tile)
    _signal_during_typing(hub, pid, signal.SIGTSTP, after_lines=4)
    prompt = "\n".join(f"touch {tmp_path}/mark-{i:02d}" for i in range(30))
    rec = hub.send("tgt", prompt).result(60)
    assert rec.status == "error"
    assert "stopped (suspended" in (rec.error or "")
    assert "not submitted" in (rec.error or "")
    wait_until(lambda: "$" in tile.screen(), 10, what="bash prompt back")
    assert _marks(tmp_path) == []
    os.kill(pid, signal.SIGCONT)


# --- 2. an agent killed while a long prompt is typed ------------------------------------------


def test_agent_killed_while_typing_stops_the_typing_and_logs_an_error(
    hub: mh.Hub, tmp_path: Path
) -> None:
    tile = _claude_from_bash(hub, "tgt")
    pid = _agent_pid(tile)
    _signal_during_typing(hub, pid, signal.SIGKILL, after_lines=5)
    prompt = "\n".join(f"touch {tmp_path}/mark-{i:02d}" for i in range(30))
    rec = hub.send("tgt", prompt).result(60)
    assert rec.status == "error"
    assert "has exited" in (rec.error or "") and "after 5 of 30 lines" in (rec.error or "")
    (row,) = hub.log.df.to_dict("records")
    assert row["status"] == "error"
    # Give bash every chance to run what it may have been given; text the agent had not
    # read when it died may sit on bash's prompt line, never run: clear it first.
    wait_until(lambda: "Killed" in tile.screen(), 10, what="bash reports the killed job")
    hub.tmux.run("send-keys", "-t", tile.pane_id, "C-c")
    _type_at_prompt(hub, tile.pane_id, f"touch {tmp_path}/probe")
    wait_until(lambda: (tmp_path / "probe").exists(), 10, what="bash runs commands again")
    assert _marks(tmp_path) == []


# --- 3. a background job in a shell ----------------------------------------------------------


def test_background_job_named_like_an_agent_never_makes_a_shell_an_agent(hub: mh.Hub) -> None:
    pane = _bash_pane(hub, "sh")
    _type_at_prompt(hub, pane, "(exec -a amp-proxy sleep 300) &")
    pid = hub.tmux.pane_info(pane).pid  # type: ignore[union-attr]

    def job() -> psutil.Process | None:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if "amp-proxy" in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        return None

    proc = wait_until(job, 10, what="the background job")
    assert isinstance(proc, psutil.Process)
    try:
        assert detect_kind(LocalMachine(), pid) == "shell"
        tile = hub.tile("sh", pane=pane)
        assert tile.agent == "shell"
        with pytest.raises(mh.MadohubValueError, match="allow_shell"):
            hub.send("sh", "echo typed")
    finally:
        kill_tree(proc.pid)


# --- 4. synchronize-panes -----------------------------------------------------------------------


def test_synchronized_window_gets_nothing_typed_and_the_round_says_why(
    hub: mh.Hub, tmp_path: Path
) -> None:
    out = tmp_path / "rec.bin"
    rec_tile = start_recorder(hub, "rec", out)
    sibling = hub.tmux.run(
        "split-window", "-d", "-P", "-F", "#{pane_id}", "-t", rec_tile.pane_id, BASH
    ).strip()
    wait_until(lambda: "$" in hub.tmux.capture(sibling), 10, what="sibling bash")
    hub.tmux.run("set-option", "-w", "-t", rec_tile.pane_id, "synchronize-panes", "on")
    before = out.read_bytes()
    marker = tmp_path / "SIBLING"
    rec = hub.send("rec", f"touch {marker}").result(60)
    assert rec.status == "error"
    assert "synchronize-panes" in (rec.error or "")
    assert out.read_bytes() == before
    hub.tmux.run("send-keys", "-t", sibling, "-l", "--", f"touch {tmp_path}/probe")
    hub.tmux.run("send-keys", "-t", sibling, "Enter")  # synchronized: reaches rec too, harmless
    wait_until(lambda: (tmp_path / "probe").exists(), 10, what="sibling runs commands")
    assert not marker.exists()


def test_unsynchronized_window_still_gets_its_prompt(hub: mh.Hub, tmp_path: Path) -> None:
    out = tmp_path / "rec.bin"
    rec_tile = start_recorder(hub, "rec", out)
    hub.tmux.run("set-option", "-w", "-t", rec_tile.pane_id, "synchronize-panes", "off")
    rec = hub.send("rec", "hello;\nworld ' \" # ~ $HOME é").result(60)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: out.read_bytes().endswith(b"\r\r"), 10, what="submit")
    assert out.read_bytes() == "hello;\nworld ' \" # ~ $HOME é\r\r".encode()


# --- the check itself ---------------------------------------------------------------------------


def test_check_reader_names_each_failure(tmp_path: Path) -> None:
    """A real child in its own session: running, stopped, background, gone."""
    script = "import os, sys, time; os.setsid(); time.sleep(60)"
    child = psutil.Popen([sys.executable, "-c", script])
    try:
        wait_until(lambda: read_stat(child.pid) and read_stat(child.pid).pgrp == child.pid, 10)  # type: ignore[union-attr]
        reader = expected_reader(os.getpid(), child.pid, "agent 'x'")
        assert isinstance(reader, Reader)
        # Not on our terminal (no terminal at all after setsid).
        assert "terminal" in (check_reader(reader) or "")
        child.send_signal(signal.SIGSTOP)
        wait_until(lambda: read_stat(child.pid).state == "T", 10)  # type: ignore[union-attr]
        assert "stopped" in (check_reader(reader) or "")
        child.send_signal(signal.SIGCONT)
    finally:
        child.kill()
        child.wait()
    assert "has exited" in (check_reader(reader) or "")
    assert expected_reader(os.getpid(), child.pid, "gone") is None


def test_a_reused_pid_is_not_the_reader_any_more() -> None:
    me = read_stat(os.getpid())
    assert me is not None
    stale = Reader(os.getpid(), os.getpid(), me.start_ticks - 1, "agent 'old'")
    assert check_reader(stale) == "agent 'old' has exited"


def test_shell_tile_reader_is_the_shell_in_the_foreground(hub: mh.Hub) -> None:
    pane = _bash_pane(hub, "sh")
    tile = hub.tile("sh", pane=pane)
    reader = tile.reader()
    assert isinstance(reader, Reader) and check_reader(reader) is None
    _type_at_prompt(hub, pane, "sleep 300")
    pid = hub.tmux.pane_info(pane).pid  # type: ignore[union-attr]
    wait_until(lambda: psutil.Process(pid).children(), 10, what="sleep running")
    assert check_reader(reader) is not None  # sleep holds the terminal now
    # A shell tile running a program acts as a terminal tile (issue 12): the program reads.
    now = tile.reader()
    assert isinstance(now, Reader) and "the program 'sleep'" in now.what
    for child in psutil.Process(pid).children():
        kill_tree(child.pid)
    wait_until(lambda: isinstance(tile.reader(), Reader), 10, what="the shell back in front")
