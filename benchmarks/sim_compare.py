"""How sure is a comparison? Simulated experiments of a variant passing 70% against one at 40%.

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/sim_compare.py [--experiments N]``. For 2,
10 and 30 runs of each variant (paired by repeat, as ``exp.compare`` pairs a finished
experiment), it draws ``N`` experiments (seeded) and counts how often ``better`` names the
70% variant, the 40% one, or neither; then prints a Markdown table and one typical sentence per
size (docs/experiments.md, "How sure is a comparison?"). Not a ``bench_*`` file: ``make
bench`` does not run it.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from madohub_nb.stats import Comparison, compare_values

SIZES = (2, 10, 30)
PASS_RATES = {"good": 0.7, "poor": 0.4}
SEED = 2026


def simulate(runs: int, experiments: int, rng: np.random.Generator) -> list[Comparison]:
    """``experiments`` comparisons of ``runs`` runs each of "good" (70%) and "poor" (40%)."""
    results = []
    for _ in range(experiments):
        good = (rng.random(runs) < PASS_RATES["good"]).astype(float)
        poor = (rng.random(runs) < PASS_RATES["poor"]).astype(float)
        results.append(compare_values("good", "poor", good, poor, "tests", paired=True))
    return results


def typical(results: list[Comparison]) -> Comparison:
    """The comparison whose difference is nearest the median difference (ties: the first)."""
    median = float(np.median([r.diff for r in results]))
    return min(results, key=lambda r: abs(r.diff - median))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(SEED)
    print(f"{args.experiments} simulated experiments per size; 'good' passes 70%, 'poor' 40%\n")
    print("| runs of each | `better` = 'good' | `better` = 'poor' | `better` = None |")
    print("| ---: | ---: | ---: | ---: |")
    sentences = []
    for runs in SIZES:
        results = simulate(runs, args.experiments, rng)
        said = Counter(r.better for r in results)
        share = {k: f"{said[k] / len(results):.1%}" for k in ("good", "poor", None)}
        print(f"| {runs} | {share['good']} | {share['poor']} | {share[None]} |")
        sentences.append((runs, typical(results).sentence))
    print()
    for runs, sentence in sentences:
        print(f"- {runs} runs: {sentence}")


if __name__ == "__main__":
    main()
