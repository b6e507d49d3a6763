"""Copilot CLI's event record: ``~/.copilot/session-state/<sessionId>/events.jsonl``.

Lines (observed with Copilot CLI 1.0.102) are ``{type, data, id, timestamp,
parentId}`` events written live: ``session.start``, ``user.message``
(``data.content``), ``assistant.turn_start``, ``session.usage_record``
(``data.usage``: model, inputTokens, outputTokens, cacheReadTokens,
cacheWriteTokens, duration), ``assistant.message`` (``data.content``,
``data.messageId``, ``data.toolRequests``), ``assistant.turn_end``. One
``turn_start``…``turn_end`` pair is one model call: a call that requested tools
is followed by another.
"""

from __future__ import annotations

import os
from typing import Any

from .base import Extraction, ReadStats, check_path, open_regular
from .common import TURN_SCAN_BYTES, count, minus, read_jsonl_answer, records_newest_first, tidy


def looks_like(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a Copilot CLI event (``type`` like ``assistant.message``, ``data``)."""
    kind = rec.get("type")
    return (
        isinstance(kind, str)
        and "." in kind
        and isinstance(rec.get("data"), dict)
        and "payload" not in rec
    )


def _data(rec: dict[str, Any]) -> dict[str, Any]:
    data = rec.get("data")
    return data if isinstance(data, dict) else {}


def _answer(rec: dict[str, Any]) -> tuple[str, str | None] | None:
    if rec.get("type") != "assistant.message":
        return None
    data = _data(rec)
    content = data.get("content")
    text = tidy(content) if isinstance(content, str) else ""
    if not text:
        return None
    mid = data.get("messageId", rec.get("id"))
    return text, mid if isinstance(mid, str) else None


def _usage(rec: dict[str, Any]) -> tuple[object, dict[str, int | None]] | None:
    if rec.get("type") != "session.usage_record":
        return None
    usage = _data(rec).get("usage")
    usage = usage if isinstance(usage, dict) else {}
    given, cached = count(usage.get("inputTokens")), count(usage.get("cacheReadTokens", 0))
    # Assumed OpenAI-style: inputTokens counts the cached ones too (the fake reports none).
    return usage.get("model"), {
        "input_tokens": minus(given, cached),
        "output_tokens": count(usage.get("outputTokens")),
        "cache_read_tokens": cached,
        "cache_write_tokens": count(usage.get("cacheWriteTokens", 0)),
    }


def _is_prompt(rec: dict[str, Any]) -> bool:
    return rec.get("type") == "user.message"


def _prompt(rec: dict[str, Any]) -> str | None:
    """What the person typed (``content``; ``transformedContent`` adds Copilot's own context)."""
    content = _data(rec).get("content")
    return content if isinstance(content, str) else None


def read_last_response(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> Extraction | None:
    """The last ``assistant.message`` content, with the usage records of its turn."""
    return read_jsonl_answer(
        check_path(path), stats, answer_of=_answer, usage_of=_usage, is_prompt=_is_prompt,
        prompt_of=_prompt,
    )  # fmt: skip


_BUSY_EVENTS = ("user.message", "assistant.turn_start", "assistant.message")
_END_EVENTS = ("abort", "session.error", "session.shutdown")


def turn_finished(path: str | os.PathLike[str], *, stats: ReadStats | None = None) -> bool | None:
    """True when the newest model call ended (``assistant.turn_end``) without requesting tools.

    False: a prompt, a call under way, a tool step, or a call that requested
    tools (another follows). None: no such event in the tail, or no file.
    """
    stats = stats if stats is not None else ReadStats()
    f = open_regular(check_path(path))
    if f is None:
        return None
    ended = False
    try:
        with f:
            for rec in records_newest_first(f, stats, TURN_SCAN_BYTES):
                kind = rec.get("type")
                if not isinstance(kind, str):
                    continue
                if kind == "assistant.turn_end":
                    ended = True
                elif kind == "assistant.message":
                    if not isinstance(_data(rec).get("content", ""), str):
                        continue  # malformed: not a message
                    requests = _data(rec).get("toolRequests")
                    return ended and not (isinstance(requests, list) and requests)
                elif kind in _BUSY_EVENTS or kind.startswith("tool."):
                    return ended if kind == "assistant.turn_start" and ended else False
                elif kind in _END_EVENTS:
                    return True
    except OSError:
        return None
    return True if ended else None
