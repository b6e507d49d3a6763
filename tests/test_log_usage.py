"""The round log's usage and cost columns, and the migration of logs written before them."""

from __future__ import annotations

import json
import math
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from madohub_nb.errors import MadohubValueError
from madohub_nb.io.log import COUNT_COLUMNS, SCHEMA_VERSION, RoundLog, RoundRecord

USAGE_COLUMNS = (
    "model",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "turn_ms",
    "tool_calls",
    "ai_model",
    "ai_input_tokens",
    "ai_output_tokens",
    "cost_usd",
)

# Schema 1, exactly as madohub_nb wrote it before the usage columns (io/log.py at 77ee226).
SCHEMA_1 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    'CREATE TABLE rounds (seq INTEGER PRIMARY KEY, "round_id" TEXT NOT NULL UNIQUE, '
    '"route_id" TEXT NOT NULL, "source" TEXT NOT NULL, "target" TEXT NOT NULL, '
    '"round" INTEGER NOT NULL, "trigger" TEXT NOT NULL, "transform" TEXT NOT NULL, '
    '"dispatch" TEXT NOT NULL, "fired_at" TEXT NOT NULL, "extracted" TEXT, '
    '"extraction_method" TEXT, "extraction_path" TEXT, "prompt" TEXT, "delivered_at" TEXT, '
    '"status" TEXT NOT NULL, "error" TEXT, "extract_ms" REAL, "transform_ms" REAL, '
    '"deliver_ms" REAL, "latency_ms" REAL, "replay_of" TEXT, "delivery_mode" TEXT, '
    '"template" TEXT, "session_id" TEXT, "meta" TEXT NOT NULL)',
    "CREATE TABLE write_probe (x BLOB)",
)
COLUMNS_1 = (
    "round_id, route_id, source, target, round, trigger, transform, dispatch, fired_at, "
    "extracted, extraction_method, extraction_path, prompt, delivered_at, status, error, "
    "extract_ms, transform_ms, deliver_ms, latency_ms, replay_of, delivery_mode, template, "
    "session_id, meta"
)


def write_schema_1_log(path: Path, rounds: int) -> None:
    """A log file as the previous version left it: WAL, meta rows, pragmas, ``rounds`` rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in SCHEMA_1:
        conn.execute(statement)
    conn.executemany(
        "INSERT INTO meta (key, value) VALUES (?, ?)",
        [("app", "madohub_nb"), ("schema_version", "1")],
    )
    conn.execute("PRAGMA application_id = 1296584258")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("PRAGMA journal_mode = WAL")
    for i in range(rounds):
        conn.execute(
            f"INSERT INTO rounds ({COLUMNS_1}) VALUES "
            "(?, 'r1', 'writer', 'reviewer', ?, 'on-idle', 'prompt-wrap', 'madoagent', ?, "
            "?, 'jsonl', '/t.jsonl', ?, ?, 'delivered', NULL, 1.5, 0.2, 900.0, 1200.0, NULL, "
            "'typed', NULL, 'sess', ?)",
            (
                f"old{i}",
                i + 1,
                f"2026-11-30T10:0{i}:00.000000+00:00",
                f"answer {i}",
                f"prompt {i}",
                f"2026-11-30T10:0{i}:01.000000+00:00",
                json.dumps({"submit_attempts": 1}),
            ),
        )
    conn.close()


def record(**usage: object) -> RoundRecord:
    return RoundRecord(
        route_id="r2",
        source="writer",
        target="reviewer",
        round=1,
        trigger="on-idle",
        transform="ai-routing",
        dispatch="madoagent",
        status="delivered",
        fired_at=datetime(2026, 12, 1, tzinfo=timezone.utc),
        **usage,  # type: ignore[arg-type]
    )


FULL = {
    "model": "claude-sonnet-4-5-20250929",
    "input_tokens": 12,
    "output_tokens": 345,
    "cache_read_tokens": 6789,
    "cache_write_tokens": 1011,
    "turn_ms": 4321.0,
    "tool_calls": 3,
    "ai_model": "claude-haiku-4-5",
    "ai_input_tokens": 500,
    "ai_output_tokens": 60,
    "cost_usd": 0.0123,
}


def test_a_schema_1_log_opens_shows_the_new_columns_empty_and_keeps_appending(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite3"
    write_schema_1_log(path, rounds=3)
    with RoundLog(path) as log:
        df = log.df
        assert list(df["round_id"]) == ["old0", "old1", "old2"]
        assert list(df["prompt"]) == ["prompt 0", "prompt 1", "prompt 2"]
        assert list(df["latency_ms"]) == [1200.0] * 3
        assert df["meta"][0] == {"submit_attempts": 1}
        for name in USAGE_COLUMNS:
            assert df[name].isna().all(), name
        log.append(record(**FULL))
    with RoundLog(path) as log:
        df = log.df
        assert len(df) == 4 and df["round_id"][3] != "old0"
        assert {name: df[name][3] for name in USAGE_COLUMNS} == FULL
        assert df[list(COUNT_COLUMNS)].dtypes.eq("float64").all()
        assert log.get("old1").prompt == "prompt 1" and log.get("old1").input_tokens is None
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()


def test_a_schema_1_log_opened_read_only_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    write_schema_1_log(path, rounds=2)
    before = path.read_bytes()
    with RoundLog(path, read_only=True) as log:
        df = log.df
        assert list(df["extracted"]) == ["answer 0", "answer 1"]
        assert df["cost_usd"].isna().all() and df["model"].isna().all()
        assert [r.tool_calls for r in log.tail(5)] == [None, None]
    assert path.read_bytes() == before
    # A writer opened later migrates it.
    with RoundLog(path) as log:
        log.append(record(input_tokens=1))
        assert list(log.df["input_tokens"].isna()) == [True, True, False]


def test_two_hubs_opening_one_old_log_migrate_it_once(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    write_schema_1_log(path, rounds=1)
    with RoundLog(path) as first, RoundLog(path) as second:
        first.append(record(output_tokens=5))
        second.append(record(output_tokens=6))
        assert list(second.df["output_tokens"].fillna(-1)) == [-1, 5, 6]


def test_screen_rounds_leave_every_usage_column_empty(tmp_path: Path) -> None:
    with RoundLog(tmp_path / "log.sqlite3") as log:
        log.append(record())
        row = log.df.iloc[0]
        assert all(pd.isna(row[name]) for name in USAGE_COLUMNS)


def test_a_nan_cost_is_stored_as_empty(tmp_path: Path) -> None:
    with RoundLog(tmp_path / "log.sqlite3") as log:
        log.append(record(model="someone-elses-model", input_tokens=3, cost_usd=math.nan))
        df = log.df
        assert math.isnan(df["cost_usd"][0]) and df["input_tokens"][0] == 3.0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("input_tokens", -1),
        ("output_tokens", 1.5),
        ("tool_calls", True),
        ("ai_input_tokens", "12"),
        ("cost_usd", -0.01),
        ("cost_usd", "free"),
        ("model", 4),
        ("ai_model", ["x"]),
    ],
)
def test_bad_usage_values_are_refused_with_the_column_named(name: str, value: object) -> None:
    with RoundLog(":memory:") as log, pytest.raises(MadohubValueError, match=name):
        log.append(record(**{name: value}))
