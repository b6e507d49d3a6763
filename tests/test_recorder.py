"""The round recorder: a round handed to it lands once, through cancellation and locked logs,
and the engine loop never waits on the log file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from conftest import start_recorder, wait_until

import madohub_nb as mh
from madohub_nb.io.log import RoundRecord


def _row(hub: mh.Hub, prompt: str) -> RoundRecord:
    return RoundRecord(
        route_id="send", source="", target="t", round=0, trigger="manual", transform="none",
        dispatch="madoagent", status="delivered", prompt=prompt, session_id=hub.session_id,
    )  # fmt: skip


def _locked(path: Path) -> sqlite3.Connection:
    """Another connection holding the log file's write lock until it rolls back."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_round_whose_recording_is_cancelled_on_a_locked_log_is_kept_not_lost(
    hub: mh.Hub,
) -> None:
    path = hub.log.path
    hub.log.close()
    hub.log = mh.RoundLog(path, busy_timeout_ms=300)
    holder = _locked(path)
    try:
        first = _row(hub, "typed while the log was locked")
        recording = hub.engine.submit(hub.runtime.recorder.record(first))
        wait_until(lambda: hub.runtime.recorder.pending == 1, 10, what="the write under way")
        recording.cancel()  # close() or an interrupt while the append waits on the lock
        kept = lambda: first.round_id in {r.round_id for r in hub.unlogged}  # noqa: E731
        wait_until(kept, 10, what="the refused round in hub.unlogged")
    finally:
        holder.rollback()
        holder.close()
    second = _row(hub, "after the lock")
    hub.engine.run_sync(hub.runtime.recorder.record(second), 10)
    ids = set(hub.log.df["round_id"])
    assert {first.round_id, second.round_id} <= ids  # the kept round was written, once
    assert list(hub.log.df["round_id"]).count(first.round_id) == 1
    assert not hub.unlogged


def test_closing_the_hub_mid_record_still_writes_the_round(
    tmux_socket: str, home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "log.sqlite3"
    hub = mh.Hub(socket_name=tmux_socket, log_path=path)
    rec = _row(hub, "recorded as the hub closed")
    hub.engine.submit(hub.runtime.recorder.record(rec))
    hub.close()
    with mh.RoundLog(path, read_only=True) as log:
        assert rec.round_id in set(log.df["round_id"])


def test_the_engine_loop_answers_while_the_log_is_locked_before_typing(
    hub: mh.Hub, tmp_path: Path
) -> None:
    """The writability check before typing waits on the lock in a worker thread, not the loop."""
    out = tmp_path / "typed.bin"
    start_recorder(hub, "sink", out)
    holder = _locked(hub.log.path)
    try:
        sent = hub.send("sink", "hello while locked")
        for _ in range(20):  # about 2 s of a 5 s busy timeout: the loop must answer each time
            hub.engine.run_sync(asyncio.sleep(0.1), 2.0)
        assert not sent.done()  # (still waiting on the lock: nothing typed yet)
        assert b"hello" not in out.read_bytes()
    finally:
        holder.rollback()
        holder.close()
    rec = sent.result(30)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: b"hello while locked" in out.read_bytes(), 10, what="the text typed")
