"""Delivery: what typing costs beyond its deliberate pauses, and how fast a 100 KB paste lands.

Run: ``.venv/bin/python benchmarks/bench_delivery.py [--quick]``.

The target is a quiet Claude-like program in a tile of a hub on a private tmux
server; it records every message typed into it, so each delivery is checked
byte for byte. ``Deliverer`` gets a fixed-seed RNG and either the real
``asyncio.sleep`` or a ``sleep`` that records the delay asked for and only
yields to the loop (so the wall time of ``deliver`` is the toolkit's own cost):

- typed: the per-line cost is the slope between a 1-line and an N-line prompt,
  pauses recorded and not slept (fixed costs such as the ready check and the
  submit check cancel out). Target < 1 ms per line (issue 14). Baseline: what
  delivery does per line, done bare on a control-mode client of the same
  server (the hub sends its commands over its own): ``send-keys -l TEXT ;
  send-keys C-j`` written to the client and both answers read (its mean per
  line, as the slope is a mean; its median beside it). Beside it, the
  same as one ``tmux`` process per line (what delivery cost before it used the
  control connection).
- paste: ``deliver(delivery=Delivery.PASTE)`` of 100 KB, whole: the ready check, the
  bracketed paste, the 500 ms pre-submit pause (Claude's profile) and the
  submit check, with real sleeps. Beside it, the same delivery with the pauses
  recorded and not slept (the toolkit's own cost), labelled as such.
  Baseline: bare ``tmux load-buffer`` + ``paste-buffer`` of the same text.

``--profile TOP`` prints where the pause-free typed deliveries spend their time
(cProfile on the engine's loop thread, its ``TOP`` entries).

Without ``--quick`` a typed delivery with real sleeps cross-checks the
subtraction (wall time minus the requested pauses, per line).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    Stopwatch,
    claude_like_command,
    elapsed_ms,
    private_tmux,
    read_json_lines,
    run_main,
    temp_home,
    wait_for,
    write_claude_like,
)

T = TypeVar("T")
PER_LINE_TARGET_MS = 1.0
PASTE_TARGET_MS = 200.0
"""Beyond the pre-submit pause: the paste, the submit keys and the submit check."""
PASTE_BYTES = 100 * 1024
SEED = 1234
WORDS = (
    "review",
    "the",
    "parser",
    "handles",
    "empty",
    "input",
    "and",
    "returns",
    "None",
    "—",
    "fine",
    "naïve",
    "tests",
    "pass",
    "edge",
    "case:",
    "`x = y[0]`",
    "#42",
    "(see",
    "above)",
)


def prompt_lines(n: int, rng: random.Random) -> list[str]:
    """Realistic routed lines (40–90 characters, some non-ASCII, none ending in ';')."""
    lines = []
    for _ in range(n):
        line = ""
        while len(line) < rng.randint(40, 90):
            line += rng.choice(WORDS) + " "
        lines.append(line.rstrip())
    return lines


class Recorder:
    """The messages the target received (its JSON lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def messages(self) -> list[dict[str, Any]]:
        return read_json_lines(self.path)

    def wait(self, n: int) -> dict[str, Any]:
        wait_for(lambda: len(self.messages()) >= n, 20, f"the target to receive message {n}")
        return self.messages()[n - 1]


def main(args: argparse.Namespace, report: Report) -> None:
    import madohub_nb as mh
    from madohub_nb.pipeline.deliver import Deliverer, Delivery

    lines_n = args.lines or (30 if args.quick else 100)
    reps = 3 if args.quick else 5
    with temp_home("delivery") as root, private_tmux("delivery") as socket:
        hub = mh.Hub(socket_name=socket, idle_delay_ms=1000, log_path=root / "rounds.sqlite3")
        try:
            program = write_claude_like(root)
            recorder = Recorder(root / "inputs.jsonl")
            tile = hub.tile(
                "target", agent="claude", command=claude_like_command(program, recorder.path)
            )
            wait_for(lambda: tile.state == "idle", 20, "the target to be idle", 0.1)
            requested: list[float] = []

            async def record_sleep(seconds: float) -> None:
                requested.append(seconds)
                await asyncio.sleep(0)

            async def real_sleep(seconds: float) -> None:
                requested.append(seconds)
                await asyncio.sleep(seconds)

            received = 0
            profile = cProfile.Profile() if args.profile else None

            def deliver(text: str, mode: str, sleep: object) -> float:
                """Wall ms of one delivery, checked against what the target received."""
                nonlocal received
                deliverer = Deliverer(rng=random.Random(SEED), sleep=sleep)  # type: ignore[arg-type]
                t0 = Stopwatch()
                delivery = deliverer.deliver(tile, text, delivery=Delivery(mode))
                if profile is not None and mode == "typed" and sleep is record_sleep:
                    delivery = profiled(profile, delivery)
                result = hub.engine.run_sync(delivery, 120)
                wall = t0.ms("delivery wall")
                received += 1
                got = recorder.wait(received)["text"]
                if got != text or not result.verified:
                    raise CouldNotMeasure(
                        f"{mode} delivery #{received} arrived wrong or unverified ({result}): "
                        f"{str(got)[:80]!r}… vs {text[:80]!r}…"
                    )
                return wall

            rng = random.Random(SEED)
            one, many = [], []
            for _ in range(reps):
                one.append(deliver(prompt_lines(1, rng)[0], "typed", record_sleep))
                many.append(deliver("\n".join(prompt_lines(lines_n, rng)), "typed", record_sleep))
            per_line = (statistics.median(many) - statistics.median(one)) / (lines_n - 1)
            pauses = sorted(set(round(s * 1000) for s in requested))
            report.info(
                f"typed: 1 line median {statistics.median(one):.1f} ms, {lines_n} lines median "
                f"{statistics.median(many):.1f} ms (pauses asked for, not slept: {pauses[0]}–{pauses[-1]} ms)"
            )

            bare = bare_send_keys(socket, tile.pane_id, prompt_lines(lines_n, rng))
            subprocess.run(
                ["tmux", "-L", socket, "send-keys", "-t", tile.pane_id, "C-m"], check=True
            )
            received += 1
            recorder.wait(received)
            alt_lines = prompt_lines(lines_n, rng)
            one_call = one_call_per_line(socket, tile.pane_id, alt_lines)
            control = control_mode_per_line(socket, tile.session, tile.pane_id, alt_lines)
            subprocess.run(
                ["tmux", "-L", socket, "send-keys", "-t", tile.pane_id, "C-m"], check=True
            )
            received += 1  # both alternatives' lines, submitted as one message
            if recorder.wait(received)["text"] != "\n".join(alt_lines + alt_lines) + "\n":
                raise CouldNotMeasure("the alternatives typed something else than their lines")
            report.info(
                f"other ways per line: text and C-j as one tmux process {one_call:.2f} ms, as two "
                f"{bare:.2f} ms (first call)"
            )
            report.target(
                f"typed delivery, cost per line beyond its 50-80 ms pauses ({lines_n}-line "
                f"prompts, {reps} each; pauses recorded, not slept)",
                f"{per_line:.2f} ms per line",
                f"< {PER_LINE_TARGET_MS:.0f} ms per line",
                f"text + C-j bare on a control-mode client: {control[1]:.2f} ms per line "
                f"(mean; median {control[0]:.2f})",
                per_line < PER_LINE_TARGET_MS,
            )
            report.info(
                f"hub commands over its control connection so far: {tile.tmux.channel_commands}"
            )
            if profile is not None:
                print_profile(profile, args.profile)

            if not args.quick:
                requested.clear()
                text = "\n".join(prompt_lines(30, rng))
                wall = deliver(text, "typed", real_sleep)
                rest = wall - sum(requested) * 1000 - statistics.median(one)
                report.info(
                    f"cross-check with real pauses: 30 lines in {wall:.0f} ms, pauses "
                    f"{sum(requested) * 1000:.0f} ms, fixed costs (1-line delivery) "
                    f"{statistics.median(one):.0f} ms → {rest / 29:.2f} ms per extra line"
                )

            big = paste_text(rng)
            size_kb = len(big.encode()) // 1024
            pause_ms = tile.profile.pre_submit_delay_ms
            real, own = [], []
            landed = 0.0
            for _ in range(reps):
                requested.clear()
                t_start = time.time()
                real.append(deliver(big, "paste", real_sleep))
                landed = elapsed_ms(  # (wall time both: here and in the recorder pane)
                    t_start, float(recorder.messages()[received - 1]["end"]), "paste landed"
                )
                slept_ms = sum(requested) * 1000
                own.append(deliver(big, "paste", record_sleep))
            bare_paste = bare_paste_ms(socket, tile.pane_id, big)
            subprocess.run(
                ["tmux", "-L", socket, "send-keys", "-t", tile.pane_id, "C-m"], check=True
            )
            received += 1
            recorder.wait(received)
            median = statistics.median(real)
            report.info(
                f"paste with real pauses: the target had all {len(big.encode())} bytes and the "
                f"submit key {landed:.0f} ms after the call; pauses slept {slept_ms:.0f} ms "
                f"(last run)"
            )
            report.target(
                f"paste delivery of {size_kb} KB, whole ({reps} runs: ready check, paste, "
                f"{pause_ms} ms pre-submit pause, submit, submit check; real sleeps)",
                f"median {median:.1f} ms (max {max(real):.1f}), "
                f"{median - pause_ms:.1f} ms beyond the pause",
                f"< {pause_ms} ms pause + {PASTE_TARGET_MS:.0f} ms",
                f"bare tmux load-buffer + paste-buffer {bare_paste:.1f} ms, no submit",
                median < pause_ms + PASTE_TARGET_MS,
            )
            own_median = statistics.median(own)
            report.target(
                f"paste delivery of {size_kb} KB, pause-free ({reps} runs: the same, pauses "
                "recorded and not slept; the toolkit's own cost)",
                f"median {own_median:.1f} ms (max {max(own):.1f})",
                f"< {PASTE_TARGET_MS:.0f} ms",
                f"bare tmux load-buffer + paste-buffer {bare_paste:.1f} ms, no submit",
                own_median < PASTE_TARGET_MS,
            )
        finally:
            hub.close()


async def profiled(profile: cProfile.Profile, delivery: Awaitable[T]) -> T:
    """``delivery`` with ``profile`` on while it runs (on the engine's loop thread, where
    typing runs; the time it waits in worker threads shows as waiting)."""
    profile.enable()
    try:
        return await delivery
    finally:
        profile.disable()


def print_profile(profile: cProfile.Profile, top: int) -> None:
    """The ``top`` entries by own time, then by time with callees."""
    for order in ("tottime", "cumulative"):
        print(f"  -- typed deliveries, cProfile on the loop thread, by {order}", flush=True)
        pstats.Stats(profile, stream=sys.stdout).sort_stats(order).print_stats(top)


def bare_send_keys(socket: str, pane: str, lines: list[str]) -> float:
    """Median ms of one plain ``tmux send-keys -l`` per line (the newline key as a second, untimed call)."""
    times = []
    for i, line in enumerate(lines):
        t0 = Stopwatch()
        subprocess.run(
            ["tmux", "-L", socket, "send-keys", "-t", pane, "-l", "--", line], check=True
        )
        times.append(t0.ms("delivery times"))
        if i < len(lines) - 1:
            subprocess.run(["tmux", "-L", socket, "send-keys", "-t", pane, "C-j"], check=True)
    return statistics.median(times)


def one_call_per_line(socket: str, pane: str, lines: list[str]) -> float:
    """Median ms per line when the text and its C-j go in one tmux call (``a ; b``)."""
    times = []
    for line in lines:
        t0 = Stopwatch()
        subprocess.run(
            [
                "tmux",
                "-L",
                socket,
                "send-keys",
                "-t",
                pane,
                "-l",
                "--",
                line,
                ";",
                "send-keys",
                "-t",
                pane,
                "C-j",
            ],
            check=True,
        )
        times.append(t0.ms("delivery times"))
    return statistics.median(times)


def control_mode_per_line(
    socket: str, session: str, pane: str, lines: list[str]
) -> tuple[float, float]:
    """Median and mean ms per line when both commands go through a tmux control-mode client
    (no spawn). The mean is what compares with delivery's slope, which is a mean too: on a
    loaded machine a few lines wait milliseconds for a core, and a median hides them."""
    proc = subprocess.Popen(
        ["tmux", "-L", socket, "-C", "attach-session", "-t", f"={session}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    times = []

    def wait_end(blocks: int) -> None:
        """Read replies until ``blocks`` commands have answered (``%end`` or ``%error``)."""
        while blocks:
            reply = proc.stdout.readline()  # type: ignore[union-attr]
            if not reply:
                raise CouldNotMeasure("the control-mode client went away")
            if reply.startswith((b"%end", b"%error")):
                blocks -= 1

    try:
        wait_end(1)  # the reply to the attach itself
        for line in lines:
            quoted = "'" + line.replace("'", "'\\''") + "'"
            t0 = Stopwatch()
            proc.stdin.write(
                f"send-keys -t {pane} -l -- {quoted} ; send-keys -t {pane} C-j\n".encode()
            )
            proc.stdin.flush()
            wait_end(2)  # one reply per command
            times.append(t0.ms("delivery times"))
    finally:
        proc.terminate()
        proc.wait(5)
    return statistics.median(times), statistics.fmean(times)


def paste_text(rng: random.Random) -> str:
    lines: list[str] = []
    size = 0
    while size < PASTE_BYTES:
        line = prompt_lines(1, rng)[0]
        lines.append(line)
        size += len(line.encode()) + 1
    return "\n".join(lines)


def bare_paste_ms(socket: str, pane: str, text: str) -> float:
    t0 = Stopwatch()
    subprocess.run(
        ["tmux", "-L", socket, "load-buffer", "-b", "bench", "-"], input=text.encode(), check=True
    )
    subprocess.run(
        ["tmux", "-L", socket, "paste-buffer", "-p", "-d", "-b", "bench", "-t", pane], check=True
    )
    return t0.ms("delivery time")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="delivery benchmark")
    p.add_argument("--quick", action="store_true", help="30-line prompts, 3 runs each")
    p.add_argument("--lines", type=int, help="lines of the long typed prompt")
    p.add_argument(
        "--profile",
        type=int,
        metavar="TOP",
        help="profile the pause-free typed deliveries (cProfile, loop thread); print TOP entries",
    )
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
