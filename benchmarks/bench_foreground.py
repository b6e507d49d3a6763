"""Foreground checks of delivery: what checking the pane before each typed line costs.

Run: ``.venv/bin/python benchmarks/bench_foreground.py [--quick]``.

A program (``cat``) runs in a pane of a private tmux server, as the agent would.

- reader check: :func:`check_reader` (two ``/proc/<pid>/stat`` reads) per call;
  target < 1 ms per line; baseline: ``psutil.Process(pid).status()``;
- synchronize-panes check over the control connection (what a hub uses):
  ``Tmux.asend_guarded`` (one ``if-shell -F '#{pane_synchronized}'`` line
  around the ``send-keys -H`` of the line, on the control-mode client) against
  the bare ``send-keys -H`` of the same line on the same client; the
  difference is the check's cost per line (target < 1 ms);
- synchronize-panes check without a control connection (the fallback): one
  guarded tmux process (``if-shell -F '#{pane_synchronized}' … send-keys -H
  …``) against a bare ``tmux send-keys -l`` process of the same line
  (target < 1 ms);
- a FIFO or device where ``sessions/<pid>.json`` should be: refused in < 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    Stopwatch,
    gap_ms_text,
    percentile,
    private_tmux,
    run_main,
)

from madohub_nb.agents.claude import read_session_file  # noqa: E402
from madohub_nb.agents.foreground import check_reader, expected_reader  # noqa: E402
from madohub_nb.io.tmux import ControlClient, Tmux, hex_keys_command  # noqa: E402

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

        t0 = Stopwatch()
        for _ in range(calls):
            check_reader(reader)
        check_ms = t0.ms("foreground check_ms") / calls
        proc = psutil.Process(info.pid)
        t0 = Stopwatch()
        for _ in range(calls):
            proc.status()
        base_ms = t0.ms("foreground base_ms") / calls
        report.target(
            "reader check per line",
            f"{check_ms * 1000:.1f} µs",
            f"< {CHECK_TARGET_MS:.0f} ms",
            f"psutil status() {base_ms * 1000:.1f} µs",
            check_ms < CHECK_TARGET_MS,
        )

        guarded_cc, bare_cc, used = asyncio.run(control_guard(tmux, "bench", pane, sends * 5))
        extra_cc = statistics.median(guarded_cc) - statistics.median(bare_cc)
        report.target(
            "synchronize-panes check per line over the control connection (guarded send minus "
            f"bare send-keys, {len(guarded_cc)} lines, {used} commands went over it)",
            f"{gap_ms_text(extra_cc, 'more', 'less', 3)} (guarded {statistics.median(guarded_cc):.3f} ms, p95 "
            f"{percentile(guarded_cc, 0.95):.3f} ms)",
            f"< {SYNC_TARGET_MS:.0f} ms",
            f"bare send-keys -H on the same control-mode client {statistics.median(bare_cc):.3f} ms",
            extra_cc < SYNC_TARGET_MS,
        )

        guarded: list[float] = []
        bare: list[float] = []
        for _ in range(sends):
            t0 = Stopwatch()
            tmux.send_guarded(pane, [hex_keys_command(pane, LINE)])
            guarded.append(t0.ms("foreground guarded"))
            t0 = Stopwatch()
            subprocess.run(
                ["tmux", "-L", socket, "send-keys", "-t", pane, "-l", "--", LINE], check=True
            )
            bare.append(t0.ms("foreground bare"))
        extra = statistics.median(guarded) - statistics.median(bare)
        report.target(
            "synchronize-panes check per line without a control connection (guarded tmux "
            "process minus a bare send-keys process)",
            f"{gap_ms_text(extra, 'more', 'less', 2)} (guarded {statistics.median(guarded):.2f} ms)",
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
                t0 = Stopwatch()
                if read_session_file(tmp, pid) is not None:
                    raise CouldNotMeasure("a FIFO or device was read as a sessions file")
                worst = max(worst, t0.ms("foreground worst"))
        report.target(
            "FIFO / device sessions file refused (worst of 100)",
            f"{worst:.3f} ms",
            f"< {FIFO_TARGET_MS:.0f} ms",
            "a plain open() of the FIFO blocks forever",
            worst < FIFO_TARGET_MS,
        )


async def control_guard(
    tmux: Tmux, session: str, pane: str, sends: int
) -> tuple[list[float], list[float], int]:
    """Per-line ms of a guarded send and of a bare send-keys, both on one control-mode client.

    Returns (guarded, bare, commands the Tmux object sent over the connection).
    """
    client = ControlClient(tmux, session, lambda pane_id, data: None, lambda: None)
    await client.start()
    tmux.use_channel(client)
    try:
        await client.command(["display-message", "-p", "attached"])
        line = hex_keys_command(pane, LINE)
        before = tmux.channel_commands
        guarded: list[float] = []
        bare: list[float] = []
        for _ in range(sends):
            t0 = Stopwatch()
            if not await tmux.asend_guarded(pane, [line]):
                raise CouldNotMeasure("the pane's window is synchronized")
            guarded.append(t0.ms("foreground guarded"))
            t0 = Stopwatch()
            await client.command_line(line, 1, True, "send-keys")
            bare.append(t0.ms("foreground bare"))
        used = tmux.channel_commands - before
        if used < sends:
            raise CouldNotMeasure(
                f"only {used} of {sends} guarded sends went over the control connection"
            )
        return guarded, bare, used
    finally:
        await client.stop()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="foreground check benchmark")
    p.add_argument("--quick", action="store_true", help="fewer calls")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
