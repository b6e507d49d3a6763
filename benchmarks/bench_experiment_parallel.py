"""Experiments side by side: 2 variants × 10 runs of stand-in agents with ``parallel=4``,
against the same runs one after the other, in the same script.

Run: ``.venv/bin/python benchmarks/bench_experiment_parallel.py [--quick] [--repeats N]``.

Each run is a fresh hub with two stand-in Claude Code tiles (``writer`` → ``reviewer`` →
``writer``, a ``LGTM`` stop keyword): the tiles start, the kickoff is typed, a round or two
is routed and the run waits until it has settled (every tile idle for twice the idle delay
plus 2 s). The agents mostly wait, so runs at once should share the 2 cores well.

Target: the wall time of the experiment with ``parallel=4`` at most half that of the same
experiment with ``parallel=1`` (≥ 2× faster), every run of both without an error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    Stopwatch,
    private_tmux,
    run_main,
    standin_available,
    temp_home,
)

IDLE_DELAY_MS = 700
PARALLEL = 4
SPEEDUP_TARGET = 2.0
VARIANTS: dict[str, Any] = {
    # The echo stand-in answers "Done: <prompt>": "LGTM" in the template ends the loop at once.
    "approve": {"writer->reviewer": {"template": "LGTM {output}"}},
    "review": {"writer->reviewer": {"template": "Review, then say LGTM: {output}"}},
}


def workflow(cwd: Path) -> Any:
    from madohub_nb.demo import standin_command
    from madohub_nb.pipeline.workflow import RouteSpec, Workflow

    tile = {
        "agent": "claude",
        "command": standin_command("claude"),
        "cwd": str(cwd),
        "env": {"MADOHUB_STANDIN_THINK_S": "0.3"},
    }
    return Workflow(
        "bench",
        {"writer": dict(tile), "reviewer": dict(tile)},
        [
            RouteSpec(["writer"], "reviewer", {"template": "Review: {output}", "max_rounds": 2}),
            RouteSpec(
                ["reviewer"],
                "writer",
                {"template": "Fix: {output}", "max_rounds": 2, "stop_keyword": "LGTM"},
            ),  # fmt: skip
        ],
    )


def run_experiment(root: Path, socket: str, repeats: int, parallel: int) -> tuple[float, Any]:
    """The experiment's wall time (s) and its ``df``."""
    import madohub_nb as mh

    cwd = root / f"proj-{parallel}"
    cwd.mkdir()
    watch = Stopwatch()
    exp = mh.experiment(
        workflow(cwd), VARIANTS, {"writer": "Write a slug function."}, repeats=repeats,
        timeout_s=120, parallel=parallel, log_path=root / f"exp-{parallel}.sqlite3",
        socket_name=socket, idle_delay_ms=IDLE_DELAY_MS,
    )  # fmt: skip
    return watch.s(f"experiment parallel={parallel}"), exp.df


def main(args: argparse.Namespace, report: Report) -> None:
    if not standin_available():
        raise CouldNotMeasure("the stand-in agents are not available in this checkout")
    repeats = args.repeats or (3 if args.quick else 10)
    runs = repeats * len(VARIANTS)
    with temp_home("exp-parallel") as root, private_tmux("exp-parallel") as sock:
        parallel_s, parallel_df = run_experiment(root, sock, repeats, PARALLEL)
        serial_s, serial_df = run_experiment(root, sock, repeats, 1)
    failed = [
        f"{row['variant']}#{row['repeat']}: {row['error']}"
        for df in (parallel_df, serial_df)
        for row in df.to_dict("records")
        if row["error"] is not None
    ]
    if len(parallel_df) != runs or len(serial_df) != runs:
        raise CouldNotMeasure(f"runs missing: {len(parallel_df)} and {len(serial_df)} of {runs}")
    report.info(
        f"{len(VARIANTS)} variants × {repeats} runs, stand-in Claude Code, idle_delay_ms "
        f"{IDLE_DELAY_MS}; a run's own wall time: median {parallel_df['wall_s'].median():.1f} s "
        f"(mean {parallel_df['wall_s'].mean():.1f}) at parallel={PARALLEL}, "
        f"{serial_df['wall_s'].median():.1f} s (mean {serial_df['wall_s'].mean():.1f}) one after "
        "the other"
    )
    report.target(
        "runs without an error", f"{2 * runs - len(failed)}/{2 * runs}", "all", "—", not failed
    )
    for line in failed[:5]:
        report.info(line)
    speedup = serial_s / parallel_s
    report.target(
        f"experiment of {runs} runs, parallel={PARALLEL}",
        f"{parallel_s:.1f} s, {speedup:.2f}× faster",
        f"≥ {SPEEDUP_TARGET:g}× faster",
        f"the same runs one after the other (parallel=1), same script: {serial_s:.1f} s",
        speedup >= SPEEDUP_TARGET,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="experiment runs side by side against one by one")
    p.add_argument("--quick", action="store_true", help="3 runs of each variant instead of 10")
    p.add_argument("--repeats", type=int, help="runs of each variant")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
