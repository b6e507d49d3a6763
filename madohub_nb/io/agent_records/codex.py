"""Codex's rollouts: the last answer, its turn's usage, the end of a turn, where they live.

Codex writes one rollout JSONL per session under ``$CODEX_HOME/sessions/YYYY/MM/DD/``
(``find_codex_rollout`` finds a session's), each line ``{timestamp, type, payload}``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import MadohubValueError
from .base import CHUNK_BYTES, MAX_CHUNK_BYTES, ReadStats, check_path, json_records, open_regular
from .transcript import (
    MAX_SCAN_BYTES,
    TAIL_SCAN_BYTES,
    TAIL_SCAN_LINES,
    TranscriptTally,
    count,
    cwd_candidates,
    duration_ms,
    join,
    tidy,
)

_CODEX_TASK_EVENTS = ("task_started", "task_complete", "turn_aborted")


def looks_like(rec: dict[str, Any]) -> bool:
    """Codex rollout lines are ``{timestamp, type, payload}``; Claude's are not."""
    return "payload" in rec and "timestamp" in rec and "type" in rec and "message" not in rec


def _codex_reply(rec: dict[str, Any]) -> tuple[str, str | None] | None:
    """(text, turn id) if this rollout record carries an assistant reply."""
    payload = rec.get("payload")
    if not isinstance(payload, dict):
        return None
    kind, ptype = rec.get("type"), payload.get("type")
    text: str | None = None
    turn_id = payload.get("turn_id")
    if kind == "event_msg" and ptype == "task_complete":
        text = payload.get("last_agent_message")
    elif kind == "event_msg" and ptype == "agent_message":
        text = payload.get("message")
    elif kind == "event_msg" and ptype == "item_completed":
        item = payload.get("item")
        if isinstance(item, dict) and item.get("type") == "AgentMessage":
            text = join(_text_blocks(item.get("content"), ("Text", "text", "output_text")))
    elif kind == "response_item" and ptype == "message" and payload.get("role") == "assistant":
        text = join(_text_blocks(payload.get("content"), ("output_text",)))
        meta = payload.get("internal_chat_message_metadata_passthrough")
        if isinstance(meta, dict):
            turn_id = meta.get("turn_id")
    if not isinstance(text, str) or not text.strip():
        return None
    return tidy(text), turn_id if isinstance(turn_id, str) and turn_id else None


def _codex_user_message(payload: dict[str, Any]) -> str | None:
    """The prompt of a rollout's ``user_message`` event, or of its newer ``item_completed``
    ``UserMessage`` item (not ``response_item`` user messages: Codex puts its own context
    there too)."""
    if payload.get("type") == "user_message":
        message = payload.get("message")
        return message if isinstance(message, str) else None
    item = payload.get("item")
    if not isinstance(item, dict) or item.get("type") != "UserMessage":
        return None
    texts = _text_blocks(item.get("content"), ("text",))
    return "\n\n".join(texts) if texts else None


def _text_blocks(content: object, types: tuple[str, ...]) -> list[str]:
    if not isinstance(content, list):
        return []
    return [
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") in types and isinstance(b.get("text"), str)
    ]


def last_response(
    records: Iterator[dict[str, Any]], stats: ReadStats
) -> tuple[str, str | None] | None:
    """The newest reply record wins (task_complete comes last in a finished turn).

    Codex writes the reply twice (event_msg and response_item, REAL-AGENTS.md);
    taking the newest single record never concatenates the two.
    """
    for rec in records:
        if stats.bytes_read > MAX_SCAN_BYTES:
            return None
        found = _codex_reply(rec)
        if found is None:
            continue
        text, turn_id = found
        if turn_id is None:
            turn_id = _codex_turn_id_before(records, stats)
        if turn_id is None:
            stamp = rec.get("timestamp")
            turn_id = f"at:{stamp}" if isinstance(stamp, str) else None
        return text, turn_id
    return None


def _codex_turn_id_before(records: Iterator[dict[str, Any]], stats: ReadStats) -> str | None:
    """The turn that the records before this point belong to, for replies without a turn id.

    Its ``turn_id`` where the start record has one, else the start's timestamp:
    either way the same before and after the turn's ``task_complete``.
    """
    start_bytes, start_lines = stats.bytes_read, stats.lines
    for rec in records:
        if (
            stats.bytes_read - start_bytes > TAIL_SCAN_BYTES
            or stats.lines - start_lines > TAIL_SCAN_LINES
        ):
            return None
        payload = rec.get("payload")
        if not isinstance(payload, dict):
            continue
        if rec.get("type") == "turn_context" or (
            rec.get("type") == "event_msg" and payload.get("type") == "task_started"
        ):
            turn_id, stamp = payload.get("turn_id"), rec.get("timestamp")
            if isinstance(turn_id, str) and turn_id:
                return turn_id
            return f"turn@{stamp}" if isinstance(stamp, str) else None
    return None


_CODEX_TOOL_ITEMS = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "web_search_call", "tool_search_call"}
)


class TurnTally(TranscriptTally):
    """Codex: ``token_count`` events (``last_token_usage`` per API call), ``turn_context`` model.

    Codex's ``input_tokens`` include the cached ones; here they are split into
    ``input_tokens`` (uncached) and ``cache_read_tokens`` like Claude's. A
    ``token_count`` repeating the previous one's running total is a duplicate.
    """

    def _reset(self) -> None:
        super()._reset()
        self._last_total: object = None

    def feed(self, rec: dict[str, Any]) -> None:
        payload = rec.get("payload")
        if not isinstance(payload, dict):
            return
        kind, ptype = rec.get("type"), payload.get("type")
        if kind == "event_msg" and ptype in ("task_complete", "turn_aborted"):
            if self.answer_seen:
                self.done = self.complete = True
                return
            self._reset()
            self.turn_ms = duration_ms(payload.get("duration_ms"))
        elif kind == "event_msg" and ptype == "task_started":
            self._turn_start()
            return
        elif kind == "event_msg" and ptype in ("user_message", "item_completed"):
            said = _codex_user_message(payload)
            if said is not None and self.answer_seen:
                self.prompt = said  # read backwards: the last one kept started the turn
        elif kind == "event_msg" and ptype == "token_count":
            self._token_count(payload.get("info"))
        elif kind == "turn_context":
            model = payload.get("model")
            if self.model is None and isinstance(model, str) and model:
                self.model = model
        elif kind == "response_item" and ptype in _CODEX_TOOL_ITEMS:
            self._add_tool(payload.get("call_id"))
        if not self.answer_seen and _codex_reply(rec) is not None:
            self._mark_answer()

    def _token_count(self, info: object) -> None:
        if not isinstance(info, dict):
            return  # rate-limit-only events carry no usage
        total = info.get("total_token_usage")
        if total is not None and total == self._last_total:
            return
        self._last_total = total
        last = info.get("last_token_usage")
        last = last if isinstance(last, dict) else {}
        given = count(last.get("input_tokens"))
        cached = count(last.get("cached_input_tokens"))
        uncached = None if given is None or cached is None or cached > given else given - cached
        self._add_tokens(
            {
                "input_tokens": uncached,
                "output_tokens": count(last.get("output_tokens")),
                "cache_read_tokens": cached,
                # Absent in Codex versions that report no cache writes (none are charged).
                "cache_write_tokens": count(last.get("cache_write_input_tokens", 0)),
            }
        )


def turn_state(rec: dict[str, Any]) -> bool | None:
    payload = rec.get("payload")
    if rec.get("type") != "event_msg" or not isinstance(payload, dict):
        return None
    ptype = payload.get("type")
    if ptype not in _CODEX_TASK_EVENTS:
        return None
    return ptype != "task_started"


def find_codex_rollouts(codex_home: str | os.PathLike[str]) -> list[Path]:
    """Every ``sessions/YYYY/MM/DD/rollout-*.jsonl`` under ``codex_home``, newest first.

    Newest by modification time (resuming a session appends to its old file),
    then by path.
    """
    sessions = check_path(codex_home, "codex_home") / "sessions"
    found: list[tuple[float, str]] = []
    for year in _numbered_dirs(sessions):
        for month in _numbered_dirs(year):
            for day in _numbered_dirs(month):
                try:
                    with os.scandir(day) as it:
                        for e in it:
                            if e.name.startswith("rollout-") and e.name.endswith(".jsonl"):
                                try:
                                    if e.is_file():
                                        found.append((e.stat().st_mtime, e.path))
                                except OSError:
                                    continue
                except OSError:
                    continue
    found.sort(reverse=True)
    return [Path(p) for _, p in found]


def _numbered_dirs(parent: Path | str) -> list[str]:
    try:
        with os.scandir(parent) as it:
            return [e.path for e in it if e.name.isdigit() and e.is_dir()]
    except OSError:
        return []


def codex_session_meta(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``session_meta`` payload (id, cwd, …) on a rollout's first line, or None."""
    p = check_path(path)
    f = open_regular(p)
    if f is None:
        return None
    try:
        with f:
            head = b""
            while b"\n" not in head and len(head) < MAX_CHUNK_BYTES:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return None
    first = next(json_records([head.split(b"\n", 1)[0]]), None)
    if first is None or first.get("type") != "session_meta":
        return None
    payload = first.get("payload")
    return payload if isinstance(payload, dict) else None


def find_codex_rollout(
    codex_home: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    started_after: float | None = None,
) -> Path | None:
    """The rollout of one Codex session, or None.

    By ``session_id`` (in the file name, else in its session_meta) when given;
    else the newest rollout whose session_meta cwd is ``cwd`` (given or real
    path) and that was modified at or after ``started_after`` (epoch seconds).
    """
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise MadohubValueError(f"session_id must be a non-empty str, got {session_id!r}")
    if cwd is not None:
        check_path(cwd, "cwd")
    if started_after is not None and (
        isinstance(started_after, bool) or not isinstance(started_after, (int, float))
    ):
        raise MadohubValueError(
            f"started_after must be epoch seconds (time.time()), got {started_after!r}"
        )
    rollouts = [r for r in find_codex_rollouts(codex_home) if _modified_since(r, started_after)]
    if session_id is not None:
        for r in rollouts:
            if r.name.endswith(f"-{session_id}.jsonl"):
                return r
        for r in rollouts:
            meta = codex_session_meta(r)
            if meta is not None and session_id in (meta.get("id"), meta.get("session_id")):
                return r
        return None
    if cwd is None:
        return rollouts[0] if rollouts else None
    wanted = set(cwd_candidates(cwd))
    for r in rollouts:
        meta = codex_session_meta(r)
        meta_cwd = meta.get("cwd") if meta is not None else None
        if isinstance(meta_cwd, str) and meta_cwd and wanted & set(cwd_candidates(meta_cwd)):
            return r
    return None


def _modified_since(path: Path, started_after: float | None) -> bool:
    if started_after is None:
        return True
    try:
        return path.stat().st_mtime >= started_after
    except OSError:
        return False
