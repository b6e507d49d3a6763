"""Hooks: from the agent's end of turn to the trigger, with its own hook and without, per kind.

Run: ``.venv/bin/python benchmarks/bench_hooks.py [--quick] [--no-real | --real-only]
[--kinds claude pi …]``.

Stand-ins (one hub, the same run, three kinds of source, each twice: started with its
hooks and without): stand-in Claude Code (``--settings`` Stop hook), stand-in Codex
(``-c notify``) and stand-in Claude Code on a host over loopback ssh (the private sshd of
``madohub_nb.testing.sshd``; its hook's message comes back over the host's ssh master).
Without hooks, turns are told from the status file or rollout and silence
(``idle_delay_ms``). Each source has an on-idle route in ``shadow`` dispatch (nothing
typed) to a target. Per turn: the round's ``fired_at`` minus the turn's end as the agent
wrote it (Claude's ``turn_duration`` record, Codex's ``task_complete`` event, stamped to
the millisecond).

The real CLIs with hooks, when the real-agent tier has installed them
(``tests/real_agents/install.py``; else the bench says which are missing): Claude Code,
Codex, Gemini CLI, Copilot CLI, OpenCode, Qwen Code and Pi, one kind at a time, a pane
started by the hub with its hooks and one without, side by side, offline against the
local fakes (set up as the real-agent tests do: ``benchmarks/_real_agents.py``), a few
turns each. Their turn's end is the fake API's: when it had written the turn's last
answer in full (``FakeServer.responses``), one clock for every kind (Pi, OpenCode and
Copilot keep no end-of-turn stamp to read); the round is the one whose answer names the
turn's prompt (a round an agent's start screen set off is no turn's).

Targets, per kind: faster with hooks than without on the same run (whose floor is
``idle_delay_ms``); for the stand-ins, which run their hook the moment their turn ends,
also a p95 under 300 ms whatever ``idle_delay_ms`` is. A real CLI runs its hook after its
own end-of-turn work (rendering, writing its records): its p95 is reported, not judged.
Exit 2 only when nothing at all could be measured.
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
    elapsed_ms,
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
        elapsed_ms(end, fired.to_pydatetime(), f"{tile.name}: end of turn → fired_at")
        for fired, end in zip(rows["fired_at"], ends, strict=False)
    ]
    return lags, set(rows["turn_signal"].dropna())


CASES = (("claude", None), ("codex", None), ("claude", "box"))
"""(agent kind, host) of each measured source pair; host ``box`` is the loopback sshd."""


def main(args: argparse.Namespace, report: Report) -> None:
    measured = 0
    if args.real_only:
        report.info("--real-only: the stand-ins are not measured")
    elif not standin_available():
        report.info("the stand-in agents are not available in this checkout: not measured")
    else:
        try:
            _standins(args, report)
            measured += 1
        except CouldNotMeasure as exc:
            report.info(f"stand-ins not measured: {exc}")
    if not args.no_real:
        measured += _real_clis(args, report)
    if not measured:
        raise CouldNotMeasure("nothing could be measured (no stand-ins, no real CLI)")


def _report_pair(
    report: Report,
    label: str,
    hooked: tuple[list[float], set[str]],
    plain: tuple[list[float], set[str]],
    p95_target: bool = True,
) -> None:
    """``p95_target``: the hub's own part is all there is (stand-ins, which run their hook
    at once); a real CLI runs its hook after its own work at the end of a turn (rendering,
    writing its records), which no hub can shorten: its p95 is reported, and the target is
    that hooks beat the screen and status path of the same run."""
    (h, h_signals), (p, p_signals) = hooked, plain
    report.info(f"{label}: signals with hooks {sorted(h_signals)}, without {sorted(p_signals)}")
    h95, p95 = percentile(h, 0.95), percentile(p, 0.95)
    measured = f"p95 {h95:.0f} ms (p50 {percentile(h, 0.5):.0f}, max {max(h):.0f})"
    baseline = f"without hooks p95 {p95:.0f} ms (p50 {percentile(p, 0.5):.0f}, same run)"
    if p95_target:
        report.target(
            f"{label}: end of turn → trigger, with hooks",
            measured,
            f"< {HOOK_P95_TARGET_MS:.0f} ms",
            baseline,
            h95 < HOOK_P95_TARGET_MS and h_signals == {"hook"},
        )
    else:
        report.info(f"{label}: end of turn → trigger, with hooks: {measured}; {baseline}")
    report.target(
        f"{label}: hooks against without (p50)",
        f"{percentile(h, 0.5):.0f} ms vs {percentile(p, 0.5):.0f} ms",
        "faster with hooks",
        f"idle_delay_ms {IDLE_DELAY_MS}",
        percentile(h, 0.5) < percentile(p, 0.5) and "hook" not in p_signals,
    )


def _standins(args: argparse.Namespace, report: Report) -> None:
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
    report.info(f"stand-ins: {turns} turns per source, idle_delay_ms {IDLE_DELAY_MS}")
    for kind, host in cases:
        where = f"{kind}{'-host' if host else ''}"
        label = f"{kind} stand-in" + (" on a host (ssh)" if host else "")
        _report_pair(report, label, lags[f"{where}-hooked"], lags[f"{where}-plain"])


REAL_TURNS = 3
"""Turns per real CLI (each starts two panes of it: a few turns keep the run short)."""


def _real_clis(args: argparse.Namespace, report: Report) -> int:
    """The real CLIs with hooks that are installed, one kind at a time (its hooked and
    plain panes side by side, in one hub); how many kinds were measured."""
    import _real_agents as ra

    kinds = [k for k in ra.HOOKED_KINDS if not args.kinds or k in args.kinds]
    missing = [k for k in kinds if ra.installed(k) is None]
    if missing:
        report.info(
            f"real CLIs not installed (tests/real_agents/install.py puts them in the agent "
            f"cache): {', '.join(missing)}; not measured"
        )
    from madohub_nb.errors import MadohubValueError

    turns = args.turns or (2 if args.quick else REAL_TURNS)
    measured = 0
    fakes = ra.fakes()
    for fake in fakes.values():
        fake.start()
    try:
        with temp_home("hooks-real") as root, ra.private_runtime_dir():
            for kind in [k for k in kinds if k not in missing]:
                try:
                    agent, lags = _real_kind(kind, turns, root, fakes)
                except (CouldNotMeasure, LookupError, MadohubValueError) as exc:
                    report.info(f"real {kind}: not measured: {exc}")
                    continue
                report.info(f"real {kind} {agent.version}: {turns} turns each, end of turn: "
                            "the fake API's end of the turn's last answer")  # fmt: skip
                _report_pair(
                    report, f"real {kind} {agent.version}", lags["hooked"], lags["plain"],
                    p95_target=False,
                )  # fmt: skip
                measured += 1
    finally:
        for fake in fakes.values():
            fake.stop()
    return measured


def _real_kind(
    kind: str, turns: int, root: Path, fakes: dict[str, Any]
) -> tuple[Any, dict[str, tuple[list[float], set[str]]]]:
    """One real CLI kind, a pane with its hooks and one without, ``turns`` turns each."""
    import _real_agents as ra

    import madohub_nb as mh

    base = root / f"real-{kind}"
    cwds = {v: ra.project(base, v) for v in ("hooked", "plain")}
    # A HOME each: two of one kind in one HOME share its database, chats and settings.
    setups = {}
    for v, cwd in cwds.items():
        (base / f"home-{v}").mkdir(parents=True)
        setups[v] = ra.setup(kind, base / f"home-{v}", [cwd], fakes)
    agent = setups["hooked"]
    with private_tmux(f"real-{kind}") as sock:
        hub = mh.Hub(socket_name=sock, idle_delay_ms=IDLE_DELAY_MS, log_path=base / "r.sqlite3")
        try:
            tiles = {
                v: hub.tile(
                    f"{kind}-{v}",
                    agent=kind,
                    command=setups[v].command,
                    cwd=cwds[v],
                    env=setups[v].env,
                    hooks=v == "hooked",
                )  # fmt: skip
                for v in cwds
            }
            target = hub.tile("target", agent="shell", command="bash --norc --noprofile")
            for t in tiles.values():
                if agent.ask_text:
                    wait_for(lambda t=t: agent.ask_text in t.screen(), 90, f"{t.name}'s question")
                    hub.keys(t, *agent.first_keys).result(10)
                if agent.ready_text:
                    wait_for(lambda t=t: agent.ready_text in t.screen(), 90, f"{t.name} ready")
            for t in [*tiles.values(), target]:
                wait_for(lambda t=t: t.state == "idle", 90, f"{t.name} idle")
            routes = {
                v: hub.connect(t.name, "target", dispatch="shadow", max_rounds=20, cooldown_ms=1000)
                for v, t in tiles.items()
            }
            for r in routes.values():
                wait_for(r.ready.is_set, 20, f"route {r.id} ready")
            prompts = {v: [f"bench turn {n:02d} of {t.name}." for n in range(1, turns + 1)]
                       for v, t in tiles.items()}  # fmt: skip
            for n in range(1, turns + 1):
                for v, t in tiles.items():
                    hub.send(t.name, prompts[v][n - 1]).result(60)
                for v, r in routes.items():
                    wait_for(
                        lambda r=r, p=prompts[v][n - 1]: _fired_for(hub, r.id, p) is not None,
                        90,
                        f"{r.id}'s round for turn {n}",
                    )
                for t in tiles.values():
                    wait_for(lambda t=t: t.state == "idle", 60, f"{t.name} idle again")
            lags = {v: _real_lags(hub, routes[v].id, tiles[v], agent, prompts[v]) for v in tiles}
        finally:
            hub.close()
    for v, (found, _) in lags.items():
        if len(found) < turns:
            raise CouldNotMeasure(f"rounds missing: {len(found)} of {turns} for {kind} {v}")
    return agent, lags


def _fired_for(hub: Hub, route_id: str, prompt: str) -> tuple[datetime, str] | None:
    """When ``route_id``'s round for the turn of ``prompt`` fired (its answer, the fake's
    ``Done: <prompt>``, names it), and on which signal; None before. Rounds an agent's start
    screen set off are not a turn's."""
    df = hub.log.df
    rows = df[(df["route_id"] == route_id) & (df["round"] > 0)]
    for fired, extracted, signal in zip(
        rows["fired_at"], rows["extracted"], rows["turn_signal"], strict=True
    ):
        if isinstance(extracted, str) and prompt in extracted:
            return fired.to_pydatetime(), str(signal)
    return None


def _real_lags(
    hub: Hub, route_id: str, tile: Tile, agent: Any, prompts: list[str]
) -> tuple[list[float], set[str]]:
    """Per turn, its round's ``fired_at`` minus the turn's end as the fake API saw it: when
    it had written the turn's last answer in full (one clock for every kind)."""
    import _real_agents as ra

    lags, signals = [], set()
    for n, prompt in enumerate(prompts):
        found = _fired_for(hub, route_id, prompt)
        if found is None:
            continue
        at, signal = found
        signals.add(signal)
        later = prompts[n + 1] if n + 1 < len(prompts) else None
        end = ra.api_turn_end(agent.api, prompt, later, at)
        if end is not None:
            lags.append(elapsed_ms(end, at, f"{prompt!r}: the API's end of turn → fired_at"))
    return lags, signals


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="hooks benchmark: end of turn to trigger")
    p.add_argument("--quick", action="store_true", help="4 turns per source instead of 12")
    p.add_argument("--turns", type=int, help="turns per source")
    p.add_argument("--no-real", action="store_true", help="the stand-ins only")
    p.add_argument("--real-only", action="store_true", help="the real CLIs only")
    p.add_argument("--kinds", nargs="*", help="only these real CLI kinds (claude, codex, ...)")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
