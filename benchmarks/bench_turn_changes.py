"""What a turn changed: the git snapshot and diff each round of a source in git pays.

Run: ``.venv/bin/python benchmarks/bench_turn_changes.py [--quick]``.

A repository of 2,000 committed files (40 lines each) in a temporary folder; each "turn"
rewrites 3 files and adds an untracked one, then :meth:`ChangeTracker.take` reads what it
changed (a snapshot through a throw-away index, ``git diff-tree --numstat``), as a route
does before each round, on a thread off the engine loop.

- per round in that repository: median < 250 ms (what it delays a round by, against the
  8 s idle delay before it: about 3%); baseline: ``git status --porcelain`` (the plainest
  way to see that something changed, without line counts or a per-round baseline),
  measured in the same run. It runs 7 short processes (``sh``, ``git rev-parse``,
  ``mktemp``, ``cp``, ``git add``, ``git write-tree``, ``git diff-tree``) to the
  baseline's one, so the ratio grows with the machine's load;
- per round for a source outside git (one ``git rev-parse`` refusing): median < 20 ms;
  baseline: starting ``true`` through ``sh -c``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import CouldNotMeasure, Report, Stopwatch, run_main  # noqa: E402

from madohub_nb.io.git import ChangeTracker  # noqa: E402
from madohub_nb.io.machine import LocalMachine  # noqa: E402

FILES = 2000
LINES = 40
REPO_TARGET_MS = 250.0
PLAIN_TARGET_MS = 20.0


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _timed(fn: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = Stopwatch()
        fn()  # type: ignore[operator]
        out.append(t0.ms("turn_changes out"))
    return out


def main(args: argparse.Namespace, report: Report) -> None:
    turns = 5 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="bench-turn-changes-") as tmp:
        repo = Path(tmp) / "repo"
        (repo / "src").mkdir(parents=True)
        _git(repo, "init", "-q", "-b", "main")
        for i in range(FILES):
            (repo / "src" / f"m{i}.py").write_text(
                "".join(f"x{i}_{j} = {j}\n" for j in range(LINES))
            )
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=b", "-c", "user.email=b@example.invalid", "commit", "-qm", "s")
        machine = LocalMachine()
        tracker = ChangeTracker(machine, lambda: str(repo))
        tracker.start("r")
        took: list[float] = []
        for turn in range(turns):
            for k in range(3):
                path = repo / "src" / f"m{(turn * 3 + k) % FILES}.py"
                path.write_text(path.read_text() + f"turn_{turn} = {k}\n")
            (repo / f"new{turn}.txt").write_text("a\nb\n")
            t0 = Stopwatch()
            changes = tracker.take("r")
            took.append(t0.ms("turn_changes took"))
            if changes is None or changes.files_changed != 4 or changes.lines_added != 5:
                raise CouldNotMeasure(f"turn {turn}: read {changes}, not 4 files and 5 lines")
        status = _timed(
            lambda: subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                                   check=True, capture_output=True),
            turns,
        )  # fmt: skip
        median = statistics.median(took)
        report.target(
            "per round, 2,000-file repository", f"{median:.1f} ms median (max {max(took):.1f})",
            f"< {REPO_TARGET_MS:.0f} ms", f"git status --porcelain {statistics.median(status):.1f} ms",
            median < REPO_TARGET_MS,
        )  # fmt: skip
        plain = Path(tmp) / "plain"
        plain.mkdir()
        outside = ChangeTracker(machine, lambda: str(plain))
        outside.start("r")
        took = _timed(lambda: outside.take("r"), turns)
        bare = _timed(lambda: subprocess.run(["sh", "-c", "true"], check=True), turns)
        median = statistics.median(took)
        report.target(
            "per round, source outside git", f"{median:.1f} ms median",
            f"< {PLAIN_TARGET_MS:.0f} ms", f"sh -c true {statistics.median(bare):.1f} ms",
            median < PLAIN_TARGET_MS,
        )  # fmt: skip


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="what a turn changed: snapshot and diff per round")
    p.add_argument("--quick", action="store_true", help="fewer turns")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
