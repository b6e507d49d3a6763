"""What one round is: ``RoundRecord``, the log's columns, and what a storable round holds.

The words the log's parts share (``log_store`` writes and reads them, ``log_frame`` types
them, ``log_redact`` scrubs their text): one dataclass whose fields are the columns in
order, the columns grouped by kind, the check an appended round must pass, and the
parse of one row's ``meta``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final

from ..defaults import ROW_DELIVERY_MODES, check_choice
from ..errors import MadohubValueError
from ..model import EXTRACTION_METHODS, ROUND_STATUSES, TURN_SIGNALS, RoundStatus


def new_round_id() -> str:
    """A fresh round id: 32 hex digits (``uuid`` is imported on the first round)."""
    import uuid

    return uuid.uuid4().hex


@dataclass(kw_only=True)
class RoundRecord:
    """One round as stored in the log; the fields are the log's columns, in order."""

    round_id: str = field(default_factory=new_round_id)
    route_id: str
    source: str
    target: str
    round: int
    """1-based count within the route; 0 for a hand ``send``."""
    trigger: str
    transform: str
    dispatch: str
    fired_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    extracted: str | None = None
    extraction_method: str | None = None
    extraction_path: str | None = None
    turn_signal: str | None = None
    """Which evidence ended the source turn: ``hook``, ``status``, ``transcript``,
    ``screen`` or ``quiet`` (None: no turn, e.g. a hand ``send``)."""
    prompt: str | None = None
    decision: str | None = None
    """An approval route's outcome: ``approved``, ``edited``, ``rejected``, ``expired``."""
    proposed_prompt: str | None = None
    """The prompt before a person's edit (None unless ``decision`` is ``edited``)."""
    delivered_at: datetime | None = None
    status: RoundStatus
    error: str | None = None
    extract_ms: float | None = None
    transform_ms: float | None = None
    deliver_ms: float | None = None
    latency_ms: float | None = None
    """From the trigger firing to the prompt submitted in the target."""
    replay_of: str | None = None
    """``round_id`` of the original round when this row is a replay."""
    delivery_mode: str | None = None
    template: str | None = None
    session_id: str | None = None
    """The hub session that wrote the row."""
    workflow: str | None = None
    """The name of the workflow whose route made the round (``hub.run``); None: made in cells."""
    workflow_hash: str | None = None
    """SHA-256 of that workflow file's bytes (of its TOML text when it was never saved)."""
    # What the source turn cost, from the agent's own files (None: not read, e.g. screen rounds).
    model: str | None = None
    input_tokens: int | None = None
    """Uncached input tokens of the source turn, summed over its API messages."""
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    turn_ms: float | None = None
    """The source turn's own duration, as the agent wrote it, else measured from its record's
    times (``meta["turn_ms_source"]``: ``record`` or ``measured``)."""
    tool_calls: int | None = None
    # What the source turn changed in its git working tree (None: not a git working tree).
    files_changed: int | None = None
    lines_added: int | None = None
    lines_removed: int | None = None
    # What the ai-routing / summary transform cost (the SDK's usage).
    ai_model: str | None = None
    ai_input_tokens: int | None = None
    ai_output_tokens: int | None = None
    ai_cache_read_tokens: int | None = None
    ai_cache_write_tokens: int | None = None
    cost_usd: float | None = None
    """Source turn plus transform, from the price table; None when a model has no price."""
    meta: dict[str, Any] = field(default_factory=dict)


ROUND_COLUMNS: Final = tuple(f.name for f in dataclasses.fields(RoundRecord))
"""The log's columns, in the stable order of ``RoundLog.df``."""

TIME_COLUMNS: Final = ("fired_at", "delivered_at")
"""Aware datetimes: ISO 8601 UTC text in the file, ``datetime64[us, UTC]`` in ``df``."""
FLOAT_COLUMNS: Final = ("extract_ms", "transform_ms", "deliver_ms", "latency_ms", "turn_ms")
"""Timings in milliseconds: REAL in the file, float64 in ``df`` (missing: NaN)."""
INT_COLUMNS: Final = ("round",)
COUNT_COLUMNS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "tool_calls",
    "files_changed",
    "lines_added",
    "lines_removed",
    "ai_input_tokens",
    "ai_output_tokens",
    "ai_cache_read_tokens",
    "ai_cache_write_tokens",
)
"""Token and call counts: INTEGER in the file, float64 in ``df`` (missing: NaN)."""
MONEY_COLUMNS: Final = ("cost_usd",)
"""US dollars: REAL in the file (NaN stored as NULL), float64 in ``df``."""
TEXT_COLUMNS: Final = tuple(
    c
    for c in ROUND_COLUMNS
    if c
    not in (*TIME_COLUMNS, *FLOAT_COLUMNS, *INT_COLUMNS, *COUNT_COLUMNS, *MONEY_COLUMNS, "meta")
)
"""Every text column: scrubbed of secrets and cut at ``max_field_chars`` before it is written."""
REQUIRED_TEXT: Final = (
    "round_id",
    "route_id",
    "source",
    "target",
    "trigger",
    "transform",
    "dispatch",
    "status",
)
"""Text every round has (NOT NULL in the file)."""
_NON_EMPTY_TEXT: Final = ("round_id", "status")


def checked(rec: RoundRecord) -> RoundRecord:
    """``rec`` if it may be appended: every column of its type and in its range (else
    ``MadohubValueError`` naming the column, the bad value and what is allowed)."""
    if not isinstance(rec, RoundRecord):
        raise MadohubValueError(f"append takes a RoundRecord, got {type(rec).__name__}")
    for name in REQUIRED_TEXT:
        value = getattr(rec, name)
        if not isinstance(value, str) or (name in _NON_EMPTY_TEXT and not value):
            kind = "a non-empty string" if name in _NON_EMPTY_TEXT else "a string"
            raise MadohubValueError(f"round {name} must be {kind}, got {value!r}")
    check_choice("round status", rec.status, ROUND_STATUSES)
    if rec.extraction_method is not None:
        check_choice("extraction method", rec.extraction_method, EXTRACTION_METHODS)
    if rec.turn_signal is not None:
        check_choice("turn signal", rec.turn_signal, TURN_SIGNALS)
    if rec.delivery_mode is not None:
        check_choice("delivery mode", rec.delivery_mode, ROW_DELIVERY_MODES)
    if isinstance(rec.round, bool) or not isinstance(rec.round, int) or rec.round < 0:
        raise MadohubValueError(
            f"round number must be a whole number >= 0 (0 for a hand send), got {rec.round!r}"
        )
    for name in TIME_COLUMNS:
        value = getattr(rec, name)
        if value is None and name == "delivered_at":
            continue
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise MadohubValueError(
                f"round {name} must be a timezone-aware datetime (e.g. datetime.now(timezone.utc)), got {value!r}"
            )
    for name in FLOAT_COLUMNS:
        value = getattr(rec, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise MadohubValueError(
                f"round {name} must be a number of milliseconds or None, got {value!r}"
            )
    _check_usage(rec)
    if not isinstance(rec.meta, dict):
        raise MadohubValueError(f"round meta must be a dict, got {type(rec.meta).__name__}")
    return rec


def _check_usage(rec: RoundRecord) -> None:
    """Usage columns: names are strings, counts whole numbers >= 0, cost a number >= 0 (or NaN)."""
    for name in ("model", "ai_model"):
        value = getattr(rec, name)
        if value is not None and not isinstance(value, str):
            raise MadohubValueError(
                f"round {name} must be a model name (str) or None, got {value!r}"
            )
    for name in COUNT_COLUMNS:
        value = getattr(rec, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise MadohubValueError(
                f"round {name} must be a whole number >= 0 or None (not read), got {value!r}"
            )
    for name in MONEY_COLUMNS:
        value = getattr(rec, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
        ):
            raise MadohubValueError(
                f"round {name} must be a number of US dollars >= 0, NaN or None, got {value!r}"
            )


_SCAN_JSON: Final = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]
"""One JSON value from a position in a string: (value, end); json's own C scanner."""


def parse_meta(text: object) -> dict[str, Any] | None:
    """One row's meta: its JSON object, or None when the row holds anything else.

    Rows this package writes always hold one JSON object; another program's may not
    (``{…},{…}``, not JSON, a list), and reading its log must neither fail nor show a
    value the row does not hold.
    """
    if not isinstance(text, str):
        return None
    text = text.strip()
    try:
        value, end = _SCAN_JSON(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    return value if end == len(text) and isinstance(value, dict) else None
