"""The round log's storage: rounds written to and read from its file, one transaction each.

One row per round, committed as soon as the round ends, so a killed kernel loses no
finished round and a later hub on the same file sees every earlier round. The file
itself (schema, migration, modes, column chunks) is ``log_file``'s.

Durability: the file is in WAL mode with ``synchronous=NORMAL``. A commit is
in the WAL file (the OS page cache) before ``append`` returns, which survives
the process being killed (SIGKILL, a crashed kernel); only an OS crash or
power loss may drop the last rounds. Each append is its own transaction, so a
round is either wholly in the log or not at all.

Threads and processes: one connection per ``LogStore`` opened with
``check_same_thread=False`` and guarded by ``lock``. The engine thread appends
while the kernel thread reads; a single connection that ``close()`` can shut
from any thread is simpler than a connection per thread. An append holds the
lock for one short transaction; a read holds it while rows are fetched. Several
stores (in several processes) may share one file: WAL lets readers run beside the
writer, and writers queue on ``busy_timeout`` (``defaults.LOG_BUSY_TIMEOUT_MS``).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from datetime import datetime, timezone
from typing import Any, Final, NamedTuple

from ..defaults import LOG_BUSY_TIMEOUT_MS
from ..errors import LogError, MadohubValueError
from .log_chunks import CHUNK_ROWS
from .log_file import COLUMN_SQL, ROW_ONLY_COLUMNS, LogFile
from .log_record import (
    COUNT_COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    MONEY_COLUMNS,
    ROUND_COLUMNS,
    TEXT_COLUMNS,
    TIME_COLUMNS,
    RoundRecord,
    parse_meta,
)

MIN_FREE_BYTES: Final = 1 << 20
"""``ensure_writable`` refuses when the log's file system has less free space."""
_PROBE_BYTES: Final = 16 * 1024  # a generous round; makes the write probe allocate pages
_INSERT: Final = (
    f"INSERT INTO rounds ({COLUMN_SQL}) VALUES ({', '.join('?' for _ in ROUND_COLUMNS)})"
)


class Snapshot(NamedTuple):
    """Every round as one read of the file found them (``LogStore.snapshot``)."""

    chunks: list[tuple[int, bytes]]
    """(last rowid, sealed BLOB) of each packed block, from rowid 1 on."""
    covered: int
    """The last rowid the chunks hold (0: none)."""
    texts: list[tuple[Any, ...]]
    """(round_id, *``ROW_ONLY_COLUMNS``) of each row the chunks hold."""
    rows: list[Any]
    """The rows after ``covered``, whole, in ``ROUND_COLUMNS`` order."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat("T", "microseconds")


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _money_or_none(value: object) -> float | None:
    """A cost as stored: NaN (no price for the model) is stored as NULL, like None."""
    number = _float_or_none(value)
    return None if number is None or math.isnan(number) else number


class LogStore:
    """Rounds written to and read from one round log's file (``LogFile``), under one lock.

    Every method is safe from any thread; all but ``closed`` take ``lock`` and touch the
    file, so they may wait for another reader of this store and, for writes, up to
    ``busy_timeout_ms`` for another process.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        read_only: bool = False,
        max_bytes: int | None = None,
        busy_timeout_ms: int = LOG_BUSY_TIMEOUT_MS,
    ) -> None:
        self.lock: Final = threading.Lock()
        """Held for each transaction on the one connection."""
        self._closed = False
        self._file = LogFile(
            path, read_only=read_only, max_bytes=max_bytes, busy_timeout_ms=busy_timeout_ms
        )
        self.read_only: Final = self._file.read_only
        self.in_memory: Final = self._file.in_memory
        self.path: Final = self._file.path
        self.busy_timeout_ms: Final = self._file.busy_timeout_ms

    # Writing -----------------------------------------------------------------

    def append(self, rec: RoundRecord) -> None:
        """Write one round, checked and redacted already, and commit it before returning.

        Blocking (up to ``busy_timeout_ms`` on a file another process locked): call it
        from a worker thread. Once its transaction began it is not undone by the
        caller giving up: a cancelled ``to_thread`` still commits the round.
        """
        row = _row(rec)
        with self.lock:
            conn = self._open_conn()
            try:
                conn.execute("BEGIN IMMEDIATE")
                seq = conn.execute(_INSERT, row).lastrowid
                conn.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                self._file.rollback()
                raise LogError(
                    f"round {rec.round_id!r} is already in round log {self.path}; "
                    "every round needs a new round_id"
                ) from exc
            except sqlite3.Error as exc:
                self._file.rollback()
                raise self._file.error("append a round to", exc) from exc
            except BaseException:
                self._file.rollback()  # never leave the write transaction open for the next append
                raise
            if seq is not None and seq % CHUNK_ROWS == 0:
                self._file.pack_after_append(seq)

    def ensure_writable(self) -> None:
        """Raise ``LogError`` unless the log can take a round right now.

        The engine calls this before typing a round, so routing pauses rather
        than running unlogged. It takes the write lock and writes a round-sized
        blob that is rolled back (catching locks, read-only files and a full
        size cap), and checks the file system still has ``MIN_FREE_BYTES``.
        Blocking (up to ``busy_timeout_ms``, and while a ``df`` of this log reads):
        call it from a worker thread, e.g. ``await asyncio.to_thread(log.ensure_writable)``.
        """
        import shutil

        if not self.in_memory:
            try:
                free = shutil.disk_usage(self.path.parent).free
            except OSError as exc:
                raise LogError(f"cannot check free space for round log {self.path}: {exc}") from exc
            if free < MIN_FREE_BYTES:
                raise LogError(
                    f"cannot write round log {self.path}: only {free} bytes free on its disk; "
                    "free some space or pass another log_path"
                )
        with self.lock:
            conn = self._open_conn()
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO write_probe VALUES (zeroblob(?))", (_PROBE_BYTES,))
            except sqlite3.Error as exc:
                raise self._file.error("write", exc) from exc
            finally:
                self._file.rollback()

    # Reading -----------------------------------------------------------------

    def rows_after(self, rowid: int | None) -> list[Any]:
        """The rows after rowid ``rowid`` (None: every row), oldest first, in
        ``ROUND_COLUMNS`` order."""
        if rowid is None:
            return self._fetch(f"{self._file.select} ORDER BY seq")
        return self._fetch(f"{self._file.select} WHERE seq > ? ORDER BY seq", (rowid,))

    def round_id_at(self, rowid: int) -> str | None:
        """The round_id of the row at ``rowid`` (None: no such row)."""
        found = self._fetch("SELECT round_id FROM rounds WHERE seq = ?", (rowid,))
        return found[0][0] if found else None

    def snapshot(self) -> Snapshot:
        """Every round, as one read of the file: the packed blocks' chunks (from rowid 1
        up to the first block without one), the row-only text of their rows, the rest
        of the rows whole. The chunks are returned sealed: ``log_frame`` opens them.
        """
        with self.lock:
            conn = self._open_conn()
            try:
                conn.execute("BEGIN")
                chunks = self._file.contiguous_chunks(conn)
                covered = chunks[-1][0] if chunks else 0
                texts = conn.execute(
                    f"SELECT round_id, {', '.join(ROW_ONLY_COLUMNS)} FROM rounds"
                    " WHERE seq <= ? ORDER BY seq",
                    (covered,),
                ).fetchall() if covered else []  # fmt: skip
                rows = conn.execute(
                    f"{self._file.select} WHERE seq > ? ORDER BY seq", (covered,)
                ).fetchall()
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._file.rollback()
                raise self._file.error("read", exc) from exc
        return Snapshot(chunks, covered, texts, rows)

    @property
    def last_rowid(self) -> int:
        """The rowid of the newest round (0 when empty).

        Rowids count rounds from 1 without gaps (the log is append-only), so
        this is also the number of rounds, and a reader that has seen
        ``since(n)`` knows the next cursor is ``n + len(result)``.
        """
        return int(self._fetch("SELECT coalesce(max(seq), 0) FROM rounds")[0][0])

    def since(self, rowid: int, limit: int | None = None) -> list[RoundRecord]:
        """The rounds after rowid ``rowid`` (oldest first), at most ``limit`` of them."""
        _check_count("rowid", rowid)
        if limit is not None:
            _check_count("limit", limit)
        rows = self._fetch(
            f"{self._file.select} WHERE seq > ? ORDER BY seq LIMIT ?",
            (rowid, -1 if limit is None else limit),
        )
        return [_record(row) for row in rows]

    def tail(self, n: int = 10) -> list[RoundRecord]:
        """The newest ``n`` rounds, oldest first."""
        _check_count("n", n)
        rows = self._fetch(f"{self._file.select} ORDER BY seq DESC LIMIT ?", (n,))
        return [_record(row) for row in reversed(rows)]

    def get(self, round_id: str) -> RoundRecord:
        """The round with this id; ``MadohubValueError`` if the log has none."""
        rows = self._fetch(f"{self._file.select} WHERE round_id = ?", (round_id,))
        if not rows:
            raise MadohubValueError(
                f"no round {round_id!r} in round log {self.path}; the ids are in log.df.round_id"
            )
        return _record(rows[0])

    def _fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        with self.lock:
            try:
                return self._open_conn().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._file.error("read", exc) from exc

    # Lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Close the file (idempotent); later calls raise ``LogError``."""
        with self.lock:
            if not self._closed:
                self._closed = True
                self._file.conn.close()

    @property
    def closed(self) -> bool:
        """True once ``close()`` has run."""
        return self._closed

    def _open_conn(self) -> sqlite3.Connection:
        if self._closed:
            raise LogError(f"round log {self.path} is closed; open a new RoundLog to use it")
        return self._file.conn


def _row(rec: RoundRecord) -> tuple[object, ...]:
    """The values of ``rec`` as the file stores them, in ``ROUND_COLUMNS`` order."""
    meta = json.dumps(rec.meta, ensure_ascii=False)
    values: dict[str, object] = {
        **{name: getattr(rec, name) for name in (*TEXT_COLUMNS, *INT_COLUMNS)},
        **{name: _iso(getattr(rec, name)) for name in TIME_COLUMNS},
        **{name: _float_or_none(getattr(rec, name)) for name in FLOAT_COLUMNS},
        **{name: getattr(rec, name) for name in COUNT_COLUMNS},
        **{name: _money_or_none(getattr(rec, name)) for name in MONEY_COLUMNS},
        "meta": meta,
    }
    return tuple(values[name] for name in ROUND_COLUMNS)


def _record(row: tuple[Any, ...]) -> RoundRecord:
    values = dict(zip(ROUND_COLUMNS, row, strict=True))
    for name in TIME_COLUMNS:
        if values[name] is not None:
            values[name] = datetime.fromisoformat(values[name])
    values["meta"] = parse_meta(values["meta"]) or {}
    return RoundRecord(**values)


def _check_count(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MadohubValueError(f"{what} must be a whole number >= 0, got {value!r}")
