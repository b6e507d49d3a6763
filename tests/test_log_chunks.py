"""Column chunks: ``RoundLog.df`` read from packed blocks equals the frame read row by row.

Every test writes a real SQLite file under ``tmp_path``; the reference frame is
built from the rows themselves (``rounds_frame`` of a plain ``sqlite3`` SELECT).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import stat
import struct
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from madohub_nb.io.log import ROUND_COLUMNS, RoundLog, RoundRecord, rounds_frame
from madohub_nb.io.log_chunks import (
    CHUNK_MAGIC,
    CHUNK_ROWS,
    SEAL_MAGIC,
    ChunkError,
    pack_chunk,
    seal_chunk,
    unpack_chunks,
)

START = datetime(2025, 6, 1, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def own_chunk_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's user data folder, where the key that seals its chunks is made."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data" / "madohub_nb" / "chunk-key"


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


@pytest.mark.parametrize(
    "texts",
    [
        [("a" if n % 2 else None) for n in range(40)],
        [None if n == 3 else f"v{n} é" for n in range(40)],
        [f"a\0{n}" if n % 2 else None for n in range(40)],
    ],
    ids=["repeated", "unique", "with_nul"],
)
def test_text_is_stored_as_dictionary_joined_or_json_and_read_back_alike(
    texts: list[str | None],
) -> None:
    rows = [(n, n / 2, "2025-06-01T00:00:00+00:00", s) for n, s in enumerate(texts)]
    blob = pack_chunk(rows, COLUMNS)
    out = unpack_chunks([blob, blob], COLUMNS)
    assert out["s"].tolist() == texts * 2
    assert out["n"].tolist() == list(range(40)) * 2
    assert out["x"].dtype == np.float64 and out["t"].dtype == np.dtype("datetime64[us]")


def _header_edited(blob: bytes, edit: Callable[[dict[str, Any]], object]) -> bytes:
    (size,) = struct.unpack_from("<I", blob, 4)
    header = json.loads(blob[8 : 8 + size])
    edit(header)
    text = json.dumps(header).encode()
    return CHUNK_MAGIC + struct.pack("<I", len(text)) + text + blob[8 + size :]


def _col(header: dict[str, Any], name: str) -> list[Any]:
    return next(c for c in header["columns"] if c[0] == name)


@pytest.mark.parametrize(
    "edit",
    [
        lambda h: _col(h, "n").__setitem__(2, "0"),
        lambda h: _col(h, "n").__setitem__(2, -8),
        lambda h: _col(h, "n").__setitem__(2, True),
        lambda h: _col(h, "n").__setitem__(3, 16.0),
        lambda h: _col(h, "x").__setitem__(1, None),
        lambda h: h.__setitem__("rows", "2"),
        lambda h: h.__setitem__("rows", -1),
        lambda h: _col(h, "s").__setitem__(4, [-1]),
        lambda h: _col(h, "s").__setitem__(4, [2]),
        lambda h: _col(h, "s").__setitem__(4, {"0": 1}),
        lambda h: _col(h, "d").__setitem__(4, [{"a": 1}]),
        lambda h: _col(h, "d").__setitem__(4, "ab"),
    ],
    ids=[
        "offset as text", "negative offset", "offset as bool", "length as float",
        "offset null", "rows as text", "negative rows", "null row before the first",
        "null row past the last", "null rows as an object", "dictionary of objects",
        "dictionary as text",
    ],
)  # fmt: skip
def test_a_chunk_header_of_the_wrong_shape_raises_chunk_error(
    edit: Callable[[dict[str, Any]], object],
) -> None:
    """Checked before use, so that a wrong type is never a TypeError or a wrong slice."""
    columns = [*COLUMNS, ("d", "text")]
    rows = [(1, 1.0, None, "a", "same"), (2, 2.0, None, "b", "same")]
    blob = pack_chunk(rows, columns)
    unpack_chunks([blob], columns)  # as packed, it reads
    with pytest.raises(ChunkError):
        unpack_chunks([_header_edited(blob, edit)], columns)


def test_json_text_that_is_not_a_list_of_text_raises_chunk_error() -> None:
    rows = [(n, 1.0, None, f"a\0{n}") for n in range(2)]  # NUL: stored as JSON
    blob = pack_chunk(rows, COLUMNS)
    text_json = json.dumps(["a\u0000" + "0", "a\u0000" + "1"]).encode()
    objects = json.dumps([{"a": 1}, {"b": 2}]).encode().ljust(len(text_json))  # same length
    assert text_json in blob
    with pytest.raises(ChunkError, match="not a list of text"):
        unpack_chunks([blob.replace(text_json, objects)], COLUMNS)


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


# A log from someone else: whatever its chunks hold, df shows what its rows hold --------


def plain_meta(path: Path) -> list[object]:
    """Each row's meta parsed alone, the plainest way: its JSON object, else None."""
    with sqlite3.connect(path) as conn:
        texts = [r[0] for r in conn.execute("SELECT meta FROM rounds ORDER BY seq")]
    out: list[object] = []
    for text in texts:
        try:
            value = json.loads(text)
        except (ValueError, TypeError):
            value = None
        out.append(value if isinstance(value, dict) else None)
    return out


def edit_chunk(conn: sqlite3.Connection, edit: Callable[[dict[str, Any], bytes], bytes]) -> None:
    """Rewrite the first chunk's header (``edit`` changes it, returns the payload), keeping
    its seal as it was: what someone without this user's key can do."""
    (blob,) = conn.execute("SELECT data FROM frame_chunks WHERE first_seq = 1").fetchone()
    seal, body = blob[: len(SEAL_MAGIC) + 32], blob[len(SEAL_MAGIC) + 32 :]
    (size,) = struct.unpack_from("<I", body, 4)
    header = json.loads(body[8 : 8 + size])
    payload = edit(header, body[8 + size :])
    text = json.dumps(header).encode()
    new = seal + CHUNK_MAGIC + struct.pack("<I", len(text)) + text + payload
    conn.execute("UPDATE frame_chunks SET data = ? WHERE first_seq = 1", (new,))


def _set(name: str, index: int, value: object) -> Callable[[dict[str, Any], bytes], bytes]:
    def edit(header: dict[str, Any], payload: bytes) -> bytes:
        _col(header, name)[index] = value(payload) if callable(value) else value
        return payload

    return edit


def _meta_not_json(header: dict[str, Any], payload: bytes) -> bytes:
    return payload.replace(b'{"n": 1, ', b"not json ", 1)


def _statuses_swapped(header: dict[str, Any], payload: bytes) -> bytes:
    _col(header, "status")[4].reverse()  # every "shadow" reads "delivered" and back
    return payload


def _resealed_with_another_key(conn: sqlite3.Connection) -> None:
    edit_chunk(conn, _statuses_swapped)
    (blob,) = conn.execute("SELECT data FROM frame_chunks").fetchone()
    body = blob[len(SEAL_MAGIC) + 32 :]
    forged = seal_chunk(body, 1, CHUNK_ROWS, b"k" * 32)
    conn.execute("UPDATE frame_chunks SET data = ?", (forged,))


def _sql(*statements: str) -> Callable[[sqlite3.Connection], None]:
    def run(conn: sqlite3.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return run


INSIDE, OUTSIDE = 5, CHUNK_ROWS + 2  # a rowid in the packed block, one after it

CRAFTED = {
    "a column offset of the wrong type": lambda c: edit_chunk(c, _set("round", 2, "0")),
    "a negative column offset": lambda c: edit_chunk(c, _set("round", 2, lambda p: -len(p))),
    "a column length as a float": lambda c: edit_chunk(c, _set("round", 3, 8.0 * CHUNK_ROWS)),
    "a row count as text": lambda c: edit_chunk(c, lambda h, p: h.update(rows="1024") or p),
    "non-JSON meta in the chunk": lambda c: edit_chunk(c, _meta_not_json),
    "a chunk's values changed": lambda c: edit_chunk(c, _statuses_swapped),
    "a chunk sealed with another key": _resealed_with_another_key,
    "a packed row's meta holding two JSON objects": _sql(
        f"""UPDATE rounds SET meta = '{{"a": 1}}, {{"b": 2}}' WHERE seq = {INSIDE}"""
    ),
    "a later row's meta holding two JSON objects": _sql(
        f"""UPDATE rounds SET meta = '{{"a": 1}}, {{"b": 2}}' WHERE seq = {OUTSIDE}"""
    ),
    "a row's meta that is not JSON": _sql(
        f"UPDATE rounds SET meta = '{{nope' WHERE seq = {OUTSIDE}"
    ),
    "a row's meta that is a list": _sql(f"UPDATE rounds SET meta = '[1, 2]' WHERE seq = {INSIDE}"),
    "a row changed after packing": _sql(
        f"UPDATE rounds SET status = 'error', error = 'changed' WHERE seq = {INSIDE}"
    ),
    "a row deleted after packing": _sql(f"DELETE FROM rounds WHERE seq = {INSIDE}"),
    "the triggers dropped, then a row changed": _sql(
        "DROP TRIGGER rounds_update_drops_chunk",
        f"UPDATE rounds SET status = 'error' WHERE seq = {INSIDE}",
    ),
    "text in number and time columns": _sql(
        f"UPDATE rounds SET latency_ms = 'fast', round = 'one', fired_at = 'yesterday' "
        f"WHERE seq = {OUTSIDE}"
    ),
}


@pytest.mark.parametrize("craft", CRAFTED.values(), ids=list(CRAFTED))
def test_a_crafted_log_reads_as_its_rows(
    tmp_path: Path, craft: Callable[[sqlite3.Connection], None]
) -> None:
    """Another program changed the file: df never fails, and shows what the rows hold."""
    path = tmp_path / "rounds.sqlite3"
    fill(path, CHUNK_ROWS + 3)
    assert chunk_starts(path) == [1]
    with sqlite3.connect(path) as conn:
        craft(conn)
    with RoundLog(path, read_only=True) as log:
        frame = log.df
    pd.testing.assert_frame_equal(frame, rows_frame(path))
    assert frame["meta"].tolist() == plain_meta(path)
    with sqlite3.connect(path) as conn:
        statuses = [r[0] for r in conn.execute("SELECT status FROM rounds ORDER BY seq")]
    assert frame["status"].tolist() == statuses


def test_a_changed_row_drops_its_chunk_and_the_next_pack_copies_it_again(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    fill(path, CHUNK_ROWS)
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE rounds SET status = 'error' WHERE seq = {INSIDE}")
    assert chunk_starts(path) == []
    fill(path, CHUNK_ROWS, first=CHUNK_ROWS + 1)  # the next block's append catches up
    assert chunk_starts(path) == [1, CHUNK_ROWS + 1]
    with RoundLog(path) as log:
        frame = log.df
    pd.testing.assert_frame_equal(frame, rows_frame(path))
    assert frame["status"].iat[INSIDE - 1] == "error"


def test_chunks_are_sealed_with_a_private_key_of_this_user(
    tmp_path: Path, own_chunk_key: Path
) -> None:
    path = tmp_path / "rounds.sqlite3"
    fill(path, CHUNK_ROWS)
    assert stat.S_IMODE(own_chunk_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(own_chunk_key.parent.stat().st_mode) == 0o700
    own_chunk_key.unlink()  # another user (or this one with a new key) reads the file
    with RoundLog(path, read_only=True) as log:
        pd.testing.assert_frame_equal(log.df, rows_frame(path))
    assert not own_chunk_key.exists()  # reading never makes a key
