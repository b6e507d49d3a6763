"""What the readers of Claude Code transcripts and Codex rollouts share: budgets, a turn's tally.

Both are JSONL files that only grow, read backwards from the end in chunks
(``base.iter_lines_backwards``): finding the last answer costs the same for a
10 kB file and a 300 MB one. Pure file reading, no tmux, no clock.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from ...regex import lazy_compile
from .base import ReadStats, TurnUsage

MAX_SCAN_BYTES = 256 * 1024 * 1024
"""read_last_response gives up after this much of a file without an answer."""
MESSAGE_SPAN_BYTES = 16 * 1024 * 1024
MESSAGE_SPAN_LINES = 1000
"""How far back past the last answer line its earlier blocks (same message.id) are sought."""
TAIL_SCAN_BYTES = 32 * 1024 * 1024
TAIL_SCAN_LINES = 2000
"""How far back turn_finished (and the Codex turn-id lookup) look before saying "unknown"."""
TURN_SCAN_BYTES = 64 * 1024 * 1024
TURN_SCAN_LINES = 20_000

_LEADING_BLANK_LINES = lazy_compile(r"\A(?:[ \t]*\r?\n)+")


def tidy(block: str) -> str:
    """A text block without its leading blank lines and trailing whitespace."""
    return _LEADING_BLANK_LINES.sub("", block).rstrip()


def join(blocks: Iterable[str]) -> str:
    return "\n\n".join(b for b in (tidy(b) for b in blocks) if b)


def tapped(records: Iterator[dict[str, Any]], tally: TranscriptTally) -> Iterator[dict[str, Any]]:
    """``records`` as they are, each shown to ``tally`` first (one pass serves both readers)."""
    for rec in records:
        tally.safe_feed(rec)
        yield rec


def finish_tally(tally: TranscriptTally, records: Iterator[dict[str, Any]]) -> TurnUsage | None:
    """Read on (backwards) until the tally has its turn; a read error keeps what was read."""
    try:
        if not tally.done:
            for _ in records:
                if tally.done:
                    break
            else:
                tally.reached_file_start()
    except OSError:
        tally.done = True
    return tally.result()


def count(value: object) -> int | None:
    """A token count as written: a whole number >= 0, else None (unreadable)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and value >= 0 else None


def duration_ms(value: object) -> float | None:
    """A duration in ms (number or numeric string, Codex writes both) >= 0, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and value >= 0 and value == value and value != float("inf"):
        return float(value)
    return None


TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class TranscriptTally:
    """Sums the usage of the answer's turn from records seen newest first.

    Records newer than the answer that belong to a later turn (a prompt the
    agent is still working on) are dropped when that turn's start shows up.
    Once the answer is seen, the tally reads back to its turn's start, or
    gives up after TURN_SCAN_BYTES / TURN_SCAN_LINES (tokens then unknown).
    """

    def __init__(self, stats: ReadStats) -> None:
        self.stats = stats
        self.done = False
        self.complete = False
        self.broken = False
        self.answer_seen = False
        self.prompt: str | None = None
        """The user message that started the answer's turn, where the turn's start said it."""
        self._answer_bytes = self._answer_lines = 0
        self._reset()

    def _reset(self) -> None:
        self.model: str | None = None
        self.turn_ms: float | None = None
        self.tool_ids: set[str] = set()
        self.tool_calls = 0
        self.api_calls = 0
        self.sums: dict[str, int | None] = dict.fromkeys(TOKEN_FIELDS, 0)

    def safe_feed(self, rec: dict[str, Any]) -> None:
        if self.done:
            return
        if self.answer_seen and (
            self.stats.bytes_read - self._answer_bytes > TURN_SCAN_BYTES
            or self.stats.lines - self._answer_lines > TURN_SCAN_LINES
        ):
            self.done = True  # the turn's start is beyond the window: complete stays False
            return
        try:
            self.feed(rec)
        except Exception:  # usage is a bonus: never let it cost the answer
            self.done = self.broken = True

    def feed(self, rec: dict[str, Any]) -> None:
        raise NotImplementedError

    def _mark_answer(self) -> None:
        self.answer_seen = True
        self._answer_bytes, self._answer_lines = self.stats.bytes_read, self.stats.lines

    def _turn_start(self) -> None:
        """The prompt that started a turn: the answer's (done) or a later one (forget it)."""
        if self.answer_seen:
            self.done = self.complete = True
        else:
            self._reset()

    def _add_tokens(self, counts: dict[str, int | None]) -> None:
        self.api_calls += 1
        for name in TOKEN_FIELDS:
            total, value = self.sums[name], counts.get(name)
            self.sums[name] = None if total is None or value is None else total + value

    def _add_tool(self, tool_id: object) -> None:
        if isinstance(tool_id, str) and tool_id:
            if tool_id in self.tool_ids:
                return
            self.tool_ids.add(tool_id)
        self.tool_calls += 1

    def reached_file_start(self) -> None:
        """The file began inside the answer's turn: nothing older belongs to it."""
        self.done = self.complete = True

    def result(self) -> TurnUsage | None:
        if not self.answer_seen or self.broken:
            return None
        if not self.complete:
            return TurnUsage(model=self.model, turn_ms=self.turn_ms, complete=False)
        return TurnUsage(
            model=self.model,
            turn_ms=self.turn_ms,
            tool_calls=self.tool_calls,
            api_calls=self.api_calls,
            complete=True,
            **self.sums,
        )


def cwd_candidates(cwd: str | os.PathLike[str]) -> list[str]:
    """The real path first (Claude names projects by it), then the path as given."""
    given = os.path.expanduser(os.fspath(cwd))
    if not os.path.isabs(given):
        given = os.path.abspath(given)
    given = given.rstrip("/") or "/"
    real = os.path.realpath(given)
    return [real] if real == given else [real, given]
