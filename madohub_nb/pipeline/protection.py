"""Loop protection: max rounds, cooldown, stop keyword and budgets. Pure; time passed in (ms)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..defaults import (
    COOLDOWN_MS_DEFAULT,
    COOLDOWN_MS_RANGE,
    MAX_ROUNDS_DEFAULT,
    MAX_ROUNDS_RANGE,
    check_range,
)
from ..errors import MadohubValueError


@dataclass
class LoopGuard:
    """Counts a route's rounds and spaces them out; says when to stop."""

    max_rounds: int = MAX_ROUNDS_DEFAULT
    cooldown_ms: int = COOLDOWN_MS_DEFAULT
    stop_keyword: str | None = None
    rounds: int = 0
    last_fired_ms: float | None = field(default=None)

    def __post_init__(self) -> None:
        check_range("max_rounds", self.max_rounds, MAX_ROUNDS_RANGE)
        check_range("cooldown_ms", self.cooldown_ms, COOLDOWN_MS_RANGE, " ms")
        if self.stop_keyword is not None and (
            not isinstance(self.stop_keyword, str) or not self.stop_keyword.strip()
        ):
            raise MadohubValueError(
                f"stop_keyword must be a non-empty string (e.g. 'LGTM') or None, got {self.stop_keyword!r}"
            )

    def cooldown_left_ms(self, now_ms: float) -> float:
        """How long the route must still wait before it may fire again."""
        if self.last_fired_ms is None:
            return 0.0
        return max(0.0, self.last_fired_ms + self.cooldown_ms - now_ms)

    @staticmethod
    def says_stop(stop_keyword: str | None, text: str | None) -> bool:
        """Does ``text`` contain ``stop_keyword`` (exact, case-sensitive)?"""
        return bool(stop_keyword and text and stop_keyword in text)

    def fire(self, now_ms: float) -> int:
        """Record a firing; return its 1-based round number."""
        if self.exhausted:
            raise MadohubValueError(f"the route already used all {self.max_rounds} rounds")
        self.rounds += 1
        self.last_fired_ms = now_ms
        return self.rounds

    @property
    def exhausted(self) -> bool:
        return self.rounds >= self.max_rounds


@dataclass
class Budget:
    """What a route may spend, in US dollars and in tokens, and what its rounds spent so far.

    Each round counts its ``cost_usd`` and its input + output tokens (the source turn's
    plus the AI transform's). A budgeted part that a round cannot say (a model without
    a price, a turn whose usage could not be read) is *unknown*, never free.
    """

    max_cost_usd: float | None = None
    max_tokens: int | None = None
    spent_usd: float = 0.0
    spent_tokens: int = 0

    def __post_init__(self) -> None:
        cost = self.max_cost_usd
        if cost is not None and (
            isinstance(cost, bool)
            or not isinstance(cost, (int, float))
            or not math.isfinite(cost)
            or cost <= 0
        ):
            raise MadohubValueError(
                "max_cost_usd must be a number of US dollars above 0 (e.g. 2.5), "
                f"or None for no money budget, got {cost!r}"
            )
        tokens = self.max_tokens
        if tokens is not None and (
            isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
        ):
            raise MadohubValueError(
                "max_tokens must be a whole number of tokens of 1 or more (e.g. 200_000), "
                f"or None for no token budget, got {tokens!r}"
            )

    @property
    def limited(self) -> bool:
        """A limit in money or in tokens is set."""
        return self.max_cost_usd is not None or self.max_tokens is not None

    def count(self, cost_usd: float | None, tokens: int | None) -> str | None:
        """Add one round's spending; None, or why a budgeted part of it is unknown."""
        unknown = []
        if self.max_cost_usd is not None:
            if cost_usd is None or math.isnan(cost_usd):
                unknown.append("cost")
            else:
                self.spent_usd += cost_usd
        if self.max_tokens is not None:
            if tokens is None:
                unknown.append("tokens")
            else:
                self.spent_tokens += tokens
        if not unknown:
            return None
        return " and ".join(unknown)

    def spent(self) -> str | None:
        """None while the budget lasts; else what was spent against which limit."""
        reasons = []
        if self.max_cost_usd is not None and self.spent_usd >= self.max_cost_usd:
            reasons.append(f"spent ${self.spent_usd:.4f} of max_cost_usd=${self.max_cost_usd:g}")
        if self.max_tokens is not None and self.spent_tokens >= self.max_tokens:
            reasons.append(f"spent {self.spent_tokens:,} tokens of max_tokens={self.max_tokens:,}")
        if not reasons:
            return None
        return "budget spent: " + " and ".join(reasons) + "; the route no longer delivers"

    def summary(self) -> str:
        """What was spent of what limit (empty without a limit), e.g. ``$0.0123/$2.5``."""
        parts = []
        if self.max_cost_usd is not None:
            parts.append(f"${self.spent_usd:.4f}/${self.max_cost_usd:g}")
        if self.max_tokens is not None:
            parts.append(f"{self.spent_tokens:,}/{self.max_tokens:,} tokens")
        return " · ".join(parts)
