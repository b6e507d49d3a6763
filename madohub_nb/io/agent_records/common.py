"""What the agent-record readers share: budgets, newest-first records, a turn's usage.

Every reader goes through its record from the end (``iter_lines_backwards``)
and never reads more than ``ANSWER_SCAN_BYTES`` of it, so its cost does not
grow with the file. A half-written last line does not parse and is skipped; a
FIFO or any other non-regular file is refused before it is read.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from .base import (
    Extraction,
    ReadStats,
    TurnUsage,
    iter_lines_backwards,
    json_records,
    open_regular,
)

ANSWER_SCAN_BYTES = 64 * 1024 * 1024
"""How much of a record's tail a reader looks through for the last answer (and its turn)."""
TURN_SCAN_BYTES = 8 * 1024 * 1024
"""How much of a record's tail the end-of-turn check looks through before saying "unknown"."""
DETECT_SCAN_BYTES = 1024 * 1024
DETECT_SCAN_LINES = 200
"""How much of a file's tail tells its format."""

SQLITE_DEADLINE_S = 1.0
"""How long one read of another program's SQLite file may run before SQLite is told to stop:
a crafted file (a view over an endless recursive query) must not hold a reader's thread."""
SQLITE_PROGRESS_STEPS = 1000
"""SQLite virtual-machine steps between two looks at that deadline (a few microseconds)."""
SQLITE_BUSY_TIMEOUT_S = 0.2
"""How long a query waits for a writer's lock before giving up (the answer is then None)."""

log = logging.getLogger("madohub_nb")
_warned: set[tuple[str, str]] = set()

_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\r?\n)+")

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def tidy(text: str) -> str:
    """``text`` without its leading blank lines and trailing whitespace; inner lines exact."""
    return _LEADING_BLANK_LINES.sub("", text).rstrip()


def count(value: object) -> int | None:
    """A token count as written: a whole number >= 0, else None (unreadable)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def minus(total: int | None, part: int | None) -> int | None:
    """``total - part`` for counts where ``total`` includes ``part``; None if unreadable."""
    if total is None or part is None or part > total:
        return None
    return total - part


@contextmanager
def opened(path: Path) -> Iterator[BinaryIO | None]:
    """The file if it is a readable regular file (a FIFO is refused), else None; closed after."""
    f = open_regular(path)
    try:
        yield f
    finally:
        if f is not None:
            f.close()


def lines_newest_first(
    f: BinaryIO, stats: ReadStats, budget: int = ANSWER_SCAN_BYTES
) -> Iterator[bytes]:
    """The file's lines from the last, reading at most ``budget`` bytes of its tail."""
    end = f.seek(0, 2)
    return iter_lines_backwards(f, end, stats=stats, floor=end - budget)


def records_newest_first(
    f: BinaryIO, stats: ReadStats, budget: int = ANSWER_SCAN_BYTES
) -> Iterator[dict[str, Any]]:
    """The JSON-object lines of the file's tail, newest first; other lines skipped."""
    return json_records(lines_newest_first(f, stats, budget))


@dataclass
class TurnTally:
    """Sums the usage of the answer's turn from records seen newest first.

    ``add`` usage of each API call seen; ``turn_start`` when the prompt that
    started a turn shows up: before the answer it belongs to a newer turn
    (forgotten), after it the tally is complete.
    """

    model: str | None = None
    sums: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(TOKEN_FIELDS, 0))
    api_calls: int = 0
    tool_calls: int = 0
    turn_ms: float | None = None
    answer_seen: bool = False
    complete: bool = False

    def add(self, model: object, counts: dict[str, int | None]) -> None:
        self.api_calls += 1
        for name in TOKEN_FIELDS:
            total, value = self.sums[name], counts.get(name)
            self.sums[name] = None if total is None or value is None else total + value
        if self.model is None and isinstance(model, str) and model:
            self.model = model

    def turn_start(self) -> bool:
        """A prompt: True when it is the answer's (stop reading), else reset."""
        if self.answer_seen:
            self.complete = True
            return True
        self.model, self.api_calls, self.tool_calls, self.turn_ms = None, 0, 0, None
        self.sums = dict.fromkeys(TOKEN_FIELDS, 0)
        return False

    def usage(self) -> TurnUsage:
        if not self.complete:
            return TurnUsage(model=self.model, turn_ms=self.turn_ms, complete=False)
        return TurnUsage(
            model=self.model,
            turn_ms=self.turn_ms,
            tool_calls=self.tool_calls,
            api_calls=self.api_calls,
            complete=True,
            **self.sums,
        )


UsageOf = Callable[[dict[str, Any]], "tuple[object, dict[str, int | None]] | None"]


def answer_with_usage(
    records: Iterator[dict[str, Any]],
    *,
    path: Path,
    answer_of: Callable[[dict[str, Any]], tuple[str, str | None] | None],
    usage_of: UsageOf,
    is_prompt: Callable[[dict[str, Any]], bool],
    whole_file: bool,
    failed: Callable[[dict[str, Any]], bool] | None = None,
    prompt_of: Callable[[dict[str, Any]], str | None] | None = None,
) -> Extraction | None:
    """The newest record ``answer_of`` accepts, with its turn's usage, as an Extraction.

    ``usage_of(rec)`` gives one API call's ``(model, token counts)``;
    ``is_prompt(rec)`` tells the prompt that starts a turn. Reading stops at
    the answer's prompt; reaching the start of the file inside the turn also
    completes it, while reaching the end of the read budget leaves the tokens
    unknown (``TurnUsage.complete`` False). ``failed(rec)`` tells a record that
    ended a turn without an answer (an API error): met before any answer, the
    last turn has none (None), never the previous turn's. ``prompt_of(rec)`` gives the
    text of the answer's prompt record (``Extraction.prompt``; None when it was not reached).
    """
    tally = TurnTally()
    found: tuple[str, str | None] | None = None
    prompt: str | None = None
    for rec in records:
        if is_prompt(rec):
            if tally.turn_start():
                prompt = prompt_of(rec) if prompt_of is not None else None
                break
            continue
        used = usage_of(rec)
        if used is not None:
            tally.add(*used)
        if found is None:
            found = answer_of(rec)
            tally.answer_seen = found is not None
            if found is None and failed is not None and failed(rec):
                return None
    else:
        tally.complete = whole_file
    if found is None:
        return None
    text, message_id = found
    return Extraction(
        text=text,
        method="session",
        path=path,
        message_id=message_id,
        usage=tally.usage(),
        prompt=prompt or None,
    )


def read_jsonl_answer(
    path: Path,
    stats: ReadStats | None,
    *,
    answer_of: Callable[[dict[str, Any]], tuple[str, str | None] | None],
    usage_of: UsageOf,
    is_prompt: Callable[[dict[str, Any]], bool],
    failed: Callable[[dict[str, Any]], bool] | None = None,
    prompt_of: Callable[[dict[str, Any]], str | None] | None = None,
) -> Extraction | None:
    """``answer_with_usage`` over a JSONL record's tail; None for an unreadable file."""
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(path) as f:
            if f is None:
                return None
            whole = f.seek(0, 2) <= ANSWER_SCAN_BYTES
            return answer_with_usage(
                records_newest_first(f, stats),
                path=path,
                answer_of=answer_of,
                usage_of=usage_of,
                is_prompt=is_prompt,
                whole_file=whole,
                failed=failed,
                prompt_of=prompt_of,
            )
    except OSError:
        return None


def jsonl_turn_state(
    path: Path, stats: ReadStats | None, verdict: Callable[[dict[str, Any]], bool | None]
) -> bool | None:
    """The first non-None ``verdict`` of the record's newest lines (None: no evidence)."""
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(path) as f:
            if f is None:
                return None
            for rec in records_newest_first(f, stats, TURN_SCAN_BYTES):
                said = verdict(rec)
                if said is not None:
                    return said
    except OSError:
        return None
    return None


def warn_once(path: Path, reason: str) -> None:
    """Log why a record was refused, once per file and reason (readers are polled)."""
    key = (str(path), reason)
    if key in _warned:
        return
    if len(_warned) > 1000:
        _warned.clear()
    _warned.add(key)
    log.warning("madohub_nb: not reading %s: %s", path, reason)


def schema_refusal(conn: sqlite3.Connection, tables: tuple[str, ...]) -> str | None:
    """Why a database's schema is not read (None: it is a plain one).

    The ``tables`` a reader queries must be plain tables (a view or a virtual
    table runs the file's own SQL or module when read), and no view or trigger
    may exist at all (the agents whose databases are read define none). The
    rest (a generated column's expression, a slow plain query) is bounded by
    the connection's deadline.
    """
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    kinds = {name: (kind, sql) for kind, name, sql in rows if isinstance(name, str)}
    for kind, name, _ in rows:
        if kind in ("view", "trigger"):
            return f"it defines a {kind} ({str(name)[:80]!r}), which the agent never writes"
    for name in tables:
        kind, sql = kinds.get(name, (None, None))
        if kind is None:
            return f"it has no table {name!r}"
        if kind != "table" or (isinstance(sql, str) and "VIRTUAL" in sql[:40].upper()):
            return f"{name!r} is not a plain table"
    return None


def open_foreign_sqlite(
    path: Path, tables: tuple[str, ...], *, deadline_s: float = SQLITE_DEADLINE_S
) -> sqlite3.Connection | None:
    """A read-only, deadline-bound connection to an SQLite file another program writes, or None.

    Opened ``mode=ro`` (never ``immutable``: the agent writes it live, WAL and
    all) with ``trusted_schema`` off and ``query_only`` on; a progress handler
    stops any statement once ``deadline_s`` has passed since the connection was
    made (the statement then raises ``sqlite3.OperationalError``: interrupted).
    A FIFO or other non-regular file is never opened; a schema that runs its
    own SQL on read (``schema_refusal``) is refused with a warning in the log.
    Missing tables give None quietly (an agent that has not made them yet).
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except OSError:
        return None
    uri = f"file:{quote(str(path))}?mode=ro"
    deadline = time.monotonic() + deadline_s
    try:
        conn = sqlite3.connect(
            uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_S, check_same_thread=False
        )
    except sqlite3.Error:
        return None
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), SQLITE_PROGRESS_STEPS)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA trusted_schema = OFF")
        conn.execute("PRAGMA query_only = ON")
        refusal = schema_refusal(conn, tables)
    except sqlite3.Error:
        conn.close()
        return None
    if refusal is not None:
        if not refusal.startswith("it has no table"):
            warn_once(path, refusal)
        conn.close()
        return None
    return conn
