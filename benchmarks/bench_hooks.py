"""Hooks: from the agent's end of turn to the trigger, with its own Stop hook and without.

Run: ``.venv/bin/python benchmarks/bench_hooks.py [--quick]``.

Two stand-in Claude Code sources in one hub, the same run: one started with hooks
(its ``--settings`` Stop hook reports to the hub's channel), one without (its
turns are told from its status file and silence, ``idle_delay_ms``). Each has an
on-idle route in ``shadow`` dispatch (nothing typed) to a target. Per turn: the
round's ``fired_at`` minus the turn's end as the agent wrote it (its transcript's
``turn_duration`` record, stamped to the millisecond).

Targets: with hooks, p95 under 300 ms whatever ``idle_delay_ms`` is; and faster
than without on the same turns (whose floor is ``idle_delay_ms``).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    percentile,
    private_tmux,
    run_main,
    standin_available,
    temp_home,
    wait_for,
)

if TYPE_CHECKING:
    from madohub_nb.hub import Hub
    from madohub_nb.pipeline.tile import Tile

IDLE_DELAY_MS = 1000
HOOK_P95_TARGET_MS = 300.0


def _turn_ends(tile: Tile) -> list[datetime]:
    """When each turn of ``tile`` ended, from its own transcript (``turn_duration``)."""
    path = tile.transcript_path()
    if path is None:
        return []
    ends = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rec: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        if rec.get("subtype") == "turn_duration":
            ends.append(datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")))
    return ends


def _lags(hub: Hub, route_id: str, tile: Tile) -> tuple[list[float], set[str]]:
    df = hub.log.df
    rows = df[(df["route_id"] == route_id) & (df["round"] > 0)].sort_values("round")
    ends = _turn_ends(tile)
    lags = [
        (fired.to_pydatetime() - end).total_seconds() * 1000
        for fired, end in zip(rows["fired_at"], ends, strict=False)
    ]
    return lags, set(rows["turn_signal"].dropna())


def main(args: argparse.Namespace, report: Report) -> None:
    if not standin_available():
        raise CouldNotMeasure("the stand-in agents are not available in this checkout")
    import madohub_nb as mh
    from madohub_nb.demo import standin_command

    turns = args.turns or (4 if args.quick else 12)
    with temp_home("hooks") as root, private_tmux("hooks") as sock:
        hub = mh.Hub(socket_name=sock, idle_delay_ms=IDLE_DELAY_MS, log_path=root / "r.sqlite3")
        try:
            env = {"MADOHUB_STANDIN_THINK_S": "0.3"}
            command = standin_command("claude", persona="echo")
            tiles = {
                "hooked": hub.tile("hooked", agent="claude", command=command, env=env, hooks=True),
                "plain": hub.tile("plain", agent="claude", command=command, env=env, hooks=False),
                "target": hub.tile("target", agent="claude", command=command, env=env, hooks=False),
            }
            for t in tiles.values():
                wait_for(lambda t=t: t.state == "idle", 20, f"{t.name} idle")
            routes = {
                name: hub.connect(
                    name, "target", dispatch="shadow", max_rounds=20, cooldown_ms=1000
                )
                for name in ("hooked", "plain")
            }
            for r in routes.values():
                wait_for(r.ready.is_set, 10, f"route {r.id} ready")
            for n in range(1, turns + 1):
                for name in routes:
                    hub.send(name, f"turn {n} of {name}").result(30)
                for r in routes.values():
                    wait_for(
                        lambda r=r, n=n: r.rounds >= n and r.last_status, 30, f"{r.id} round {n}"
                    )
            hooked, hooked_signals = _lags(hub, routes["hooked"].id, tiles["hooked"])
            plain, plain_signals = _lags(hub, routes["plain"].id, tiles["plain"])
        finally:
            hub.close()
    if len(hooked) < turns or len(plain) < turns:
        raise CouldNotMeasure(
            f"rounds missing: {len(hooked)} hooked, {len(plain)} plain of {turns}"
        )
    report.info(f"{turns} turns per source, idle_delay_ms {IDLE_DELAY_MS}")
    report.info(f"signals: with hooks {sorted(hooked_signals)}, without {sorted(plain_signals)}")
    h95, p95 = percentile(hooked, 0.95), percentile(plain, 0.95)
    report.target(
        "end of turn → trigger, with hooks",
        f"p95 {h95:.0f} ms (p50 {percentile(hooked, 0.5):.0f}, max {max(hooked):.0f})",
        f"< {HOOK_P95_TARGET_MS:.0f} ms",
        f"without hooks p95 {p95:.0f} ms (p50 {percentile(plain, 0.5):.0f}, same run)",
        h95 < HOOK_P95_TARGET_MS and hooked_signals == {"hook"},
    )
    report.target(
        "hooks against without (p50)",
        f"{percentile(hooked, 0.5):.0f} ms vs {percentile(plain, 0.5):.0f} ms",
        "faster with hooks",
        f"idle_delay_ms {IDLE_DELAY_MS}",
        percentile(hooked, 0.5) < percentile(plain, 0.5) and "hook" not in plain_signals,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="hooks benchmark: end of turn to trigger")
    p.add_argument("--quick", action="store_true", help="4 turns per source instead of 12")
    p.add_argument("--turns", type=int, help="turns per source")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
