"""The statistics of an experiment against hand-computed values (fast and pure: no tmux).

``exp.summary()`` and ``exp.compare()`` are checked on an ``Experiment`` whose runs are filled
in by hand: the statistics read ``exp.df`` only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pytest

from madohub_nb import stats
from madohub_nb.errors import MadohubValueError
from madohub_nb.experiment import Experiment, Run
from madohub_nb.pipeline.workflow import Workflow


def test_wilson_interval_of_7_out_of_10_at_95_percent() -> None:
    """z = 1.959964: centre (0.7 + z²/20) / (1 + z²/10) = 0.6445, half-width
    z·sqrt(0.021 + z²/400) / (1 + z²/10) = 0.2477: 0.3968 to 0.8922."""
    low, high = stats.wilson_interval(7, 10)
    assert (round(low, 4), round(high, 4)) == (0.3968, 0.8922)


def test_wilson_interval_at_the_edges_and_other_levels() -> None:
    """0/n and n/n stay inside [0, 1] and are not a point; 90% is narrower than 95%."""
    low, high = stats.wilson_interval(0, 10)
    assert low == 0.0 and round(high, 4) == 0.2775  # z²/(n + z²) = 3.8415/13.8415
    low, high = stats.wilson_interval(10, 10)
    assert round(low, 4) == 0.7225 and high == 1.0
    narrow = stats.wilson_interval(7, 10, 0.90)
    assert 0.3968 < narrow[0] and narrow[1] < 0.8922
    assert all(math.isnan(v) for v in stats.wilson_interval(0, 0))


def test_bootstrap_interval_by_hand_and_reproducible() -> None:
    """Of [0, 10], a resample's mean is 0 a quarter of the time, 10 a quarter: the 2.5% and
    97.5% points are 0 and 10. A constant has no spread. The same values, the same numbers."""
    assert stats.bootstrap_interval([0.0, 10.0]) == (0.0, 10.0)
    assert stats.bootstrap_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)
    values = [0.2, 0.9, 0.4, 0.7, 0.5, 0.1]
    once = stats.bootstrap_interval(values)
    assert once == stats.bootstrap_interval(values)
    assert 0.1 < once[0] < sum(values) / len(values) < once[1] < 0.9


def test_exact_permutation_p_values_by_hand() -> None:
    """Unpaired [1, 2] vs [3, 4]: of the 6 ways to pick two of {1, 2, 3, 4}, the differences
    of means are -2, -1, 0, 0, 1, 2; two are as far from 0 as -2: p = 2/6. Paired differences
    [1, 2, -0.5]: of the 8 sign flips, sums ±3.5 and ±2.5 reach |2.5|: p = 4/8."""
    assert stats.permutation_p([1, 2], [3, 4]) == pytest.approx(2 / 6)
    assert stats.paired_permutation_p([1, 2, -0.5]) == pytest.approx(4 / 8)
    assert stats.paired_permutation_p([0, 0]) == 1.0
    # 7/10 against 4/10 unpaired: C(20, 10) = 184,756 ways, more than the exact limit: seeded
    mc = stats.permutation_p([1] * 7 + [0] * 3, [1] * 4 + [0] * 6)
    assert mc == stats.permutation_p([1] * 7 + [0] * 3, [1] * 4 + [0] * 6)
    assert 0.2 < mc < 0.5  # Fisher's exact two-sided p is 0.37


def test_is_binary() -> None:
    assert stats.is_binary([True, False])
    assert stats.is_binary([1.0, 0.0, float("nan"), None])
    assert not stats.is_binary([0.5, 1.0])
    assert not stats.is_binary([float("nan")])
    assert not stats.is_binary(["1", "0"])


@dataclass
class Scored(Experiment):
    """An experiment whose ``df`` has score columns, as the scorers add them."""

    scores: pd.DataFrame = field(default_factory=pd.DataFrame)
    names: list[str] = field(default_factory=list)
    """Score names as the scorers would give them (``exp.score_names``); empty: none."""

    @property
    def score_names(self) -> list[str]:
        return self.names

    @property
    def df(self) -> pd.DataFrame:
        return super().df.merge(self.scores, on=["variant", "repeat"])


def _experiment(rows: list[dict[str, Any]]) -> Scored:
    """An experiment of variants a and b whose runs are ``rows``, filled in by hand."""
    workflow = Workflow("w", {}, [])
    runs = [
        Run(r["variant"], r["repeat"], cost_usd=r["cost_usd"], rounds=r["rounds"],
            wall_s=r["wall_s"])
        for r in rows
    ]  # fmt: skip
    frame = pd.DataFrame(rows)[["variant", "repeat", "quality", "tests"]]
    return Scored(
        workflow, {"a": workflow, "b": workflow}, "/nonexistent/log.db", runs=runs, scores=frame
    )


def _rows(passes_a: list[int], passes_b: list[int]) -> list[dict[str, Any]]:
    return [
        {"variant": v, "repeat": i + 1, "tests": bool(p), "quality": 2.0 * p + i, "cost_usd": 0.5,
         "rounds": 3 + p, "wall_s": 10.0}
        for v, passes in (("a", passes_a), ("b", passes_b)) for i, p in enumerate(passes)
    ]  # fmt: skip


def test_summary_columns_and_values_on_a_hand_made_experiment() -> None:
    """7/10 and 4/10 passing: Wilson intervals, means, cost per success = 10 × $0.50 / 7."""
    exp = _experiment(_rows([1] * 7 + [0] * 3, [1] * 4 + [0] * 6))
    summary = exp.summary()
    assert list(summary.index) == ["a", "b"]
    assert list(summary.columns) == [
        "n", "quality_mean", "quality_ci_low", "quality_ci_high", "tests_mean", "tests_ci_low",
        "tests_ci_high", "cost_usd", "rounds", "wall_s", "cost_per_success",
    ]  # fmt: skip
    a = summary.loc["a"]
    assert a["n"] == 10 and a["tests_mean"] == 0.7
    assert (round(a["tests_ci_low"], 4), round(a["tests_ci_high"], 4)) == (0.3968, 0.8922)
    assert a["cost_usd"] == 0.5 and a["rounds"] == 3.7 and a["wall_s"] == 10.0
    assert a["cost_per_success"] == pytest.approx(5.0 / 7)
    assert summary.loc["b", "cost_per_success"] == pytest.approx(5.0 / 4)
    assert a["quality_ci_low"] < a["quality_mean"] < a["quality_ci_high"]  # bootstrap
    assert a["quality_mean"] == pytest.approx((2.0 * 7 + sum(range(10))) / 10)
    only = exp.summary(scores=["tests"], confidence=0.9)
    assert "quality_mean" not in only and only.loc["a", "tests_ci_low"] > 0.3968


def test_summary_uses_the_experiments_score_names_and_no_success_is_nan() -> None:
    exp = _experiment(_rows([0, 0], [1, 0]))
    exp.names = ["tests"]
    summary = exp.summary()
    assert "quality_mean" not in summary
    assert math.isnan(summary.loc["a", "cost_per_success"])
    assert summary.loc["b", "cost_per_success"] == 1.0


def test_compare_pairs_by_repeat_when_every_repeat_is_there() -> None:
    exp = _experiment(_rows([1] * 7 + [0] * 3, [1] * 4 + [0] * 6))
    result = exp.compare("a", "b", score="tests")
    assert result.paired and result.diff == pytest.approx(0.3)
    assert result.better is None and result.ci_low <= 0 <= result.ci_high
    assert result.p_value == 2 / 8  # repeats 5-7 differ (by 1 each): 2 of 8 sign flips reach 3
    rows = _rows([1] * 7 + [0] * 3, [1] * 4 + [0] * 6)
    rows = [r for r in rows if (r["variant"], r["repeat"]) != ("b", 5)]  # b's repeat 5 is gone
    unpaired = _experiment(rows).compare("a", "b", score="tests")
    assert not unpaired.paired and unpaired.n_a == 10 and unpaired.n_b == 9


def test_compare_with_two_runs_each_cannot_tell() -> None:
    """Both of a pass, neither of b: the bootstrap's interval is +100 to +100, but the exact
    sign-flip test's p is 2/4: it cannot tell."""
    result = _experiment(_rows([1, 1], [0, 0])).compare("a", "b", score="tests")
    assert result.better is None and result.p_value == 0.5
    assert "It cannot tell which is better" in result.sentence and "run more repeats" in str(result)


def test_compare_names_the_better_variant_when_the_interval_excludes_0() -> None:
    result = _experiment(_rows([1] * 12, [0] * 12)).compare("b", "a", score="tests")
    assert result.better == "a" and result.diff == -1.0 and result.p_value < 0.05
    assert result.sentence.endswith("'a' is better.")


def test_the_sentence_says_it_plainly() -> None:
    result = stats.compare_values("a", "b", [1] * 7 + [0] * 3, [1] * 4 + [0] * 6, "tests")
    assert result.sentence.startswith(
        "On tests, 'a' passes 70% (7/10) against 'b' 40% (4/10): a difference of 30 points, "
        "95% CI −"
    )
    assert "p = 0.37 (unpaired). It cannot tell which is better: run more repeats." in str(result)


def test_compare_and_summary_errors_teach() -> None:
    exp = _experiment(_rows([1, 0], [0, 1]))
    with pytest.raises(MadohubValueError, match="no variant 'c'; the experiment's: a, b"):
        exp.compare("a", "c", score="tests")
    with pytest.raises(MadohubValueError, match="say which score.*quality, tests"):
        exp.compare("a", "b")
    with pytest.raises(MadohubValueError, match="'speed' is not a column"):
        exp.compare("a", "b", score="speed")
    with pytest.raises(MadohubValueError, match="confidence must be a level between 0 and 1"):
        exp.summary(confidence=95)


def test_a_run_without_a_score_is_left_out_and_unpairs_the_comparison() -> None:
    """A scorer that failed leaves NaN: that run is out of the mean and the interval, and the
    other variant's same repeat has no partner, so the comparison is unpaired."""
    exp = _experiment(_rows([1, 1, 0, 1], [0, 1, 0, 0]))
    exp.scores.loc[(exp.scores["variant"] == "a") & (exp.scores["repeat"] == 4), "quality"] = (
        math.nan
    )
    exp.scores["tests"] = exp.scores["tests"].astype(object)
    exp.scores.loc[(exp.scores["variant"] == "b") & (exp.scores["repeat"] == 2), "tests"] = None
    summary = exp.summary()
    assert summary.loc["a", "quality_mean"] == pytest.approx((2 + 3 + 2) / 3)  # 2p + i, i < 3
    assert summary.loc["b", "tests_mean"] == 0.0 and summary.loc["b", "n"] == 4
    assert summary.loc["b", "tests_ci_low"] == 0.0  # Wilson of 0/3
    assert round(summary.loc["b", "tests_ci_high"], 4) == 0.5615
    result = exp.compare("a", "b", score="tests")
    assert not result.paired and (result.n_a, result.n_b) == (4, 3)


def test_compare_of_a_numeric_score_and_the_only_score_by_default() -> None:
    exp = _experiment(_rows([1, 0, 1], [0, 0, 1]))
    exp.names = ["quality"]
    result = exp.compare("a", "b")
    assert result.score == "quality" and not result.binary and result.paired
    assert result.diff == pytest.approx(2 / 3)  # a: 2, 1, 4; b: 0, 1, 4
    assert result.sentence.startswith(
        "On quality, 'a' averages 2.333 (n=3) against 'b' 1.667 (n=3): a difference of +0.6667"
    )
