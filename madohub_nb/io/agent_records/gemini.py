"""Gemini CLI's chat record: ``~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl``.

Lines (observed with Gemini CLI 0.61.0; JSONL since 0.39): a header
``{sessionId, projectHash, startTime, lastUpdated, kind}``, then messages ``{id,
timestamp, type: "user" | "gemini" | "info" | "error" | "warning", content,
tokens, model, toolCalls?}``, and ``{"$set": {...}}`` updates (``lastUpdated``,
or a whole ``messages`` list when the history is rewritten). A ``gemini``
message's ``content`` is its whole text; ``tokens`` is ``{input, output, cached,
thoughts, tool, total}`` where ``input`` includes ``cached``.

Before 0.39 (observed with 0.6.1 and 0.38.2) the record is one JSON document,
``session-<time>-<id8>.json``, rewritten whole at each change as
``JSON.stringify(conversation, null, 2)``: ``{sessionId, projectHash, startTime,
lastUpdated, messages: [...], kind?}`` with the same messages (0.6.1 writes a
user's ``content`` as a string, later versions as a list of parts). It is read
from its tail too: each message of the ``messages`` list is the lines from an
indented ``    {`` to its ``    }`` (the two-space layout puts every other line
deeper), so the newest messages parse without the rest of the file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from .base import Extraction, ReadStats, check_path
from .common import (
    ANSWER_SCAN_BYTES,
    TURN_SCAN_BYTES,
    answer_with_usage,
    count,
    jsonl_turn_state,
    lines_newest_first,
    minus,
    opened,
    records_newest_first,
    tidy,
)

MESSAGE_TYPES = ("user", "gemini", "info", "error", "warning")
DOCUMENT_HEAD_BYTES = 4096
"""How much of a file's start tells a pre-0.39 JSON session document."""
_DOCUMENT_HEAD = re.compile(rb'\A\{\r?\n +"(?:sessionId|projectHash)": ')
"""``{`` alone on the first line: the two-space layout (a JSONL header is one line)."""
_MESSAGE_START = b"    {"
_MESSAGE_ENDS = (b"    }", b"    },")


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


def looks_like_document(head: bytes) -> bool:
    """Whether a file's first bytes open a pre-0.39 session document (``{`` then
    ``"sessionId": …`` on the next line)."""
    return bool(_DOCUMENT_HEAD.match(head)) and b'"projectHash"' in head


def is_document(f: BinaryIO) -> bool:
    """Whether an open record is a JSON session document (not JSONL), from its head."""
    f.seek(0)
    return looks_like_document(f.read(DOCUMENT_HEAD_BYTES))


def document_messages(f: BinaryIO, stats: ReadStats, budget: int) -> Iterator[dict[str, Any]]:
    """The messages of a JSON session document's tail, newest first (see the module doc).

    Only whole messages are given: one cut by the read budget does not parse
    and is skipped. A document that does not end with its closing ``}`` is
    being rewritten (Gemini truncates the file, then writes it): nothing is
    given, rather than the messages of a prefix that may miss the newest.
    """
    lines: list[bytes] | None = None
    ended = False
    for raw in lines_newest_first(f, stats, budget):
        line = raw.rstrip(b"\r")
        if not ended:
            if not line.strip():
                continue
            if line != b"}":
                return
            ended = True
        elif line in _MESSAGE_ENDS:
            lines = [b"    }"]
        elif lines is not None:
            lines.append(line)
            if line == _MESSAGE_START:
                try:
                    msg = json.loads(b"\n".join(reversed(lines)))
                except (ValueError, RecursionError):
                    msg = None
                lines = None
                if isinstance(msg, dict):
                    yield msg


def _text(content: object) -> str:
    if isinstance(content, dict):  # one part, not a list of them
        content = [content]
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


def _failed(rec: dict[str, Any]) -> bool:
    """An ``error`` message: the turn ended without an answer (observed: an API error is
    recorded as ``error`` then ``info``)."""
    return rec.get("type") == "error"


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
    """The last ``gemini`` message's text in a Gemini CLI chat record, with its turn's usage.

    Reads either layout: JSONL (0.39 on) or the older JSON document.
    """
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(p) as f:
            if f is None:
                return None
            document = is_document(f)
            messages = (
                document_messages(f, stats, ANSWER_SCAN_BYTES)
                if document
                else records_newest_first(f, stats)
            )
            return answer_with_usage(
                messages,
                path=p,
                answer_of=_answer,
                usage_of=_usage,
                is_prompt=_is_prompt,
                whole_file=f.seek(0, 2) <= ANSWER_SCAN_BYTES,
                failed=_failed,
                prompt_of=lambda rec: _text(rec.get("content")),
            )
    except OSError:
        return None


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
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(p) as f:
            if f is not None and is_document(f):
                for msg in document_messages(f, stats, TURN_SCAN_BYTES):
                    said = _verdict(msg)
                    if said is not None:
                        return said
                return None
    except OSError:
        return None
    return jsonl_turn_state(p, stats, _verdict)


__all__ = [
    "document_messages",
    "is_document",
    "looks_like",
    "looks_like_document",
    "read_last_response",
    "turn_finished",
]
