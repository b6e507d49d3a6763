"""The round log: durable, append-only, shared between processes, free of secrets.

Every test uses real SQLite files under ``tmp_path`` and real child processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, wait_until, write_lock_held

from madohub_nb.errors import LogError, MadohubValueError
from madohub_nb.io.log import (
    ROUND_COLUMNS,
    SCHEMA_VERSION,
    RoundLog,
    RoundRecord,
    default_log_path,
)

ANTHROPIC_KEY = "sk-ant-api03-" + "Zx9_Qw-" * 12 + "AA"
OTHER_KEY = "sk-proj-" + "a1B2c3D4" * 5


def make_record(n: int = 1, **fields: object) -> RoundRecord:
    """A plain delivered round; ``fields`` override any column."""
    values: dict[str, object] = {
        "route_id": "route-1",
        "source": "writer",
        "target": "reviewer",
        "round": n,
        "trigger": "on-idle",
        "transform": "prompt-wrap",
        "dispatch": "madoagent",
        "status": "delivered",
        "prompt": f"prompt {n}",
    }
    values.update(fields)
    return RoundRecord(**values)  # type: ignore[arg-type]


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def file_bytes(path: Path) -> bytes:
    """The log and its WAL, as they are on disk."""
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


APPENDER = """
import sys
from madohub_nb.io.log import RoundLog, RoundRecord
path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = RoundLog(path)
n = 0
while count < 0 or n < count:
    n += 1
    rec = RoundRecord(route_id=name, source=name, target="t", round=n, trigger="on-idle",
                      transform="raw", dispatch="madoagent", status="delivered", prompt="x" * 200)
    log.append(rec)
    print(rec.round_id, flush=True)
"""


def start_appender(path: Path, name: str, count: int) -> subprocess.Popen[str]:
    """A child process appending ``count`` rounds (forever if < 0), printing each id once committed."""
    return subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(path), name, str(count)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def log(tmp_path: Path) -> Iterator[RoundLog]:
    with RoundLog(tmp_path / "rounds.sqlite3") as opened:
        yield opened


@pytest.fixture
def frozen(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A folder made unwritable for real, even for root (``chattr +i``); else ``chmod``."""
    folder = tmp_path / "frozen"
    folder.mkdir()
    if os.geteuid() != 0:
        how = "chmod"
    elif shutil.which("chattr") and subprocess.run(["chattr", "+i", folder]).returncode == 0:
        subprocess.run(["chattr", "-i", folder], check=True)
        how = "chattr"
    else:
        pytest.skip("running as root without chattr: no way to make a folder read-only")
    yield how, folder
    if how == "chattr":
        for p in [folder, *folder.iterdir()]:
            subprocess.run(["chattr", "-i", p], check=False)
    else:
        folder.chmod(0o755)
        for p in folder.iterdir():
            p.chmod(0o644)


def freeze(how: str, path: Path) -> None:
    if how == "chattr":
        subprocess.run(["chattr", "+i", path], check=True)
    else:
        path.chmod(0o555 if path.is_dir() else 0o444)


# Round trip and order --------------------------------------------------------


def test_every_field_round_trips_through_the_file(tmp_path: Path) -> None:
    fired = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=9)))
    rec = RoundRecord(
        route_id="writer->reviewer",
        source="writer",
        target="reviewer",
        round=3,
        trigger="on-keyword",
        transform="ai-routing",
        dispatch="legacy",
        fired_at=fired,
        extracted="the answer ✓\nline two",
        extraction_method="jsonl",
        extraction_path="/home/u/.claude/projects/-p/abc.jsonl",
        prompt="Review this:\nthe answer ✓",
        delivered_at=fired + timedelta(seconds=2),
        status="delivered",
        error="none really",
        extract_ms=1.5,
        transform_ms=2.25,
        deliver_ms=300.0,
        latency_ms=2000.125,
        replay_of="0" * 32,
        delivery_mode="paste",
        template="Review this:\n{output}",
        session_id="hub-42",
        meta={"tokens": 12, "nested": {"ok": True, "list": [1, None, "x"]}},
    )
    path = tmp_path / "rounds.sqlite3"
    with RoundLog(path) as first:
        first.append(rec)
    with RoundLog(path) as again:
        got = again.get(rec.round_id)
        row = again.df.iloc[0]
    assert got == rec
    assert got.fired_at.utcoffset() == timedelta(0)
    assert got.fired_at == fired
    assert row["fired_at"] == pd.Timestamp(fired)
    assert row["delivered_at"] - row["fired_at"] == pd.Timedelta(seconds=2)
    assert row["meta"] == rec.meta
    assert row["latency_ms"] == 2000.125
    assert row["extraction_method"] == "jsonl"


def test_rounds_come_back_in_append_order(log: RoundLog) -> None:
    # Round numbers out of order, to see that order is the append order, not a sort.
    numbers = [5, 1, 4, 2, 3]
    records = [make_record(n) for n in numbers]
    for rec in records:
        log.append(rec)
    assert log.df["round"].tolist() == numbers
    assert log.df["round_id"].tolist() == [r.round_id for r in records]
    assert log.tail(2) == records[-2:]
    assert log.tail(0) == []
    assert log.since(0) == records
    assert log.since(3) == records[3:]
    assert log.since(1, limit=2) == records[1:3]
    assert len(log) == log.last_rowid == 5


def test_a_reader_cursor_sees_only_new_rounds(log: RoundLog) -> None:
    log.append(make_record(1))
    cursor = log.last_rowid
    fresh = [make_record(2), make_record(3)]
    for rec in fresh:
        log.append(rec)
    new = log.since(cursor)
    assert new == fresh
    assert cursor + len(new) == log.last_rowid
    assert log.since(log.last_rowid) == []


def test_a_second_log_on_the_same_file_sees_earlier_and_live_rounds(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    first = RoundLog(path)
    old = make_record(1)
    first.append(old)
    first.close()
    with RoundLog(path) as second, RoundLog(path) as third:
        assert second.get(old.round_id) == old
        live = make_record(2)
        third.append(live)
        assert [r.round_id for r in second.tail(5)] == [old.round_id, live.round_id]


def test_threads_can_share_one_log(log: RoundLog) -> None:
    def append_many(name: str) -> None:
        for n in range(1, 101):
            log.append(make_record(n, source=name))

    threads = [threading.Thread(target=append_many, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    frame = log.df
    assert len(frame) == 400
    for name, group in frame.groupby("source"):
        assert group["round"].tolist() == list(range(1, 101)), name


# Processes -------------------------------------------------------------------


def test_two_processes_appending_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    children = [start_appender(path, name, 500) for name in ("alpha", "beta")]
    printed: dict[str, list[str]] = {}
    for name, child in zip(("alpha", "beta"), children, strict=True):
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        printed[name] = out.split()
    assert integrity(path) == "ok"
    with RoundLog(path) as log:
        frame = log.df
    assert len(frame) == 1000
    assert frame["round_id"].is_unique
    for name, ids in printed.items():
        mine = frame[frame["source"] == name]
        assert mine["round_id"].tolist() == ids
        assert mine["round"].tolist() == list(range(1, 501))


def test_sigkill_while_appending_keeps_every_committed_round(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    child = start_appender(path, "victim", -1)
    assert child.stdout is not None
    committed: list[str] = []
    try:
        while len(committed) < 300:
            line = child.stdout.readline()
            assert line, f"appender died early: {child.stderr.read() if child.stderr else ''}"
            committed.append(line.strip())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    # Lines already in the reader's buffer count too (communicate() would skip them).
    committed += child.stdout.read().split()
    child.stdout.close()
    if child.stderr is not None:
        child.stderr.close()
    assert integrity(path) == "ok"
    with RoundLog(path) as reopened:
        ids = reopened.df["round_id"].tolist()
        # Every id the child printed was committed; at most the one in flight is extra.
        assert ids[: len(committed)] == committed
        assert len(ids) - len(committed) in (0, 1)
        after = make_record(1)
        reopened.append(after)
        assert reopened.get(after.round_id) == after


# Failures ----------------------------------------------------------------------


def test_read_only_log_reads_but_refuses_appends(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    with RoundLog(path) as writer:
        old = make_record(1)
        writer.append(old)
        with RoundLog(path, read_only=True) as reader:
            assert reader.get(old.round_id) == old
            with pytest.raises(LogError, match="read-?only") as err:
                reader.append(make_record(2))
            assert str(path) in str(err.value)
            with pytest.raises(LogError, match="read-?only"):
                reader.ensure_writable()
            later = make_record(3)
            writer.append(later)
            assert reader.since(1) == [later]
    assert integrity(path) == "ok"


def test_read_only_open_of_a_missing_file_says_so(tmp_path: Path) -> None:
    path = tmp_path / "nothing.sqlite3"
    with pytest.raises(LogError, match="does not exist"):
        RoundLog(path, read_only=True)
    assert not path.exists()


def test_new_log_in_a_read_only_folder_raises_log_error(frozen: tuple[str, Path]) -> None:
    how, folder = frozen
    freeze(how, folder)
    path = folder / "rounds.sqlite3"
    with pytest.raises(LogError, match="rounds.sqlite3") as err:
        RoundLog(path)
    assert "writable" in str(err.value)
    assert not path.exists()


def test_read_only_log_file_refuses_appends_but_still_reads(frozen: tuple[str, Path]) -> None:
    how, folder = frozen
    path = folder / "rounds.sqlite3"
    with RoundLog(path) as log:
        old = make_record(1)
        log.append(old)
    freeze(how, path)
    with RoundLog(path) as log:
        assert log.get(old.round_id) == old
        with pytest.raises(LogError, match="read-?only"):
            log.ensure_writable()
        with pytest.raises(LogError, match="read-?only"):
            log.append(make_record(2))
        assert len(log) == 1


def test_full_disk_raises_log_error_and_keeps_earlier_rounds(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    big = "y" * 3000
    kept: list[RoundRecord] = []
    with RoundLog(path, max_bytes=64 * 1024) as log:
        with pytest.raises(LogError, match="full") as err:
            for n in range(1, 1000):
                rec = make_record(n, prompt=big)
                log.append(rec)
                kept.append(rec)
        assert str(path) in str(err.value)
        assert "free some space" in str(err.value)
        assert kept, "the cap should allow a few rounds first"
        with pytest.raises(LogError, match="full"):
            log.ensure_writable()
        assert log.df["round_id"].tolist() == [r.round_id for r in kept]
    assert integrity(path) == "ok"


def test_ensure_writable_fails_on_a_full_log_before_append_does(tmp_path: Path) -> None:
    """The probe is round-sized, so a nearly full log pauses routing instead of failing mid-round."""
    with RoundLog(tmp_path / "r.sqlite3", max_bytes=64 * 1024) as log:
        while True:
            try:
                log.ensure_writable()
            except LogError:
                break
            log.append(make_record(1, prompt="z" * 2000))
        count = len(log)
        assert count > 0
        assert len(log) == count  # the probe itself adds nothing


def test_ensure_writable_leaves_no_trace(log: RoundLog) -> None:
    log.append(make_record(1))
    for _ in range(3):
        log.ensure_writable()
    assert len(log) == 1
    with sqlite3.connect(log.path) as raw:
        assert raw.execute("SELECT count(*) FROM write_probe").fetchone()[0] == 0


def test_a_log_locked_too_long_raises_log_error(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    RoundLog(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with RoundLog(path, busy_timeout_ms=100) as log:
            with pytest.raises(LogError, match="locked"):
                log.ensure_writable()
            with pytest.raises(LogError, match="locked") as err:
                log.append(make_record(1))
            assert "100 ms" in str(err.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with RoundLog(path) as log:
        assert len(log) == 0


def test_redaction_never_waits_for_an_append_on_a_locked_file(tmp_path: Path) -> None:
    """Another process holds the file's write lock; an append waits for it in a thread.

    Redacting (what ``tile.screen()``, ``history()`` and recording on the engine loop
    do) must return while that append still waits: the lock is released only after.
    """
    path = tmp_path / "rounds.sqlite3"
    secret = "hunter2-is-my-password"
    with RoundLog(path, secrets=[secret], busy_timeout_ms=60_000) as log:
        with write_lock_held(path):
            appender = threading.Thread(target=log.append, args=(make_record(1),), daemon=True)
            appender.start()
            # The append holds the log's own lock while SQLite waits on the file.
            wait_until(lambda: log._lock.locked(), what="the append waiting on the locked file")
            done: dict[str, object] = {}

            def redact() -> None:
                done["text"] = log.redact_text(f"pw {secret}")
                done["rec"] = log.redact(make_record(2, prompt=f"say {secret}"))
                log.register_secret("another-secret-value")
                log.register_env_secrets()
                done["append still waiting"] = log._lock.locked() and appender.is_alive()

            redactor = threading.Thread(target=redact, daemon=True)
            redactor.start()
            redactor.join(30)  # today's fix returns in ms; before it, only the release ended it
            assert not redactor.is_alive(), "redaction waited for the append on the locked file"
            assert done["append still waiting"] is True
            assert done["text"] == "pw [redacted]"
            assert isinstance(done["rec"], RoundRecord) and done["rec"].prompt == "say [redacted]"
        appender.join(30)
        assert not appender.is_alive() and len(log) == 1
        assert log.redact_text("another-secret-value") == "[redacted]"


def test_duplicate_round_id_is_refused(log: RoundLog) -> None:
    rec = make_record(1)
    log.append(rec)
    with pytest.raises(LogError, match=rec.round_id):
        log.append(make_record(2, round_id=rec.round_id))
    assert len(log) == 1
    log.append(make_record(3))
    assert len(log) == 2


@pytest.mark.parametrize(
    "content",
    [
        b"this is a text file, not a log\n" * 20,
        bytes(range(256)) * 8,
        b"SQLite format 3\x00" + b"\xff" * 4000,
    ],
    ids=["text", "binary", "sqlite-header-then-garbage"],
)
def test_a_file_that_is_not_a_log_is_refused_and_left_untouched(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "rounds.sqlite3"
    path.write_bytes(content)
    with pytest.raises(LogError, match="left untouched") as err:
        RoundLog(path)
    assert str(path) in str(err.value)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rounds.sqlite3"]


def test_another_apps_sqlite_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as other:
        other.execute("CREATE TABLE notes (body TEXT)")
        other.execute("INSERT INTO notes VALUES ('keep me')")
    other.close()
    before = path.read_bytes()
    with pytest.raises(LogError, match="not a madohub round log.*notes"):
        RoundLog(path)
    assert path.read_bytes() == before


ENDLESS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r)"


@pytest.mark.parametrize(
    "crafted",
    [
        # appending a round would never return
        f"CREATE TRIGGER spin AFTER INSERT ON rounds BEGIN SELECT max(i) FROM ({ENDLESS} SELECT i FROM r); END",
        # reading hub.log.df would never return
        f"CREATE VIEW spin AS {ENDLESS} SELECT i FROM r",
        # one of ours in name, not in body
        "DROP TRIGGER rounds_delete_drops_chunk; CREATE TRIGGER rounds_delete_drops_chunk "
        f"AFTER DELETE ON rounds BEGIN SELECT max(i) FROM ({ENDLESS} SELECT i FROM r); END",
    ],
)
def test_a_log_with_sql_of_its_own_is_refused_and_left_untouched(
    crafted: str, tmp_path: Path
) -> None:
    path = tmp_path / "rounds.sqlite3"
    RoundLog(path).close()
    with sqlite3.connect(path) as raw:
        raw.executescript(crafted)
    raw.close()
    before = path.read_bytes()
    with pytest.raises(LogError, match="madohub never writes.*left untouched"):
        RoundLog(path)
    with pytest.raises(LogError, match="madohub never writes"):
        RoundLog(path, read_only=True)
    assert path.read_bytes() == before


def test_a_log_from_a_newer_version_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    RoundLog(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    raw.close()
    before = path.read_bytes()
    with pytest.raises(LogError, match=f"newer madohub_nb \\(schema {SCHEMA_VERSION + 1}"):
        RoundLog(path)
    assert path.read_bytes() == before


def test_a_folder_as_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="is a folder"):
        RoundLog(tmp_path)


def test_a_closed_log_says_so(tmp_path: Path) -> None:
    log = RoundLog(tmp_path / "r.sqlite3")
    log.close()
    log.close()
    assert log.closed
    with pytest.raises(LogError, match="closed"):
        log.append(make_record(1))
    with pytest.raises(LogError, match="closed"):
        _ = log.df
    assert "closed" in repr(log)


# Secrets -----------------------------------------------------------------------


def test_no_secret_reaches_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_key = "proxy-token-" + "q7" * 10
    registered = "corp secret with spaces 123"
    monkeypatch.setenv("ANTHROPIC_API_KEY", env_key)
    path = tmp_path / "rounds.sqlite3"
    with RoundLog(path, secrets=[registered]) as log:
        later = "registered-later-" + "w" * 10
        log.register_secret(later)
        rec = make_record(
            1,
            prompt=f"use {ANTHROPIC_KEY} please",
            extracted=f"export OPENAI_API_KEY={OTHER_KEY}",
            error=f"auth failed for {env_key}",
            template=f"{{output}} {registered}",
            status="error",
            meta={"headers": {"x-api-key": ANTHROPIC_KEY}, later: [later]},
        )
        log.append(rec)
        stored = log.get(rec.round_id)
        assert stored.prompt == "use [redacted] please"
        assert stored.extracted == "export OPENAI_API_KEY=[redacted]"
        assert stored.error == "auth failed for [redacted]"
        assert stored.template == "{output} [redacted]"
        assert stored.meta == {"headers": {"x-api-key": "[redacted]"}, "[redacted]": ["[redacted]"]}
        assert rec.prompt == f"use {ANTHROPIC_KEY} please"  # the caller's record is not changed
        assert ANTHROPIC_KEY not in repr(log) and env_key not in repr(log)
    raw = file_bytes(path)
    for secret in (ANTHROPIC_KEY, OTHER_KEY, env_key, registered, later, "sk-ant-"):
        assert secret.encode() not in raw, secret


def test_ordinary_words_that_contain_sk_are_kept(log: RoundLog) -> None:
    text = "the task-scheduler-for-nightly-builds and risk-assessment-of-the-release-plan"
    rec = make_record(1, prompt=text)
    log.append(rec)
    assert log.get(rec.round_id).prompt == text


def test_a_too_short_secret_is_refused(log: RoundLog) -> None:
    with pytest.raises(MadohubValueError, match="at least 8 characters"):
        log.register_secret("abc")


# DataFrame ---------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 50])
def test_df_has_the_documented_columns_and_dtypes(log: RoundLog, count: int) -> None:
    for n in range(1, count + 1):
        log.append(make_record(n, latency_ms=float(n), delivered_at=datetime.now(timezone.utc)))
    frame = log.df
    assert list(frame.columns) == list(ROUND_COLUMNS)
    assert len(frame) == count
    dtypes = frame.dtypes.astype(str).to_dict()
    assert dtypes["fired_at"] == dtypes["delivered_at"] == "datetime64[us, UTC]"
    assert dtypes["round"] == "int64"
    for name in ("extract_ms", "transform_ms", "deliver_ms", "latency_ms"):
        assert dtypes[name] == "float64", name
    assert dtypes["meta"] == "object"
    for name in ("round_id", "prompt", "error", "status", "replay_of"):
        assert dtypes[name] == "object", name
    # An empty log and a full one have the same schema, so frames concatenate cleanly.
    assert frame.dtypes.equals(RoundLog(":memory:").df.dtypes)
    if count:
        assert frame["latency_ms"].tolist() == [float(n) for n in range(1, count + 1)]
        assert frame["error"].tolist() == [None] * count
        assert frame["prompt"].tolist() == [f"prompt {n}" for n in range(1, count + 1)]
        assert all(m == {} for m in frame["meta"])


def test_df_of_many_rounds_matches_the_records(log: RoundLog) -> None:
    start = datetime(2025, 6, 1, tzinfo=timezone.utc)
    records = [
        make_record(
            n % 7,
            fired_at=start + timedelta(milliseconds=n),
            delivered_at=None if n % 3 else start + timedelta(seconds=n),
            status="shadow" if n % 2 else "delivered",
            meta={"n": n},
        )
        for n in range(300)
    ]
    for rec in records:
        log.append(rec)
    frame = log.df
    assert frame["fired_at"].tolist() == [pd.Timestamp(r.fired_at) for r in records]
    assert frame["delivered_at"].isna().tolist() == [r.delivered_at is None for r in records]
    assert frame["status"].tolist() == [r.status for r in records]
    assert [m["n"] for m in frame["meta"]] == list(range(300))


def test_df_read_in_steps_equals_df_read_at_once(tmp_path: Path) -> None:
    """Later df calls add only the new rounds, from this log and another; the frame is the same."""
    path = tmp_path / "rounds.sqlite3"
    start = datetime(2025, 6, 1, tzinfo=timezone.utc)
    with RoundLog(path) as log, RoundLog(path) as other:
        assert len(log.df) == 0
        for n in range(1, 6):
            log.append(make_record(n, fired_at=start + timedelta(seconds=n), meta={"n": n}))
        assert len(log.df) == 5
        for n in range(6, 9):  # another writer on the same file: all-None and NaT columns too
            other.append(make_record(n, delivered_at=None, latency_ms=None, error="boom"))
        stepped = log.df
        assert len(stepped) == 8
        assert len(log.df) == 8  # nothing new: the same rows again
    with RoundLog(path) as fresh:
        at_once = fresh.df
    pd.testing.assert_frame_equal(stepped, at_once)
    assert stepped["round"].tolist() == list(range(1, 9))
    assert stepped["error"].tolist() == [None] * 5 + ["boom"] * 3


def test_changing_a_returned_df_leaves_the_next_one_as_it_was(log: RoundLog) -> None:
    for n in range(1, 4):
        log.append(make_record(n))
    first = log.df
    first.loc[0, "status"] = "changed"
    first["round"] = 99
    first.iloc[1, first.columns.get_loc("source")] = "changed"
    again = log.df
    assert again["status"].tolist() == ["delivered"] * 3
    assert again["round"].tolist() == [1, 2, 3]
    assert again["source"].tolist() == ["writer"] * 3


def test_df_of_a_file_replaced_under_the_log_is_read_afresh(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    with RoundLog(path) as log:
        for n in range(1, 4):
            log.append(make_record(n, source="old"))
        assert log.df["source"].tolist() == ["old"] * 3
        # Another process empties the table and writes new rounds (rowids start again at 1).
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM rounds")
        with RoundLog(path) as other:
            for n in range(1, 5):
                other.append(make_record(n, source="new"))
        assert log.df["source"].tolist() == ["new"] * 4


# Input checks and defaults -----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status": "done"}, "unknown round status 'done'; allowed: delivered"),
        ({"fired_at": datetime(2025, 1, 1)}, "timezone-aware"),
        ({"round": -1}, "whole number >= 0"),
        ({"extraction_method": "ocr"}, "allowed: channel, hook, jsonl, rollout, session, terminal"),
        ({"turn_signal": "psychic"}, "allowed: channel, hook, status, transcript, screen, quiet"),
        ({"delivery_mode": "carrier-pigeon"}, "allowed: typed, paste, channel"),
        ({"latency_ms": "fast"}, "milliseconds"),
        ({"round_id": ""}, "round_id must be a non-empty string"),
        ({"source": None}, "source must be a string"),
    ],
)
def test_bad_records_are_refused_with_a_teaching_error(
    log: RoundLog, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(MadohubValueError, match=message.replace("(", "\\(")):
        log.append(make_record(1, **fields))
    assert len(log) == 0


def test_get_of_an_unknown_round_names_it(log: RoundLog) -> None:
    with pytest.raises(MadohubValueError, match="no round 'nope'"):
        log.get("nope")


def test_default_path_follows_madohub_log_then_xdg_then_home(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MADOHUB_LOG", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert default_log_path() == home / ".local/share/madohub_nb/rounds.sqlite3"
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    assert default_log_path() == home / "data/madohub_nb/rounds.sqlite3"
    monkeypatch.setenv("MADOHUB_LOG", "~/logs/mine.sqlite3")
    assert default_log_path() == home / "logs/mine.sqlite3"
    with RoundLog() as log:
        log.append(make_record(1))
        assert log.path == home / "logs/mine.sqlite3"
    assert (home / "logs/mine.sqlite3").is_file()


def test_repr_names_the_path_and_count(log: RoundLog) -> None:
    log.append(make_record(1))
    assert repr(log) == f"RoundLog({str(log.path)!r}, rounds=1)"


def test_meta_is_stored_as_json_readable_by_other_tools(log: RoundLog) -> None:
    log.append(make_record(1, meta={"model": "m", "tokens": [1, 2]}))
    with sqlite3.connect(log.path) as raw:
        stored, fired = raw.execute("SELECT meta, fired_at FROM rounds").fetchone()
    assert json.loads(stored) == {"model": "m", "tokens": [1, 2]}
    assert datetime.fromisoformat(fired).utcoffset() == timedelta(0)


def test_meta_values_that_are_not_json_are_stored_as_text_without_secrets(log: RoundLog) -> None:
    """The engine logs every round, so odd meta values are kept as text rather than refused."""
    failure = RuntimeError(f"401 for key {ANTHROPIC_KEY}")
    rec = make_record(
        1, meta={"when": datetime(2025, 1, 2, tzinfo=timezone.utc), "exc": failure, 7: (1, 2)}
    )
    log.append(rec)
    assert log.get(rec.round_id).meta == {
        "when": "2025-01-02 00:00:00+00:00",
        "exc": "401 for key [redacted]",
        "7": [1, 2],
    }


def test_rows_with_equal_meta_each_get_a_dict_of_their_own(log: RoundLog) -> None:
    for n in range(3):
        log.append(make_record(n + 1, meta={"k": 1, "paths": ["a"]} if n < 2 else {"k": 1}))
    log.append(make_record(4, meta={"k": 1}))
    metas = log.df["meta"].tolist()
    assert metas == [{"k": 1, "paths": ["a"]}] * 2 + [{"k": 1}] * 2
    assert metas[0] is not metas[1] and metas[0]["paths"] is not metas[1]["paths"]
    assert metas[2] is not metas[3]
