"""Remote hosts: trigger latency and typed delivery over loopback ssh, side by side with local.

Run: ``.venv/bin/python benchmarks/bench_remote.py [--quick]``.

A private OpenSSH server on 127.0.0.1 (``madohub_nb.testing.sshd``, throwaway
keys) is host ``box``; its tmux server is another one than the hub's. In the
same run and the same hub, two routes carry the same turns of stand-in Claude
agents:

- local:  ``lsrc`` → ``ldst``, both panes of the hub's own tmux (the baseline);
- remote: ``rsrc`` → ``rdst``, both panes of ``box``'s tmux, reached over ssh.

Per turn, from the round log and the source's own transcript:

- trigger latency: how long after the on-idle condition held the round fired
  (on ``box`` the state and the transcript are read over ssh with bounded
  reads): ``fired_at`` minus the turn's end (its ``turn_duration`` record's
  stamp), plus ``idle_delay_ms`` unless the round's ``turn_signal`` is
  ``hook`` (the agent's own Stop hook says the turn ended: no quiet time is
  waited for). Both ends are stamps of this machine's one wall clock (``box``
  is loopback: the stand-in there stamps with the same kernel clock as the
  hub); a negative figure is refused (``_common.durations_ms``), not printed;
- typed delivery: the round's ``deliver_ms`` (waiting for the target to be idle,
  typing line by line with a foreground check before each line, submitting and
  seeing it submitted); on ``box`` every foreground check is one ssh read.

Targets: the remote trigger adds less than 300 ms p95 over local, and remote
typed delivery takes less than 1.5 s p95 (ssh reads are ~20 ms each over the
shared connection). Loopback ssh has no network latency: a real link adds its
round-trip time to every read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    durations_ms,
    elapsed_ms,
    gap_ms_text,
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
EXTRA_TRIGGER_P95_TARGET_MS = 300.0
REMOTE_DELIVERY_P95_TARGET_MS = 1500.0


def turn_ends(tile: Tile) -> list[float]:
    """Wall times of the source's finished turns (its transcript's turn_duration records),
    in the order it wrote them."""
    found = tile.last_response()
    if found is None or found.path is None:
        return []
    ends = []
    for line in Path(str(found.path)).read_text().splitlines():  # loopback: the same files
        rec = json.loads(line)
        if rec.get("type") == "system" and rec.get("subtype") == "turn_duration":
            ends.append(datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")).timestamp())
    return ends


def condition_held_s(turn_end_s: float, turn_signal: str) -> float:
    """When a route's on-idle condition held for a turn that ended at ``turn_end_s``: at its
    end when the agent's own hook said so, else once ``idle_delay_ms`` of quiet had passed."""
    return turn_end_s + (0 if turn_signal == "hook" else IDLE_DELAY_MS / 1000)


def start(hub: Hub, name: str, work: Path, host: str | None) -> Tile:
    from madohub_nb.demo import standin_command

    kwargs: dict[str, Any] = {"host": host} if host else {}
    tile = hub.tile(
        name,
        agent="claude",
        command=standin_command("claude", persona="echo"),
        cwd=work,
        env={"MADOHUB_STANDIN_THINK_S": "0.2"},
        **kwargs,
    )
    wait_for(lambda: tile.state == "idle", 30, f"{name} to be idle", 0.1)
    return tile


def main(args: argparse.Namespace, report: Report) -> None:
    import madohub_nb as mh
    from madohub_nb.testing.sshd import SshServer

    if not standin_available():
        raise CouldNotMeasure("stand-in agents (madohub_nb.demo) are not importable")
    turns = args.turns or (6 if args.quick else 16)
    if turns > 20:
        raise CouldNotMeasure("at most 20 turns (max_rounds)")
    with (
        temp_home("remote") as root,
        private_tmux("local") as socket,
        private_tmux("remote") as remote_socket,
    ):
        try:
            server = SshServer(root / "sshd").start()
        except RuntimeError as exc:
            raise CouldNotMeasure(f"no OpenSSH server to measure with: {exc}") from exc
        work = root / "work"
        work.mkdir()
        hub = mh.Hub(
            socket_name=socket,
            idle_delay_ms=IDLE_DELAY_MS,
            log_path=root / "rounds.sqlite3",
            ssh_command=server.ssh_command,
            remote_socket_name=remote_socket,
        )
        try:
            tiles = {
                "local": (start(hub, "lsrc", work, None), start(hub, "ldst", work, None)),
                "remote": (start(hub, "rsrc", work, "box"), start(hub, "rdst", work, "box")),
            }
            routes = {
                where: hub.connect(
                    src.name,
                    dst.name,
                    template="turn {round}: {output}",
                    cooldown_ms=1000,
                    max_rounds=20,
                )  # fmt: skip
                for where, (src, dst) in tiles.items()
            }
            wait_for(lambda: all(r.ready.is_set() for r in routes.values()), 30, "routes")
            report.info(
                f"{turns} turns per route, idle_delay_ms={IDLE_DELAY_MS}, "
                f"host box = sshd on 127.0.0.1:{server.port}"
            )
            for k in range(turns):
                sends = [hub.send(src.name, f"answer turn {k}") for src, _ in tiles.values()]
                for fut in sends:
                    fut.result(60)
                wait_for(
                    lambda k=k: all(r.rounds > k and r.last_status for r in routes.values()),
                    60,
                    f"round {k + 1} on both routes",
                    0.05,
                )
                time.sleep(0.3)
            hub.wait_rounds_sync(turns * 4, 60)  # two hand sends and two routed rounds a turn
            df = hub.log.df
            figures: dict[str, tuple[list[float], list[float]]] = {}
            signal_counts: dict[str, Counter[str]] = {}
            for where, route in routes.items():
                rows = df[df["route_id"] == route.id].sort_values("fired_at")
                bad = rows[rows["status"] != "delivered"]
                if len(bad):
                    raise CouldNotMeasure(
                        f"{where}: {bad.iloc[0]['status']} {bad.iloc[0]['error']}"
                    )
                ends = turn_ends(tiles[where][0])
                fired = [t.timestamp() for t in rows["fired_at"]]
                if len(ends) != len(fired):
                    raise CouldNotMeasure(f"{where}: {len(ends)} turn ends for {len(fired)} rounds")
                signals = [str(s) for s in rows["turn_signal"]]
                signal_counts[where] = Counter(signals)
                # The k-th round answers the source's k-th turn (only hand sends reach it).
                lag = [
                    elapsed_ms(condition_held_s(end, signal), f, f"{where} trigger latency")
                    for end, f, signal in zip(ends, fired, signals, strict=True)
                ]
                figures[where] = (
                    lag,
                    durations_ms([float(x) for x in rows["deliver_ms"]], f"{where} delivery"),
                )
            reads = hub.hosts["box"].ssh.reads
        finally:
            hub.close()
            server.stop()
            subprocess.run(["tmux", "-L", remote_socket, "kill-server"], capture_output=True)

    (l_lag, l_del), (r_lag, r_del) = figures["local"], figures["remote"]
    for where, (lag, dl) in figures.items():
        report.info(
            f"{where}: condition→fire p50 {percentile(lag, 0.5):.0f} ms p95 "
            f"{percentile(lag, 0.95):.0f} ms; typed delivery p50 {percentile(dl, 0.5):.0f} ms "
            f"p95 {percentile(dl, 0.95):.0f} ms"
        )
    report.info(f"bounded reads over ssh in the run: {reads}")
    report.info(
        "turn signals (hook: the condition held at the turn's end; else idle_delay_ms later): "
        + "; ".join(f"{w} {dict(c)}" for w, c in signal_counts.items())
    )
    extra = percentile(r_lag, 0.95) - percentile(l_lag, 0.95)
    report.target(
        f"trigger latency over ssh ({len(r_lag)} turns)",
        f"p95 {percentile(r_lag, 0.95):.0f} ms ({gap_ms_text(extra)} local)",
        f"< local p95 + {EXTRA_TRIGGER_P95_TARGET_MS:.0f} ms",
        f"local p95 {percentile(l_lag, 0.95):.0f} ms",
        extra < EXTRA_TRIGGER_P95_TARGET_MS,
    )
    report.target(
        f"typed delivery over ssh ({len(r_del)} prompts)",
        f"p95 {percentile(r_del, 0.95):.0f} ms (p50 {percentile(r_del, 0.5):.0f})",
        f"< {REMOTE_DELIVERY_P95_TARGET_MS:.0f} ms",
        f"local p95 {percentile(l_del, 0.95):.0f} ms (p50 {percentile(l_del, 0.5):.0f})",
        percentile(r_del, 0.95) < REMOTE_DELIVERY_P95_TARGET_MS,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="remote hosts benchmark (loopback ssh vs local)")
    p.add_argument("--quick", action="store_true", help="6 turns per route instead of 16")
    p.add_argument("--turns", type=int, help="turns per route (at most 20)")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
