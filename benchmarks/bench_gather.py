"""Fan-in: a gather of 10 sources, from the last source's end of turn to the round, against
a one-source route in the same run.

Run: ``.venv/bin/python benchmarks/bench_gather.py [--quick] [--waves N]``.

One hub, eleven stand-in Claude Code sources started with their hooks (``Stop``) and two
targets. Ten sources are gathered into ``writer`` (``hub.gather``, typed with
prompt-wrap: ``{answers}`` holds the ten answers); the eleventh, ``solo``, has a plain
on-idle route to ``solo-target`` (the baseline). In each wave every source gets a prompt
with a token of its own at the same moment. Per wave: the gather's ``fired_at`` minus the
last of its ten sources' ends of turn (each stand-in's ``turn_duration`` record, stamped to
the millisecond), and the solo route's ``fired_at`` minus its source's end of turn; and
whether the gather's prompt, as the writer's transcript holds it, carries every token.

Targets: every gathered prompt whole at its target; the gather fires within 250 ms of the
one-source route (p95 against p95, same run): waiting for ten changes nothing but the wait.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    elapsed_ms,
    percentile,
    private_tmux,
    run_main,
    standin_available,
    temp_home,
    wait_for,
)

if TYPE_CHECKING:
    from madohub_nb.pipeline.tile import Tile

SOURCES = 10
IDLE_DELAY_MS = 1000
EXTRA_P95_TARGET_MS = 250.0


def ends_of_turns(tile: Tile) -> list[datetime]:
    """When each turn of a stand-in Claude Code ended: its transcript's ``turn_duration``."""
    path = tile.transcript_path()
    records = [] if path is None else Path(path).read_text(encoding="utf-8").splitlines()
    stamps = [json.loads(r) for r in records if '"turn_duration"' in r]
    return [datetime.fromisoformat(s["timestamp"].replace("Z", "+00:00")) for s in stamps]


def prompts_received(tile: Tile) -> list[str]:
    """The user prompts in a stand-in Claude Code's transcript, in order."""
    path = tile.transcript_path()
    out = []
    for line in [] if path is None else Path(path).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("type") == "user" and isinstance(rec.get("message", {}).get("content"), str):
            out.append(rec["message"]["content"])
    return out


def main(args: argparse.Namespace, report: Report) -> None:
    if not standin_available():
        raise CouldNotMeasure("the stand-in agents are not available in this checkout")
    import madohub_nb as mh
    from madohub_nb.demo import standin_command

    waves = args.waves or (3 if args.quick else 8)
    if waves > 20:
        raise CouldNotMeasure("at most 20 waves (max_rounds)")
    names = [f"r{i:02d}" for i in range(SOURCES)]
    with temp_home("gather") as root, private_tmux("gather") as sock:
        hub = mh.Hub(socket_name=sock, idle_delay_ms=IDLE_DELAY_MS, log_path=root / "r.sqlite3")
        try:
            command = standin_command("claude", persona="echo")
            env = {"MADOHUB_STANDIN_THINK_S": "0.3"}
            tiles = {
                n: hub.tile(n, agent="claude", command=command, env=env, cwd=root)
                for n in [*names, "solo", "writer", "solo-target"]
            }
            for t in tiles.values():
                wait_for(lambda t=t: t.state == "idle", 60, f"{t.name} idle")
            gather = hub.gather(names, "writer", max_rounds=20, cooldown_ms=1000)
            solo = hub.connect("solo", "solo-target", max_rounds=20, cooldown_ms=1000)
            for r in (gather, solo):
                wait_for(r.ready.is_set, 20, f"route {r.id} ready")
            for n in range(1, waves + 1):
                sent = [hub.send(s, f"wave {n} token {s}-W{n}") for s in [*names, "solo"]]
                for fut in sent:
                    fut.result(60)
                for r in (gather, solo):
                    wait_for(lambda r=r, n=n: r.rounds >= n and r.last_status, 60, f"{r.id} {n}")
                wait_for(
                    lambda n=n: len(prompts_received(tiles["writer"])) >= n, 30, "writer prompt"
                )
            df = hub.log.df
            ends = {n: ends_of_turns(tiles[n]) for n in [*names, "solo"]}
            received = prompts_received(tiles["writer"])
        finally:
            hub.close()

    def fired(route_id: str) -> list[datetime]:
        rows = df[(df["route_id"] == route_id) & (df["round"] > 0)].sort_values("round")
        return [t.to_pydatetime() for t in rows["fired_at"]]

    gathered, single = fired(gather.id), fired(solo.id)
    if len(gathered) < waves or len(single) < waves or any(len(e) < waves for e in ends.values()):
        raise CouldNotMeasure(f"rounds or turns missing after {waves} waves")
    # (wall time both: the hub's fired_at and the stand-ins' transcript stamps, one machine)
    lag_g = [
        elapsed_ms(max(ends[n][k] for n in names), gathered[k], f"gather wave {k + 1}")
        for k in range(waves)
    ]
    lag_s = [elapsed_ms(ends["solo"][k], single[k], f"solo wave {k + 1}") for k in range(waves)]
    whole = [
        all(f"{n}-W{k + 1}" in received[k] for n in names) for k in range(min(waves, len(received)))
    ]
    signals = sorted(set(df[df["round"] > 0]["turn_signal"].dropna()))
    report.info(
        f"{waves} waves, {SOURCES} gathered sources, idle_delay_ms {IDLE_DELAY_MS}, "
        f"turn signals {signals}"
    )
    report.target(
        f"gathered prompts whole at the writer ({SOURCES} answers each)",
        f"{sum(whole)}/{waves} carry every source's token",
        "all",
        "each checked in the writer's own transcript",
        sum(whole) == waves,
    )
    g95, s95 = percentile(lag_g, 0.95), percentile(lag_s, 0.95)
    report.target(
        f"gather of {SOURCES}: last source's end of turn → fired",
        f"p95 {g95:.0f} ms (p50 {percentile(lag_g, 0.5):.0f}, max {max(lag_g):.0f})",
        f"< one-source route + {EXTRA_P95_TARGET_MS:.0f} ms",
        f"one-source route, same run: p95 {s95:.0f} ms (p50 {percentile(lag_s, 0.5):.0f})",
        g95 < s95 + EXTRA_P95_TARGET_MS,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="fan-in benchmark: a gather of 10 sources")
    p.add_argument("--quick", action="store_true", help="3 waves instead of 8")
    p.add_argument("--waves", type=int, help="waves of prompts to every source")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
