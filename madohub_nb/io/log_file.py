"""One round log's SQLite file: refused if a stranger's, created at the schema, migrated
when older, kept owner-only, and its column chunks packed.

Only its owner can read the log: a new file (and so its WAL and SHM, which
SQLite creates with the database's mode) is made 0600, a folder made for it
0700; an existing log readable by others is fixed at open when we own it,
else refused. The file is in WAL mode with ``synchronous=NORMAL`` (see ``log_store``).

Every ``CHUNK_ROWS`` rounds, the append that completes a block packs it into one
sealed column chunk (``log_chunks``), which ``log_frame`` reads instead of its rows;
a chunk is trusted only from rowid 1 on, contiguous, and beside the triggers that drop
it when one of its rows changes.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path
from typing import Final
from urllib.parse import quote

from ..defaults import check_range
from ..errors import LogError, MadohubValueError
from .log_chunks import (
    CHUNK_ROWS,
    CHUNK_TABLE_SQL,
    CHUNK_TRIGGERS_SQL,
    ChunkError,
    chunk_key,
    pack_chunk,
    seal_chunk,
)
from .log_record import (
    COUNT_COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    MONEY_COLUMNS,
    REQUIRED_TEXT,
    ROUND_COLUMNS,
    TEXT_COLUMNS,
    TIME_COLUMNS,
)

logger = logging.getLogger("madohub_nb.io.log")  # the round log's one logger, whichever part speaks

SCHEMA_VERSION: Final = 4
"""1: the first log; 2: the usage and cost columns (model … cost_usd); 3: the column chunks
(``log_chunks``) that make ``df`` fast; 4: chunks sealed by their user's key and dropped
by any change to their rows, the AI transform's cache columns (``ai_cache_read_tokens``,
``ai_cache_write_tokens``), ``turn_signal`` and what a turn changed (``files_changed``,
``lines_added``, ``lines_removed``). Older files are migrated, and so is a
schema-4 file written before one of these columns joined (schema 4 was not released then)."""
APP_NAME: Final = "madohub_nb"
APPLICATION_ID: Final = 0x4D484E42  # "MHNB" in the SQLite header, for file(1) and friends
MEMORY: Final = ":memory:"

FILE_MODE: Final = 0o600
FOLDER_MODE: Final = 0o700
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")
_SQLITE_HEADER: Final = b"SQLite format 3\x00"

_SQL_TYPES: Final = {
    **{c: "TEXT" for c in TEXT_COLUMNS},
    **{c: "TEXT" for c in TIME_COLUMNS},  # ISO 8601 UTC, readable in the sqlite3 shell
    **{c: "REAL" for c in FLOAT_COLUMNS},
    **{c: "INTEGER" for c in COUNT_COLUMNS},
    **{c: "REAL" for c in MONEY_COLUMNS},
    "round": "INTEGER",
    "meta": "TEXT",  # JSON object
}
_NOT_NULL: Final = {*REQUIRED_TEXT, "round", "fired_at", "meta"}
COLUMN_SQL: Final = ", ".join(f'"{c}"' for c in ROUND_COLUMNS)
ROW_ONLY_COLUMNS: Final = ("extracted", "prompt")
"""Free text read from the rows, never packed in chunks (that would double the file)."""
CHUNK_COLUMNS: Final = tuple(
    (c, "time" if c in TIME_COLUMNS else "int" if c in INT_COLUMNS else "text" if c in
     (*TEXT_COLUMNS, "meta") else "float")
    for c in ROUND_COLUMNS
    if c not in ROW_ONLY_COLUMNS
)  # fmt: skip
"""(column, kind) of each column a chunk packs, in ``ROUND_COLUMNS`` order."""
_CHUNK_SELECT: Final = (
    "SELECT " + ", ".join(f'"{c}"' for c, _ in CHUNK_COLUMNS) + " FROM rounds"
    " WHERE seq BETWEEN ? AND ? ORDER BY seq"
)
_TRIGGERS_AS_STORED: Final = tuple(t.replace(" IF NOT EXISTS", "") for t in CHUNK_TRIGGERS_SQL)
"""The chunk triggers as ``sqlite_master`` keeps them; chunks are trusted only beside them."""
_CATCH_UP_CHUNKS: Final = 8
"""Missing chunks an append packs at most (a log written by an older version catches up)."""
_SCHEMA: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE rounds (seq INTEGER PRIMARY KEY, "
    + ", ".join(
        f'"{c}" {_SQL_TYPES[c]}'
        + (" NOT NULL" if c in _NOT_NULL else "")
        + (" UNIQUE" if c == "round_id" else "")
        for c in ROUND_COLUMNS
    )
    + ")",
    "CREATE TABLE write_probe (x BLOB)",  # ensure_writable writes here, then rolls back
    CHUNK_TABLE_SQL,
    *CHUNK_TRIGGERS_SQL,
)
_SELECT: Final = f"SELECT {COLUMN_SQL} FROM rounds"


def _select_sql(stored: set[str]) -> str:
    """The SELECT of every column; columns an older (read-only) file lacks read as NULL."""
    if all(c in stored for c in ROUND_COLUMNS):
        return _SELECT
    parts = (f'"{c}"' if c in stored else f'NULL AS "{c}"' for c in ROUND_COLUMNS)
    return f"SELECT {', '.join(parts)} FROM rounds"


def default_log_path() -> Path:
    """Where a hub logs when given no path: ``$MADOHUB_LOG``, else the XDG data folder.

    ``$XDG_DATA_HOME/madohub_nb/rounds.sqlite3``, falling back to
    ``~/.local/share/madohub_nb/rounds.sqlite3``.
    """
    explicit = os.environ.get("MADOHUB_LOG", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME", "").strip()
    # The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    base = Path(data_home) if data_home and Path(data_home).is_absolute() else None
    if base is None:
        base = Path.home() / ".local" / "share"
    return base / APP_NAME / "rounds.sqlite3"


def _resolved(path: str | os.PathLike[str] | None) -> Path:
    """The absolute file a log path names (None: ``default_log_path()``)."""
    if path is None:
        return default_log_path().absolute()
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise MadohubValueError(
            f"log path must be a file path, ':memory:' or None (the default), got {path!r}"
        )
    return Path(path).expanduser().absolute()


def _advice(message: str, busy_timeout_ms: int) -> str:
    low = message.lower()
    if "full" in low:
        return "the disk (or the log's max_bytes cap) is full: free some space or pass another log_path"
    if "readonly" in low or "read-only" in low or "read only" in low:
        return "the log file or its folder is read-only: make it writable or pass another log_path"
    if "locked" in low or "busy" in low:
        return (
            f"another process held the log locked for over {busy_timeout_ms} ms: "
            "close other hubs writing to it, or pass another log_path"
        )
    if "unable to open" in low:
        return "the file cannot be opened or created: check its folder exists and is writable"
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return (
            "the file is damaged or not a madohub round log: it was left untouched; "
            "move it aside or pass another log_path"
        )
    if "i/o" in low:
        return "the disk reported an I/O error: check the drive and its free space"
    return "check the file and its folder, or pass another log_path"


def _restrict(path: Path, mode: int, what: str) -> None:
    """Take group and other permissions off ``path`` if it has any; LogError if we cannot."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LogError(f"cannot check the permissions of {what} {path}: {exc}") from exc
    if not stat.S_IMODE(st.st_mode) & 0o077:
        return
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
    except OSError as exc:
        raise LogError(
            f"{what} {path} is readable by other users (mode {stat.S_IMODE(st.st_mode):o}) "
            f"and cannot be made private: {exc.strerror or exc}; run `chmod {mode:o} {path}` "
            "or pass another log_path"
        ) from exc


class LogFile:
    """The opened file of one round log and its one connection.

    It holds no lock: ``LogStore`` takes its lock around each use of ``conn``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        read_only: bool,
        max_bytes: int | None,
        busy_timeout_ms: int,
    ) -> None:
        self.read_only: Final = read_only
        self.in_memory: Final = str(path) == MEMORY
        self.path: Final = Path(MEMORY) if self.in_memory else _resolved(path)
        self.busy_timeout_ms: Final = check_range(
            "busy_timeout_ms", busy_timeout_ms, (0, 600_000), " ms"
        )
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise MadohubValueError(
                f"max_bytes must be a positive whole number of bytes or None, got {max_bytes!r}"
            )
        self.conn: Final = self._connect()
        try:
            self._open_schema()
            self.select: Final = _select_sql(self._stored_columns())
            """The SELECT of every column in ``ROUND_COLUMNS`` order (NULL for those an
            older read-only file lacks)."""
            self._has_chunks = self._table_exists("frame_chunks")
            if max_bytes is not None:
                self._cap_size(max_bytes)
            self._check_modes()
        except BaseException:
            self.conn.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        """Open the file after checking it looks like SQLite; never write to a stranger's file."""
        if self.in_memory:
            target, uri = MEMORY, False
        else:
            self._check_file()
            mode = "ro" if self.read_only else "rwc"
            target, uri = f"file:{quote(str(self.path))}?mode={mode}", True
        try:
            conn = sqlite3.connect(
                target,
                uri=uri,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise self.error("open", exc) from exc
        return conn

    def _check_file(self) -> None:
        path = self.path
        if path.is_dir():
            raise LogError(
                f"round log path {path} is a folder; give a file path such as {path / 'rounds.sqlite3'}"
            )
        if not path.exists():
            if self.read_only:
                raise LogError(f"cannot open round log {path} read-only: the file does not exist")
            try:
                if not path.parent.exists():
                    path.parent.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
                    os.chmod(path.parent, FOLDER_MODE)  # mkdir's mode is masked by the umask
                # An empty file with our mode first: SQLite then creates WAL and SHM alike.
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
            except FileExistsError:
                pass  # another process made it meanwhile; checked in _check_modes
            except OSError as exc:
                raise LogError(
                    f"cannot create round log {path}: {exc.strerror or exc}; "
                    "check its folder exists and is writable, or pass another log_path"
                ) from exc
            return
        try:
            with path.open("rb") as f:
                header = f.read(len(_SQLITE_HEADER))
        except OSError as exc:
            raise LogError(f"cannot read round log {path}: {exc.strerror or exc}") from exc
        if header and header != _SQLITE_HEADER:
            raise LogError(
                f"{path} is not a madohub round log (not an SQLite file); it was left untouched: "
                "move it aside or pass another log_path"
            )

    def _open_schema(self) -> None:
        """Check the file is our log at a schema we read; create the schema in a new file."""
        conn = self.conn
        try:
            if self._is_our_log():
                self._set_wal()
                return
            if self.read_only:
                raise LogError(
                    f"{self.path} is an empty SQLite file, not a round log (opened read-only)"
                )
            conn.execute("BEGIN IMMEDIATE")  # another process may be creating it right now
            try:
                if not self._is_our_log():
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.executemany(
                        "INSERT INTO meta (key, value) VALUES (?, ?)",
                        [("app", APP_NAME), ("schema_version", str(SCHEMA_VERSION))],
                    )
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                self.rollback()
                raise
            self._set_wal()
        except sqlite3.Error as exc:
            raise self.error("open", exc) from exc

    def _check_modes(self) -> None:
        """Make the log and its side files 0600 (the default folder 0700), or refuse.

        Rounds hold whole prompts and answers: no other local user may read them.
        """
        if self.in_memory or self.read_only:
            return
        path = self.path
        if path.parent.name == APP_NAME and path.parent == default_log_path().absolute().parent:
            _restrict(path.parent, FOLDER_MODE, "folder of round log")
        for file in (path, *(Path(f"{path}{suffix}") for suffix in _SIDE_FILES)):
            _restrict(file, FILE_MODE, "round log file")

    def _refuse_foreign_sql(self) -> None:
        """LogError for a view, or a trigger that is not one of ours, in the file.

        A log file can come from anyone: such schema runs the file's own SQL when the
        hub reads or appends (an endless recursive view or trigger would hold it for
        ever). madohub's log holds tables and the chunk triggers only.
        """
        found = [
            f"{kind} {str(name)[:80]!r}"
            for kind, name, sql in self.conn.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger')"
            )
            if kind == "view" or sql not in _TRIGGERS_AS_STORED
        ]
        if found:
            raise LogError(
                f"{self.path} defines {', '.join(found[:5])}, which madohub never writes: a "
                "crafted file's own SQL would run when the log is read or written; it was left "
                "untouched: pass another log_path"
            )

    def _is_our_log(self) -> bool:
        """True for a madohub log we can read, False for an empty file; else LogError."""
        tables = {
            row[0]
            for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return False
        self._refuse_foreign_sql()
        info = dict(self.conn.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
        if info.get("app") != APP_NAME or "rounds" not in tables:
            raise LogError(
                f"{self.path} is an SQLite file of something else, not a madohub round log "
                f"(tables: {', '.join(sorted(tables))}); it was left untouched: pass another log_path"
            )
        try:
            version = int(info.get("schema_version", ""))
        except ValueError:
            raise LogError(
                f"round log {self.path} has no readable schema_version in its meta table; "
                "it was left untouched: move it aside or pass another log_path"
            ) from None
        if version > SCHEMA_VERSION:
            raise LogError(
                f"round log {self.path} was written by a newer madohub_nb (schema {version}; "
                f"this version reads up to {SCHEMA_VERSION}): upgrade madohub_nb or pass another log_path"
            )
        if version < SCHEMA_VERSION or (
            not self.read_only and not all(c in self._stored_columns() for c in ROUND_COLUMNS)
        ):
            self._migrate(version)
        return True

    def _migrate(self, version: int) -> None:
        """Bring an older log up to SCHEMA_VERSION by adding the columns it lacks (empty).

        Every later column is nullable, so old rows read as "not recorded"
        (NaN/None) and nothing already logged changes. A read-only log is left
        as it is: its missing columns read as empty (see ``_select_sql``).
        """
        if self.read_only:
            return
        conn = self.conn
        own = not conn.in_transaction  # inside _open_schema's create transaction: reuse it
        if own:
            conn.execute("BEGIN IMMEDIATE")  # another process may be migrating it right now
        try:
            missing = [c for c in ROUND_COLUMNS if c not in self._stored_columns()]
            for name in missing:
                conn.execute(f'ALTER TABLE rounds ADD COLUMN "{name}" {_SQL_TYPES[name]}')
            conn.execute(CHUNK_TABLE_SQL)
            if version < 4 or missing:  # schema 3's chunks are unsealed and lack columns
                conn.execute("DELETE FROM frame_chunks")
            for statement in CHUNK_TRIGGERS_SQL:
                conn.execute(statement)
            last_rowid = int(conn.execute("SELECT coalesce(max(seq), 0) FROM rounds").fetchone()[0])
            packed = self._pack_chunks(conn, last_rowid, limit=None)
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            if own:
                conn.execute("COMMIT")
        except BaseException:
            if own:
                self.rollback()
            raise
        logger.info(
            "round log %s migrated from schema %d to %d (added %s; packed %d column chunks)",
            self.path,
            version,
            SCHEMA_VERSION,
            ", ".join(missing) or "no column",
            packed,
        )

    def _table_exists(self, name: str) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        return self.conn.execute(query, (name,)).fetchone() is not None

    def _stored_columns(self) -> set[str]:
        return {str(row[1]) for row in self.conn.execute("PRAGMA table_info(rounds)")}

    def _set_wal(self) -> None:
        if not self.in_memory and not self.read_only:
            self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")

    def _cap_size(self, max_bytes: int) -> None:
        page_size = int(self.conn.execute("PRAGMA page_size").fetchone()[0])
        self.conn.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page_size)}")

    # Column chunks -----------------------------------------------------------

    def pack_after_append(self, seq: int) -> None:
        """Pack the block the append completed (and a few older ones still missing).

        Its own transaction after the round's commit: a chunk that cannot be written
        (a full disk, the size cap) loses nothing logged, and ``df`` reads those rows
        row by row instead. Nothing here fails the append: its round is committed.
        """
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._pack_chunks(conn, seq, limit=_CATCH_UP_CHUNKS)
            conn.execute("COMMIT")
        except Exception as exc:
            self.rollback()
            logger.info("round log %s: column chunk not written (%s)", self.path, exc)

    def _pack_chunks(self, conn: sqlite3.Connection, upto: int, limit: int | None) -> int:
        """Pack the full blocks up to rowid ``upto`` that have no chunk, oldest first (at most
        ``limit``), inside the caller's transaction; return how many were written.

        A block that cannot be packed (a row missing, an odd value) is left without
        one: ``df`` reads its rows one by one.
        """
        have = {row[0] for row in conn.execute("SELECT first_seq FROM frame_chunks")}
        starts = [s for s in range(1, upto - CHUNK_ROWS + 2, CHUNK_ROWS) if s not in have]
        key = chunk_key(create=True) if starts else None
        if key is None:
            return 0  # no block to pack, or no key to seal one with: df reads rows
        written = 0
        for first in starts[:limit]:
            last = first + CHUNK_ROWS - 1
            rows = conn.execute(_CHUNK_SELECT, (first, last)).fetchall()
            try:
                if len(rows) != CHUNK_ROWS:
                    raise ChunkError(f"{len(rows)} rows, not {CHUNK_ROWS}")
                blob = seal_chunk(pack_chunk(rows, CHUNK_COLUMNS), first, last, key)
            except ChunkError as exc:
                logger.info(
                    "round log %s: rounds %d-%d stay unpacked (%s)", self.path, first, last, exc
                )
                continue
            conn.execute(
                "INSERT OR IGNORE INTO frame_chunks (first_seq, last_seq, data) VALUES (?, ?, ?)",
                (first, last, blob),
            )
            written += 1
        return written

    def contiguous_chunks(self, conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
        """(last rowid, BLOB) of the chunks from rowid 1 on, up to the first block without one."""
        if not self._has_chunks:
            return []
        triggers = {
            sql for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")
        }
        if not triggers.issuperset(_TRIGGERS_AS_STORED):
            return []  # without them a row may have changed under its chunk unseen
        found: list[tuple[int, bytes]] = []
        for first, last, blob in conn.execute(
            "SELECT first_seq, last_seq, data FROM frame_chunks ORDER BY first_seq"
        ):
            if first != (found[-1][0] if found else 0) + 1 or last != first + CHUNK_ROWS - 1:
                break
            found.append((last, blob))
        return found

    # Errors ------------------------------------------------------------------

    def rollback(self) -> None:
        """End an open transaction (a failed ROLLBACK is logged: the caller's error matters more)."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                logger.warning("rollback failed on round log %s", self.path, exc_info=True)

    def error(self, action: str, exc: sqlite3.Error) -> LogError:
        """A ``LogError`` for a failed ``action`` naming the file, SQLite's words and what to do."""
        message = str(exc)
        return LogError(
            f"cannot {action} round log {self.path}: {message}; {_advice(message, self.busy_timeout_ms)}"
        )
