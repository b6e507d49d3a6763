"""Hooks: from the agent's end of turn to the trigger, with its own hook and without, per kind.

Run: ``.venv/bin/python benchmarks/bench_hooks.py [--quick]``.

One hub, the same run, three kinds of source, each twice: started with its hooks and
without. Stand-in Claude Code (``--settings`` Stop hook), stand-in Codex (``-c notify``)
and stand-in Claude Code on a host over loopback ssh (the private sshd of
``madohub_nb.testing.sshd``; its hook's message comes back over the host's ssh master).
Without hooks, turns are told from the status file or rollout and silence
(``idle_delay_ms``). Each source has an on-idle route in ``shadow`` dispatch (nothing
typed) to a target. Per turn: the round's ``fired_at`` minus the turn's end as the agent
wrote it (Claude's ``turn_duration`` record, Codex's ``task_complete`` event, stamped to
the millisecond).

Targets, per kind: with hooks, p95 under 300 ms whatever ``idle_delay_ms`` is; and
faster than without on the same run (whose floor is ``idle_delay_ms``).
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
    """When each turn of ``tile`` ended, from its own transcript or rollout (loopback: the
    host's files are this machine's)."""
    path = tile.transcript_path()
    if path is None:
        return []
    ends = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rec: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        payload = rec.get("payload") if isinstance(rec.get("payload"), dict) else {}
        if rec.get("subtype") == "turn_duration" or payload.get("type") == "task_complete":
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


CASES = (("claude", None), ("codex", None), ("claude", "box"))
"""(agent kind, host) of each measured source pair; host ``box`` is the loopback sshd."""


def main(args: argparse.Namespace, report: Report) -> None:
    if not standin_available():
        raise CouldNotMeasure("the stand-in agents are not available in this checkout")
    import madohub_nb as mh
    from madohub_nb.demo import standin_command
    from madohub_nb.testing.sshd import SshServer

    turns = args.turns or (4 if args.quick else 12)
    with (
        temp_home("hooks") as root,
        private_tmux("hooks") as sock,
        private_tmux("hooks-host") as remote_sock,
    ):
        try:
            server: SshServer | None = SshServer(root / "sshd").start()
        except RuntimeError as exc:
            server = None
            report.info(f"no OpenSSH server here ({exc}): the host case is not measured")
        cases = [c for c in CASES if c[1] is None or server is not None]
        hub = mh.Hub(
            socket_name=sock, idle_delay_ms=IDLE_DELAY_MS, log_path=root / "r.sqlite3",
            ssh_command=server.ssh_command if server else "ssh", remote_socket_name=remote_sock,
        )  # fmt: skip
        try:
            env = {"MADOHUB_STANDIN_THINK_S": "0.3"}
            tiles: dict[str, Tile] = {}
            for kind, host in cases:
                for hooked in (True, False):
                    name = f"{kind}{'-host' if host else ''}-{'hooked' if hooked else 'plain'}"
                    tiles[name] = hub.tile(
                        name, agent=kind, command=standin_command(kind, persona="echo"),
                        env=env, hooks=hooked, host=host,
                    )  # fmt: skip
            target = hub.tile(
                "target", agent="claude", command=standin_command("claude", persona="echo"),
                env=env, hooks=False,
            )  # fmt: skip
            for t in [*tiles.values(), target]:
                wait_for(lambda t=t: t.state == "idle", 30, f"{t.name} idle")
            routes = {
                name: hub.connect(
                    name, "target", dispatch="shadow", max_rounds=20, cooldown_ms=1000
                )
                for name in tiles
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
            lags = {name: _lags(hub, routes[name].id, tiles[name]) for name in tiles}
        finally:
            hub.close()
            if server is not None:
                server.stop()
    for name, (found, _) in lags.items():
        if len(found) < turns:
            raise CouldNotMeasure(f"rounds missing: {len(found)} of {turns} for {name}")
    report.info(f"{turns} turns per source, idle_delay_ms {IDLE_DELAY_MS}")
    for kind, host in cases:
        where = f"{kind}{'-host' if host else ''}"
        hooked, hooked_signals = lags[f"{where}-hooked"]
        plain, plain_signals = lags[f"{where}-plain"]
        label = f"{kind} stand-in" + (" on a host (ssh)" if host else "")
        report.info(f"{label}: signals with hooks {sorted(hooked_signals)}, without "
                    f"{sorted(plain_signals)}")  # fmt: skip
        h95, p95 = percentile(hooked, 0.95), percentile(plain, 0.95)
        report.target(
            f"{label}: end of turn → trigger, with hooks",
            f"p95 {h95:.0f} ms (p50 {percentile(hooked, 0.5):.0f}, max {max(hooked):.0f})",
            f"< {HOOK_P95_TARGET_MS:.0f} ms",
            f"without hooks p95 {p95:.0f} ms (p50 {percentile(plain, 0.5):.0f}, same run)",
            h95 < HOOK_P95_TARGET_MS and hooked_signals == {"hook"},
        )
        report.target(
            f"{label}: hooks against without (p50)",
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
