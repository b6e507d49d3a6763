"""Other agents' records: the last answer of a huge Gemini, Qwen, Copilot, Pi, Aider record and OpenCode DB.

Run: ``.venv/bin/python benchmarks/bench_agent_records.py [--quick]``.

- For each line format, a record of 300 MB (30 MB with ``--quick``) is written
  in a temporary folder from the real agent's fixture
  (``tests/fixtures/agent_records``): its conversation repeated turn after turn
  (Pi's entries get fresh ids, chained), ending with the fixture's own last
  turn, so the expected answer is the fixture's. The reader
  (``madohub_nb.io.agent_records.<agent>.read_last_response``) is timed
  (median of many calls, page cache warm) against the plainest way in the same
  run: read every line (``json.loads`` each, or Aider's whole file split at its
  last prompt) keeping the last answer.
- OpenCode: the fixture database grown to about 100 MB (30 MB with
  ``--quick``) of older sessions' messages and text parts; the reader's one
  indexed query against a full scan of the ``message`` and ``part`` tables.

The temporary files are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, CouldNotMeasure, Report, Stopwatch, run_main  # noqa: E402

RECORDS = REPO / "tests" / "fixtures" / "agent_records"
EXTRACT_TARGET_MS = 5.0
SPEEDUP_TARGET = 500.0
DB_SPEEDUP_TARGET = 100.0
FORMATS = ("gemini", "qwen", "copilot", "pi", "aider")


def fixture_of(fmt: str) -> Path:
    expected = json.loads((RECORDS / "expected.json").read_text())
    name = next(n for n, e in expected.items() if e["format"] == fmt)
    return RECORDS / name


def _split(fmt: str, data: bytes) -> tuple[bytes, bytes]:
    """The fixture's header (written once) and its conversation (repeated)."""
    lines = data.splitlines(keepends=True)
    if fmt == "aider":
        start = next(i for i, line in enumerate(lines) if line.startswith(b"#### "))
    else:
        start = 1  # a session header line (Gemini, Copilot, Pi) or the first prompt (Qwen)
        if fmt == "qwen":
            start = 0
    return b"".join(lines[:start]), b"".join(lines[start:])


def _pi_block(body: bytes, turn: int, parent: str | None) -> tuple[bytes, str]:
    """Pi's conversation entries with fresh ids, chained after ``parent``."""
    out = []
    for line in body.splitlines():
        rec = json.loads(line)
        if rec.get("type") != "message":
            continue
        rec["id"] = f"{turn:06x}{len(out):02x}"
        rec["parentId"] = parent
        parent = rec["id"]
        out.append(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
    return b"".join(out), parent or ""


def write_record(fmt: str, path: Path, size_bytes: int) -> int:
    """A record of about ``size_bytes`` ending with the fixture's last turn; returns its lines."""
    data = fixture_of(fmt).read_bytes()
    header, body = _split(fmt, data)
    written = lines = 0
    with path.open("wb") as f:
        f.write(header)
        written += len(header)
        parent: str | None = None
        turn = 0
        buffer: list[bytes] = []
        while written < size_bytes - len(data):
            if fmt == "pi":
                block, parent = _pi_block(body, turn, parent)
            else:
                block = body
            buffer.append(block)
            written += len(block)
            lines += block.count(b"\n")
            turn += 1
            if len(buffer) >= 2000:
                f.write(b"".join(buffer))
                buffer = []
        f.write(b"".join(buffer))
        if fmt == "pi":  # the fixture's own entries, its first one chained to the last block
            tail = []
            for line in data.splitlines()[1:]:
                rec = json.loads(line)
                if rec.get("parentId") is None:
                    rec["parentId"] = parent
                tail.append(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
            f.write(b"".join(tail))
        else:
            f.write(body)
    return lines + data.count(b"\n")


# ------------------------------------------------------------------ the plainest ways


def _full_parse(fmt: str, path: Path) -> str | None:
    """Every line parsed; the last answer kept (the reader's rules, without its bounds)."""
    last: str | None = None
    with path.open("rb") as f:
        for raw in f:
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            text = _answer_text(fmt, rec)
            if text:
                last = text
    return last


def _answer_text(fmt: str, rec: dict[str, Any]) -> str | None:
    if fmt == "gemini" and rec.get("type") == "gemini":
        return rec.get("content") if isinstance(rec.get("content"), str) else None
    if fmt == "qwen" and rec.get("type") == "assistant":
        parts = rec.get("message", {}).get("parts", [])
        return "".join(p.get("text", "") for p in parts if not p.get("thought")) or None
    if fmt == "copilot" and rec.get("type") == "assistant.message":
        return rec.get("data", {}).get("content") or None
    if fmt == "pi" and rec.get("type") == "message":
        msg = rec.get("message", {})
        if msg.get("role") == "assistant":
            return "".join(
                b.get("text", "") for b in msg.get("content", []) if b.get("type") == "text"
            )
    return None


def _aider_whole(path: Path) -> str | None:
    """The whole history read and split at its last prompt; Aider's notes dropped."""
    text = path.read_text(encoding="utf-8")
    after = text.rsplit("\n#### ", 1)[-1].split("\n", 1)[-1]
    kept = [
        line for line in after.split("\n") if not (line.startswith("> ") and line.endswith("  "))
    ]
    return "\n".join(kept).strip() or None


def timed_ms(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = Stopwatch()
        fn()
        out.append(t0.ms("agent_records out"))
    return out


def bench_format(report: Report, fmt: str, folder: Path, size_mb: int, runs: int) -> None:
    from madohub_nb.io import agent_records
    from madohub_nb.io.records import ReadStats

    reader = getattr(agent_records, fmt).read_last_response
    expected = reader(fixture_of(fmt))
    if expected is None:
        raise CouldNotMeasure(f"the {fmt} fixture has no answer")
    path = folder / f"record-{fmt}"
    t0 = Stopwatch()
    lines = write_record(fmt, path, size_mb * 1_000_000)
    size = path.stat().st_size
    report.info(
        f"{fmt}: {size / 1e6:.0f} MB, {lines} lines, written in {t0.s('agent_records time'):.1f} s"
    )
    stats = ReadStats()
    found = reader(path, stats=stats)
    if found is None or found.text != expected.text:
        raise CouldNotMeasure(f"the {fmt} reader gave {found!r}, expected {expected.text[:60]!r}…")
    ours = timed_ms(lambda: reader(path), runs)
    t0 = Stopwatch()
    plain = _aider_whole(path) if fmt == "aider" else _full_parse(fmt, path)
    full_ms = t0.ms("agent_records full_ms")
    if plain is None or expected.text.split("\n")[0] not in plain:
        raise CouldNotMeasure(f"the full read of the {fmt} record found {str(plain)[:80]!r}")
    path.unlink()
    median = statistics.median(ours)
    report.info(f"{fmt} reader read {stats.bytes_read} bytes ({stats.lines} lines) of {size}")
    baseline = "whole file read and split" if fmt == "aider" else "json.loads of every line"
    report.target(
        f"{fmt}: last answer of a {size / 1e6:.0f} MB record ({runs} calls)",
        f"median {median:.3f} ms (max {max(ours):.3f}), {full_ms / median:.0f}x faster",
        f"< {EXTRACT_TARGET_MS} ms and >= {SPEEDUP_TARGET:.0f}x",
        f"{baseline} {full_ms:.0f} ms",
        median < EXTRACT_TARGET_MS and full_ms / median >= SPEEDUP_TARGET,
    )


def grow_opencode_db(path: Path, size_bytes: int) -> int:
    """Older sessions' messages and text parts added until the file is about ``size_bytes``."""
    filler = "lorem ipsum dolor sit amet " * 40
    conn = sqlite3.connect(path)
    rows = 0
    try:
        conn.execute("PRAGMA journal_mode=wal")
        while path.stat().st_size < size_bytes:
            batch = range(rows, rows + 20_000)
            conn.executemany(
                "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
                [(f"msg_0{i:012d}", f"ses_old{i % 100}", i, i,
                  json.dumps({"role": "assistant" if i % 2 else "user", "parentID": f"msg_0{i - 1:012d}"}))
                 for i in batch],
            )  # fmt: skip
            conn.executemany(
                "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                [(f"prt_0{i:012d}", f"msg_0{i:012d}", f"ses_old{i % 100}", i, i,
                  json.dumps({"type": "text", "text": f"{i} {filler}"}))
                 for i in batch],
            )  # fmt: skip
            conn.commit()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows += len(batch)
    finally:
        conn.close()
    return rows


def _opencode_full_scan(path: Path) -> str | None:
    """Every message and part read; the newest assistant message's text parts joined."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        newest: tuple[str, str] | None = None
        for mid, data in conn.execute("SELECT id, data FROM message"):
            if json.loads(data).get("role") == "assistant" and (newest is None or mid > newest[0]):
                newest = (mid, data)
        if newest is None:
            return None
        texts = [
            json.loads(data).get("text", "")
            for mid, data in conn.execute("SELECT message_id, data FROM part")
            if mid == newest[0] and json.loads(data).get("type") == "text"
        ]
    finally:
        conn.close()
    return "\n\n".join(texts) or None


def bench_opencode(report: Report, folder: Path, size_mb: int, runs: int) -> None:
    from madohub_nb.io.agent_records import opencode

    path = folder / "opencode.db"
    shutil.copyfile(fixture_of("opencode"), path)
    expected = opencode.read_last_response(path)
    if expected is None:
        raise CouldNotMeasure("the OpenCode fixture has no answer")
    t0 = Stopwatch()
    rows = grow_opencode_db(path, size_mb * 1_000_000)
    size = path.stat().st_size
    report.info(
        f"opencode: {size / 1e6:.0f} MB, {rows} more messages, written in {t0.s('agent_records time'):.1f} s"
    )
    found = opencode.read_last_response(path)
    if found is None or found.text != expected.text:
        raise CouldNotMeasure(f"the OpenCode reader gave {found!r}")
    ours = timed_ms(lambda: opencode.read_last_response(path), runs)
    t0 = Stopwatch()
    plain = _opencode_full_scan(path)
    full_ms = t0.ms("agent_records full_ms")
    if plain is None or plain.split("\n")[0] != expected.text.split("\n")[0]:
        raise CouldNotMeasure(f"the full scan found {str(plain)[:80]!r}")
    median = statistics.median(ours)
    report.target(
        f"opencode: last answer of a {size / 1e6:.0f} MB database ({runs} calls)",
        f"median {median:.3f} ms (max {max(ours):.3f}), {full_ms / median:.0f}x faster",
        f"< {EXTRACT_TARGET_MS} ms and >= {DB_SPEEDUP_TARGET:.0f}x",
        f"full scan of message and part {full_ms:.0f} ms",
        median < EXTRACT_TARGET_MS and full_ms / median >= DB_SPEEDUP_TARGET,
    )


def main(args: argparse.Namespace, report: Report) -> None:
    size_mb = args.size_mb or (30 if args.quick else 300)
    db_mb = min(size_mb, 30 if args.quick else 100)
    runs = 50 if args.quick else 200
    with tempfile.TemporaryDirectory(prefix="mhbench-records-") as tmp:
        for fmt in FORMATS:
            bench_format(report, fmt, Path(tmp), size_mb, runs)
        bench_opencode(report, Path(tmp), db_mb, runs)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="agent records benchmark")
    p.add_argument("--quick", action="store_true", help="30 MB records instead of 300 MB")
    p.add_argument("--size-mb", type=int, help="record size in MB")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
