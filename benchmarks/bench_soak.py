"""Soak: how long the seeded 1,000-round soak takes (its time is a figure here, never a test budget).

Run: ``.venv/bin/python benchmarks/bench_soak.py [--quick] [--seed N]``.

Runs ``tests/test_soak.py::test_soak_thousand_rounds_with_faults_keeps_every_invariant``
under pytest with the seed and step count given, and times the whole run
(set-up, every step and fault, the checks). The test itself asserts every
invariant; this benchmark reports the wall time and the figures the test
prints. Baseline: the time the same steps would take if each step cost only
its deliberate waits (one idle delay plus the 500 ms pre-submit pause of one
hand send and one routed delivery), which no run can beat.
``--quick`` runs 8 steps (about 220 rounds) instead of 45 (1,000+).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, CouldNotMeasure, Report, Stopwatch, run_main  # noqa: E402

TARGET_S_PER_1000_ROUNDS = 300.0
FLOOR_S_PER_STEP = 0.25 + 0.5 + 0.5
"""A step's deliberate waits: the idle delay, the pre-submit pause of a hand send and of a delivery."""


def main(args: argparse.Namespace, report: Report) -> None:
    steps = 8 if args.quick else 45
    env = {**os.environ, "MADOHUB_SOAK_STEPS": str(steps), "MADOHUB_SOAK_SEED": str(args.seed)}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    test = "tests/test_soak.py::test_soak_thousand_rounds_with_faults_keeps_every_invariant"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s", test]
    t0 = Stopwatch()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = t0.s("soak wall")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("soak figures: ")), None)
    if done.returncode != 0 or line is None:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise CouldNotMeasure(f"the soak failed (exit {done.returncode}):\n{tail}")
    figures = json.loads(line.split(": ", 1)[1])
    rounds = int(figures["rounds"])
    report.info(f"figures: {line.split(': ', 1)[1]}")
    limit = TARGET_S_PER_1000_ROUNDS * max(rounds, 1) / 1000
    floor = FLOOR_S_PER_STEP * steps
    report.target(
        f"soak, seed {args.seed}, {steps} steps: {rounds} rounds, "
        f"{figures['faults applied']} faults, every invariant held",
        f"{wall:.0f} s wall ({figures['seconds']:.0f} s in the run), {1000 * wall / rounds:.0f} s per 1,000 rounds",
        f"< {TARGET_S_PER_1000_ROUNDS:.0f} s per 1,000 rounds",
        f"the steps' deliberate waits alone: {floor:.0f} s",
        wall < limit,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="soak benchmark")
    p.add_argument("--quick", action="store_true", help="8 steps (about 220 rounds)")
    p.add_argument("--seed", type=int, default=20261130, help="the soak's seed")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
