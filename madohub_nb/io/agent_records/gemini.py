"""Gemini CLI's chat record: ``~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl``.

Lines (observed with Gemini CLI 0.61.0): a header ``{sessionId, projectHash,
startTime, lastUpdated, kind}``, then messages ``{id, timestamp, type: "user" |
"gemini" | "info" | "error" | "warning", content, tokens, model, toolCalls?}``,
and ``{"$set": {...}}`` updates (``lastUpdated``, or a whole ``messages`` list
when the history is rewritten). A ``gemini`` message's ``content`` is its whole
text; ``tokens`` is ``{input, output, cached, thoughts, tool, total}`` where
``input`` includes ``cached``.
"""

from __future__ import annotations

import os
from typing import Any

from ..records import Extraction, ReadStats, check_path
from .common import count, jsonl_turn_state, minus, read_jsonl_answer, tidy

MESSAGE_TYPES = ("user", "gemini", "info", "error", "warning")


def looks_like(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a line of a Gemini CLI chat record."""
    if "$set" in rec:
        return isinstance(rec["$set"], dict)
    if "projectHash" in rec and "sessionId" in rec:
        return True
    return (
        rec.get("type") in MESSAGE_TYPES
        and "content" in rec
        and "id" in rec
        and "message" not in rec
        and "parentId" not in rec
    )


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"]
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
        )
    return ""


def _messages(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages a line holds, newest first: itself, or a ``$set`` of the whole list."""
    update = rec.get("$set")
    if isinstance(update, dict):
        listed = update.get("messages")
        if isinstance(listed, list):
            return [m for m in reversed(listed) if isinstance(m, dict)]
        return []
    return [rec]


def _answer(rec: dict[str, Any]) -> tuple[str, str | None] | None:
    for msg in _messages(rec):
        if msg.get("type") == "gemini":
            text = tidy(_text(msg.get("content")))
            if text:
                mid = msg.get("id")
                return text, mid if isinstance(mid, str) else None
        elif msg.get("type") == "user" and rec is not msg:
            return None  # a rewritten history ending in a prompt: its answer is not here
    return None


def _usage(rec: dict[str, Any]) -> tuple[object, dict[str, int | None]] | None:
    if rec.get("type") != "gemini":
        return None
    tokens = rec.get("tokens")
    tokens = tokens if isinstance(tokens, dict) else {}
    given, cached = count(tokens.get("input")), count(tokens.get("cached", 0))
    output, thoughts = count(tokens.get("output")), count(tokens.get("thoughts", 0))
    return rec.get("model"), {
        "input_tokens": minus(given, cached),
        "output_tokens": None if output is None or thoughts is None else output + thoughts,
        "cache_read_tokens": cached,
        "cache_write_tokens": 0,  # Gemini charges no cache writes
    }


def _is_prompt(rec: dict[str, Any]) -> bool:
    return rec.get("type") == "user"


def read_last_response(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> Extraction | None:
    """The last ``gemini`` message's text in a Gemini CLI chat record, with its turn's usage."""
    return read_jsonl_answer(
        check_path(path), stats, answer_of=_answer, usage_of=_usage, is_prompt=_is_prompt
    )


def _verdict(rec: dict[str, Any]) -> bool | None:
    for msg in _messages(rec):
        kind = msg.get("type")
        if kind == "gemini":
            if not isinstance(msg.get("content", ""), (str, list)):
                continue  # malformed: not a message
            calls = msg.get("toolCalls")
            return not (isinstance(calls, list) and calls)
        if kind == "user":
            return False
        if kind == "error":
            return True
    return None


def turn_finished(path: str | os.PathLike[str], *, stats: ReadStats | None = None) -> bool | None:
    """True when the newest message is a ``gemini`` answer without tool calls (or an error).

    False: a prompt, or a ``gemini`` message that called tools (more follows).
    None: no message in the tail, or the file cannot be read.
    """
    return jsonl_turn_state(check_path(path), stats, _verdict)


__all__ = ["looks_like", "read_last_response", "turn_finished"]
