"""Statistics that say how sure they are: intervals for a variant's scores, tests between two.

Pure functions over numbers (numpy and pandas only: no tmux, no clock), behind
``Experiment.summary`` and ``Experiment.compare``. A 0/1 score (a bool column, or values all in
{0, 1}) gets the Wilson score interval; any other score a percentile bootstrap of its mean. Two
variants are compared by the difference of their means, ``diff = mean(a) - mean(b)``, with a
bootstrap interval and a permutation test, paired by repeat when every repeat of both is there.
Every random draw is seeded, so the same runs always give the same numbers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Final

import numpy as np

from .errors import MadohubValueError

if TYPE_CHECKING:
    import pandas as pd

BOOTSTRAP_RESAMPLES: Final = 2000
"""Resamples of a percentile bootstrap."""
PERMUTATIONS: Final = 10_000
"""Random arrangements of a Monte Carlo permutation test."""
EXACT_LIMIT: Final = 20_000
"""At most this many arrangements: the permutation test counts them all (an exact p-value)."""
SEED: Final = 40
"""The seed of every bootstrap and Monte Carlo test: the same runs give the same numbers."""
RUN_COLUMNS: Final = ("cost_usd", "rounds", "wall_s")
"""The run columns whose per-variant means ``summarize`` adds."""


def check_confidence(confidence: float) -> float:
    """``confidence`` if it is a level strictly between 0 and 1, else a teaching error."""
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float))
        or not 0 < confidence < 1
    ):
        raise MadohubValueError(
            f"confidence must be a level between 0 and 1 (0.95 for a 95% interval), "
            f"got {confidence!r}"
        )
    return float(confidence)


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``successes / n`` (NaNs when ``n`` is 0).

    Unlike ``p ± z·sqrt(p(1-p)/n)`` it stays inside [0, 1] and is honest at 0/n and n/n.
    """
    confidence = check_confidence(confidence)
    if n == 0:
        return (math.nan, math.nan)
    z, p = _z(confidence), successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the edges, no 1e-17
    return (low, 1.0 if successes == n else min(1.0, centre + half))


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """A percentile bootstrap interval of the mean of ``values`` (seeded; NaNs when empty)."""
    confidence = check_confidence(confidence)
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return (float(low), float(high))


def _numbers(values: Iterable[object]) -> bool:
    """Whether ``values`` has a number and, NaN and None aside, nothing but numbers and bools."""
    import pandas as pd

    seen = [v for v in values if not pd.isna(v)]  # type: ignore[call-overload]
    return bool(seen) and all(isinstance(v, (bool, int, float, np.number)) for v in seen)


def is_binary(values: Iterable[object]) -> bool:
    """Whether a score is 0/1: every value (NaN and None left out) is 0, 1, False or True."""
    import pandas as pd

    seen = [v for v in values if not pd.isna(v)]  # type: ignore[call-overload]
    return _numbers(seen) and all(v in (0, 1) for v in seen)


def _two_sided(statistics: np.ndarray, observed: float) -> int:
    """How many arrangements' statistics are at least as far from 0 as the observed one."""
    return int((np.abs(statistics) >= abs(observed) - 1e-12).sum())


def paired_permutation_p(
    diffs: Sequence[float] | np.ndarray, permutations: int = PERMUTATIONS, seed: int = SEED
) -> float:
    """Two-sided sign-flip test of a mean paired difference of 0.

    Each pair's difference may be flipped (the two runs swapped). Zero differences do not
    change under a flip and are left out of the count; with at most ``EXACT_LIMIT``
    arrangements (2^nonzero) every one is counted (exact), else ``permutations`` seeded random
    ones, with the observed one counted in (``(k + 1) / (N + 1)``).
    """
    d = np.asarray(diffs, dtype=float)
    d = d[d != 0]
    if len(d) == 0:
        return 1.0
    observed = float(d.sum())
    if 2 ** len(d) <= EXACT_LIMIT:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
        return _two_sided(signs @ d, observed) / len(signs)
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(permutations, len(d)))
    return (_two_sided(signs @ d, observed) + 1) / (permutations + 1)


def permutation_p(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
) -> float:
    """Two-sided permutation test of ``mean(a) - mean(b) = 0`` (the runs' labels shuffled).

    Exact (every way of choosing ``len(a)`` of the pooled runs) when there are at most
    ``EXACT_LIMIT`` ways, else ``permutations`` seeded random shuffles, the observed one
    counted in (``(k + 1) / (N + 1)``).
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pooled, n = np.concatenate([x, y]), len(x)
    total = pooled.sum()
    observed = x.mean() - y.mean()
    if math.comb(len(pooled), n) <= EXACT_LIMIT:
        picks = np.array(list(itertools.combinations(range(len(pooled)), n)), dtype=int)
        sums = pooled[picks].sum(axis=1)
        return _two_sided(sums / n - (total - sums) / len(y), observed) / len(picks)
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((permutations, len(pooled))), axis=1)
    sums = pooled[order[:, :n]].sum(axis=1)
    return (_two_sided(sums / n - (total - sums) / len(y), observed) + 1) / (permutations + 1)


def _bootstrap_difference(
    x: np.ndarray, y: np.ndarray, paired: bool, confidence: float
) -> tuple[float, float]:
    """A percentile bootstrap interval of ``mean(x) - mean(y)`` (pairs resampled together)."""
    if paired:
        return bootstrap_interval(x - y, confidence)
    rng = np.random.default_rng(SEED)
    mx = x[rng.integers(0, len(x), size=(BOOTSTRAP_RESAMPLES, len(x)))].mean(axis=1)
    my = y[rng.integers(0, len(y), size=(BOOTSTRAP_RESAMPLES, len(y)))].mean(axis=1)
    low, high = np.quantile(mx - my, [(1 - confidence) / 2, (1 + confidence) / 2])
    return (float(low), float(high))


@dataclass(frozen=True)
class Comparison:
    """Variant ``a`` against variant ``b`` on one score: ``diff = mean(a) - mean(b)``.

    ``ci_low``/``ci_high``: the bootstrap interval of ``diff`` at ``confidence``; ``p_value``:
    the two-sided permutation test (sign flips when ``paired`` by repeat). ``better``: the
    variant whose mean is higher when the interval excludes 0 and ``p_value < 1 -
    confidence`` (both must agree: with two runs a side the bootstrap's interval is too
    narrow, the exact test is not), else None. ``sentence`` (also ``str()``) says it plainly.
    """

    a: str
    b: str
    score: str
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    better: str | None
    paired: bool
    binary: bool
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    confidence: float
    sentence: str

    def __str__(self) -> str:
        return self.sentence


def _signed(value: float, digits: str = ".0f") -> str:
    """``value`` with its sign, a true minus sign for a negative one (``+72``, ``−12``)."""
    return f"{value:+{digits}}".replace("-", "\u2212")


def _sentence(
    a: str, b: str, score: str, x: np.ndarray, y: np.ndarray, binary: bool,
    low: float, high: float, p: float, better: str | None, paired: bool, confidence: float,
) -> str:  # fmt: skip
    level = f"{confidence * 100:g}%"
    how = "paired by repeat" if paired else "unpaired"
    diff = float(x.mean() - y.mean())
    if binary:
        said = (
            f"On {score}, {a!r} passes {x.mean():.0%} ({int(x.sum())}/{len(x)}) against "
            f"{b!r} {y.mean():.0%} ({int(y.sum())}/{len(y)}): a difference of "
            f"{_signed(diff * 100).lstrip('+')} points, {level} CI {_signed(low * 100)} to "
            f"{_signed(high * 100)} points"
        )
    else:
        said = (
            f"On {score}, {a!r} averages {x.mean():.4g} (n={len(x)}) against {b!r} "
            f"{y.mean():.4g} (n={len(y)}): a difference of {_signed(diff, '.4g')}, "
            f"{level} CI {_signed(low, '.4g')} to {_signed(high, '.4g')}"
        )
    said = f"{said}; p = {p:.2g} ({how})."
    if better is None and (low > 0 or high < 0):
        return (
            f"{said} It cannot tell which is better (the interval leaves out 0, but the "
            f"permutation test's p is not below {1 - confidence:.2g} with so few runs): "
            "run more repeats."
        )
    if better is None:
        return f"{said} It cannot tell which is better: run more repeats."
    return f"{said} {better!r} is better."


def compare_values(
    a: str,
    b: str,
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    score: str = "score",
    paired: bool = False,
    confidence: float = 0.95,
) -> Comparison:
    """Compare ``x`` (variant ``a``'s scores) with ``y`` (``b``'s); ``paired``: ``x[i]`` and
    ``y[i]`` are the same repeat. See :class:`Comparison`."""
    confidence = check_confidence(confidence)
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    for name, values in ((a, xs), (b, ys)):
        if len(values) == 0:
            raise MadohubValueError(
                f"variant {name!r} has no run with a {score!r} score to compare; "
                "run it (or fix its scorer) first"
            )
    if paired and len(xs) != len(ys):
        raise MadohubValueError(f"paired scores need as many of a as of b: {len(xs)}, {len(ys)}")
    low, high = _bootstrap_difference(xs, ys, paired, confidence)
    p = paired_permutation_p(xs - ys) if paired else permutation_p(xs, ys)
    diff = float(xs.mean() - ys.mean())
    sure = (low > 0 or high < 0) and p < 1 - confidence
    better = (a if diff > 0 else b) if sure else None
    binary = is_binary(xs.tolist()) and is_binary(ys.tolist())
    return Comparison(
        a, b, score, diff, low, high, p, better, paired, binary, len(xs), len(ys),
        float(xs.mean()), float(ys.mean()), confidence,
        _sentence(a, b, score, xs, ys, binary, low, high, p, better, paired, confidence),
    )  # fmt: skip


def compare(df: pd.DataFrame, a: str, b: str, score: str, confidence: float = 0.95) -> Comparison:
    """Compare variants ``a`` and ``b`` of ``df`` (``variant``, ``repeat`` and ``score``
    columns) on ``score``. Paired by repeat when both have the same repeats, each once, all
    scored; else unpaired. Runs without a score (NaN) are left out."""
    import pandas as pd

    if score not in df.columns:
        raise MadohubValueError(
            f"score {score!r} is not a column of exp.df; its columns: {', '.join(df.columns)}"
        )
    value = pd.to_numeric(df[score].astype("float64"), errors="coerce")
    rows = df.assign(_value=value)[value.notna()]
    x = rows[rows["variant"] == a].sort_values("repeat")
    y = rows[rows["variant"] == b].sort_values("repeat")
    every = df[df["variant"].isin((a, b))]
    paired = (
        len(x) > 0
        and list(x["repeat"]) == list(y["repeat"])
        and x["repeat"].is_unique
        and len(every) == 2 * len(x)  # no run of either left out for a missing score
    )
    return compare_values(
        a, b, x["_value"].to_numpy(), y["_value"].to_numpy(), score, paired, confidence
    )


def score_columns(df: pd.DataFrame, known: Iterable[str]) -> list[str]:
    """The columns of ``df`` taken as scores when none are named: those that are not
    ``known`` (the run's own columns) and hold numbers or bools (NaN or None where a scorer
    failed)."""
    import pandas as pd

    skip = set(known)
    return [
        c for c in df.columns
        if c not in skip
        and (
            pd.api.types.is_numeric_dtype(df[c])
            or pd.api.types.is_bool_dtype(df[c])
            or _numbers(df[c].tolist())
        )
    ]  # fmt: skip


def summarize(
    df: pd.DataFrame,
    scores: Sequence[str],
    confidence: float = 0.95,
    order: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per variant (index ``variant``, in ``order``): ``n``; per score
    ``<name>_mean``, ``<name>_ci_low``, ``<name>_ci_high`` (Wilson for a 0/1 score, else a
    bootstrap); the means of ``cost_usd``, ``rounds`` and ``wall_s``; and for a 0/1 score the
    total cost per success (``cost_per_success``, or ``<name>_cost_per_success`` when several
    scores are 0/1; NaN without a success or a cost)."""
    import pandas as pd

    confidence = check_confidence(confidence)
    missing = [s for s in scores if s not in df.columns]
    if missing:
        raise MadohubValueError(
            f"no score column {', '.join(map(repr, missing))} in exp.df; "
            f"its columns: {', '.join(df.columns)}"
        )
    binary = [s for s in scores if is_binary(df[s].tolist())]
    variants = list(order) if order is not None else list(dict.fromkeys(df["variant"]))
    rows = []
    for variant in variants:
        runs = df[df["variant"] == variant]
        row: dict[str, float] = {"n": len(runs)}
        cost = pd.to_numeric(runs["cost_usd"], errors="coerce") if "cost_usd" in runs else None
        for s in scores:
            values = pd.to_numeric(runs[s].astype("float64"), errors="coerce").dropna()
            mean = float(values.mean()) if len(values) else math.nan
            if s in binary:
                low, high = wilson_interval(int(values.sum()), len(values), confidence)
            else:
                low, high = bootstrap_interval(values.to_numpy(), confidence)
            row |= {f"{s}_mean": mean, f"{s}_ci_low": low, f"{s}_ci_high": high}
        for column in RUN_COLUMNS:
            if column in runs:
                row[column] = float(pd.to_numeric(runs[column], errors="coerce").mean())
        for s in binary:
            successes = float(pd.to_numeric(runs[s].astype("float64"), errors="coerce").sum())
            spent = float(cost.sum()) if cost is not None and cost.notna().any() else math.nan
            name = "cost_per_success" if len(binary) == 1 else f"{s}_cost_per_success"
            row[name] = spent / successes if successes else math.nan
        rows.append(row)
    out = pd.DataFrame(rows, index=pd.Index(variants, name="variant"))
    return out.astype({"n": int}) if len(out) else out
