"""OpenCode's database: ``~/.local/share/opencode/opencode.db`` (SQLite, ``$XDG_DATA_HOME``).

Observed with OpenCode 1.18.33: table ``message(id, session_id, time_created,
time_updated, data)`` where ``data`` is JSON (``role``, ``parentID``,
``modelID``, ``tokens: {input, output, reasoning, cache: {read, write}}``,
``time: {created, completed}``, ``finish``), and ``part(id, message_id,
session_id, ..., data)`` with ``data.type`` ``text`` (``text``),
``step-start``, ``step-finish``, ``tool``, ``reasoning``. Ids grow with time
(``msg_…``, ``prt_…``), so the primary key orders messages newest last.

The database is opened read-only (``mode=ro``) with a short busy timeout, and
the answer costs one query walking an index (the primary key, or
``message_session_time_created_id_idx`` for a session) from the newest row.
The file is another program's, so it is read as untrusted
(``common.open_foreign_sqlite``): a database whose tables are views, or that
defines views or triggers (OpenCode's has none), is refused, and every read
stops after ``SQLITE_DEADLINE_S``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from ..records import Extraction, TurnUsage, check_path
from .common import (
    SQLITE_BUSY_TIMEOUT_S,
    SQLITE_DEADLINE_S,
    TOKEN_FIELDS,
    count,
    open_foreign_sqlite,
    tidy,
    warn_once,
)

BUSY_TIMEOUT_S = SQLITE_BUSY_TIMEOUT_S
"""How long a query waits for a writer's lock before giving up (the answer is then None)."""
TABLES = ("message", "part", "session")
"""The tables read: each must be a plain table (a view runs the file's own SQL)."""
NEWEST_MESSAGES = 8
"""Assistant messages fetched: the newest with text wins; the others of its turn add usage."""
SQLITE_MAGIC = b"SQLite format 3\x00"

_ANSWER_SQL = """
SELECT m.id, m.data, p.data
FROM (
    SELECT id, data FROM message
    WHERE json_extract(data, '$.role') = 'assistant' {session}
    ORDER BY {order} LIMIT {limit}
) AS m
LEFT JOIN part AS p ON p.message_id = m.id AND json_extract(p.data, '$.type') = 'text'
ORDER BY m.id DESC, p.id
"""
_STATE_SQL = "SELECT data FROM message {where} ORDER BY {order} LIMIT 1"
_SESSION_SQL = (
    "SELECT id FROM session WHERE directory = ? AND parent_id IS NULL "
    "ORDER BY time_updated DESC, id DESC LIMIT 1"
)


def looks_like(head: bytes) -> bool:
    """Whether a file's first bytes are an SQLite database's (its tables are checked on read)."""
    return head.startswith(SQLITE_MAGIC)


def _connect(path: Path) -> sqlite3.Connection | None:
    """A read-only, deadline-bound connection, or None (a FIFO or a crafted schema is refused)."""
    return open_foreign_sqlite(path, TABLES)


def _failed(path: Path, err: sqlite3.Error) -> None:
    """Say in the log when a read was stopped by its deadline (a lock or a torn file: quiet)."""
    if "interrupt" in str(err).lower():
        warn_once(path, f"a read ran over its {SQLITE_DEADLINE_S:g} s deadline (SQLITE_DEADLINE_S)")


def _session_filter(session_id: str | None) -> tuple[str, str, tuple[str, ...]]:
    """SQL filter, order and parameters: newest of one session, or of the whole database."""
    if session_id is None:
        return "", "id DESC", ()
    return "AND session_id = ?", "time_created DESC, id DESC", (session_id,)


def _json(text: object) -> dict[str, Any]:
    if not isinstance(text, (str, bytes)):
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _session_of(conn: sqlite3.Connection, directory: str) -> str | None:
    """The newest top-level session OpenCode ran in ``directory`` (its session table is small)."""
    row = conn.execute(_SESSION_SQL, (directory,)).fetchone()
    return row[0] if row is not None and isinstance(row[0], str) else None


def session_for_directory(path: str | os.PathLike[str], directory: str) -> str | None:
    """The id (``ses_…``) of the newest top-level session run in ``directory``, or None.

    One OpenCode database serves every OpenCode of a user: a tile's answer is
    its own session's, found by the pane's working directory.
    """
    conn = _connect(check_path(path))
    if conn is None:
        return None
    try:
        with conn:
            return _session_of(conn, directory)
    except sqlite3.Error as err:
        _failed(check_path(path), err)
        return None
    finally:
        conn.close()


def read_last_response(
    path: str | os.PathLike[str], *, session_id: str | None = None, directory: str | None = None
) -> Extraction | None:
    """The text parts of the newest assistant message that has text, with its turn's usage.

    ``session_id`` (``ses_…``) narrows it to one session, ``directory`` to the
    newest session run there; with neither, the newest message of any session
    is taken. A missing, locked, half-written or foreign file gives None.
    """
    p = check_path(path)
    conn = _connect(p)
    if conn is None:
        return None
    try:
        if session_id is None and directory is not None:
            session_id = _session_of(conn, directory)
            if session_id is None:
                conn.close()
                return None
    except sqlite3.Error as err:
        _failed(p, err)
        conn.close()
        return None
    where, order, params = _session_filter(session_id)
    sql = _ANSWER_SQL.format(session=where, order=order, limit=NEWEST_MESSAGES)
    try:
        with conn:
            rows = conn.execute(sql, params).fetchall()
    except sqlite3.Error as err:
        _failed(p, err)
        return None
    finally:
        conn.close()
    messages: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for mid, mdata, pdata in rows:
        entry = messages.setdefault(mid, (_json(mdata), []))
        part = _json(pdata)
        text = part.get("text")
        if part.get("type") == "text" and isinstance(text, str) and not part.get("synthetic"):
            if text.strip() and not part.get("ignored"):
                entry[1].append(text)
    for mid, (data, texts) in messages.items():  # newest first
        text = tidy("\n\n".join(tidy(t) for t in texts))
        if text:
            usage = _usage(data, [d for d, _ in messages.values()])
            return Extraction(text=text, method="session", path=p, message_id=mid, usage=usage)
    return None


def _usage(answer: dict[str, Any], fetched: list[dict[str, Any]]) -> TurnUsage:
    """Tokens summed over the fetched assistant messages answering the answer's prompt."""
    parent = answer.get("parentID")
    sums: dict[str, int | None] = dict.fromkeys(TOKEN_FIELDS, 0)
    calls = 0
    for data in fetched:
        if data.get("parentID") != parent:
            continue
        calls += 1
        tokens = data.get("tokens")
        tokens = tokens if isinstance(tokens, dict) else {}
        cache = tokens.get("cache")
        cache = cache if isinstance(cache, dict) else {}
        output, reasoning = count(tokens.get("output")), count(tokens.get("reasoning", 0))
        counts = {
            "input_tokens": count(tokens.get("input")),
            "output_tokens": None if output is None or reasoning is None else output + reasoning,
            "cache_read_tokens": count(cache.get("read", 0)),
            "cache_write_tokens": count(cache.get("write", 0)),
        }
        for name in TOKEN_FIELDS:
            total, value = sums[name], counts[name]
            sums[name] = None if total is None or value is None else total + value
    model = answer.get("modelID")
    times = answer.get("time")
    times = times if isinstance(times, dict) else {}
    start, end = count(times.get("created")), count(times.get("completed"))
    turn_ms = float(end - start) if start is not None and end is not None and end >= start else None
    # Fewer fetched messages than the limit means the turn's older ones were all seen.
    complete = len(fetched) < NEWEST_MESSAGES
    if not complete:
        return TurnUsage(model=model if isinstance(model, str) else None, turn_ms=turn_ms)
    return TurnUsage(
        model=model if isinstance(model, str) else None,
        turn_ms=turn_ms,
        api_calls=calls,
        complete=True,
        **sums,
    )


def turn_finished(
    path: str | os.PathLike[str], *, session_id: str | None = None, directory: str | None = None
) -> bool | None:
    """True when the newest message is a completed assistant message that did not stop for tools.

    False: a prompt, or an answer still being written or calling tools. None:
    no message, or the database cannot be read (locked, missing, foreign).
    ``session_id`` and ``directory`` narrow it as in ``read_last_response``.
    """
    p = check_path(path)
    conn = _connect(p)
    if conn is None:
        return None
    try:
        with conn:
            if session_id is None and directory is not None:
                session_id = _session_of(conn, directory)
                if session_id is None:
                    return None
            where, order, params = _session_filter(session_id)
            sql = _STATE_SQL.format(where=where.replace("AND", "WHERE", 1), order=order)
            row = conn.execute(sql, params).fetchone()
    except sqlite3.Error as err:
        _failed(p, err)
        return None
    finally:
        conn.close()
    if row is None:
        return None
    data = _json(row[0])
    if data.get("role") != "assistant":
        return False if data.get("role") == "user" else None
    times = data.get("time")
    completed = isinstance(times, dict) and times.get("completed") is not None
    return completed and data.get("finish") not in (None, "tool-calls", "unknown")


def default_path(home: str | os.PathLike[str], xdg_data_home: str | None = None) -> Path:
    """Where OpenCode keeps its database for a user: ``$XDG_DATA_HOME/opencode/opencode.db``."""
    base = Path(xdg_data_home) if xdg_data_home else check_path(home) / ".local" / "share"
    return base / "opencode" / "opencode.db"
