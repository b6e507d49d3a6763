"""Faults and concurrency on real tmux: what breaks is reported, nothing else breaks.

Panes, agents and the tmux server are killed for real; transcripts are
deleted, cut and rotated under a running route; the Anthropic API fails
through the local fake; a hub process is SIGKILLed mid-route; two hubs share
one log; the log's disk fills up or turns read-only. Every round still ends as
exactly one logged row (or, when the log itself cannot be written, one kept
in ``hub.unlogged`` while routing pauses), and routes that were not hit go on.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import (
    FAST_IDLE_MS,
    SkippedTurns,
    alive,
    kill_tree,
    log_rows,
    repaint,
    start_recorder,
    start_standin,
    user_prompts,
    wait_until,
)

import madohub_nb as mh
from madohub_nb.agents.profiles import get_profile
from madohub_nb.pipeline.extract import transcript_path
from madohub_nb.testing.fake_anthropic import FakeAnthropic

API_KEY = "sk-ant-test-faults-0123456789abcdef"
SUBMIT = "".join(get_profile("amp").submit_keys).encode()  # the Amp-like recorder's Enter


def _wait_rows(hub: mh.Hub, route: mh.Route, n: int, timeout_s: float = 30) -> list[dict[str, Any]]:
    wait_until(lambda: len(log_rows(hub, route)) >= n, timeout_s, what=f"{n} rows of {route.id}")
    return log_rows(hub, route)


def _kill_agent(tile: mh.Tile) -> int:
    proc = tile.agent_process()
    assert proc is not None, f"{tile.name} runs no agent"
    os.kill(proc.pid, signal.SIGKILL)
    return proc.pid


def _ready(*routes: mh.Route) -> None:
    wait_until(lambda: all(r.ready.is_set() for r in routes), 10, what="routes listening")


def _lines(tag: str, n: int) -> str:
    return "\n".join(f"{tag} line {i:02d}" for i in range(n))


# --- panes and agents die ------------------------------------------------------------


def test_target_killed_before_delivery_is_an_error_and_other_routes_go_on(
    hub: mh.Hub, project: Path
) -> None:
    start_standin(hub, "w", cwd=project)
    doomed = start_standin(hub, "doomed", cwd=project)
    alive = start_standin(hub, "alive", cwd=project)
    to_doomed = hub.connect("w", "doomed", template="A: {output}", cooldown_ms=1000)
    to_alive = hub.connect("w", "alive", template="B: {output}", cooldown_ms=1000)
    _ready(to_doomed, to_alive)
    hub.runtime.tmux.kill_pane(doomed.pane_id)
    wait_until(lambda: doomed.state == "exited", 10)
    hub.send("w", "ping").result(30)
    (lost,) = _wait_rows(hub, to_doomed, 1)
    (fine,) = _wait_rows(hub, to_alive, 1)
    assert lost["status"] == "error"
    assert "target 'doomed' has exited; nothing was typed" in lost["error"]
    assert fine["status"] == "delivered", fine["error"]
    wait_until(lambda: user_prompts(alive) == ["B: Done: ping"], 10)
    assert to_alive.state == "active"


def test_target_pane_killed_while_typing_is_an_error_with_the_reason(
    hub: mh.Hub, project: Path
) -> None:
    start_standin(hub, "w", cwd=project)
    doomed = start_standin(hub, "doomed", cwd=project)
    route = hub.connect("w", "doomed", template=_lines("long", 40) + "\n{output}", cooldown_ms=1000)
    _ready(route)
    hub.send("w", "go").result(30)
    wait_until(lambda: "long line 05" in doomed.screen(), 30, what="typing under way")
    hub.runtime.tmux.kill_pane(doomed.pane_id)
    (row,) = _wait_rows(hub, route, 1)
    assert row["status"] == "error"
    assert "typing into 'doomed'" in row["error"]
    # The pane's process dies with the pane: the foreground check usually sees it first,
    # gone or (hung up, not yet exited) without its terminal.
    assert any(
        reason in row["error"]
        for reason in ("can't find pane", "has exited", "no longer on the pane's terminal")
    ), row["error"]
    assert "not submitted" in row["error"] or "failed" in row["error"]


def test_target_agent_crash_while_typing_is_not_logged_as_delivered(
    hub: mh.Hub, project: Path
) -> None:
    # The first tile's pane stays after its program dies (remain-on-exit): tmux then
    # accepts keys for the dead pane without complaint.
    doomed = start_standin(hub, "doomed", cwd=project)
    start_standin(hub, "w", cwd=project)
    route = hub.connect("w", "doomed", template=_lines("long", 40) + "\n{output}", cooldown_ms=1000)
    _ready(route)
    hub.send("w", "go").result(30)
    wait_until(lambda: "long line 05" in doomed.screen(), 30, what="typing under way")
    _kill_agent(doomed)
    (row,) = _wait_rows(hub, route, 1)
    assert row["status"] == "error", row
    assert "'doomed'" in row["error"] and "exited" in row["error"]


def test_target_crash_while_a_round_waits_for_it_ends_the_wait(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "w", cwd=project)
    busy = start_standin(hub, "busy", cwd=project)
    route = hub.connect("w", "busy", cooldown_ms=1000)
    _ready(route)
    hub.send("busy", "[[sleep 60]] a long turn").result(30)
    wait_until(lambda: busy.state == "busy", 10)
    hub.send("w", "for the busy one").result(30)
    wait_until(lambda: route.rounds == 1, 20, what="the round to fire and wait")
    _kill_agent(busy)
    (row,) = _wait_rows(hub, route, 1)
    assert row["status"] == "error"
    assert "target 'busy' has exited; nothing was typed" in row["error"]


def test_source_killed_stops_its_route_only(hub: mh.Hub, project: Path) -> None:
    w1 = start_standin(hub, "w1", cwd=project)
    start_standin(hub, "w2", cwd=project)
    sink = start_standin(hub, "sink", cwd=project)
    r1 = hub.connect("w1", "sink", template="1: {output}", cooldown_ms=1000)
    r2 = hub.connect("w2", "sink", template="2: {output}", cooldown_ms=1000)
    _ready(r1, r2)
    _kill_agent(w1)
    wait_until(lambda: r1.state == "stopped", 20, what="the route of the dead source to stop")
    assert r1.last_error is not None and "source 'w1' exited" in r1.last_error
    assert r2.state == "active"
    hub.send("w2", "still here").result(30)
    wait_until(lambda: user_prompts(sink) == ["2: Done: still here"], 30)
    assert w1.state == "exited"
    assert log_rows(hub, r1) == []


def test_source_crash_mid_turn_fires_no_round(hub: mh.Hub, project: Path) -> None:
    w = start_standin(hub, "w", cwd=project)
    sink = start_standin(hub, "sink", cwd=project)
    route = hub.connect("w", "sink", cooldown_ms=1000)
    _ready(route)
    hub.send("w", "[[sleep 30]] never finishes").result(30)
    wait_until(lambda: w.state == "busy", 10)
    _kill_agent(w)
    wait_until(lambda: route.state == "stopped", 20, what="the route to notice")
    assert route.rounds == 0
    assert log_rows(hub, route) == []
    assert user_prompts(sink) == []


def test_tmux_server_killed_under_the_hub(hub: mh.Hub, project: Path) -> None:
    a = start_standin(hub, "a", cwd=project)
    b = start_standin(hub, "b", cwd=project)
    route = hub.connect("a", "b", cooldown_ms=1000)
    _ready(route)
    server = hub.runtime.tmux.server_pid()
    assert server is not None
    agents = [p.pid for t in (a, b) if (p := t.agent_process()) is not None]
    try:
        os.kill(server, signal.SIGKILL)
        wait_until(lambda: a.state == "exited" and b.state == "exited", 15, what="tiles exited")
        wait_until(lambda: route.state == "stopped", 15, what="the route to stop")
        # The hub keeps answering: state, the log, a hand send (logged as an error round).
        rec = hub.send("b", "anyone?").result(30)
        assert rec.status == "error"
        assert "has exited" in (rec.error or "")
        assert "tiles=2" in repr(hub)
        assert list(hub.log.df["status"]) == ["error"]
        clients = hub.runtime.tiles.watcher.client_pids()
        hub.close()
        assert hub.closed
        assert not any(psutil.pid_exists(p) and alive(p) for p in clients)
    finally:
        for pid in agents:
            kill_tree(pid)


# --- transcripts change under a route ------------------------------------------------


def test_transcript_changes_under_a_route_still_route_the_next_turn(
    hub: mh.Hub, project: Path
) -> None:
    # No hooks: the answers must come from the changed transcript, or the screen.
    w = start_standin(hub, "w", cwd=project, think_s=0.1, hooks=False)
    sink = start_standin(hub, "sink", cwd=project)
    route = hub.connect("w", "sink", template="> {output}", cooldown_ms=1000)
    _ready(route)
    hub.send("w", "turn 0").result(30)
    wait_until(lambda: user_prompts(sink) == ["> Done: turn 0"], 30)
    # Each change, then a turn: it is routed once, from the (new) transcript or the screen.
    changes = ["cut mid-line", "emptied", "cleared", "deleted"]
    for n, change in enumerate(changes, start=1):
        path = transcript_path(w)
        assert path is not None
        if change == "cut mid-line":
            os.truncate(path, path.stat().st_size - 40)
        elif change == "emptied":
            os.truncate(path, 0)
        elif change == "cleared":  # /clear: a new session id, a new transcript file
            hub.send("w", "/clear").result(30)
            wait_until(lambda p=path: transcript_path(w) not in (None, p), 10, what="a new session")
        else:
            path.unlink()
        hub.send("w", f"turn {n}").result(30)
        row = _wait_rows(hub, route, n + 1)[-1]
        expected = (n + 1, "delivered", f"Done: turn {n}")
        assert (row["round"], row["status"], row["extracted"]) == expected, change
        # Without the file the screen is read; otherwise the transcript.
        assert row["extraction_method"] == ("terminal" if change == "deleted" else "jsonl")
    assert user_prompts(sink) == [f"> Done: turn {n}" for n in range(len(changes) + 1)]


def test_an_old_answer_showing_again_is_not_routed_again(hub: mh.Hub, project: Path) -> None:
    """The transcript cut back to an earlier turn: that turn was routed once already."""
    w = start_standin(hub, "w", cwd=project)
    sink = start_standin(hub, "sink", cwd=project)
    route = hub.connect("w", "sink", template="> {output}", cooldown_ms=1000)
    _ready(route)
    for word in ("one", "two"):
        hub.send("w", word).result(30)
        wait_until(lambda word=word: user_prompts(sink)[-1:] == [f"> Done: {word}"], 30)
    _wait_rows(hub, route, 2)
    path = transcript_path(w)
    assert path is not None
    data = path.read_bytes()
    first_turn_end = data.index(b"\n", data.index(b'"turn_duration"')) + 1
    os.truncate(path, first_turn_end)  # the file ends with turn one again
    assert w.last_response() is not None and w.last_response().text == "Done: one"
    skipped = SkippedTurns(hub)
    for _ in range(2):  # repaints: output, then silence, as after a turn
        before = skipped.count(route)
        repaint(hub, w)
        assert skipped.wait(route, before) == "already routed"
    assert route.rounds == 2
    assert user_prompts(sink) == ["> Done: one", "> Done: two"]


def test_deleting_the_transcript_after_a_routed_turn_does_not_route_it_again(
    hub: mh.Hub, project: Path
) -> None:
    w = start_standin(hub, "w", cwd=project)
    sink = start_standin(hub, "sink", cwd=project)
    route = hub.connect("w", "sink", template="> {output}", cooldown_ms=1000)
    _ready(route)
    hub.send("w", "one").result(30)
    wait_until(lambda: user_prompts(sink) == ["> Done: one"], 30)
    path = transcript_path(w)
    assert path is not None
    path.unlink()
    skipped = SkippedTurns(hub)
    for _ in range(2):
        before = skipped.count(route)
        repaint(hub, w)
        # Read from the screen now: the same text as the routed turn.
        assert skipped.wait(route, before) in ("already routed", "not new")
    assert route.rounds == 1
    assert user_prompts(sink) == ["> Done: one"]


# --- the AI API fails ----------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_api_failures_are_error_rounds_and_the_routes_recover(
    hub: mh.Hub, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeAnthropic(reply="AI prompt", api_key=API_KEY) as fake:
        hub.api_key, hub.base_url = API_KEY, fake.base_url
        # A short per-attempt timeout and one retry, so the stalled API times out soon.
        hub.ai_timeout_s, hub.ai_max_retries = 1.0, 1
        start_standin(hub, "w", cwd=project, think_s=0.1)
        sinks = [start_standin(hub, name, cwd=project) for name in ("sink1", "sink2")]
        routes = [
            hub.connect("w", sink.name, transform=transform, cooldown_ms=1000, max_rounds=10)
            for sink, transform in zip(sinks, ("ai-routing", "summary"), strict=True)
        ]
        _ready(*routes)

        def turn(n: int) -> list[dict[str, Any]]:
            hub.send("w", f"turn {n}").result(30)
            return [_wait_rows(hub, route, n, timeout_s=60)[-1] for route in routes]

        fake.fail_next(500, times=4)  # both attempts of both routes
        failed = turn(1)
        fake.fail_next(429, times=1, retry_after=1)  # one retry after the pause: fine
        limited = turn(2)
        fake.hang_next(30, times=4)
        stalled = turn(3)
        hub.base_url = f"http://127.0.0.1:{_closed_port()}"
        refused = turn(4)
        hub.base_url = fake.base_url
        recovered = turn(5)

    for i, route in enumerate(routes):
        rows = [failed[i], limited[i], stalled[i], refused[i], recovered[i]]
        assert [r["status"] for r in rows] == ["error", "delivered", "error", "error", "delivered"]
        assert "API error 500" in failed[i]["error"]
        assert "timed out" in stalled[i]["error"]
        assert "connection refused" in refused[i]["error"]
        assert all(API_KEY not in r["error"] for r in (failed[i], stalled[i], refused[i]))
        assert user_prompts(sinks[i]) == ["AI prompt", "AI prompt"]
        assert route.state == "active"


# --- the kernel dies -----------------------------------------------------------------

CHILD_HUB = """
import sys, time
import madohub_nb as mh
from madohub_nb.demo import standin_command
from madohub_nb.pipeline.events import RoundLogged

socket_name, log_path, project, report = sys.argv[1:5]
hub = mh.Hub(socket_name=socket_name, idle_delay_ms=300, log_path=log_path)
out = open(report, "a", buffering=1)
hub.events.subscribe(lambda e: out.write(e.record.round_id + "\\n") if isinstance(e, RoundLogged) else None)
env = {"MADOHUB_STANDIN_THINK_S": "0.1"}
for name in ("a", "b"):
    tile = hub.tile(name, agent="claude", command=standin_command("claude", persona="counter"),
                    cwd=project, env=env)
    while tile.state != "idle":
        time.sleep(0.05)
routes = [hub.connect("a", "b", max_rounds=20, cooldown_ms=1000),
          hub.connect("b", "a", max_rounds=20, cooldown_ms=1000)]
while not all(r.ready.is_set() for r in routes):
    time.sleep(0.05)
hub.send("a", "start counting")
out.write("READY\\n")
time.sleep(600)
"""


def test_sigkilled_hub_process_leaves_every_finished_round_in_the_log(
    tmux_socket: str, tmp_path: Path, project: Path
) -> None:
    log_path, report = tmp_path / "rounds.sqlite3", tmp_path / "finished.txt"
    script = tmp_path / "child_hub.py"
    script.write_text(CHILD_HUB)
    child = subprocess.Popen(
        [sys.executable, str(script), tmux_socket, str(log_path), str(project), str(report)],
        stderr=subprocess.PIPE,
    )
    helpers: list[int] = []
    try:

        def finished() -> list[str]:
            lines = report.read_text().splitlines() if report.exists() else []
            return [ln for ln in lines if ln != "READY"]

        wait_until(lambda: len(finished()) >= 5, 90, what="five finished rounds in the child")
        helpers = [p.pid for p in psutil.Process(child.pid).children(recursive=True)]
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        reported = finished()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        for pid in helpers:
            kill_tree(pid)
    assert child.returncode == -signal.SIGKILL
    with sqlite3.connect(log_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    log = mh.RoundLog(log_path)
    try:
        df = log.df
        assert set(reported) <= set(df["round_id"])
        assert df["round_id"].is_unique
        assert set(df["status"]) <= {"delivered", "error"}
        # The log takes new rounds after the crash.
        rec = mh.RoundRecord(
            route_id="after", source="", target="a", round=0, trigger="manual",
            transform="none", dispatch="shadow", status="shadow",
        )  # fmt: skip
        log.append(rec)
        assert log.get(rec.round_id).route_id == "after"
    finally:
        log.close()


# --- two hubs, one log ---------------------------------------------------------------

CHILD_REPLAYS = """
import sys
import madohub_nb as mh

socket_name, log_path, round_id, count = sys.argv[1:5]
hub = mh.Hub(socket_name=socket_name, log_path=log_path)
for i in range(int(count)):
    hub.replay(round_id, template=f"child {i}: {{output}}").result(60)
print(hub.session_id)
hub.close()
"""


def test_two_hubs_share_one_log_file_without_losing_a_round(
    hub: mh.Hub, tmp_path: Path, tmux_socket: str
) -> None:
    first = mh.RoundRecord(
        route_id="a->b#1", source="a", target="b", round=1, trigger="on-idle",
        transform="prompt-wrap", dispatch="shadow", status="shadow", extracted="the original",
    )  # fmt: skip
    hub.log.append(first)
    script = tmp_path / "child_replays.py"
    script.write_text(CHILD_REPLAYS)
    count = 150
    child = subprocess.Popen(
        [sys.executable, str(script), tmux_socket, str(hub.log.path), first.round_id, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        mine = [
            hub.replay(first.round_id, template=f"parent {i}: {{output}}").result(60)
            for i in range(count)
        ]
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            kill_tree(child.pid)
    assert child.returncode == 0, err
    child_session = out.strip()
    df = hub.log.df
    assert len(df) == 1 + 2 * count
    assert df["round_id"].is_unique
    assert {r.round_id for r in mine} <= set(df["round_id"])
    replays = df[df["replay_of"] == first.round_id]
    assert sorted(replays["session_id"].value_counts().items()) == sorted(
        [(hub.session_id, count), (child_session, count)]
    )
    assert set(replays["status"]) == {"shadow"}
    with sqlite3.connect(hub.log.path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# --- the log cannot be written ---------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MB file system (tmpfs) in a fresh folder; needs the right to mount.

    Root in a container may mount a tmpfs (checked here and in CI). Filling it leaves no
    byte free, so SQLite cannot add a WAL frame: the log is unwritable for real, not
    capped or reopened read-only by the test.
    """
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte (big writes, then smaller ones); returns the filler file."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass  # no room for this size: try a smaller one
    assert os.statvfs(disk).f_bavail == 0
    return filler


def _routing_pair(hub: mh.Hub, project: Path) -> tuple[mh.Route, mh.Tile, mh.Tile]:
    w = start_standin(hub, "w", cwd=project, think_s=0.1)
    sink = start_standin(hub, "sink", cwd=project)
    route = hub.connect("w", "sink", template="> {output}", cooldown_ms=1000)
    _ready(route)
    hub.send("w", "turn 1").result(30)
    wait_until(lambda: user_prompts(sink) == ["> Done: turn 1"], 30)
    _wait_rows(hub, route, 1)
    return route, w, sink


def _blocked_turn(hub: mh.Hub, route: mh.Route, w: mh.Tile, sink: mh.Tile) -> mh.RoundRecord:
    """A turn of the source while the log cannot be written: nothing typed, routing paused,
    the round kept in ``hub.unlogged`` (and not in the log)."""
    before = user_prompts(sink)
    rows = len(log_rows(hub, route))
    # Typed by hand into the source pane, as a person would: the hub types nothing here.
    hub.runtime.tmux.run("send-keys", "-t", w.pane_id, "-l", "--", "turn 2")
    hub.runtime.tmux.run("send-keys", "-t", w.pane_id, "C-m")
    wait_until(lambda: route.state == "paused", 30, what="routing to pause")
    assert route.last_error is not None and "round log" in route.last_error
    wait_until(lambda: route.last_status == "error", 30, what="the blocked round to end")
    (kept,) = [r for r in hub.unlogged if r.route_id == route.id]
    assert (kept.round, kept.status, kept.extracted) == (2, "error", "Done: turn 2")
    assert kept.error is not None and "round log" in kept.error
    assert len(log_rows(hub, route)) == rows
    assert user_prompts(sink) == before
    return kept


def _recovers(hub: mh.Hub, route: mh.Route, sink: mh.Tile, kept: mh.RoundRecord) -> None:
    """Once resumed, routing carries on and the kept round is written exactly once."""
    route.resume()
    hub.send("w", "turn 3").result(30)
    wait_until(lambda: user_prompts(sink)[-1:] == ["> Done: turn 3"], 30, what="routing again")
    wait_until(lambda: log_rows(hub, route)[-1]["round"] == 3, 10, what="round 3 logged")
    rows = log_rows(hub, route)
    assert [(r["round"], r["status"]) for r in rows] == [
        (1, "delivered"),
        (2, "error"),
        (3, "delivered"),
    ]
    assert rows[1]["round_id"] == kept.round_id
    assert rows[2]["extracted"] == "Done: turn 3"
    assert hub.unlogged == []
    assert user_prompts(sink) == ["> Done: turn 1", "> Done: turn 3"]
    # A later round does not write the kept one again.
    hub.send("w", "turn 4").result(30)
    wait_until(lambda: log_rows(hub, route)[-1]["round"] == 4, 30, what="round 4 logged")
    assert list(hub.log.df["round_id"]).count(kept.round_id) == 1


def test_full_disk_pauses_routing_keeps_the_round_and_writes_it_once_after(
    tmux_socket: str, home: Path, project: Path, small_disk: Path
) -> None:
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=small_disk / "r.sqlite3"
    )
    try:
        route, w, sink = _routing_pair(hub, project)
        filler = _fill(small_disk)
        kept = _blocked_turn(hub, route, w, sink)
        filler.unlink()
        _recovers(hub, route, sink, kept)
    finally:
        hub.close()


@pytest.mark.parametrize("name", ["r.sqlite3", "new.sqlite3"], ids=["existing-log", "new-log"])
def test_hub_refuses_a_log_in_a_read_only_folder(
    tmux_socket: str, home: Path, small_disk: Path, tmp_path: Path, name: str
) -> None:
    mh.RoundLog(
        small_disk / "r.sqlite3"
    ).close()  # a log made earlier, then the folder turned read-only
    view = tmp_path / "ro"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(small_disk), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        with pytest.raises(mh.LogError, match="check its folder exists and is writable"):
            mh.Hub(socket_name=tmux_socket, log_path=view / name)
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


def test_log_reopened_read_only_under_a_hub_pauses_routing(hub: mh.Hub, project: Path) -> None:
    # The log object swapped for a read-only one (SQLite mode=ro): every append fails.
    route, w, sink = _routing_pair(hub, project)
    path = hub.log.path
    hub.log.close()
    hub.log = mh.RoundLog(path, read_only=True)
    kept = _blocked_turn(hub, route, w, sink)
    hub.log.close()
    hub.log = mh.RoundLog(path)
    _recovers(hub, route, sink, kept)


def test_hubs_in_one_process_share_one_log_file(
    tmux_socket: str, home: Path, project: Path, tmp_path: Path
) -> None:
    """Three hubs, one file: each one's routed rounds and replays are all there, once."""
    log_path = tmp_path / "shared.sqlite3"
    hubs = [
        mh.Hub(socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=log_path)
        for _ in range(3)
    ]
    try:
        routes = []
        for i, h in enumerate(hubs):
            start_standin(h, f"w{i}", cwd=project, think_s=0.1)
            start_standin(h, f"s{i}", cwd=project)
            routes.append(h.connect(f"w{i}", f"s{i}", dispatch="shadow", cooldown_ms=1000))
        _ready(*routes)
        turns = 3
        for n in range(turns):
            for f in [h.send(f"w{i}", f"hub {i} turn {n}") for i, h in enumerate(hubs)]:
                assert f.result(30).status == "delivered"
            for route in routes:
                wait_until(lambda route=route, n=n: route.rounds == n + 1, 30, what="a round")
        for h in hubs:
            h.wait_rounds_sync(2 * turns, 30)  # hand sends + routed rounds of this hub
        # Each hub replays a round another hub logged.
        first = log_rows(hubs[0], routes[0])[0]["round_id"]
        for i, h in enumerate(hubs):
            assert h.replay(first, template=f"hub {i}: {{output}}").result(60).status == "shadow"
        df = hubs[0].log.df
        assert df["round_id"].is_unique
        assert len(df) == 3 * (2 * turns) + 3
        for i, (h, route) in enumerate(zip(hubs, routes, strict=True)):
            mine = df[df["session_id"] == h.session_id]
            assert len(mine) == 2 * turns + 1
            routed = mine[(mine["route_id"] == route.id) & mine["replay_of"].isna()]
            routed = routed.sort_values("round")
            assert list(mine[mine["replay_of"] == first]["prompt"]) == [
                f"hub {i}: Done: hub 0 turn 0"
            ]
            assert list(routed["extracted"]) == [f"Done: hub {i} turn {n}" for n in range(turns)]
            assert list(routed["status"]) == ["shadow"] * turns
        with sqlite3.connect(log_path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        for h in hubs:
            h.close()


# --- concurrency ---------------------------------------------------------------------


def test_many_routes_into_one_target_never_interleave(
    hub: mh.Hub, project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sink.bin"
    names = ["s1", "s2", "s3", "s4"]
    for name in names:
        start_standin(hub, name, cwd=project, think_s=0.1)
    start_recorder(hub, "rec", out)
    routes = [
        hub.connect(n, "rec", template=_lines(n, 8) + "\n{output}", cooldown_ms=1000) for n in names
    ]
    _ready(*routes)
    sends = [hub.send(n, f"from {n}") for n in names]
    for f in sends:
        f.result(30)
    wait_until(lambda: out.read_bytes().count(SUBMIT) == 4, 60, what="four prompts")
    typed = out.read_bytes().split(SUBMIT)
    assert typed[-1] == b""
    expected = {(_lines(n, 8) + f"\nDone: from {n}").encode() for n in names}
    assert sorted(typed[:-1]) == sorted(expected)


def test_a_finished_turn_fires_once_whatever_output_follows(hub: mh.Hub, project: Path) -> None:
    w = start_standin(hub, "w", cwd=project)
    start_standin(hub, "sink1", cwd=project)
    start_standin(hub, "sink2", cwd=project)
    # Transcript keys (madoagent) and screen keys (legacy reads the terminal).
    routes = [
        hub.connect("w", sink, dispatch=dispatch, cooldown_ms=1000)
        for sink, dispatch in (("sink1", "madoagent"), ("sink2", "legacy"))
    ]
    _ready(*routes)
    hub.send("w", "once").result(30)
    for route in routes:
        _wait_rows(hub, route, 1)
    skipped = SkippedTurns(hub)
    for width in (150, 200):  # keys typed and deleted, a resize: repaints, no new turn
        before = [skipped.count(route) for route in routes]
        repaint(hub, w)
        hub.runtime.tmux.run("resize-window", "-t", w.pane_id, "-x", str(width), "-y", "50")
        for route, n in zip(routes, before, strict=True):
            assert skipped.wait(route, n) in ("already routed", "not new")
    for route in routes:
        assert route.rounds == 1
        assert len(log_rows(hub, route)) == 1


def test_pause_resume_stop_from_another_thread_during_a_delivery(
    hub: mh.Hub, project: Path
) -> None:
    start_standin(hub, "w", cwd=project, think_s=0.1)
    sink = start_standin(hub, "sink", cwd=project)
    watch = start_standin(hub, "watch", cwd=project)
    template = _lines("slow", 30) + "\n{output}"
    route = hub.connect("w", "sink", template=template, cooldown_ms=1000)
    # The witness types the same prompt into another target: when it has landed, the
    # stopped route would have landed its own too.
    witness = hub.connect("w", "watch", template=template, cooldown_ms=1000)
    _ready(route, witness)
    hub.send("w", "first").result(30)
    wait_until(lambda: "slow line 03" in sink.screen(), 30, what="typing under way")
    states: list[str] = []

    def flip() -> None:
        for action in (route.pause, route.resume, route.pause, route.resume, route.stop):
            action()
            states.append(route.state)

    worker = threading.Thread(target=flip)
    worker.start()
    worker.join(10)
    assert states == ["paused", "active", "paused", "active", "stopped"]
    (row,) = _wait_rows(hub, route, 1)
    assert row["status"] == "delivered", row["error"]  # the round under way finished
    first = template.replace("{output}", "Done: first")
    wait_until(lambda: user_prompts(sink) == [first], 20)
    assert route.state == "stopped"
    # The next turn is routed by the witness, typed in full at its target; the stopped
    # route types nothing: the sink holds the first prompt, then only a hand-sent fence
    # (deliveries into one pane are serialised, so a late round would come before it).
    hub.send("w", "second").result(30)
    second = template.replace("{output}", "Done: second")
    wait_until(lambda: user_prompts(watch) == [first, second], 60, what="the witness delivery")
    assert hub.send("sink", "fence").result(60).status == "delivered"
    wait_until(lambda: len(user_prompts(sink)) >= 2, 20, what="the fence in the sink")
    assert user_prompts(sink) == [first, "fence"]
    assert "Done: second" not in sink.screen()
    assert len(log_rows(hub, route)) == 1
    assert route.rounds == 1


def test_stopping_a_route_whose_round_waits_for_a_busy_target_types_nothing(
    hub: mh.Hub, project: Path
) -> None:
    start_standin(hub, "w", cwd=project)
    busy = start_standin(hub, "busy", cwd=project)
    route = hub.connect("w", "busy", template="late: {output}", cooldown_ms=1000)
    _ready(route)
    hub.send("busy", "[[sleep 4]] a long turn").result(30)
    wait_until(lambda: busy.state == "busy", 10)
    hub.send("w", "queued").result(30)
    wait_until(lambda: route.rounds == 1, 20, what="the round to fire and wait")
    route.stop()
    (row,) = _wait_rows(hub, route, 1, timeout_s=30)
    assert row["status"] in ("stopped", "error"), row
    assert "stopped" in row["error"]
    wait_until(lambda: busy.state == "idle", 20)
    assert user_prompts(busy) == ["[[sleep 4]] a long turn"]


def test_closing_the_hub_while_a_round_waits_still_logs_the_round(
    tmux_socket: str, home: Path, project: Path, tmp_path: Path
) -> None:
    log_path = tmp_path / "closing.sqlite3"
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=log_path)
    try:
        start_standin(hub, "w", cwd=project)
        busy = start_standin(hub, "busy", cwd=project)
        route = hub.connect("w", "busy", cooldown_ms=1000)
        _ready(route)
        hub.send("busy", "[[sleep 30]] a long turn").result(30)
        wait_until(lambda: busy.state == "busy", 10)
        hub.send("w", "queued").result(30)
        wait_until(lambda: route.rounds == 1, 20, what="the round to fire and wait")
    finally:
        hub.close()
    log = mh.RoundLog(log_path, read_only=True)
    try:
        rows = log.df[log.df["route_id"] == route.id].to_dict("records")
    finally:
        log.close()
    assert [(r["round"], r["status"]) for r in rows] == [(1, "error")]
    assert "closed" in rows[0]["error"]
