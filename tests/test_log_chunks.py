"""Column chunks: ``RoundLog.df`` read from packed blocks equals the frame read row by row.

Every test writes a real SQLite file under ``tmp_path``; the reference frame is
built from the rows themselves (``rounds_frame`` of a plain ``sqlite3`` SELECT).
"""

from __future__ import annotations

import logging
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from madohub_nb.io.log import ROUND_COLUMNS, RoundLog, RoundRecord, rounds_frame
from madohub_nb.io.log_chunks import CHUNK_ROWS, ChunkError, pack_chunk, unpack_chunks

START = datetime(2025, 6, 1, tzinfo=timezone.utc)


def varied_record(n: int) -> RoundRecord:
    """Rounds whose every column varies: missing values, NUL and non-ASCII text, usage."""
    return RoundRecord(
        route_id=f"route-{n % 3}",
        source="writer",
        target="réviewer",
        round=n % 20,
        trigger="on-idle",
        transform="prompt-wrap",
        dispatch="madoagent",
        fired_at=START + timedelta(seconds=n, microseconds=n * 7919 % 1_000_000),
        extracted=None if n % 11 == 0 else f"answer {n} ✓",
        extraction_method="jsonl" if n % 4 else None,
        prompt=f"prompt {n}\nline two",
        delivered_at=None if n % 3 == 0 else START + timedelta(seconds=n + 1.25),
        status="shadow" if n % 2 else "delivered",
        error=None if n % 5 else f"boom\0{n}",
        extract_ms=None if n % 7 == 0 else n / 3,
        latency_ms=float(n) * 1.1,
        delivery_mode="typed",
        template=None if n % 2 else "Review:\n{output}",
        session_id=f"s{n // 700}",
        model="claude-x" if n % 2 else None,
        input_tokens=n if n % 2 else None,
        output_tokens=2 * n if n % 2 else None,
        cost_usd=n / 1e6 if n % 2 else None,
        meta={"n": n, "ok": n % 2 == 0},
    )


def rows_frame(path: Path) -> pd.DataFrame:
    """The reference: every row of the file read the plain way, built into the log's frame."""
    columns = ", ".join(f'"{c}"' for c in ROUND_COLUMNS)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(f"SELECT {columns} FROM rounds ORDER BY seq").fetchall()
    return rounds_frame(rows)


def chunk_starts(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT first_seq FROM frame_chunks ORDER BY 1")]


def fill(path: Path, count: int, first: int = 1) -> None:
    with RoundLog(path) as log:
        for n in range(first, first + count):
            log.append(varied_record(n))


def test_df_from_chunks_equals_df_read_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    fill(path, 10)
    # Another writer's times in other ISO forms (an offset, no fraction, Z), written raw.
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE rounds SET fired_at = '2025-06-01T12:00:00+02:00' WHERE seq = 5")
        conn.execute("UPDATE rounds SET delivered_at = '2025-06-01T10:00:00.5Z' WHERE seq = 7")
    fill(path, 2 * CHUNK_ROWS + 27, first=11)
    assert chunk_starts(path) == [1, CHUNK_ROWS + 1]
    with RoundLog(path) as log:
        frame = log.df
    reference = rows_frame(path)
    pd.testing.assert_frame_equal(frame, reference)
    assert frame["fired_at"].iat[4] == pd.Timestamp("2025-06-01T10:00:00Z")
    assert frame["error"].iat[4] == "boom\x005" and frame["error"].iat[1] is None
    assert frame["extracted"].iat[10] is None and frame["target"].iat[0] == "réviewer"
    assert np.isnan(frame["extract_ms"].iat[6]) and frame["delivered_at"].isna().iat[2]


def test_an_append_that_completes_a_block_packs_it(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    fill(path, CHUNK_ROWS - 1)
    assert chunk_starts(path) == []
    fill(path, 1, first=CHUNK_ROWS)
    assert chunk_starts(path) == [1]
    with RoundLog(path) as log:
        pd.testing.assert_frame_equal(log.df, rows_frame(path))


def test_a_log_of_schema_2_gets_its_chunks_when_opened_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    fill(path, 2 * CHUNK_ROWS + 5)
    with sqlite3.connect(path) as conn:  # as the previous version left it
        conn.execute("DROP TABLE frame_chunks")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        conn.execute("PRAGMA user_version = 2")
    with RoundLog(path, read_only=True) as old:  # read-only: read as it is, row by row
        pd.testing.assert_frame_equal(old.df, rows_frame(path))
    with RoundLog(path) as log:
        assert chunk_starts(path) == [1, CHUNK_ROWS + 1]
        pd.testing.assert_frame_equal(log.df, rows_frame(path))


def test_a_damaged_chunk_is_not_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "rounds.sqlite3"
    fill(path, CHUNK_ROWS + 3)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE frame_chunks SET data = substr(data, 1, 300)")
    with caplog.at_level(logging.WARNING), RoundLog(path) as log:
        frame = log.df
    pd.testing.assert_frame_equal(frame, rows_frame(path))
    assert "column chunks unreadable" in caplog.text


def test_rows_rewritten_under_their_chunks_are_read_from_the_rows(tmp_path: Path) -> None:
    """Another program empties the table and logs anew: the old chunk no longer fits."""
    path = tmp_path / "rounds.sqlite3"
    fill(path, CHUNK_ROWS)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM rounds")
    fill(path, CHUNK_ROWS + 2, first=5000)  # the stale chunk at rowid 1 is kept (OR IGNORE)
    with RoundLog(path) as log:
        frame = log.df
    pd.testing.assert_frame_equal(frame, rows_frame(path))
    assert frame["round"].iat[0] == 5000 % 20


def test_a_block_that_cannot_be_packed_is_read_row_by_row(tmp_path: Path) -> None:
    """A BLOB in a text column (written by another program) stays in the frame as bytes."""
    path = tmp_path / "rounds.sqlite3"
    fill(path, CHUNK_ROWS + 10)
    fill(path, 10, first=CHUNK_ROWS + 11)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM frame_chunks")
        conn.execute("UPDATE rounds SET error = x'00ff' WHERE seq = ?", (CHUNK_ROWS + 4,))
    fill(path, 2 * CHUNK_ROWS, first=CHUNK_ROWS + 21)  # the boundaries at 2048 and 3072
    # The first block is packed again; the second cannot be; the third is.
    assert chunk_starts(path) == [1, 2 * CHUNK_ROWS + 1]
    with RoundLog(path) as log:
        frame = log.df
    pd.testing.assert_frame_equal(frame, rows_frame(path))
    assert frame["error"].iat[CHUNK_ROWS + 3] == b"\x00\xff"


# The chunk format itself -------------------------------------------------------------

COLUMNS = [("n", "int"), ("x", "float"), ("t", "time"), ("s", "text")]


def test_text_is_stored_as_dictionary_joined_or_json_and_read_back_alike() -> None:
    repeated = [("a" if n % 2 else None) for n in range(40)]
    unique = [None if n == 3 else f"v{n} é" for n in range(40)]
    with_nul = [f"a\0{n}" if n % 2 else None for n in range(40)]
    for texts in (repeated, unique, with_nul):
        rows = [(n, n / 2, "2025-06-01T00:00:00+00:00", s) for n, s in enumerate(texts)]
        blob = pack_chunk(rows, COLUMNS)
        out = unpack_chunks([blob, blob], COLUMNS)
        assert out["s"].tolist() == texts * 2
        assert out["n"].tolist() == list(range(40)) * 2
        assert out["x"].dtype == np.float64 and out["t"].dtype == np.dtype("datetime64[us]")


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"PK\x03\x04 a zip file", "not a madohub column chunk"),
        (b"MHC1\xff\xff\x00\x00{}", "unreadable column chunk"),
        (b"MHC1\x02\x00\x00\x00{}", "unreadable column chunk"),
    ],
)
def test_a_blob_that_is_no_chunk_raises_chunk_error(blob: bytes, message: str) -> None:
    with pytest.raises(ChunkError, match=message):
        unpack_chunks([blob], COLUMNS)


def test_a_chunk_missing_a_column_or_values_raises_chunk_error() -> None:
    rows = [(1, 1.0, "2025-06-01T00:00:00+00:00", "a"), (2, 2.0, None, "b")]
    blob = pack_chunk(rows, COLUMNS)
    with pytest.raises(ChunkError, match="no readable 'y'"):
        unpack_chunks([blob], [*COLUMNS, ("y", "int")])
    with pytest.raises(ChunkError, match="no readable"):
        unpack_chunks([blob[:-4]], COLUMNS)  # the last payload cut short
    unique = [(n, 1.0, None, f"text {n}") for n in range(8)]
    damaged = pack_chunk(unique, COLUMNS).replace(b"text 3", b"\xff\xfe\xfd\xfc 3")
    with pytest.raises(ChunkError, match="'s' is unreadable"):
        unpack_chunks([damaged], COLUMNS)  # not UTF-8


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ((1.5, 1.0, None, "a"), "n: not every value is a whole number"),
        ((1, "fast", None, "a"), "x: text in a number column"),
        ((1, 1.0, "yesterday", "a"), "t: Invalid isoformat"),
        ((1, 1.0, None, b"\x00"), "s: not every value is text"),
    ],
)
def test_values_a_chunk_cannot_hold_raise_chunk_error(
    row: tuple[object, ...], message: str
) -> None:
    with pytest.raises(ChunkError, match=message):
        pack_chunk([row], COLUMNS)
