"""Aider's chat history: ``<cwd>/.aider.chat.history.md`` (markdown, appended to).

How Aider 0.86.2 writes it (observed): ``# aider chat started at <time>``
opens a session; each line of a prompt is ``#### <line>`` followed by two
spaces; the model's answer is written whole, raw, between blank lines; Aider's
own messages (``Tokens: …``, edit errors, ``Model: …``) are lines starting
``> `` and ending with two spaces. An answer's own quote lines (``> …``) and
code blocks are kept exactly: only a line that starts ``> ``, ends with two
spaces and lies outside a code fence is taken for one of Aider's messages.

The last answer is the last block of answer lines after the last prompt (an
edit-format error makes Aider ask the model again, unlogged: the newest reply
wins). A prompt answered only by Aider's notes (an API error) has no answer. ``Tokens: N sent, [X cache write, Y cache hit,] M received.`` lines
give the turn's usage (Aider rounds counts over 1000 to ``1.2k``).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from contextlib import closing
from pathlib import Path

from ...regex import lazy_compile
from ..records import Extraction, ReadStats, TurnUsage, check_path
from .common import ANSWER_SCAN_BYTES, TURN_SCAN_BYTES, lines_newest_first, opened

SESSION_START = "# aider chat started at "
PROMPT_PREFIX = "#### "
_TOKENS = lazy_compile(r"^> Tokens: (.+?)\.?\s*(?:Cost:.*)?$")
_COUNT = lazy_compile(r"^([0-9]+(?:\.[0-9]+)?)(k|M)?\s+(sent|received|cache write|cache hit)$")
_MODEL = lazy_compile(r"^> Model: (\S+)")
_FENCE = lazy_compile(r"^ {0,3}(```|~~~)")

MODEL_SCAN_BYTES = 1024 * 1024
"""How far back the ``> Model:`` line of the session is sought (beyond it the model is None)."""


def looks_like(line: str) -> bool:
    """Whether a line is one only an Aider chat history has."""
    return (
        line.startswith(SESSION_START)
        or (line.startswith(PROMPT_PREFIX) and line.endswith("  "))
        or line.startswith("> Tokens: ")
    )


def _is_prompt(line: str) -> bool:
    return (line.startswith(PROMPT_PREFIX) or line == "####") and line.endswith("  ")


def _is_note(line: str) -> bool:
    """One of Aider's own messages (blockquoted, two trailing spaces)."""
    return (line.startswith("> ") or line == ">") and line.endswith("  ")


def _segments(
    path: Path, stats: ReadStats, budget: int
) -> Generator[tuple[list[str], int], None, None]:
    """The lines after each prompt (oldest first) with that prompt's byte offset, newest first.

    The lines before the first prompt (a session's header) come with offset -1.
    A last line without its newline (being written) is left out.
    """
    with opened(path) as f:
        if f is None:
            return
        size = f.seek(0, 2)
        if size == 0:
            return
        f.seek(size - 1)
        complete_end = f.read(1) == b"\n"
        lines: list[str] = []
        consumed = 0
        for i, raw in enumerate(lines_newest_first(f, stats, budget)):
            consumed += len(raw) + 1
            if i == 0 and not complete_end:
                continue
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if _is_prompt(line) or line.startswith(SESSION_START):
                lines.reverse()
                yield lines, (size - consumed + 1 if _is_prompt(line) else -1)
                lines = []
                continue
            lines.append(line)
    lines.reverse()
    yield lines, -1


def _blocks(lines: list[str]) -> list[list[str]]:
    """Runs of answer lines between Aider's own messages (code fences respected)."""
    blocks: list[list[str]] = [[]]
    fence: str | None = None
    for line in lines:
        match = _FENCE.match(line)
        if fence is None and _is_note(line):
            if blocks[-1]:
                blocks.append([])
            continue
        if match:
            fence = (
                match.group(1) if fence is None else (None if match.group(1) == fence else fence)
            )
        blocks[-1].append(line)
    return [b for b in (_trim(b) for b in blocks) if b]


def _trim(block: list[str]) -> list[str]:
    start, end = 0, len(block)
    while start < end and not block[start].strip():
        start += 1
    while end > start and not block[end - 1].strip():
        end -= 1
    return block[start:end]


def _number(text: str, unit: str | None) -> int:
    value = float(text) * {"k": 1000, "M": 1_000_000}.get(unit or "", 1)
    return round(value)


def _usage(lines: list[str], model: str | None) -> TurnUsage:
    sums = {"sent": 0, "received": 0, "cache write": 0, "cache hit": 0}
    calls = 0
    for line in lines:
        match = _TOKENS.match(line.rstrip())
        if not match:
            continue
        calls += 1
        for piece in match.group(1).split(","):
            got = _COUNT.match(piece.strip())
            if got:
                sums[got.group(3)] += _number(got.group(1), got.group(2))
    if not calls:
        return TurnUsage(model=model, complete=False)
    return TurnUsage(
        model=model,
        input_tokens=sums["sent"],
        output_tokens=sums["received"],
        cache_read_tokens=sums["cache hit"],
        cache_write_tokens=sums["cache write"],
        api_calls=calls,
        complete=True,
    )


def _model(path: Path, stats: ReadStats) -> str | None:
    """The model named by the newest ``> Model: …`` line within MODEL_SCAN_BYTES of the tail.

    Aider names it once, at a session's start (and after ``/model``): in a
    session longer than the window the model stays unknown (None).
    """
    with opened(path) as f:
        if f is None:
            return None
        size = f.seek(0, 2)
        start = max(0, size - MODEL_SCAN_BYTES)
        f.seek(start)
        window = f.read(size - start)
    stats.bytes_read += len(window)
    at = window.rfind(b"\n> Model: ")
    if at < 0 and start == 0 and window.startswith(b"> Model: "):
        at = -1
    elif at < 0:
        return None
    line = window[at + 1 :].split(b"\n", 1)[0].decode("utf-8", "replace")
    match = _MODEL.match(line)
    return match.group(1) if match else None


def read_last_response(
    path: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> Extraction | None:
    """The last answer in an Aider chat history: the newest prompt's, or, while nothing
    follows that prompt yet (the model is working), the previous one's.

    A newest prompt followed only by Aider's own notes (the model's error, a
    refused request) has no answer: None, never an older turn's. Lines are
    kept exactly; the answer's usage is the ``Tokens:`` lines after its prompt.
    """
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        with closing(_segments(p, stats, ANSWER_SCAN_BYTES)) as segments:
            for lines, offset in segments:
                blocks = _blocks(lines)
                if offset >= 0 and blocks:
                    break
                if offset >= 0 and any(line.strip() for line in lines):
                    return None  # the newest turn wrote only Aider's notes (an error): no answer
            else:
                return None
        usage = _usage(lines, _model(p, stats))
    except OSError:
        return None
    text = "\n".join(blocks[-1])
    return Extraction(
        text=text, method="session", path=p, message_id=f"aider@{offset}:{len(blocks)}", usage=usage
    )


def turn_finished(path: str | os.PathLike[str], *, stats: ReadStats | None = None) -> bool | None:
    """True when the newest line is Aider's ``Tokens:`` report, which follows each answer.

    False: the newest line is a prompt (the model is working). None: anything
    else (a question to the user, a half-written file), or no file.
    """
    p = check_path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        with opened(p) as f:
            if f is None:
                return None
            for raw in lines_newest_first(f, stats, TURN_SCAN_BYTES):
                line = raw.decode("utf-8", "replace").rstrip("\r")
                if not line.strip():
                    continue
                if _is_prompt(line):
                    return False
                return True if line.startswith("> Tokens: ") else None
    except OSError:
        return None
    return None
