"""What every agent-record reader shares: the answer type and a bounded backwards reader.

Agents' records (Claude transcripts, Codex rollouts, Gemini/Qwen chats, Copilot
events, Pi sessions, Aider's chat history) only grow, so readers go through them
from the end in chunks: finding the last answer costs the same for a 10 kB file
and a 300 MB one. Pure file reading, no tmux, no clock.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ...errors import MadohubValueError
from ...model import EXTRACTION_METHODS, ExtractionMethod

CHUNK_BYTES = 64 * 1024
"""First read size of the backwards reader; doubled while a line has no start yet."""
MAX_CHUNK_BYTES = 8 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024 * 1024
"""A longer line is skipped (read through, never held in memory)."""


@dataclass(frozen=True)
class TurnUsage:
    """What the turn that produced an answer cost, as the agent wrote it down.

    The turn is every main-thread API message since the prompt that started it.
    Tokens are summed over its API messages (each counted once); ``input_tokens``
    leaves out cached input, which is in ``cache_read_tokens``. A field is None
    when it could not be read: missing or malformed on some message, or (tokens
    and tool calls) when the turn's start lies beyond the read window
    (``complete`` False).
    """

    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    turn_ms: float | None = None
    tool_calls: int | None = None
    api_calls: int | None = None
    complete: bool = False
    cost_usd: float | None = None
    """What the agent itself says the turn cost (OpenCode's channel does); None: priced
    from the hub's price table by ``model``."""
    measured_turn_ms: float | None = field(default=None, compare=False)
    """Where the record gives no duration: the span from the turn's prompt line to its
    newest line, by the record's own timestamps (one clock, the agent's). Claude Code
    2.1.197 writes ``turn_duration`` after its Stop hook, so a hooked round may come first."""


USAGE_FIELDS = (
    "model",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "turn_ms",
    "tool_calls",
)
"""The TurnUsage fields that are also round log columns."""


@dataclass(frozen=True)
class Extraction:
    """A source agent's last answer and how it was obtained.

    ``message_id`` identifies the turn/message it came from, so a trigger can
    tell a new answer from the one it already routed. ``usage`` is what that
    turn cost (``read_last_response(..., usage=True)``); it takes no part in
    comparisons. ``prompt`` is the user message that started the answer's turn,
    where the reader could tell it for sure (else None); an MCP ``ask`` checks
    that the answer it returns is its own prompt's.
    """

    text: str
    method: ExtractionMethod
    path: Path | None
    message_id: str | None = None
    usage: TurnUsage | None = field(default=None, compare=False)
    prompt: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.method not in EXTRACTION_METHODS:
            raise MadohubValueError(
                f"unknown extraction method {self.method!r}; allowed: {', '.join(EXTRACTION_METHODS)}"
            )


@dataclass
class ReadStats:
    """What a backwards read cost: bytes read from disk and lines produced."""

    bytes_read: int = 0
    lines: int = 0


# --------------------------------------------------------------------------- reading


def iter_lines_backwards(
    file: BinaryIO,
    end: int | None = None,
    *,
    stats: ReadStats | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
    floor: int = 0,
) -> Iterator[bytes]:
    """Yield the lines of ``file`` (without ``\\n``) from the last to the first.

    Reads chunks from ``end`` (default: the file's size) towards the start, so
    a caller that stops early pays only for the tail. A line without a start in
    the current chunk grows the read size (doubling up to MAX_CHUNK_BYTES); a
    line over ``max_line_bytes`` is read through and dropped. Nothing before
    byte ``floor`` is read: the line cut there is dropped (a reader's budget).
    """
    if end is None:
        end = file.seek(0, os.SEEK_END)
    floor = max(0, min(floor, end))
    pos = end
    size = chunk_bytes
    pending: list[bytes] = []  # pieces of the line being assembled, newest piece first
    pending_len = 0
    oversized = False
    while pos > floor:
        n = min(size, pos - floor)
        pos -= n
        file.seek(pos)
        data = _read_exactly(file, n)
        if stats is not None:
            stats.bytes_read += len(data)
        parts = data.split(b"\n")
        if len(parts) == 1:
            if not oversized:
                pending.append(data)
                pending_len += len(data)
                if pending_len > max_line_bytes:
                    oversized, pending, pending_len = True, [], 0
            size = min(size * 2, MAX_CHUNK_BYTES)
            continue
        size = chunk_bytes
        if not oversized:
            yield _counted(parts[-1] + b"".join(reversed(pending)), stats)
        for line in reversed(parts[1:-1]):
            yield _counted(line, stats)
        pending, pending_len, oversized = [parts[0]], len(parts[0]), False
    if pending and not oversized and floor == 0:
        yield _counted(b"".join(reversed(pending)), stats)


def _counted(line: bytes, stats: ReadStats | None) -> bytes:
    if stats is not None:
        stats.lines += 1
    return line


def _read_exactly(file: BinaryIO, n: int) -> bytes:
    """Read ``n`` bytes (fewer only at end of file; unbuffered reads may come short)."""
    out = file.read(n)
    while len(out) < n:
        more = file.read(n - len(out))
        if not more:
            break
        out += more
    return out


def check_path(path: object, what: str = "path") -> Path:
    """``path`` as a Path, ``~`` expanded; anything but a str or a str-valued PathLike is refused."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise MadohubValueError(
            f"{what} must be a str or os.PathLike, got {type(path).__name__} {path!r}"
        )
    return Path(text).expanduser()


def open_regular(path: Path) -> BinaryIO | None:
    """Open ``path`` for reading if it is a readable regular file, else None.

    O_NONBLOCK keeps a FIFO from blocking the open; it changes nothing for files.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb", buffering=0)
    except OSError:
        os.close(fd)
        return None


def json_records(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """JSON objects among ``lines``; anything that does not parse is skipped.

    The newest line may be half-written while the agent appends to it.
    """
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"{"):
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            yield rec
