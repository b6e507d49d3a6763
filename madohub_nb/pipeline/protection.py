"""Loop protection: max rounds, cooldown and stop keyword. Pure; time passed in (ms)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MadohubValueError
from ..settings import (
    COOLDOWN_MS_DEFAULT,
    COOLDOWN_MS_RANGE,
    MAX_ROUNDS_DEFAULT,
    MAX_ROUNDS_RANGE,
    check_range,
)


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
