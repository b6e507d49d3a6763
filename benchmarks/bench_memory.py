"""Memory over time: RSS growth of a hub process over 10,000 rounds, after warm-up.

Run: ``.venv/bin/python benchmarks/bench_memory.py [--quick] [--rounds N]``.

A hub on a private tmux server with a fixed set of route slots: 6 source
tiles (a shell loop printing a line every 100 ms) with 10 ``always`` routes
each, shadow dispatch, prompt-wrap, ``max_rounds`` 20, cooldown 1 s, into one
quiet target. Every route fires about once a second; a route that is spent
(exhausted after 20 rounds) is replaced by a new one in its slot, as a user
re-arming routes would, so the hub sees the same load all run long and makes
and ends ~500 routes per 10,000 rounds. RSS (this process: hub, engine
thread, SQLite) is read after ``gc.collect()`` once warm-up is over (the first
10% of rounds, at least 1,000) and at the end; the growth between the two is
the figure. Baseline: the RSS growth of appending the same number of rounds
to a bare ``RoundLog`` in this process (what the log alone costs).

Also printed: what the hub still holds at the end (routes, listeners, event
subscribers, per-pane delivery locks, watched streams), where a leak shows.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Report, Stopwatch, private_tmux, run_main, temp_home, wait_for  # noqa: E402

TARGET_MB = 10.0
SOURCES = 6
ROUTES_PER_SOURCE = 10
TICKER = "bash --norc --noprofile -c 'i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.1; done'"
QUIET = "bash --norc --noprofile -c 'exec sleep 100000'"


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def main(args: argparse.Namespace, report: Report) -> None:
    import madohub_nb as mh

    total = args.rounds or (2_000 if args.quick else 10_000)
    warmup = max(1_000, total // 10)
    with temp_home("memory") as root, private_tmux("memory") as socket:
        hub = mh.Hub(socket_name=socket, idle_delay_ms=1000, log_path=root / "rounds.sqlite3")
        try:
            hub.tile("sink", agent="shell", command=QUIET)
            for i in range(SOURCES):
                hub.tile(f"src{i}", agent="shell", command=TICKER)
            slots: list[mh.Route] = []

            def connect(i: int) -> mh.Route:
                return hub.connect(
                    f"src{i % SOURCES}",
                    "sink",
                    trigger="always",
                    dispatch="shadow",
                    template="r{round}: {output}",
                    max_rounds=20,
                    cooldown_ms=1000,
                )

            slots = [connect(i) for i in range(SOURCES * ROUTES_PER_SOURCE)]
            made = len(slots)
            start = Stopwatch()
            rss_warm: float | None = None
            rounds_warm = 0
            while hub.rounds_written < total:
                time.sleep(0.2)
                for i, route in enumerate(slots):
                    if route.state in ("exhausted", "stopped"):
                        route.stop()
                        slots[i] = connect(i)
                        made += 1
                if rss_warm is None and hub.rounds_written >= warmup:
                    rss_warm, rounds_warm = rss_mb(), hub.rounds_written
                    if args.trace:
                        tracemalloc.start(8)
                        snap_warm = tracemalloc.take_snapshot()
                if start.s("memory run so far") > 30 + total / 10:
                    break
            wait_for(lambda: hub.rounds_written >= total, 60, f"{total} rounds")
            rounds_end = hub.rounds_written
            rss_end = rss_mb()
            if args.trace:
                grown = tracemalloc.take_snapshot().compare_to(snap_warm, "traceback")
                for stat in grown[:12]:
                    where = " <- ".join(
                        f"{Path(f.filename).name}:{f.lineno}" for f in list(stat.traceback)[-4:]
                    )
                    report.info(
                        f"grew {stat.size_diff / 1024:+.0f} KB in {stat.count_diff:+d} blocks: {where}"
                    )
                tracemalloc.stop()
            elapsed = start.s("memory elapsed")
            assert rss_warm is not None
            growth = rss_end - rss_warm
            held = {
                "routes in hub.routes": len(hub.routes),
                "routes active or paused": sum(
                    1 for r in hub.routes if r.state in ("active", "paused")
                ),
                "listeners": sum(
                    len(s.listeners) for s in hub.runtime.tiles.watcher.streams.values()
                ),
                "watched streams": len(hub.runtime.tiles.watcher.streams),
                "event subscribers": len(hub.events._subscribers),
                "ended routes dropped from hub.routes": hub._rt.routes.routes_dropped,
                "delivery locks": len(hub.runtime.deliverer._locks),
                "rounds kept unlogged": len(hub.unlogged),
            }
        finally:
            hub.close()
        report.info(
            f"{rounds_end} rounds in {elapsed:.0f} s, {made} routes made over the run; "
            f"RSS {rss_warm:.1f} MB after {rounds_warm} rounds (warm-up), {rss_end:.1f} MB at the end"
        )
        report.info("held at the end: " + ", ".join(f"{k} {v}" for k, v in held.items()))
        base_growth = bare_log_growth(root / "bare.sqlite3", rounds_end - rounds_warm)
        report.target(
            f"RSS growth after warm-up ({rounds_end - rounds_warm} rounds over "
            f"{SOURCES * ROUTES_PER_SOURCE} route slots)",
            f"{growth:+.1f} MB ({1024 * growth / max(1, rounds_end - rounds_warm) * 1000:.0f} KB per 1,000 rounds)",
            f"< {TARGET_MB:.0f} MB",
            f"RoundLog.append of as many rounds, bare: {base_growth:+.1f} MB",
            growth < TARGET_MB,
        )


def bare_log_growth(path: Path, count: int) -> float:
    """RSS growth (MB) of appending ``count`` small rounds to a fresh RoundLog in this process."""
    from madohub_nb.io.log import RoundLog, RoundRecord

    with RoundLog(path) as log:
        before = rss_mb()
        now = datetime.now(timezone.utc)
        for n in range(count):
            log.append(
                RoundRecord(
                    route_id=f"src{n % SOURCES}->sink#{n % 60}",
                    source=f"src{n % SOURCES}",
                    target="sink",
                    round=n % 20 + 1,
                    trigger="always",
                    transform="prompt-wrap",
                    dispatch="shadow",
                    fired_at=now,
                    extracted=f"tick {n}\n",
                    extraction_method="terminal",
                    prompt=f"r{n % 20 + 1}: tick {n}",
                    status="shadow",
                )
            )
        return rss_mb() - before


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="memory benchmark")
    p.add_argument("--quick", action="store_true", help="2,000 rounds")
    p.add_argument("--rounds", type=int, help="rounds in all")
    p.add_argument(
        "--trace", action="store_true", help="show where Python memory grew (tracemalloc)"
    )
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
