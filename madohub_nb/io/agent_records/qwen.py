"""Qwen Code's chat record: ``~/.qwen/projects/<sanitized cwd>/chats/<sessionId>.jsonl``.

Lines (observed with Qwen Code 0.24.4) are ``{uuid, parentUuid, sessionId,
timestamp, type, provenance, cwd, version, ...}``: ``user`` and ``assistant``
lines carry ``message: {role, parts: [{text} | {functionCall} |
{functionResponse} | {text, thought: true}]}`` (Gemini-style parts, where
Claude Code writes ``content``); an ``assistant`` line also has ``model`` and
``usageMetadata`` (``promptTokenCount`` including ``cachedContentTokenCount``,
``candidatesTokenCount``, ``thoughtsTokenCount``). ``system`` lines are
snapshots and telemetry. No line marks the end of a turn: an answer with no
function call after the last prompt is one.
"""

from __future__ import annotations

import os
from typing import Any

from .base import Extraction, ReadStats, check_path
from .common import count, jsonl_turn_state, minus, read_jsonl_answer, tidy


def _parts(rec: dict[str, Any]) -> list[dict[str, Any]] | None:
    msg = rec.get("message")
    parts = msg.get("parts") if isinstance(msg, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else None


def looks_like(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a line of a Qwen Code chat record (not Claude Code's look-alike)."""
    if "uuid" not in rec or "sessionId" not in rec:
        return False
    return _parts(rec) is not None or "systemPayload" in rec


def _texts(rec: dict[str, Any]) -> str:
    return "".join(
        p["text"]
        for p in _parts(rec) or []
        if isinstance(p.get("text"), str) and not p.get("thought")
    )


def _has(rec: dict[str, Any], key: str) -> bool:
    return any(key in p for p in _parts(rec) or [])


def _answer(rec: dict[str, Any]) -> tuple[str, str | None] | None:
    if rec.get("type") != "assistant":
        return None
    text = tidy(_texts(rec))
    if not text:
        return None
    uuid = rec.get("uuid")
    return text, uuid if isinstance(uuid, str) else None


def _usage(rec: dict[str, Any]) -> tuple[object, dict[str, int | None]] | None:
    if rec.get("type") != "assistant":
        return None
    meta = rec.get("usageMetadata")
    meta = meta if isinstance(meta, dict) else {}
    given, cached = (
        count(meta.get("promptTokenCount")),
        count(meta.get("cachedContentTokenCount", 0)),
    )
    output, thoughts = (
        count(meta.get("candidatesTokenCount")),
        count(meta.get("thoughtsTokenCount", 0)),
    )
    return rec.get("model"), {
        "input_tokens": minus(given, cached),
        "output_tokens": None if output is None or thoughts is None else output + thoughts,
        "cache_read_tokens": cached,
        "cache_write_tokens": 0,
    }


def _is_prompt(rec: dict[str, Any]) -> bool:
    return rec.get("type") == "user" and not _has(rec, "functionResponse") and bool(_texts(rec))


API_ERROR_EVENT = "qwen-code.api_error"


def _failed(rec: dict[str, Any]) -> bool:
    """The model call failed (a ``ui_telemetry`` line with event ``qwen-code.api_error``,
    observed with 0.24.4 when the API answered HTTP 400): the turn ended with no answer."""
    payload = rec.get("systemPayload")
    event = payload.get("uiEvent") if isinstance(payload, dict) else None
    return isinstance(event, dict) and event.get("event.name") == API_ERROR_EVENT


def read_last_response(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> Extraction | None:
    """The last ``assistant`` line's text (thoughts left out), with its turn's usage; None
    when the last turn's model call failed (never the previous turn's answer)."""
    return read_jsonl_answer(
        check_path(path),
        stats,
        answer_of=_answer,
        usage_of=_usage,
        is_prompt=_is_prompt,
        failed=_failed,
        prompt_of=_texts,
    )


def _verdict(rec: dict[str, Any]) -> bool | None:
    kind = rec.get("type")
    if kind == "assistant":
        return not _has(rec, "functionCall")
    if kind in ("user", "tool_result"):
        return False
    return None


def turn_finished(path: str | os.PathLike[str], *, stats: ReadStats | None = None) -> bool | None:
    """True when the newest conversation line is an answer that calls no function.

    False: a prompt, a tool result or a function call. None: no such line in
    the tail, or the file cannot be read.
    """
    return jsonl_turn_state(check_path(path), stats, _verdict)
