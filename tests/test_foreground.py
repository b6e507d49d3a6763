"""Typed text goes only to the tile's agent: the foreground checks of delivery (issue 11).

Each test puts a real program between the hub and the pane the way a user
would: a stand-in Claude Code started from a bash prompt (its newline key C-j
is accept-line in bash), a background job, synchronized panes. What arrives is
checked where it arrives: files that bash would create if it ran a typed line,
and the raw bytes a recorder pane reads.

Every test runs twice: once reading ``/proc``, once through ``ps`` (the path of a
machine without ``/proc``, forced here), and the two are compared on the same
live processes.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
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
from madohub_nb.agents.process_table import (
    TABLE_NAMES,
    TABLES,
    ProcStat,
    TableName,
    process_table,
    use_process_table,
)
from madohub_nb.agents.profiles import get_profile
from madohub_nb.defaults import TYPING_DELAY_MS
from madohub_nb.io.machine import LocalMachine
from madohub_nb.pipeline.deliver import Deliverer

_bash_pane = bash_pane
_type_at_prompt = type_at_prompt

_AMP_SUBMIT = "".join(get_profile("amp").submit_keys).encode()
"""What the Amp-like recorder gets after a prompt: Amp's submit keys."""


@pytest.fixture(autouse=True, params=TABLE_NAMES)
def table(request: pytest.FixtureRequest) -> Iterator[TableName]:
    """Each test once through ``/proc`` and once through ``ps``; the automatic choice after."""
    name: TableName = request.param
    use_process_table(name)
    try:
        yield name
    finally:
        use_process_table(None)


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

    hub.runtime.deliverer = Deliverer(rng=random.Random(1), sleep=sleep)


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
    # (bytes the agent had not read may still reach bash's line after one C-c: clear and
    # try again until bash runs the probe; what it ran meanwhile shows in the marks)
    for _ in range(3):
        hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "C-c")
        time.sleep(0.3)
        _type_at_prompt(hub, tile.pane_id, f"touch {tmp_path}/probe")
        try:
            wait_until(lambda: (tmp_path / "probe").exists(), 5, what="bash runs commands")
            break
        except AssertionError:
            continue
    assert (tmp_path / "probe").exists(), "bash never ran a command again"
    assert _marks(tmp_path) == []


# --- 3. a background job in a shell ----------------------------------------------------------


def test_background_job_named_like_an_agent_never_makes_a_shell_an_agent(hub: mh.Hub) -> None:
    pane = _bash_pane(hub, "sh")
    _type_at_prompt(hub, pane, "(exec -a amp-proxy sleep 300) &")
    pid = hub.runtime.tmux.pane_info(pane).pid  # type: ignore[union-attr]

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
    sibling = hub.runtime.tmux.run(
        "split-window", "-d", "-P", "-F", "#{pane_id}", "-t", rec_tile.pane_id, BASH
    ).strip()
    wait_until(lambda: "$" in hub.runtime.tmux.capture(sibling), 10, what="sibling bash")
    hub.runtime.tmux.run("set-option", "-w", "-t", rec_tile.pane_id, "synchronize-panes", "on")
    before = out.read_bytes()
    marker = tmp_path / "SIBLING"
    rec = hub.send("rec", f"touch {marker}").result(60)
    assert rec.status == "error"
    assert "synchronize-panes" in (rec.error or "")
    assert out.read_bytes() == before
    hub.runtime.tmux.run("send-keys", "-t", sibling, "-l", "--", f"touch {tmp_path}/probe")
    hub.runtime.tmux.run(
        "send-keys", "-t", sibling, "Enter"
    )  # synchronized: reaches rec too, harmless
    wait_until(lambda: (tmp_path / "probe").exists(), 10, what="sibling runs commands")
    assert not marker.exists()


def test_unsynchronized_window_still_gets_its_prompt(hub: mh.Hub, tmp_path: Path) -> None:
    out = tmp_path / "rec.bin"
    rec_tile = start_recorder(hub, "rec", out)
    hub.runtime.tmux.run("set-option", "-w", "-t", rec_tile.pane_id, "synchronize-panes", "off")
    rec = hub.send("rec", "hello;\nworld ' \" # ~ $HOME é").result(60)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: out.read_bytes().endswith(_AMP_SUBMIT), 10, what="submit")
    assert out.read_bytes() == "hello;\nworld ' \" # ~ $HOME é".encode() + _AMP_SUBMIT


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


def test_a_reader_that_execs_a_shell_is_not_the_reader_any_more(hub: mh.Hub) -> None:
    """``exec bash`` keeps the pid and the start time: its program name tells."""
    script = "import os, sys; sys.stdin.readline(); os.execv('/bin/bash', ['bash', '--norc'])"
    pane, pid = hub.runtime.tmux.new_pane(hub.session_name, f'{sys.executable} -c "{script}"')
    # (the pane's shell first reads its command, then execs python: wait for python itself)
    started = lambda: any("execv" in a for a in psutil.Process(pid).cmdline())  # noqa: E731
    wait_until(started, 10, what="python started")
    reader = expected_reader(pid, pid, "agent 'x'", argv=psutil.Process(pid).cmdline())
    assert isinstance(reader, Reader) and not reader.runs_commands
    assert check_reader(reader) is None
    hub.runtime.tmux.run("send-keys", "-t", pane, "Enter")
    wait_until(lambda: getattr(read_stat(pid), "comm", "") == "bash", 10, what="exec bash")
    assert check_reader(reader) == (
        "agent 'x' now runs 'bash', which would run typed text as commands"
    )
    again = expected_reader(pid, pid, "agent 'x'", argv=psutil.Process(pid).cmdline())
    assert isinstance(again, Reader) and again.runs_commands  # pinned anew: a shell


def test_shell_tile_reader_is_the_shell_in_the_foreground(hub: mh.Hub) -> None:
    pane = _bash_pane(hub, "sh")
    tile = hub.tile("sh", pane=pane)
    reader = tile.reader()
    assert isinstance(reader, Reader) and check_reader(reader) is None
    _type_at_prompt(hub, pane, "sleep 300")
    pid = hub.runtime.tmux.pane_info(pane).pid  # type: ignore[union-attr]
    wait_until(lambda: psutil.Process(pid).children(), 10, what="sleep running")
    # sleep holds the terminal once bash has given it the foreground (just after the fork)
    wait_until(lambda: check_reader(reader) is not None, 10, what="sleep in the foreground")
    # A shell tile running a program acts as a terminal tile (issue 12): the program reads.
    # (Between bash's fork and the exec, the foreground is a child still named bash: a shell
    # reader, as it should read; under load that moment lasts, so wait for the exec.)
    wait_until(
        lambda: "the program 'sleep'" in getattr(tile.reader(), "what", ""), 10, what="sleep reads"
    )
    now = tile.reader()
    assert isinstance(now, Reader) and "the program 'sleep'" in now.what
    for child in psutil.Process(pid).children():
        kill_tree(child.pid)
    wait_until(lambda: isinstance(tile.reader(), Reader), 10, what="the shell back in front")
    assert now.table is process_table()


# --- /proc and ps agree -------------------------------------------------------------------------


def _boot_time_s() -> int:
    with open("/proc/stat") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("btime "))


def _started_s(proc_start_ticks: int) -> float:
    """A ``/proc`` start time (clock ticks since boot) in seconds since the epoch, as ps says."""
    return _boot_time_s() + proc_start_ticks / os.sysconf("SC_CLK_TCK")


def _job_pids(hub: mh.Hub, pane_pid: int, count: int) -> list[int]:
    def found() -> list[int] | None:
        sleeps = [c.pid for c in psutil.Process(pane_pid).children() if c.name() == "sleep"]
        return sorted(sleeps) if len(sleeps) == count else None

    return wait_until(found, 10, what=f"{count} jobs of the pane's bash")  # type: ignore[no-any-return]


@pytest.mark.parametrize("table", ["proc"], indirect=True)
def test_proc_and_ps_read_the_same_live_processes_alike(hub: mh.Hub) -> None:
    """A pane's bash with a background job, a stopped job and a foreground job, plus a
    zombie: both tables say the same group, terminal, foreground group, state and start."""
    pane = _bash_pane(hub, "sh")
    pane_pid = hub.runtime.tmux.pane_info(pane).pid  # type: ignore[union-attr]
    _type_at_prompt(hub, pane, "sleep 301 &")
    _type_at_prompt(hub, pane, "sleep 302 &")
    background, stopped = _job_pids(hub, pane_pid, 2)
    os.kill(stopped, signal.SIGSTOP)
    _type_at_prompt(hub, pane, "sleep 303")
    foreground = next(p for p in _job_pids(hub, pane_pid, 3) if p not in (background, stopped))
    zombie = psutil.Popen(["true"])  # not waited for until the end: a zombie
    wait_until(lambda: zombie.status() == psutil.STATUS_ZOMBIE, 10, what="a zombie")
    gone = zombie.pid + 3_000_000  # above any pid in use here
    pids = [pane_pid, background, stopped, foreground, zombie.pid, gone]
    try:
        wait_until(
            lambda: TABLES["proc"].stats([pane_pid])[pane_pid].tpgid == foreground,  # type: ignore[union-attr]
            10,
            what="sleep 303 in the terminal's foreground",
        )
        by_proc = TABLES["proc"].stats(pids)
        by_ps = TABLES["ps"].stats(pids)  # one ps call for all of them
        assert by_proc[gone] is None and by_ps[gone] is None

        def same_but_start(st: ProcStat | None) -> tuple[object, ...]:
            assert st is not None
            return (st.pid, st.comm, st.state, st.pgrp, st.tty_nr, st.tpgid)

        for pid in pids[:-1]:
            assert same_but_start(by_proc[pid]) == same_but_start(by_ps[pid]), pid
            assert abs(_started_s(by_proc[pid].start_ticks) - by_ps[pid].start_ticks) <= 1  # type: ignore[union-attr]
        assert by_ps[stopped].state == "T" and by_ps[zombie.pid].state == "Z"  # type: ignore[union-attr]
        assert by_ps[foreground].tty_nr != 0 and by_ps[zombie.pid].tty_nr == 0  # type: ignore[union-attr]
        assert by_ps[pane_pid].tpgid == by_ps[foreground].pgrp != by_ps[background].pgrp  # type: ignore[union-attr]

        # The same verdicts, each reader pinned and checked through one table.
        def verdicts(name: TableName) -> list[str | None]:
            use_process_table(name)
            readers = [expected_reader(pane_pid, pid, f"pid {pid}") for pid in pids[:4]]
            assert all(isinstance(r, Reader) and r.table is TABLES[name] for r in readers)
            stale = Reader(pane_pid, foreground, readers[3].start_ticks - 1, "old")  # type: ignore[union-attr]
            return [check_reader(r) for r in readers] + [  # type: ignore[arg-type]
                check_reader(stale),
                None if expected_reader(pane_pid, zombie.pid, "z") is None else "zombie pinned",
            ]

        proc_says, ps_says = verdicts("proc"), verdicts("ps")
        assert proc_says == ps_says
        assert ps_says[3] is None  # the foreground job reads
        assert "is not the terminal's foreground process; 'sleep'" in (ps_says[0] or "")
        assert "not the terminal's foreground" in (ps_says[1] or "")
        assert "is stopped" in (ps_says[2] or "")
        assert ps_says[4] == "old has exited" and ps_says[5] is None
    finally:
        zombie.wait()
        for pid in (background, stopped, foreground):
            kill_tree(pid)


def test_a_reader_is_checked_through_the_table_it_was_pinned_with(table: TableName) -> None:
    """Start times differ in units between the tables: switching must not unpin a reader."""
    reader = expected_reader(os.getpid(), os.getpid(), "me")
    assert isinstance(reader, Reader) and reader.table is TABLES[table]
    assert reader.quick is (table == "proc")  # a ps call is checked off the engine loop
    other = next(name for name in TABLE_NAMES if name != table)
    use_process_table(other)
    # Through the other table its start time would not match: "has exited". (Whether the
    # test runs on a terminal decides what else it says.)
    assert "has exited" not in (check_reader(reader) or "")
    assert expected_reader(os.getpid(), os.getpid(), "me").table is TABLES[other]  # type: ignore[union-attr]


def test_the_automatic_table_is_proc_where_there_is_proc() -> None:
    assert use_process_table(None) is TABLES["proc"]
    with pytest.raises(mh.MadohubValueError, match="'proc', 'ps'|proc, ps"):
        use_process_table("sysctl")  # type: ignore[arg-type]


def test_ps_lines_are_read_by_field_whatever_the_command_name_holds() -> None:
    """``ps`` output of procps (``?``, ``-1``) and of BSD (``??``, ``0``); a name with spaces."""
    from madohub_nb.agents.process_table import parse_ps

    raw = (
        b"  501   501   501 Ss+  pts/0    Tue Dec  1 17:38:25 2026 my agent x\n"
        b"   77    77    -1 T    ?        Mon Feb 29 00:00:09 2024 sleep\n"
        b"   78    78     0 Z    ??       Wed Jan 31 23:59:59 2025 \n"
        b"not a ps line\n"
        b"   79    79     0 S    ??       Wed Foo 31 23:59:59 2025 bad-month\n"
    )
    found = parse_ps(raw)
    assert sorted(found) == [77, 78, 501]
    assert found[501].comm == "my agent x" and found[501].state == "S"
    assert found[501].pgrp == found[501].tpgid == 501
    assert found[501].start_ticks == 1796146705  # 2026-12-01 17:38:25 UTC
    assert (found[77].state, found[77].tty_nr, found[77].tpgid) == ("T", 0, -1)
    assert found[78].comm == "" and found[78].tty_nr == 0
