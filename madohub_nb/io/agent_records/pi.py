"""Pi's session record: ``~/.pi/agent/sessions/<encoded cwd>/<time>_<sessionId>.jsonl``.

Lines (observed with Pi 0.73.1): a header ``{type: "session", version, id,
cwd}``, then entries ``{type, id, parentId, timestamp, ...}`` forming a tree:
going back in the conversation and prompting again adds a branch. ``message``
entries hold ``message: {role: "user" | "assistant" | "toolResult", content:
[{type: "text", text} | {type: "thinking"} | {type: "toolCall"}], model,
usage: {input, output, cacheRead, cacheWrite}, stopReason}``. The live branch
is the chain of ``parentId`` links from the newest entry (the leaf).

Earlier versions (Pi's ``migrateSessionEntries`` in ``core/session-manager.ts``
reads them; observed with 0.30.2 and 0.32.3): version 1 (up to 0.30, header
without ``version``) is linear, its entries without ``id`` or ``parentId``;
version 2 (0.31 to 0.34) is the tree, with role ``hookMessage`` where version 3
(0.35 on) says ``custom``.

The answer is Pi's own ``getLastAssistantText``: the last assistant message
on the branch (one aborted with no content skipped), its text blocks joined
with nothing between them and trimmed. A turn that ended (``stopReason`` stop,
length, error or aborted) with no text has no answer; one still calling tools
(``toolUse``) is not over, and the answer is still the previous turn's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from .base import Extraction, ReadStats, check_path
from .common import (
    ANSWER_SCAN_BYTES,
    TURN_SCAN_BYTES,
    answer_with_usage,
    count,
    opened,
    records_newest_first,
)

ENTRY_TYPES = (
    "message",
    "model_change",
    "thinking_level_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "session_info",
)
FINISHED_STOPS = ("stop", "length", "error", "aborted")


def looks_like(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a line of a Pi session record (any version)."""
    kind = rec.get("type")
    if kind == "session":  # (version 1's header has no ``version``)
        return ("version" in rec or "id" in rec) and "cwd" in rec
    if kind not in ENTRY_TYPES or "data" in rec:
        return False
    if "parentId" in rec:
        return True
    # Version 1: no ids; a message entry wraps a message with a role.
    message = rec.get("message")
    return "id" not in rec and isinstance(message, dict) and "role" in message


def branch(records: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The entries on the newest leaf's chain, newest first; other branches skipped.

    A version-1 record (entries without ids) is one line of entries: all of them.
    """
    need: object = None
    for rec in records:
        if rec.get("type") == "session":
            continue
        eid = rec.get("id")
        if not isinstance(eid, str):
            if need is None and "parentId" not in rec:
                yield rec  # version 1: linear
            continue
        if need is None or eid == need:
            yield rec
            need = rec.get("parentId")
            if not isinstance(need, str):
                return  # the tree's root


def _message(rec: dict[str, Any]) -> dict[str, Any]:
    msg = rec.get("message") if rec.get("type") == "message" else None
    return msg if isinstance(msg, dict) else {}


def _text(msg: dict[str, Any]) -> str:
    """The message's text blocks joined and trimmed, as Pi's ``getLastAssistantText``."""
    content = msg.get("content")
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    return "".join(
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ).strip()


def _skipped(msg: dict[str, Any]) -> bool:
    """An answer Pi itself passes over: aborted before any content."""
    return msg.get("stopReason") == "aborted" and not msg.get("content")


def _answer(rec: dict[str, Any]) -> tuple[str, str | None] | None:
    msg = _message(rec)
    if msg.get("role") != "assistant" or _skipped(msg):
        return None
    text = _text(msg)
    eid = rec.get("id", rec.get("timestamp"))  # (version 1: no ids; its time tells it)
    return (text, eid if isinstance(eid, str) else None) if text else None


def _failed(rec: dict[str, Any]) -> bool:
    """An assistant message that ended its turn (``stop``, ``length``, ``error``,
    ``aborted``) without text, such as an API error: the turn has no answer."""
    msg = _message(rec)
    if msg.get("role") != "assistant" or _skipped(msg) or _text(msg):
        return False
    return msg.get("stopReason") in FINISHED_STOPS


def _usage(rec: dict[str, Any]) -> tuple[object, dict[str, int | None]] | None:
    msg = _message(rec)
    if msg.get("role") != "assistant":
        return None
    usage = msg.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return msg.get("model"), {
        "input_tokens": count(usage.get("input")),
        "output_tokens": count(usage.get("output")),
        "cache_read_tokens": count(usage.get("cacheRead", 0)),
        "cache_write_tokens": count(usage.get("cacheWrite", 0)),
    }


def _is_prompt(rec: dict[str, Any]) -> bool:
    return _message(rec).get("role") == "user"


def read_last_response(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> Extraction | None:
    """The last assistant message on the live branch, with its turn's usage (None: the
    last turn ended without text)."""
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(p) as f:
            if f is None:
                return None
            whole = f.seek(0, 2) <= ANSWER_SCAN_BYTES
            return answer_with_usage(
                branch(records_newest_first(f, stats)),
                path=p,
                answer_of=_answer,
                usage_of=_usage,
                is_prompt=_is_prompt,
                whole_file=whole,
                failed=_failed,
                prompt_of=lambda rec: _text(_message(rec)),
            )
    except OSError:
        return None


def turn_finished(path: str | os.PathLike[str], *, stats: ReadStats | None = None) -> bool | None:
    """True when the live branch's newest message is an answer that stopped (not for tools).

    False: a prompt, a tool result, or an answer that called tools. None: no
    message in the tail, or the file cannot be read.
    """
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(check_path(path)) as f:
            if f is None:
                return None
            for rec in branch(records_newest_first(f, stats, TURN_SCAN_BYTES)):
                msg = _message(rec)
                role = msg.get("role")
                if role == "assistant":
                    return msg.get("stopReason") in FINISHED_STOPS
                if role in ("user", "toolResult"):
                    return False
    except OSError:
        return None
    return None
