"""The transform playground: 1,000 recorded rounds × 5 templates, no AI, no agent.

Run: ``.venv/bin/python benchmarks/bench_playground.py [--quick]``.

1,000 rounds (200 with ``--quick``) of varied answers (about 1 KB each, a screen tail and
``max_rounds`` in their ``meta``, as a route writes them) are appended to a real round log
in a temporary folder and read back as ``log.df``; ``mh.try_transforms(df, variants)`` with
five ``prompt-wrap`` templates is timed (median of 5 calls): its table of 5,000 prompts with
their token estimates. Target: < 1 s (issue 40), scaled to the rounds given, and at
most 3x the baseline. Baseline, the
plainest way to do the same job in the same run: a Python loop over the rows that fills
each template with ``str.replace`` and builds the same DataFrame (the
playground also parses and checks each template once, builds a context per answer, and
keeps every variant's failure to its own cell).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Report, Stopwatch, run_main  # noqa: E402

import madohub_nb as mh  # noqa: E402
from madohub_nb.io.log import RoundLog, RoundRecord  # noqa: E402

ROUNDS = 1000
TARGET_S = 1.0
"""For 1,000 rounds × 5 templates (issue 40, item 10); scaled to the rounds measured."""
BASELINE_RATIO = 3.0
"""And at most this many times the baseline of the same run (the rule of every speed target)."""
CALLS = 5
TEMPLATES = {
    "terse": "Fix: {output}",
    "review": "Here is {source}'s answer (round {round} of {maxRounds}):\n\n{output}\n\nReview it.",
    "checklist": "Check each point of this answer from {source} for {target}:\n{output}\n- tests?\n- names?",
    "answers": "Answers so far:\n{answers}\nReply with the next step.",
    "json": 'Reply as JSON {"ok": true} about: {output}',
}


def write_rounds(path: Path, count: int) -> None:
    with RoundLog(path) as log:
        for n in range(count):
            answer = f"Round {n}: I changed parser.py line {n % 97} and ran the tests. " * 12
            log.append(RoundRecord(
                route_id="writer->reviewer#1", source="writer", target="reviewer",
                round=n % 20 + 1, trigger="on-idle", transform="prompt-wrap",
                dispatch="madoagent", status="delivered", extracted=answer,
                meta={"max_rounds": 20, "screen_tail": answer.splitlines()[-5:]},
            ))  # fmt: skip


def bare(df: Any) -> Any:
    """The plainest way: ``str.replace`` of each placeholder, one DataFrame at the end."""
    import pandas as pd

    rows = []
    for rec in df.to_dict("records"):
        for name, template in TEMPLATES.items():
            prompt = (
                template.replace("{output}", rec["extracted"]).replace("{source}", rec["source"])
                .replace("{target}", rec["target"]).replace("{round}", str(rec["round"]))
                .replace("{maxRounds}", "20")
                .replace("{answers}", f"--- {rec['source']} ---\n{rec['extracted'].strip()}")
            )  # fmt: skip
            rows.append((rec["round_id"], name, prompt, -(-len(prompt) // 4), 0.0, None))
    return pd.DataFrame(rows, columns=["round", "variant", "prompt", "tokens", "cost_usd", "error"])


def timed(fn: Any, what: str) -> tuple[float, Any]:
    took, result = [], None
    for _ in range(CALLS):
        watch = Stopwatch()
        result = fn()
        took.append(watch.s(what))
    return statistics.median(took), result


def main(args: argparse.Namespace, report: Report) -> None:
    count = 200 if args.quick else ROUNDS
    with tempfile.TemporaryDirectory(prefix="bench-playground-") as tmp:
        path = Path(tmp) / "rounds.sqlite3"
        write_rounds(path, count)
        with RoundLog(path, read_only=True) as log:
            df = log.df
        played_s, played = timed(lambda: mh.try_transforms(df, TEMPLATES), "try_transforms")
        bare_s, plain = timed(lambda: bare(df), "bare rendering")
    assert len(played.df) == count * len(TEMPLATES) and played.df["error"].isna().all()
    assert list(played.df["prompt"]) == list(plain["prompt"]), "the baseline renders otherwise"
    target_s = TARGET_S * count / ROUNDS
    ratio = played_s / bare_s
    report.target(
        f"try_transforms, {count:,} rounds x {len(TEMPLATES)} templates",
        f"{played_s:.3f} s ({ratio:.1f}x the baseline)",
        f"< {target_s:g} s and <= {BASELINE_RATIO:g}x the baseline",
        f"str.replace loop + DataFrame {bare_s:.3f} s",
        played_s < target_s and ratio <= BASELINE_RATIO,
    )
    report.info(f"median of {CALLS} calls; {len(played.df):,} prompts")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="transform playground on recorded rounds")
    parser.add_argument("--quick", action="store_true", help="200 rounds instead of 1,000")
    sys.exit(run_main(main, parser))
