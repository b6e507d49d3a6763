"""Whole answers from the records other agents keep of their conversations.

One module per agent, each with ``read_last_response(path)`` (an
``Extraction`` with method ``session`` and the turn's usage, or None),
``turn_finished(path)`` (True / False / None: the record's end-of-turn
evidence) and ``looks_like`` (tells its lines). ``detect_format`` tells a
file's format from its content, so ``read_record(path)`` reads any of them:

- ``gemini``: Gemini CLI ``~/.gemini/tmp/<project>/chats/session-*.jsonl`` (and the
  ``session-*.json`` documents of versions before 0.39);
- ``qwen``: Qwen Code ``~/.qwen/projects/<cwd>/chats/<session>.jsonl``;
- ``copilot``: Copilot CLI ``~/.copilot/session-state/<uuid>/events.jsonl``;
- ``opencode``: OpenCode's SQLite database (read-only, one indexed query);
- ``pi``: Pi ``~/.pi/agent/sessions/<encoded cwd>/<time>_<uuid>.jsonl``;
- ``aider``: Aider ``<cwd>/.aider.chat.history.md``.

Claude Code transcripts and Codex rollouts (``claude``, ``codex``) are told
apart here too, and read by ``madohub_nb.io.transcripts``. Every reader reads
a bounded tail, refuses FIFOs and other non-regular files, and skips a
half-written last line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, get_args

from ...errors import MadohubValueError
from ..records import Extraction, ReadStats, check_path, json_records
from . import aider, copilot, gemini, opencode, pi, qwen
from .common import DETECT_SCAN_BYTES, DETECT_SCAN_LINES, lines_newest_first, opened

T = TypeVar("T")

RecordFormat = Literal["gemini", "qwen", "copilot", "opencode", "pi", "aider", "claude", "codex"]
RECORD_FORMATS: Final[tuple[str, ...]] = get_args(RecordFormat)
SESSION_FORMATS: Final[tuple[str, ...]] = RECORD_FORMATS[:6]
"""The formats this package reads (``claude`` and ``codex`` are transcripts.py's)."""


def record_format(rec: dict[str, Any]) -> RecordFormat | None:
    """Which agent wrote this JSON record line (None: no agent's record looks like it)."""
    if copilot.looks_like(rec):
        return "copilot"
    if "payload" in rec and "timestamp" in rec and "type" in rec and "message" not in rec:
        return "codex"
    if pi.looks_like(rec):
        return "pi"
    if gemini.looks_like(rec):
        return "gemini"
    if qwen.looks_like(rec):
        return "qwen"
    if rec.get("type") in ("user", "assistant", "system", "summary") or "uuid" in rec:
        return "claude"
    return None


def detect_format(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> RecordFormat | None:
    """Which agent's record ``path`` is, from its content (its name is not looked at).

    An SQLite file is OpenCode's, a JSON document opening with ``sessionId``
    and ``projectHash`` an older Gemini CLI's; otherwise the newest lines (at most 1 MB or
    200 of them) are matched against each format. None: empty, unreadable, a
    FIFO, or nothing recognised.
    """
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(p) as f:
            if f is None:
                return None
            head = f.read(gemini.DOCUMENT_HEAD_BYTES)
            if opencode.looks_like(head):
                return "opencode"
            if gemini.looks_like_document(head):
                return "gemini"  # a pre-0.39 JSON session document
            for n, raw in enumerate(lines_newest_first(f, stats, DETECT_SCAN_BYTES)):
                if n >= DETECT_SCAN_LINES:
                    break
                line = raw.strip()
                if line.startswith(b"{"):
                    rec = next(json_records([line]), None)
                    found = record_format(rec) if rec is not None else None
                else:
                    text = raw.decode("utf-8", "replace").rstrip("\r")
                    found = "aider" if aider.looks_like(text) else None
                if found is not None:
                    return found
    except OSError:
        return None
    return None


def _check_format(fmt: str) -> None:
    if fmt not in SESSION_FORMATS:
        raise MadohubValueError(
            f"unknown record format {fmt!r}; allowed: {', '.join(SESSION_FORMATS)} "
            "(Claude and Codex files: use madohub_nb.read_last_response)"
        )


def read_record(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    session_id: str | None = None,
    cwd: str | None = None,
    stats: ReadStats | None = None,
) -> Extraction | None:
    """The last answer in any agent record this package reads (format told, or ``fmt``).

    ``session_id`` narrows OpenCode's database to one session, ``cwd`` to the
    newest session run there (other records hold one session each). None: no
    answer, an unreadable file, or a format this package does not read.
    """
    p = check_path(path)
    if fmt is not None:
        _check_format(fmt)
    found = fmt or detect_format(p, stats=stats)
    read = _LAST_RESPONSE.get(found or "")
    return read(p, stats, session_id, cwd) if read is not None else None


def record_turn_finished(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    session_id: str | None = None,
    cwd: str | None = None,
    stats: ReadStats | None = None,
) -> bool | None:
    """The record's end-of-turn evidence (True / False / None), for the ``transcript`` signal."""
    p = check_path(path)
    if fmt is not None:
        _check_format(fmt)
    found = fmt or detect_format(p, stats=stats)
    finished = _TURN_FINISHED.get(found or "")
    return finished(p, stats, session_id, cwd) if finished is not None else None


_Reader = Callable[[Path, ReadStats | None, str | None, str | None], T]
"""A format's reader: (path, stats, session id, cwd); OpenCode's database takes the last
two, the others (one session per file) the stats."""

_LAST_RESPONSE: Final[dict[str, _Reader[Extraction | None]]] = {
    "opencode": lambda p, st, session, cwd: opencode.read_last_response(
        p, session_id=session, directory=cwd
    ),
    "gemini": lambda p, st, session, cwd: gemini.read_last_response(p, stats=st),
    "qwen": lambda p, st, session, cwd: qwen.read_last_response(p, stats=st),
    "copilot": lambda p, st, session, cwd: copilot.read_last_response(p, stats=st),
    "pi": lambda p, st, session, cwd: pi.read_last_response(p, stats=st),
    "aider": lambda p, st, session, cwd: aider.read_last_response(p, stats=st),
}
"""The last answer, by format (``claude`` and ``codex``: ``io/transcripts.py``)."""

_TURN_FINISHED: Final[dict[str, _Reader[bool | None]]] = {
    "opencode": lambda p, st, session, cwd: opencode.turn_finished(
        p, session_id=session, directory=cwd
    ),
    "gemini": lambda p, st, session, cwd: gemini.turn_finished(p, stats=st),
    "qwen": lambda p, st, session, cwd: qwen.turn_finished(p, stats=st),
    "copilot": lambda p, st, session, cwd: copilot.turn_finished(p, stats=st),
    "pi": lambda p, st, session, cwd: pi.turn_finished(p, stats=st),
    "aider": lambda p, st, session, cwd: aider.turn_finished(p, stats=st),
}
"""The end-of-turn evidence, by format."""


__all__ = [
    "RECORD_FORMATS",
    "SESSION_FORMATS",
    "RecordFormat",
    "aider",
    "copilot",
    "detect_format",
    "gemini",
    "opencode",
    "pi",
    "qwen",
    "read_record",
    "record_format",
    "record_turn_finished",
]
