"""Defaults and allowed ranges, named once.

Every timing, limit and choice the toolkit documents lives here so the rest of
the code (and the error messages) quote one source of truth.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import MadohubValueError

# Triggers -------------------------------------------------------------------
IDLE_DELAY_MS: Final = 8000
"""Silence after the completion marker before an on-idle route fires."""

IDLE_DELAY_MS_RANGE: Final = (0, 600_000)
"""Tests and impatient users may shorten it; ten minutes at most."""

TRIGGERS: Final = ("on-idle", "on-complete", "on-keyword", "always")

# Transforms -----------------------------------------------------------------
TRANSFORMS: Final = ("ai-routing", "prompt-wrap", "full-output", "raw", "summary")
AI_TRANSFORMS: Final = ("ai-routing", "summary")
FULL_OUTPUT_LINES: Final = 30
RAW_LINES: Final = 10
DEFAULT_MODEL: Final = "claude-sonnet-5-5"

# Dispatch / delivery --------------------------------------------------------
DISPATCH_MODES: Final = ("madoagent", "legacy", "shadow")
DELIVERY_MODES: Final = ("typed", "paste")
TYPING_DELAY_MS: Final = (50, 80)
"""Random pause between typed lines, like a person typing."""

MAX_ROUTED_CHARS: Final = 200_000
"""Routed content longer than this is cut, with a visible marker."""

# Loop protection ------------------------------------------------------------
MAX_ROUNDS_DEFAULT: Final = 5
MAX_ROUNDS_RANGE: Final = (1, 20)
COOLDOWN_MS_DEFAULT: Final = 3000
COOLDOWN_MS_RANGE: Final = (1000, 30000)

AGENT_KINDS: Final = ("claude", "codex", "amp", "opencode", "qwen", "shell", "terminal")
"""The shipped agent kinds; users may register more (``mh.register_agent``)."""

READY_QUIET_MS: Final = 1000
"""A ``terminal`` tile (any program) is ready after this long without output."""
READY_QUIET_MS_RANGE: Final = (0, 600_000)
TILE_STATES: Final = ("idle", "busy", "waiting", "exited", "unknown")
ROUTE_STATES: Final = ("active", "paused", "stopped", "exhausted")
ROUND_STATUSES: Final = ("delivered", "shadow", "stopped", "exhausted", "error")


def check_choice(what: str, value: str, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise a teaching error."""
    if value not in allowed:
        raise MadohubValueError(f"unknown {what} {value!r}; allowed: {', '.join(allowed)}")
    return value


def check_range(what: str, value: int, bounds: tuple[int, int], unit: str = "") -> int:
    """Return ``value`` if ``bounds[0] <= value <= bounds[1]``, else raise."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int):
        raise MadohubValueError(
            f"{what} must be a whole number from {low} to {high}{unit}, got {value!r}"
        )
    if not low <= value <= high:
        raise MadohubValueError(f"{what} must be from {low} to {high}{unit}, got {value}")
    return value


def check_regex(what: str, pattern: object) -> re.Pattern[str]:
    """Compile a user regex, or raise a one-line error naming the parameter."""
    if not isinstance(pattern, str) or not pattern:
        raise MadohubValueError(
            f"{what} must be a non-empty regular expression string, got {pattern!r}"
        )
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise MadohubValueError(
            f"{what} {pattern!r} is not a valid regular expression: {exc}; fix it or leave it out"
        ) from exc


# Round log ------------------------------------------------------------------
EXTRACTION_METHODS: Final = ("jsonl", "rollout", "terminal")
"""How a round's source output was extracted (the round log's extraction_method)."""

LOG_BUSY_TIMEOUT_MS: Final = 5000
"""How long a round log write waits for another writer's lock before failing."""

# AI transforms (ai-routing, summary) -----------------------------------------
TEMPLATE_PLACEHOLDERS: Final = ("output", "round", "maxRounds", "source", "target")
"""The names a template fills, written ``{output}``; all other brace text is kept verbatim."""
AI_TIMEOUT_S: Final = 60.0
"""Per-attempt timeout of one Anthropic API request."""
AI_MAX_RETRIES: Final = 2
AI_MAX_RETRIES_RANGE: Final = (0, 10)
AI_MAX_TOKENS: Final = 2048
"""Upper bound on the length of an AI-written prompt or summary."""
