"""The benchmarks' shared helpers (``benchmarks/_common.py``): pure logic, fast.

A duration below zero means its two ends were read from different clocks or origins
(``bench_remote`` once printed "trigger latency p95 -863 ms"); the helpers refuse it
so that no benchmark prints or checks such a figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _common import (  # noqa: E402
    CouldNotMeasure,
    NegativeDuration,
    durations_ms,
    elapsed_ms,
)


def test_a_duration_on_one_clock_is_kept_as_it_is() -> None:
    assert elapsed_ms(10.0, 10.25, "trigger latency") == pytest.approx(250.0)
    assert elapsed_ms(3.0, 3.0, "trigger latency") == 0.0
    assert durations_ms([0.0, 1.5, 900.0], "delivery") == [0.0, 1.5, 900.0]


def test_a_negative_duration_is_refused_naming_what_and_why() -> None:
    with pytest.raises(NegativeDuration, match=r"remote trigger latency: .* -863\.0 ms") as err:
        elapsed_ms(100.863, 100.0, "remote trigger latency")
    assert "different clocks or origins" in str(err.value)
    assert "nothing was printed or checked" in str(err.value)
    assert isinstance(err.value, CouldNotMeasure)  # the benchmark exits 2: could not measure
    with pytest.raises(NegativeDuration, match="sample 2 of 3"):
        durations_ms([5.0, -0.1, 7.0], "local delivery")
    with pytest.raises(NegativeDuration):
        durations_ms([float("nan")], "a duration that is no number")
