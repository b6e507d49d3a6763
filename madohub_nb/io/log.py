"""The round log: a durable, append-only SQLite record of every round.

One row per round (trigger → extract → transform → deliver), committed as soon
as the round ends, so a killed kernel loses no finished round and a later hub
on the same file sees every earlier round. ``RoundLog.df`` is the pandas view.

Durability: the file is in WAL mode with ``synchronous=NORMAL``. A commit is
in the WAL file (the OS page cache) before ``append`` returns, which survives
the process being killed (SIGKILL, a crashed kernel); only an OS crash or
power loss may drop the last rounds. Each append is its own transaction, so a
round is either wholly in the log or not at all.

Threads and processes: one connection per ``RoundLog`` opened with
``check_same_thread=False`` and guarded by a lock. The engine thread appends
while the kernel thread reads; a single connection that ``close()`` can shut
from any thread is simpler than a connection per thread. An append holds the
lock for one short transaction; reading ``df`` holds it while rows are fetched. Several ``RoundLog`` objects (in
several processes) may share one file: WAL lets readers run beside the writer,
and writers queue on ``busy_timeout`` (``defaults.LOG_BUSY_TIMEOUT_MS``).

Every method is safe from any thread. Blocking ones take the log's lock and touch
the file, so they may wait for a reader of this log (``df``) and, for writes, up to
``busy_timeout_ms`` for another process: ``append``, ``ensure_writable``, ``df``,
``since``, ``tail``, ``get``, ``last_rowid``/``len``, ``plot``, ``close``. The engine
loop must call them in a worker thread (``asyncio.to_thread``), never on the loop.
Non-blocking ones take no lock on the log and do no I/O, so the loop and the views
may call them directly: ``redact``, ``redact_text``, ``register_secret``,
``register_env_secrets`` (the secrets are a ``SecretRegistry`` snapshot).

Reading: ``df`` of a newly opened log reads every ``CHUNK_ROWS`` rounds from one
column chunk (``log_chunks``), packed by the append that completed the block, and
only the free text (``extracted``, ``prompt``) and the newest rounds row by row:
100,000 rounds in about 0.2 s, where a row-by-row read costs 0.9 s. A log may come
from anyone: chunks not sealed by this user, or whose rows changed since, are not
read (the rows are), each row's meta is parsed alone, and a value of the wrong type
in a row reads as missing (NaN, NaT) or as stored, never as an error.

No secret reaches the file: every text field is scrubbed of API-key-like
strings and of registered secrets before it is written (keys put in the
environment later are picked up at each write). Each text field is cut at
``max_field_chars`` (``defaults.MAX_LOGGED_CHARS``) with a visible marker.

Only its owner can read the log: a new file (and so its WAL and SHM, which
SQLite creates with the database's mode) is made 0600, a folder made for it
0700; an existing log readable by others is fixed at open when we own it,
else refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
import logging
import math
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Final
from urllib.parse import quote

from ..agents.regex import lazy_compile
from ..defaults import (
    CUT_MARKER,
    DELIVERY_MODES,
    LOG_BUSY_TIMEOUT_MS,
    MAX_LOGGED_CHARS,
    check_choice,
    check_range,
)
from ..errors import LogError, MadohubError, MadohubValueError
from ..model import EXTRACTION_METHODS, ROUND_STATUSES, TURN_SIGNALS, RoundStatus
from ..secrets import SecretRegistry, scrub_secrets
from .log_chunks import (
    CHUNK_ROWS,
    CHUNK_TABLE_SQL,
    CHUNK_TRIGGERS_SQL,
    ChunkError,
    chunk_key,
    object_array,
    open_chunk,
    pack_chunk,
    seal_chunk,
    unpack_chunks,
)

if TYPE_CHECKING:  # pandas loads on first use of .df, not at import (import time)
    import pandas as pd

logger = logging.getLogger(__name__)

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

MIN_FREE_BYTES: Final = 1 << 20
"""``ensure_writable`` refuses when the log's file system has less free space."""

FILE_MODE: Final = 0o600
FOLDER_MODE: Final = 0o700
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")
_PROBE_BYTES: Final = 16 * 1024  # a generous round; makes the write probe allocate pages
_SQLITE_HEADER: Final = b"SQLite format 3\x00"


def new_round_id() -> str:
    """A fresh round id: 32 hex digits (``uuid`` is imported on the first round)."""
    import uuid

    return uuid.uuid4().hex


@dataclass(kw_only=True)
class RoundRecord:
    """One round as stored in the log; the fields are the log's columns, in order."""

    round_id: str = field(default_factory=new_round_id)
    route_id: str
    source: str
    target: str
    round: int
    """1-based count within the route; 0 for a hand ``send``."""
    trigger: str
    transform: str
    dispatch: str
    fired_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    extracted: str | None = None
    extraction_method: str | None = None
    extraction_path: str | None = None
    turn_signal: str | None = None
    """Which evidence ended the source turn: ``hook``, ``status``, ``transcript``,
    ``screen`` or ``quiet`` (None: no turn, e.g. a hand ``send``)."""
    prompt: str | None = None
    decision: str | None = None
    """An approval route's outcome: ``approved``, ``edited``, ``rejected``, ``expired``."""
    proposed_prompt: str | None = None
    """The prompt before a person's edit (None unless ``decision`` is ``edited``)."""
    delivered_at: datetime | None = None
    status: RoundStatus
    error: str | None = None
    extract_ms: float | None = None
    transform_ms: float | None = None
    deliver_ms: float | None = None
    latency_ms: float | None = None
    """From the trigger firing to the prompt submitted in the target."""
    replay_of: str | None = None
    """``round_id`` of the original round when this row is a replay."""
    delivery_mode: str | None = None
    template: str | None = None
    session_id: str | None = None
    """The hub session that wrote the row."""
    workflow: str | None = None
    """The name of the workflow whose route made the round (``hub.run``); None: made in cells."""
    workflow_hash: str | None = None
    """SHA-256 of that workflow file's bytes (of its TOML text when it was never saved)."""
    # What the source turn cost, from the agent's own files (None: not read, e.g. screen rounds).
    model: str | None = None
    input_tokens: int | None = None
    """Uncached input tokens of the source turn, summed over its API messages."""
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    turn_ms: float | None = None
    """The source turn's own duration, as the agent wrote it, else measured from its record's
    times (``meta["turn_ms_source"]``: ``record`` or ``measured``)."""
    tool_calls: int | None = None
    # What the source turn changed in its git working tree (None: not a git working tree).
    files_changed: int | None = None
    lines_added: int | None = None
    lines_removed: int | None = None
    # What the ai-routing / summary transform cost (the SDK's usage).
    ai_model: str | None = None
    ai_input_tokens: int | None = None
    ai_output_tokens: int | None = None
    ai_cache_read_tokens: int | None = None
    ai_cache_write_tokens: int | None = None
    cost_usd: float | None = None
    """Source turn plus transform, from the price table; None when a model has no price."""
    meta: dict[str, Any] = field(default_factory=dict)


ROUND_COLUMNS: Final = tuple(f.name for f in dataclasses.fields(RoundRecord))
"""The log's columns, in the stable order of ``RoundLog.df``."""

_TIME_COLUMNS: Final = ("fired_at", "delivered_at")
_FLOAT_COLUMNS: Final = ("extract_ms", "transform_ms", "deliver_ms", "latency_ms", "turn_ms")
_INT_COLUMNS: Final = ("round",)
COUNT_COLUMNS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "tool_calls",
    "files_changed",
    "lines_added",
    "lines_removed",
    "ai_input_tokens",
    "ai_output_tokens",
    "ai_cache_read_tokens",
    "ai_cache_write_tokens",
)
"""Token and call counts: INTEGER in the file, float64 in ``df`` (missing: NaN)."""
_MONEY_COLUMNS: Final = ("cost_usd",)
_TEXT_COLUMNS: Final = tuple(
    c
    for c in ROUND_COLUMNS
    if c
    not in (*_TIME_COLUMNS, *_FLOAT_COLUMNS, *_INT_COLUMNS, *COUNT_COLUMNS, *_MONEY_COLUMNS, "meta")
)
_REQUIRED_TEXT: Final = (
    "round_id",
    "route_id",
    "source",
    "target",
    "trigger",
    "transform",
    "dispatch",
    "status",
)
_NON_EMPTY_TEXT: Final = ("round_id", "status")
TIME_DTYPE: Final = "datetime64[us, UTC]"

_SQL_TYPES: Final = {
    **{c: "TEXT" for c in _TEXT_COLUMNS},
    **{c: "TEXT" for c in _TIME_COLUMNS},  # ISO 8601 UTC, readable in the sqlite3 shell
    **{c: "REAL" for c in _FLOAT_COLUMNS},
    **{c: "INTEGER" for c in COUNT_COLUMNS},
    **{c: "REAL" for c in _MONEY_COLUMNS},
    "round": "INTEGER",
    "meta": "TEXT",  # JSON object
}
_NOT_NULL: Final = {*_REQUIRED_TEXT, "round", "fired_at", "meta"}
_COLUMN_SQL: Final = ", ".join(f'"{c}"' for c in ROUND_COLUMNS)
_ROW_ONLY_COLUMNS: Final = ("extracted", "prompt")
"""Free text read from the rows, never packed in chunks (that would double the file)."""
_CHUNK_COLUMNS: Final = tuple(
    (c, "time" if c in _TIME_COLUMNS else "int" if c in _INT_COLUMNS else "text" if c in
     (*_TEXT_COLUMNS, "meta") else "float")
    for c in ROUND_COLUMNS
    if c not in _ROW_ONLY_COLUMNS
)  # fmt: skip
_CHUNK_SELECT: Final = (
    "SELECT " + ", ".join(f'"{c}"' for c, _ in _CHUNK_COLUMNS) + " FROM rounds"
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
_INSERT: Final = (
    f"INSERT INTO rounds ({_COLUMN_SQL}) VALUES ({', '.join('?' for _ in ROUND_COLUMNS)})"
)
_SELECT: Final = f"SELECT {_COLUMN_SQL} FROM rounds"


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


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat("T", "microseconds")


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _money_or_none(value: object) -> float | None:
    """A cost as stored: NaN (no price for the model) is stored as NULL, like None."""
    number = _float_or_none(value)
    return None if number is None or math.isnan(number) else number


def _check_usage(rec: RoundRecord) -> None:
    """Usage columns: names are strings, counts whole numbers >= 0, cost a number >= 0 (or NaN)."""
    for name in ("model", "ai_model"):
        value = getattr(rec, name)
        if value is not None and not isinstance(value, str):
            raise MadohubValueError(
                f"round {name} must be a model name (str) or None, got {value!r}"
            )
    for name in COUNT_COLUMNS:
        value = getattr(rec, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise MadohubValueError(
                f"round {name} must be a whole number >= 0 or None (not read), got {value!r}"
            )
    for name in _MONEY_COLUMNS:
        value = getattr(rec, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
        ):
            raise MadohubValueError(
                f"round {name} must be a number of US dollars >= 0, NaN or None, got {value!r}"
            )


class RoundLog:
    """The durable, append-only log of rounds in one SQLite file.

    ``path=None`` uses ``default_log_path()``; ``":memory:"`` keeps the log in
    memory (tests). ``read_only=True`` opens an existing log for analysis
    (SQLite ``mode=ro``): appends then fail with ``LogError``. ``max_bytes``
    caps the file size; appends beyond it fail like a full disk. ``secrets``
    (and the values of ``SECRET_ENV_VARS``) are redacted from every row. A
    write waits up to ``busy_timeout_ms`` for another writer's lock.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        secrets: Iterable[str] = (),
        read_only: bool = False,
        max_bytes: int | None = None,
        busy_timeout_ms: int = LOG_BUSY_TIMEOUT_MS,
        max_field_chars: int = MAX_LOGGED_CHARS,
    ) -> None:
        self.read_only: Final = read_only
        self.in_memory: Final = str(path) == MEMORY
        self.path: Final = Path(MEMORY) if self.in_memory else self._resolve(path)
        self.secrets: Final = SecretRegistry()
        """What this log redacts; reading it takes no lock (see ``SecretRegistry``)."""
        self.max_field_chars = max_field_chars
        self._lock = threading.Lock()
        self._closed = False
        self._frame: pd.DataFrame | None = None
        """The rounds ``df`` has read so far; later calls read only newer rows."""
        self._frame_lock = threading.Lock()  # one df build at a time; appends go on beside it
        self.busy_timeout_ms: Final = check_range(
            "busy_timeout_ms", busy_timeout_ms, (0, 600_000), " ms"
        )
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise MadohubValueError(
                f"max_bytes must be a positive whole number of bytes or None, got {max_bytes!r}"
            )
        for secret in [secrets] if isinstance(secrets, str) else secrets:
            self.register_secret(secret)
        self.register_env_secrets()
        self._conn = self._connect()
        try:
            self._open_schema()
            self._select = _select_sql(self._stored_columns())
            self._has_chunks = self._table_exists("frame_chunks")
            if max_bytes is not None:
                self._cap_size(max_bytes)
            self._check_modes()
        except BaseException:
            self._conn.close()
            raise

    @property
    def max_field_chars(self) -> int:
        """Longest text one field keeps; longer text is cut with a visible marker."""
        return self._max_field_chars

    @max_field_chars.setter
    def max_field_chars(self, value: int) -> None:
        self._max_field_chars = check_range("max_field_chars", value, (100, 1 << 30), " characters")

    # Opening -----------------------------------------------------------------

    @staticmethod
    def _resolve(path: str | os.PathLike[str] | None) -> Path:
        if path is None:
            return default_log_path().absolute()
        if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
            raise MadohubValueError(
                f"log path must be a file path, ':memory:' or None (the default), got {path!r}"
            )
        return Path(path).expanduser().absolute()

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
            raise self._error("open", exc) from exc
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
        conn = self._conn
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
                self._rollback()
                raise
            self._set_wal()
        except sqlite3.Error as exc:
            raise self._error("open", exc) from exc

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
            for kind, name, sql in self._conn.execute(
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
            for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return False
        self._refuse_foreign_sql()
        info = dict(self._conn.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
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
        conn = self._conn
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
            packed = self._pack_chunks(conn, self.last_rowid, limit=None)
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            if own:
                conn.execute("COMMIT")
        except BaseException:
            if own:
                self._rollback()
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
        return self._conn.execute(query, (name,)).fetchone() is not None

    def _stored_columns(self) -> set[str]:
        return {str(row[1]) for row in self._conn.execute("PRAGMA table_info(rounds)")}

    def _set_wal(self) -> None:
        if not self.in_memory and not self.read_only:
            self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")

    def _cap_size(self, max_bytes: int) -> None:
        page_size = int(self._conn.execute("PRAGMA page_size").fetchone()[0])
        self._conn.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page_size)}")

    # Writing -----------------------------------------------------------------

    def register_env_secrets(self) -> None:
        """Redact the keys now in ``SECRET_ENV_VARS`` (the environment may change later).

        Never blocks: it takes no lock on the log (see ``SecretRegistry``).
        """
        self.secrets.add_env()

    def redact_text(self, text: str) -> str:
        """``text`` with every registered secret (and key-like string) replaced: safe to show.

        Never blocks: it reads the secrets' snapshot, not the file, so a view or the
        engine loop redacting meanwhile never waits on an append held by a locked file.
        """
        return self.secrets.redact(text)

    def register_secret(self, secret: str) -> None:
        """Redact ``secret`` (e.g. an API key) from every row appended from now on.

        Never blocks on the log (a swap of the secrets' snapshot).
        """
        self.secrets.add(secret)

    def append(self, rec: RoundRecord) -> None:
        """Write one round and commit it before returning.

        Blocking (up to ``busy_timeout_ms`` on a file another process locked): call it
        from a worker thread. Once its transaction began it is not undone by the
        caller giving up: a cancelled ``to_thread`` still commits the round.
        """
        stored = self._scrubbed(self._validated(rec))
        row = self._row(stored)
        with self._lock:
            conn = self._open_conn()
            try:
                conn.execute("BEGIN IMMEDIATE")
                seq = conn.execute(_INSERT, row).lastrowid
                conn.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                self._rollback()
                raise LogError(
                    f"round {stored.round_id!r} is already in round log {self.path}; "
                    "every round needs a new round_id"
                ) from exc
            except sqlite3.Error as exc:
                self._rollback()
                raise self._error("append a round to", exc) from exc
            except BaseException:
                self._rollback()  # never leave the write transaction open for the next append
                raise
            if seq is not None and seq % CHUNK_ROWS == 0:
                self._pack_after_append(conn, seq)

    def _pack_after_append(self, conn: sqlite3.Connection, seq: int) -> None:
        """Pack the block the append completed (and a few older ones still missing).

        Its own transaction after the round's commit: a chunk that cannot be written
        (a full disk, the size cap) loses nothing logged, and ``df`` reads those rows
        row by row instead. Nothing here fails the append: its round is committed.
        """
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._pack_chunks(conn, seq, limit=_CATCH_UP_CHUNKS)
            conn.execute("COMMIT")
        except Exception as exc:
            self._rollback()
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
                blob = seal_chunk(pack_chunk(rows, _CHUNK_COLUMNS), first, last, key)
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
        with self._lock:
            conn = self._open_conn()
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO write_probe VALUES (zeroblob(?))", (_PROBE_BYTES,))
            except sqlite3.Error as exc:
                raise self._error("write", exc) from exc
            finally:
                self._rollback()

    def _validated(self, rec: RoundRecord) -> RoundRecord:
        if not isinstance(rec, RoundRecord):
            raise MadohubValueError(f"append takes a RoundRecord, got {type(rec).__name__}")
        for name in _REQUIRED_TEXT:
            value = getattr(rec, name)
            if not isinstance(value, str) or (name in _NON_EMPTY_TEXT and not value):
                kind = "a non-empty string" if name in _NON_EMPTY_TEXT else "a string"
                raise MadohubValueError(f"round {name} must be {kind}, got {value!r}")
        check_choice("round status", rec.status, ROUND_STATUSES)
        if rec.extraction_method is not None:
            check_choice("extraction method", rec.extraction_method, EXTRACTION_METHODS)
        if rec.turn_signal is not None:
            check_choice("turn signal", rec.turn_signal, TURN_SIGNALS)
        if rec.delivery_mode is not None:
            check_choice("delivery mode", rec.delivery_mode, DELIVERY_MODES)
        if isinstance(rec.round, bool) or not isinstance(rec.round, int) or rec.round < 0:
            raise MadohubValueError(
                f"round number must be a whole number >= 0 (0 for a hand send), got {rec.round!r}"
            )
        for name in _TIME_COLUMNS:
            value = getattr(rec, name)
            if value is None and name == "delivered_at":
                continue
            if not isinstance(value, datetime) or value.utcoffset() is None:
                raise MadohubValueError(
                    f"round {name} must be a timezone-aware datetime (e.g. datetime.now(timezone.utc)), got {value!r}"
                )
        for name in _FLOAT_COLUMNS:
            value = getattr(rec, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
            ):
                raise MadohubValueError(
                    f"round {name} must be a number of milliseconds or None, got {value!r}"
                )
        _check_usage(rec)
        if not isinstance(rec.meta, dict):
            raise MadohubValueError(f"round meta must be a dict, got {type(rec.meta).__name__}")
        return rec

    def redact(self, rec: RoundRecord) -> RoundRecord:
        """A copy of ``rec`` as the log stores it (secrets redacted): safe to show.

        Never blocks: no lock on the log, no file I/O (safe on the engine loop).
        """
        return self._scrubbed(rec)

    def _scrubbed(self, rec: RoundRecord) -> RoundRecord:
        """A copy of ``rec`` with every secret replaced in text fields and meta.

        Lone surrogates (a transcript's ``\\udc9b`` escape) become U+FFFD:
        SQLite stores UTF-8, which cannot encode them.
        """
        self.register_env_secrets()
        secrets = self.secrets.snapshot
        cap = self._max_field_chars
        changes: dict[str, Any] = {
            name: _capped(_storable(scrub_secrets(value, secrets)), cap)
            for name in _TEXT_COLUMNS
            if isinstance(value := getattr(rec, name), str)
        }
        changes["meta"] = _scrub_json(rec.meta, secrets, cap)
        return dataclasses.replace(rec, **changes)

    @staticmethod
    def _row(rec: RoundRecord) -> tuple[object, ...]:
        meta = json.dumps(rec.meta, ensure_ascii=False)
        values: dict[str, object] = {
            **{name: getattr(rec, name) for name in (*_TEXT_COLUMNS, *_INT_COLUMNS)},
            **{name: _iso(getattr(rec, name)) for name in _TIME_COLUMNS},
            **{name: _float_or_none(getattr(rec, name)) for name in _FLOAT_COLUMNS},
            **{name: getattr(rec, name) for name in COUNT_COLUMNS},
            **{name: _money_or_none(getattr(rec, name)) for name in _MONEY_COLUMNS},
            "meta": meta,
        }
        return tuple(values[name] for name in ROUND_COLUMNS)

    # Reading -----------------------------------------------------------------

    @property
    def df(self) -> pd.DataFrame:
        """Every round as a DataFrame, in append order, columns in ``ROUND_COLUMNS`` order.

        Text columns are ``object`` holding ``str`` (missing: None; the same
        in pandas 2 and 3, and much faster to build than the string dtype
        for 100k rounds), ``round`` is int64, ``fired_at``/``delivered_at`` are ``datetime64[us, UTC]``
        (missing: NaT), timings are float64 ms (missing: NaN), ``meta`` holds
        dicts. Row ``i`` is the round with rowid ``i + 1``.

        The first call reads every round (packed blocks from their column chunks,
        the rest row by row, see ``log_chunks``); later calls read only the rounds
        appended since (by this or any other process) and add them to the
        rows already read, so a dashboard or notebook asking again and again
        pays for new rounds only. Rounds are never changed once written, which
        is what makes this exact; a file replaced under an open log is noticed
        (its row at the last rowid read is not the one read) and read afresh.
        Each call returns a new DataFrame: changing it leaves the next one as
        it was (the ``meta`` dicts are shared, as a shallow copy shares them).
        """
        with self._frame_lock:
            with _gc_paused():
                frame = self._frame
                if frame is not None and len(frame) and not self._still_has(frame):
                    frame = None
                if frame is None:
                    frame = self._read_frame()
                else:
                    rows = self._fetch(f"{self._select} WHERE seq > ? ORDER BY seq", (len(frame),))
                    if rows:
                        frame = _appended(frame, rounds_frame(rows))
                self._frame = frame
                return _copy_frame(frame)

    def _read_frame(self) -> pd.DataFrame:
        """Every round: the packed blocks from their column chunks, the rest row by row.

        Chunks are used from rowid 1 up to the first block without one; the chunks and
        the rows are read in one transaction, so they are one snapshot of the file.
        """
        with self._lock:
            conn = self._open_conn()
            try:
                conn.execute("BEGIN")
                chunks = self._contiguous_chunks(conn)
                covered = chunks[-1][0] if chunks else 0
                texts = conn.execute(
                    f"SELECT round_id, {', '.join(_ROW_ONLY_COLUMNS)} FROM rounds"
                    " WHERE seq <= ? ORDER BY seq",
                    (covered,),
                ).fetchall() if covered else []  # fmt: skip
                rows = conn.execute(
                    f"{self._select} WHERE seq > ? ORDER BY seq", (covered,)
                ).fetchall()
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise self._error("read", exc) from exc
        if not covered:
            return rounds_frame(rows)
        try:
            key = chunk_key(create=False)
            bodies = [open_chunk(blob, last - CHUNK_ROWS + 1, last, key) for last, blob in chunks]
            packed = _chunk_frame(bodies, texts, covered)
        except Exception as exc:  # a chunk is a copy of rows: whatever is wrong, read the rows
            logger.warning(
                "round log %s: column chunks unreadable (%s); reading rows", self.path, exc
            )
            return rounds_frame(self._fetch(f"{self._select} ORDER BY seq"))
        return _appended(packed, rounds_frame(rows)) if rows else packed

    def _contiguous_chunks(self, conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
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

    def _still_has(self, frame: pd.DataFrame) -> bool:
        """Is the last row read still the round at its rowid (the file was not replaced)?"""
        rowid = len(frame)
        found = self._fetch("SELECT round_id FROM rounds WHERE seq = ?", (rowid,))
        return bool(found) and found[0][0] == frame["round_id"].iat[rowid - 1]

    plotter: ClassVar[Callable[..., Any] | None] = None
    """Draws :meth:`plot` from the rounds' DataFrame; attached by the notebook layer
    (madohub_nb.notebook.display: :func:`madohub_nb.plot.timeline_figure`, loaded only when
    a plot is asked for), so the log itself imports no plotting."""

    def plot(self, *, session_id: str | None = None, title: str | None = None) -> Any:
        """The rounds as a timeline Figure: a lane per route, a bar per round, latency beneath.

        ``session_id`` keeps one hub's rounds (``hub.session_id``); an empty log gives a
        Figure that says so. Drawn by :func:`madohub_nb.plot.timeline_figure`.
        """
        draw = RoundLog.plotter
        if draw is None:  # (only if madohub_nb's package __init__ was bypassed)
            raise MadohubError("no plotter attached; import madohub_nb to draw the timeline")
        df = self.df
        if session_id is not None:
            df = df[df["session_id"] == session_id]
        return draw(df, title=title)

    def __len__(self) -> int:
        return self.last_rowid

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
            f"{self._select} WHERE seq > ? ORDER BY seq LIMIT ?",
            (rowid, -1 if limit is None else limit),
        )
        return [_record(row) for row in rows]

    def tail(self, n: int = 10) -> list[RoundRecord]:
        """The newest ``n`` rounds, oldest first."""
        _check_count("n", n)
        rows = self._fetch(f"{self._select} ORDER BY seq DESC LIMIT ?", (n,))
        return [_record(row) for row in reversed(rows)]

    def get(self, round_id: str) -> RoundRecord:
        """The round with this id; ``MadohubValueError`` if the log has none."""
        rows = self._fetch(f"{self._select} WHERE round_id = ?", (round_id,))
        if not rows:
            raise MadohubValueError(
                f"no round {round_id!r} in round log {self.path}; the ids are in log.df.round_id"
            )
        return _record(rows[0])

    def _fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._open_conn().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._error("read", exc) from exc

    # Lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Close the file (idempotent); later calls raise ``LogError``."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
        with self._frame_lock:
            self._frame = None  # the rows read for df go with the log

    @property
    def closed(self) -> bool:
        """True once ``close()`` has run."""
        return self._closed

    def __enter__(self) -> RoundLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            return f"RoundLog({str(self.path)!r}, closed)"
        mode = ", read_only" if self.read_only else ""
        return f"RoundLog({str(self.path)!r}, rounds={len(self)}{mode})"

    def _open_conn(self) -> sqlite3.Connection:
        if self._closed:
            raise LogError(f"round log {self.path} is closed; open a new RoundLog to use it")
        return self._conn

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                logger.warning("rollback failed on round log %s", self.path, exc_info=True)

    def _error(self, action: str, exc: sqlite3.Error) -> LogError:
        message = str(exc)
        return LogError(
            f"cannot {action} round log {self.path}: {message}; {_advice(message, self.busy_timeout_ms)}"
        )


def rounds_frame(rows: list[Any]) -> pd.DataFrame:
    """Build the log's DataFrame from rows in ``ROUND_COLUMNS`` order (vectorised conversions)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in ROUND_COLUMNS]
    return _frame(dict(zip(ROUND_COLUMNS, columns, strict=True)))


def _chunk_frame(blobs: list[bytes], texts: list[tuple[Any, ...]], rows: int) -> pd.DataFrame:
    """The DataFrame of the first ``rows`` rounds: chunk columns, plus the row-only text.

    ``texts``: (round_id, *row-only columns) of each row. Every round_id must be the
    chunks' own: rows deleted or rewritten by another program leave chunks that no
    longer describe them (``ChunkError``).
    """
    import numpy as np

    columns = unpack_chunks(blobs, _CHUNK_COLUMNS)
    if len(texts) != rows or any(len(values) != rows for values in columns.values()):
        raise ChunkError(f"the chunks and rows do not both hold {rows} rounds")
    ids, *row_only = zip(*texts, strict=True)
    if not np.array_equal(columns["round_id"], np.asarray(ids, dtype=object)):
        raise ChunkError("the rows' round ids are not the chunks' (rows were rewritten)")
    columns.update(zip(_ROW_ONLY_COLUMNS, row_only, strict=True))
    return _frame(columns)


def _frame(columns: dict[str, Any]) -> pd.DataFrame:
    """The log's DataFrame from each column's values: sequences as read from rows, or the
    numpy arrays of column chunks (times as ``datetime64[us]`` in UTC)."""
    import pandas as pd

    data: dict[str, Any] = {}
    for name in ROUND_COLUMNS:
        values = columns[name]
        if name in _TIME_COLUMNS and getattr(values, "dtype", None) == "datetime64[us]":
            data[name] = pd.Series(values, copy=False).dt.tz_localize("UTC")
        elif name in _TIME_COLUMNS:
            data[name] = _typed(values, _times, lambda v: _times(v, errors="coerce"))
        elif name in (*_FLOAT_COLUMNS, *COUNT_COLUMNS, *_MONEY_COLUMNS):
            data[name] = _typed(
                values,
                lambda v: pd.Series(v, dtype="float64"),
                lambda v: pd.to_numeric(pd.Series(v, dtype=object), errors="coerce").astype(
                    "float64"
                ),
            )
        elif name in _INT_COLUMNS:
            data[name] = _typed(
                values,
                lambda v: pd.Series(v, dtype="int64"),
                lambda v: pd.Series(object_array(list(v)), dtype=object),
            )
        elif name == "meta":
            # Each row's own text parsed alone: joined, one row's "{…},{…}" shifts the rest.
            data[name] = _object_series(_meta_column(values))
        else:
            data[name] = pd.Series(values, dtype=object, copy=False)
    return pd.DataFrame(data, columns=list(ROUND_COLUMNS), copy=False)


def _typed(
    values: Any,
    convert: Callable[[Any], pd.Series],
    otherwise: Callable[[Any], pd.Series],
) -> pd.Series:
    """``convert(values)``, the column's dtype; ``otherwise(values)`` when a row holds a value
    of another type (another program's file): ``df`` never fails on one."""
    try:
        return convert(values)
    except (ValueError, TypeError, OverflowError, ArithmeticError):
        return otherwise(values)


def _times(values: Any, errors: str = "raise") -> pd.Series:
    """ISO 8601 text as UTC times (``errors="coerce"``: NaT where a row holds no time)."""
    import pandas as pd

    raw = pd.Series(values, dtype=object)
    return pd.to_datetime(raw, format="ISO8601", utc=True, errors=errors).astype(TIME_DTYPE)  # type: ignore[call-overload]


def _appended(frame: pd.DataFrame, more: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the rows of ``more`` (the same columns and dtypes) after it, renumbered."""
    import pandas as pd

    return pd.concat([frame, more], ignore_index=True) if len(frame) else more


def _copy_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy the caller may change without changing ``frame``.

    With copy-on-write (always on from pandas 3) a shallow copy is enough and
    costs nothing; before it, the values are copied.
    """
    import pandas as pd

    if int(pd.__version__.split(".")[0]) >= 3:
        return frame.copy(deep=False)
    return frame.copy(deep=pd.get_option("mode.copy_on_write") is not True)  # "warn" is not on


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building millions of short-lived objects.

    Reading 100k rounds creates millions of cells; in a kernel full of live
    objects the collector's passes over them cost a quarter of the time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _object_series(values: list[Any]) -> pd.Series:
    """An object Series holding ``values`` as they are (dicts stay dicts)."""
    import pandas as pd

    return pd.Series(object_array(values), dtype=object)


_SCAN_JSON: Final = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]
"""One JSON value from a position in a string: (value, end); json's own C scanner."""


def _meta_or_none(text: object) -> dict[str, Any] | None:
    """One row's meta: its JSON object, or None when the row holds anything else.

    Rows this package writes always hold one JSON object; another program's may not
    (``{…},{…}``, not JSON, a list), and reading its log must neither fail nor show a
    value the row does not hold.
    """
    if not isinstance(text, str):
        return None
    text = text.strip()
    try:
        value, end = _SCAN_JSON(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    return value if end == len(text) and isinstance(value, dict) else None


def _meta_column(values: Iterable[Any]) -> list[dict[str, Any] | None]:
    """Each row's meta, parsed alone, each row with a dict of its own.

    Each distinct text is parsed once; its rows get a copy of the dict (values plain)
    or a parse of their own (values nested): 100,000 rows with a few hundred distinct
    metas cost about what one ``json.loads`` of the whole column did.
    """
    values = list(values)
    make: dict[Any, Callable[[], dict[str, Any] | None]] = {}
    for text in dict.fromkeys(values):
        meta = _meta_or_none(text)
        if meta is None:
            make[text] = _no_meta
        elif any(isinstance(v, (dict, list)) for v in meta.values()):
            make[text] = functools.partial(_meta_or_none, text)
        else:
            make[text] = meta.copy
    return [make[text]() for text in values]


def _no_meta() -> None:
    return None


def _record(row: tuple[Any, ...]) -> RoundRecord:
    values = dict(zip(ROUND_COLUMNS, row, strict=True))
    for name in _TIME_COLUMNS:
        if values[name] is not None:
            values[name] = datetime.fromisoformat(values[name])
    values["meta"] = _meta_or_none(values["meta"]) or {}
    return RoundRecord(**values)


def _scrub_json(value: Any, secrets: tuple[str, ...], cap: int = MAX_LOGGED_CHARS) -> Any:
    """``value`` as JSON-ready data with secrets scrubbed and strings capped; other objects
    become their ``str``."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {
            _scrub_json(str(k), secrets, cap): _scrub_json(v, secrets, cap)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_scrub_json(v, secrets, cap) for v in value]
    text = value if isinstance(value, str) else str(value)
    return _capped(_storable(scrub_secrets(text, secrets)), cap)


def _capped(text: str, cap: int) -> str:
    """``text`` cut to ``cap`` characters with a visible marker saying how much went."""
    if len(text) <= cap:
        return text
    return text[:cap] + "\n" + CUT_MARKER.format(cut=len(text) - cap)


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


_SURROGATE: Final = lazy_compile("[\ud800-\udfff]")


def _storable(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, so that it encodes as UTF-8."""
    return _SURROGATE.sub("\ufffd", text)


def _check_count(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MadohubValueError(f"{what} must be a whole number >= 0, got {value!r}")
