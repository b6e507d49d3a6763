"""Test utilities shipped with the package, usable from tests, notebooks and benchmarks."""

from __future__ import annotations

from .fake_anthropic import FakeAnthropic

__all__ = ["FakeAnthropic"]
