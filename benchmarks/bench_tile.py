"""How long ``hub.tile()`` holds the caller (a notebook cell) before it returns.

Run: ``.venv/bin/python benchmarks/bench_tile.py [--quick]``. The start-up check
(a command that exits at once) runs on the engine thread, so the call costs
about one ``tmux new-window`` plus bookkeeping. Baseline, same run and server:
a bare ``tmux new-window -d -P`` subprocess, the least any tool can do to make a pane.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _common import Report, Stopwatch, percentile, private_tmux, run_main, temp_home

from madohub_nb import Hub

TARGET_MS = 50.0


def main(args: argparse.Namespace, report: Report) -> None:
    count = 8 if args.quick else 30
    with temp_home("tile") as root, private_tmux("tile") as socket:
        hub = Hub(socket_name=socket, log_path=root / "log.sqlite3")
        try:
            made: list[float] = []
            for i in range(count):
                started = Stopwatch()
                tile = hub.tile(f"t{i}", agent="shell", command="sleep 300")
                made.append(started.ms("tile made"))
                tile.ready.result(10)  # (not timed) the check passes on the engine thread
            bare: list[float] = []
            for _ in range(count):
                started = Stopwatch()
                subprocess.run(
                    ["tmux", "-L", socket, "new-window", "-d", "-P", "-t", f"{hub.session_name}:",
                     "sleep 300"],
                    check=True, capture_output=True,
                )  # fmt: skip
                bare.append(started.ms("tile bare"))
            for i in range(count - 1):
                hub.connect(f"t{i}", f"t{i + 1}", dispatch="shadow")
            started = Stopwatch()
        finally:
            hub.close()
        close_s = started.s("tile close_s")
        p95, median = percentile(made, 0.95), percentile(made, 0.5)
        report.target(
            "hub.tile() returns (new pane)",
            f"p95 {p95:.1f} ms, median {median:.1f} ms over {count} tiles",
            f"< {TARGET_MS:.0f} ms",
            f"bare tmux new-window: median {percentile(bare, 0.5):.1f} ms",
            p95 < TARGET_MS,
        )
        report.info("before: 540 ms per tile (the start-up check blocked the caller for 0.5 s)")
        report.target(
            "hub.close() with its tiles and routes",
            f"{close_s * 1000:.0f} ms ({count} tiles, {count - 1} routes)",
            "< 2000 ms",
            "(none: ends the engine thread, the watchers and the tmux session)",
            close_s < 2.0,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="hub.tile() latency seen by the caller")
    parser.add_argument("--quick", action="store_true", help="fewer tiles")
    sys.exit(run_main(main, parser))
