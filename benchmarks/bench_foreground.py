"""Foreground checks of delivery: what checking the pane before each typed line costs.

Run: ``.venv/bin/python benchmarks/bench_foreground.py [--quick]``.

A program (``cat``) runs in a pane of a private tmux server, as the agent would.

- reader check: :func:`check_reader` (two ``/proc/<pid>/stat`` reads) per call;
  target < 1 ms per line; baseline: ``psutil.Process(pid).status()``;
- synchronize-panes check: one guarded tmux call (``if-shell -F
  '#{pane_synchronized}' … send-keys -H …``) against the bare ``send-keys -l``
  of the same line; the difference is the check's cost per line (target < 1 ms);
- a FIFO or device where ``sessions/<pid>.json`` should be: refused in < 10 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import CouldNotMeasure, Report, private_tmux, run_main  # noqa: E402

from madohub_nb.agents.claude import read_session_file  # noqa: E402
from madohub_nb.agents.foreground import check_reader, expected_reader  # noqa: E402
from madohub_nb.io.tmux import Tmux, hex_keys_command  # noqa: E402

CHECK_TARGET_MS = 1.0
SYNC_TARGET_MS = 1.0
FIFO_TARGET_MS = 10.0
LINE = "review the parser; it handles 'empty' input and returns None # é"


def main(args: argparse.Namespace, report: Report) -> None:
    calls = 2000 if args.quick else 20000
    sends = 40 if args.quick else 200
    with private_tmux("fg") as socket:
        tmux = Tmux(socket)
        pane, _ = tmux.new_pane("bench", "cat")
        info = tmux.pane_info(pane)
        if info is None:
            raise CouldNotMeasure("the pane did not start")
        reader = expected_reader(info.pid, info.pid, "cat")
        if reader is None or check_reader(reader) is not None:
            raise CouldNotMeasure(f"cat is not a foreground reader: {reader}")

        t0 = time.perf_counter()
        for _ in range(calls):
            check_reader(reader)
        check_ms = (time.perf_counter() - t0) * 1000 / calls
        proc = psutil.Process(info.pid)
        t0 = time.perf_counter()
        for _ in range(calls):
            proc.status()
        base_ms = (time.perf_counter() - t0) * 1000 / calls
        report.target(
            "reader check per line",
            f"{check_ms * 1000:.1f} µs",
            f"< {CHECK_TARGET_MS:.0f} ms",
            f"psutil status() {base_ms * 1000:.1f} µs",
            check_ms < CHECK_TARGET_MS,
        )

        guarded: list[float] = []
        bare: list[float] = []
        for _ in range(sends):
            t0 = time.perf_counter()
            tmux.send_guarded(pane, [hex_keys_command(pane, LINE)])
            guarded.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            subprocess.run(
                ["tmux", "-L", socket, "send-keys", "-t", pane, "-l", "--", LINE], check=True
            )
            bare.append((time.perf_counter() - t0) * 1000)
        extra = statistics.median(guarded) - statistics.median(bare)
        report.target(
            "synchronize-panes check per line (guarded call minus bare send-keys)",
            f"{extra:+.2f} ms (guarded {statistics.median(guarded):.2f} ms)",
            f"< {SYNC_TARGET_MS:.0f} ms",
            f"bare send-keys -l {statistics.median(bare):.2f} ms",
            extra < SYNC_TARGET_MS,
        )

    with tempfile.TemporaryDirectory() as tmp:
        sessions = Path(tmp) / "sessions"
        sessions.mkdir()
        os.mkfifo(sessions / "1.json")
        (sessions / "2.json").symlink_to("/dev/zero")
        worst = 0.0
        for pid in (1, 2):
            for _ in range(50):
                t0 = time.perf_counter()
                if read_session_file(tmp, pid) is not None:
                    raise CouldNotMeasure("a FIFO or device was read as a sessions file")
                worst = max(worst, (time.perf_counter() - t0) * 1000)
        report.target(
            "FIFO / device sessions file refused (worst of 100)",
            f"{worst:.3f} ms",
            f"< {FIFO_TARGET_MS:.0f} ms",
            "a plain open() of the FIFO blocks forever",
            worst < FIFO_TARGET_MS,
        )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="foreground check benchmark")
    p.add_argument("--quick", action="store_true", help="fewer calls")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
