"""The inbox: from a person's ``approve()`` to the first byte typed at the target, against a
hand send to the same target in the same run.

Run: ``.venv/bin/python benchmarks/bench_inbox.py [--quick] [--turns N]``.

One hub; a stand-in Claude Code writer and a quiet Claude-like target that timestamps the
first byte of every message typed into it (``benchmarks/_common.py``). The route writer →
target has ``approve=True``: each turn's prompt waits in ``hub.inbox``. Per turn: the wall
time just before ``ask.approve()`` is called, against the target's record of the first byte
of that prompt. Baseline, interleaved turn by turn: ``hub.send`` to the same target, timed
the same way (call → first byte), so the difference is what approving adds to typing.

Target: approve → first typed byte p95 < the hand send's p95 + 100 ms.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    claude_like_command,
    elapsed_ms,
    percentile,
    private_tmux,
    read_json_lines,
    run_main,
    standin_available,
    temp_home,
    wait_for,
    write_claude_like,
)

IDLE_DELAY_MS = 500
EXTRA_P95_TARGET_MS = 100.0


def main(args: argparse.Namespace, report: Report) -> None:
    if not standin_available():
        raise CouldNotMeasure("the stand-in agents are not available in this checkout")
    import madohub_nb as mh
    from madohub_nb.demo import standin_command

    turns = args.turns or (4 if args.quick else 12)
    if turns > 20:
        raise CouldNotMeasure("at most 20 turns (max_rounds)")
    approve_ms: list[float] = []
    send_ms: list[float] = []
    with temp_home("inbox") as root, private_tmux("inbox") as sock:
        hub = mh.Hub(socket_name=sock, idle_delay_ms=IDLE_DELAY_MS, log_path=root / "r.sqlite3")
        try:
            inputs = root / "target-inputs.jsonl"
            program = write_claude_like(root)
            target = hub.tile(
                "target", agent="claude", command=claude_like_command(program, inputs)
            )
            writer = hub.tile(
                "writer", agent="claude", command=standin_command("claude", persona="echo"),
                env={"MADOHUB_STANDIN_THINK_S": "0.2"}, cwd=root,
            )  # fmt: skip
            for t in (target, writer):
                wait_for(lambda t=t: t.state == "idle", 30, f"{t.name} idle")
            route = hub.connect("writer", "target", template="{output}", approve=True,
                                max_rounds=20, cooldown_ms=1000)  # fmt: skip
            wait_for(route.ready.is_set, 10, "the route to listen")

            def typed(n: int, holding: str) -> float:
                """When the target read the first byte of its ``n``-th message (which must
                hold ``holding``: the approved prompt, or the hand send)."""
                wait_for(lambda: len(read_json_lines(inputs)) >= n, 30, f"message {n} typed")
                message = read_json_lines(inputs)[n - 1]
                if holding not in message["text"]:
                    raise CouldNotMeasure(f"message {n} is {message['text']!r}, not {holding!r}")
                return float(message["first"])

            for k in range(turns):
                hub.send("writer", f"turn {k} of the writer").result(30)
                wait_for(lambda: list(hub.inbox), 30, f"turn {k}'s prompt in the inbox")
                (ask,) = hub.inbox
                before = time.time()
                rec = ask.approve().result(30)
                if rec.status != "delivered":
                    raise CouldNotMeasure(f"approval {k} was {rec.status}: {rec.error}")
                approve_ms.append(  # (wall time both: here and in the recorder pane)
                    elapsed_ms(before, typed(2 * k + 1, f"turn {k} of the writer"), "approve")
                )
                time.sleep(1.1)  # past the route's cooldown
                before = time.time()
                hub.send("target", f"hand send {k}").result(30)
                send_ms.append(elapsed_ms(before, typed(2 * k + 2, f"hand send {k}"), "hand send"))
        finally:
            hub.close()
    a95, s95 = percentile(approve_ms, 0.95), percentile(send_ms, 0.95)
    report.target(
        f"inbox approve() → first byte typed at the target ({turns} approvals)",
        f"p95 {a95:.0f} ms (p50 {percentile(approve_ms, 0.5):.0f}, max {max(approve_ms):.0f})",
        f"< hand send + {EXTRA_P95_TARGET_MS:.0f} ms",
        f"hand send to the same target, same run: p95 {s95:.0f} ms "
        f"(p50 {percentile(send_ms, 0.5):.0f})",
        a95 < s95 + EXTRA_P95_TARGET_MS,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="inbox benchmark: approve to first typed byte")
    p.add_argument("--quick", action="store_true", help="4 approvals instead of 12")
    p.add_argument("--turns", type=int, help="approvals (and as many hand sends)")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
