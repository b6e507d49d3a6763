"""Whole answers from the records agents keep of their conversations: every reader's home.

``read_last_response(path)`` (the last answer, an ``Extraction``, or None),
``read_turn_usage`` and ``turn_finished(path)`` (True / False / None: the record's
end-of-turn evidence) read any agent's record, its format told from its content
(``detect_format``). ``base.py`` holds what every reader shares (the answer type,
the bounded backwards reader).

Claude Code transcripts (``claude``: ``<config>/projects/<dir>/<sessionId>.jsonl``)
and Codex rollouts (``codex``: ``$CODEX_HOME/sessions/YYYY/MM/DD/``) are read in one
backwards pass (``transcript.py``: what the two share). The other agents' records
have one module each, with ``read_last_response(path)`` (method ``session``, the
turn's usage always filled), ``turn_finished(path)`` and ``looks_like`` (tells its
lines), and ``common.py`` for what they share; ``read_record(path)`` reads any of them:

- ``gemini``: Gemini CLI ``~/.gemini/tmp/<project>/chats/session-*.jsonl`` (and the
  ``session-*.json`` documents of versions before 0.39);
- ``qwen``: Qwen Code ``~/.qwen/projects/<cwd>/chats/<session>.jsonl``;
- ``copilot``: Copilot CLI ``~/.copilot/session-state/<uuid>/events.jsonl``;
- ``opencode``: OpenCode's SQLite database (read-only, one indexed query);
- ``pi``: Pi ``~/.pi/agent/sessions/<encoded cwd>/<time>_<uuid>.jsonl``;
- ``aider``: Aider ``<cwd>/.aider.chat.history.md``.

Every reader reads a bounded tail, refuses FIFOs and other non-regular files, and skips a
half-written last line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, get_args

from ...errors import MadohubValueError
from ...model import ExtractionMethod
from . import aider, claude, codex, copilot, gemini, opencode, pi, qwen
from .base import (
    Extraction,
    ReadStats,
    TurnUsage,
    check_path,
    iter_lines_backwards,
    json_records,
    open_regular,
)
from .common import DETECT_SCAN_BYTES, DETECT_SCAN_LINES, lines_newest_first, opened
from .transcript import TAIL_SCAN_BYTES, TAIL_SCAN_LINES, TranscriptTally, finish_tally, tapped

T = TypeVar("T")

RecordFormat = Literal["gemini", "qwen", "copilot", "opencode", "pi", "aider", "claude", "codex"]
RECORD_FORMATS: Final[tuple[str, ...]] = get_args(RecordFormat)
SESSION_FORMATS: Final[tuple[str, ...]] = RECORD_FORMATS[:6]
"""The formats of the other agents' records (``read_record``; ``claude`` and ``codex``:
``read_last_response`` reads those)."""


def record_format(rec: dict[str, Any]) -> RecordFormat | None:
    """Which agent wrote this JSON record line (None: no agent's record looks like it)."""
    if copilot.looks_like(rec):
        return "copilot"
    if codex.looks_like(rec):
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


# --------------------------------------------------------------------------- any record


def read_last_response(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None, usage: bool = False
) -> Extraction | None:
    """The last assistant answer in a Claude transcript, a Codex rollout or another agent's record.

    The format is told from the records themselves; Gemini CLI, Qwen Code,
    Copilot CLI, Pi and Aider records and OpenCode's database are read by
    ``madohub_nb.io.agent_records`` (method ``session``, usage always filled).
    A missing, unreadable, empty or unrecognised file gives None; only a path
    of the wrong type raises.
    With ``usage=True`` the same backwards pass goes on to the start of the
    answer's turn and fills ``Extraction.usage``; unreadable usage never costs
    the answer.
    """
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    fmt = detect_format(p)  # at most DETECT_SCAN_BYTES of the tail, not counted in stats
    if fmt in SESSION_FORMATS:
        return read_record(p, fmt=fmt, stats=stats)  # another agent's own record
    f = open_regular(p)
    if f is None:
        return None
    method: ExtractionMethod
    tally: TranscriptTally | None = None
    turn: TurnUsage | None = None
    try:
        with f:
            records = json_records(iter_lines_backwards(f, stats=stats))
            first = next(records, None)
            if first is None:
                return None
            seen = claude.ThreadsSeen()
            rollout = codex.looks_like(first)
            records = chain([first], records)
            if usage:
                tally = codex.TurnTally(stats) if rollout else claude.TurnTally(stats)
                records = tapped(records, tally)
            if rollout:
                method, found = "rollout", codex.last_response(records, stats)
            else:
                method = "jsonl"
                found = claude.last_response(seen.note(records), stats)
            if tally is not None and found is not None:
                turn = finish_tally(tally, records)
        if found is None and method == "jsonl" and seen.sidechain and not seen.main_assistant:
            found = claude.subagent_last_response(p, stats)
    except OSError:
        return None
    if found is None:
        return None
    text, message_id = found
    prompt = tally.prompt if tally is not None and tally.complete else None
    return Extraction(
        text=text, method=method, path=p, message_id=message_id, usage=turn, prompt=prompt
    )


def read_turn_usage(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> TurnUsage | None:
    """Usage of the turn that produced the last answer (see ``TurnUsage``), or None.

    None when there is no answer or nothing about its turn could be read.
    """
    found = read_last_response(path, stats=stats, usage=True)
    return found.usage if found is not None else None


def turn_finished(path: str | os.PathLike[str], *, stats: ReadStats | None = None) -> bool | None:
    """Does the transcript's tail say the agent's turn is over?

    True: the newest conversation record ends a turn (Claude ``system``
    ``turn_duration``, or ``stop_hook_summary`` which Stop hooks write at the
    same moment, or an interruption notice; Codex ``task_complete`` or
    ``turn_aborted``). False: the newest one is a prompt, a reply or a tool
    step with no end after it (Claude versions that never write
    ``turn_duration`` also land here: combine with the screen). None: no
    evidence within the tail, or the file cannot be read.
    """
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    fmt = detect_format(p)  # at most DETECT_SCAN_BYTES of the tail, not counted in stats
    if fmt in SESSION_FORMATS:
        return record_turn_finished(p, fmt=fmt, stats=stats)
    f = open_regular(p)
    if f is None:
        return None
    try:
        with f:
            for rec in json_records(iter_lines_backwards(f, stats=stats)):
                if stats.bytes_read > TAIL_SCAN_BYTES or stats.lines > TAIL_SCAN_LINES:
                    return None
                verdict = codex.turn_state(rec) if codex.looks_like(rec) else claude.turn_state(rec)
                if verdict is not None:
                    return verdict
    except OSError:
        return None
    return None


# --------------------------------------------------------------------------- other agents' records


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
"""The last answer, by format (``claude`` and ``codex``: ``read_last_response``)."""

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
    "claude",
    "codex",
    "copilot",
    "detect_format",
    "gemini",
    "opencode",
    "pi",
    "qwen",
    "read_last_response",
    "read_record",
    "read_turn_usage",
    "record_format",
    "record_turn_finished",
    "turn_finished",
]
