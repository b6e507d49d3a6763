"""Round log benchmarks: durable append time and the cost of ``RoundLog.df``.

Run: ``.venv/bin/python benchmarks/bench_log.py [--quick]``. Prints one line
per target, ``name: value (target …) baseline …``, where the baseline is the
plainest way to do the same job, measured in the same run:

- append: bare ``sqlite3`` INSERT + commit of one small row, same WAL/NORMAL file settings;
- dataframe: ``pd.DataFrame(list_of_dicts)`` of the same rounds already in memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd

from madohub_nb.io import log as log_module
from madohub_nb.io.log import RoundLog, RoundRecord

APPEND_TARGET_MS = 2.0
DATAFRAME_TARGET_S = 1.0
EXTRACTED = "The review found three issues in parser.py: " + "details " * 50
PROMPT = "Review this:\n" + EXTRACTED + "\nReply LGTM when it is fine."


def make_record(n: int, start: datetime) -> RoundRecord:
    """A realistic delivered round (about 1 KB of text)."""
    fired = start + timedelta(seconds=n)
    return RoundRecord(
        route_id=f"route-{n % 4}",
        source="writer",
        target="reviewer",
        round=n % 20 + 1,
        trigger="on-idle",
        transform="prompt-wrap",
        dispatch="madoagent",
        fired_at=fired,
        extracted=EXTRACTED,
        extraction_method="jsonl",
        extraction_path="/home/u/.claude/projects/-home-u-proj/0b7c.jsonl",
        prompt=PROMPT,
        delivered_at=fired + timedelta(milliseconds=1800),
        status="delivered",
        extract_ms=2.5,
        transform_ms=0.1,
        deliver_ms=1700.0,
        latency_ms=1803.2,
        delivery_mode="typed",
        template="Review this:\n{output}\nReply LGTM when it is fine.",
        session_id="bench",
        meta={"submit_attempts": 1, "submit_verified": True},
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_append(folder: Path, count: int) -> tuple[list[float], list[float]]:
    """Per-round durable append times (ms) through RoundLog, and of a bare sqlite3 insert."""
    start = datetime.now(timezone.utc)
    records = [make_record(n, start) for n in range(count)]
    ours: list[float] = []
    with RoundLog(folder / "append.sqlite3") as log:
        for rec in records:
            t0 = time.perf_counter()
            log.append(rec)
            ours.append((time.perf_counter() - t0) * 1000)

    bare: list[float] = []
    conn = sqlite3.connect(folder / "bare.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    for rec in records:
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t (body) VALUES (?)", (rec.prompt,))
        conn.execute("COMMIT")
        bare.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return ours, bare


def fill(path: Path, records: list[RoundRecord]) -> None:
    """Write ``records`` in one transaction (filling 100k rows one commit at a time is slow).

    Uses the log's own row conversion, so the file is exactly what appends write.
    """
    RoundLog(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(log_module._INSERT, (RoundLog._row(rec) for rec in records))
    conn.execute("COMMIT")
    conn.close()


def best_of(repeats: int, build: Callable[[], pd.DataFrame], rows: int) -> float:
    """The fastest of ``repeats`` runs, in seconds (the least disturbed by other load)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        frame = build()
        times.append(time.perf_counter() - t0)
        assert len(frame) == rows, (len(frame), rows)
        del frame
    return min(times)


def bench_dataframe(folder: Path, rows: int, repeats: int) -> tuple[float, float]:
    """Seconds for RoundLog.df over ``rows`` rounds, and for pd.DataFrame(list_of_dicts)."""
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    records = [make_record(n, start) for n in range(rows)]
    path = folder / "frame.sqlite3"
    fill(path, records)
    with RoundLog(path) as log:
        ours = best_of(repeats, lambda: log.df, rows)
    dicts = [dataclasses.asdict(rec) for rec in records]
    bare = best_of(repeats, lambda: pd.DataFrame(dicts), rows)
    return ours, bare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (seconds, not tens)")
    parser.add_argument("--appends", type=int, help="rounds appended for the append timing")
    parser.add_argument("--rows", type=int, help="rounds in the DataFrame timing")
    args = parser.parse_args(argv)
    appends = args.appends or (300 if args.quick else 2000)
    rows = args.rows or (20_000 if args.quick else 100_000)

    with tempfile.TemporaryDirectory(prefix="bench-log-") as tmp:
        folder = Path(tmp)
        ours, bare = bench_append(folder, appends)
        ok_append = statistics.median(ours) < APPEND_TARGET_MS
        print(
            f"append ({appends} rounds, WAL+NORMAL): median {statistics.median(ours):.3f} ms, "
            f"p95 {percentile(ours, 0.95):.3f} ms (target < {APPEND_TARGET_MS} ms) "
            f"baseline bare sqlite3 insert+commit median {statistics.median(bare):.3f} ms, "
            f"p95 {percentile(bare, 0.95):.3f} ms"
        )
        df_s, dicts_s = bench_dataframe(folder, rows, repeats=3)
        limit_s = DATAFRAME_TARGET_S * rows / 100_000
        ok_frame = df_s < limit_s
        print(
            f"dataframe ({rows} rounds, best of 3): {df_s:.3f} s "
            f"(target < {limit_s:.2f} s, i.e. {DATAFRAME_TARGET_S} s per 100000) "
            f"baseline pd.DataFrame(list_of_dicts) {dicts_s:.3f} s"
        )
    # Like the other benchmarks: a missed target is reported, not an error of the run.
    print("targets met" if ok_append and ok_frame else "TARGET MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
