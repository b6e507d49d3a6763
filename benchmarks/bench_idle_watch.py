"""Idle watching: what 24 idle tiles with on-idle routes cost, against a 500 ms capture-pane poller.

Run: ``.venv/bin/python benchmarks/bench_idle_watch.py [--quick] [--profile FILE]``.

24 panes are started on a private tmux server (stand-in agents when the
package has them, else plain shells) and left idle. Then, one after the other,
over the same window on the same panes:

- floor: nobody watches (only the tmux server runs), for reference;
- baseline: a process that runs ``tmux capture-pane -p -t %N`` for every pane
  every 500 ms and hashes the text (the way claude-squad watches);
- hub: a process with a ``madohub_nb.Hub`` that adopts the 24 panes and wires
  an on-idle route from each to the next (a ring; shadow dispatch).

Cost = CPU time of the watching process, its children (live and reaped) and
the tmux server, over wall time, in percent of one core.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CLOCK_TICK_S,
    SHELL_COMMAND,
    CouldNotMeasure,
    Report,
    Stopwatch,
    counting_tmux_calls,
    cpu_seconds,
    kill_tree,
    private_tmux,
    run_main,
    server_pid,
    standin_available,
    start_py_spy,
    summarize_collapsed,
    temp_home,
    tmux_server_cpu_seconds,
    wait_for,
)

TILES = 24
POLL_S = 0.5
CORE_TARGET_PCT = 1.0
RATIO_TARGET = 10.0
LIVENESS_IDLE_MS = 1000
"""The hub's idle delay (any value costs the same while nothing happens; short, for the liveness check)."""


def pane_commands(kind: str, root: Path, n: int) -> tuple[str, list[tuple[str, dict[str, str]]]]:
    """The agent kind the hub is told and (command, env) for each pane."""
    if kind == "auto":
        kind = "standin" if standin_available() else "shell"
    if kind == "standin":
        from madohub_nb.demo import standin_command

        env = {"MADOHUB_STANDIN_THINK_S": "0.2", "CLAUDE_CONFIG_DIR": str(root / "claude")}
        return "claude", [(standin_command("claude", persona="echo"), env)] * n
    return "shell", [(SHELL_COMMAND, {})] * n


def start_panes(socket: str, root: Path, kind: str, n: int) -> tuple[str, list[str]]:
    from madohub_nb.agents.profiles import get_profile, screen_state
    from madohub_nb.io.tmux import Tmux

    tmux = Tmux(socket)
    agent, commands = pane_commands(kind, root, n)
    work = root / "work"
    work.mkdir(exist_ok=True)
    panes = [
        tmux.new_pane("bench", cmd, cwd=str(work), env=env, window_name=f"t{i}")[0]
        for i, (cmd, env) in enumerate(commands)
    ]
    profile = get_profile(agent)

    def all_idle() -> bool:
        for pane in panes:
            info = tmux.pane_info(pane)
            if info is None or info.dead:
                raise CouldNotMeasure(f"pane {pane} exited: {tmux.capture(pane) if info else ''}")
            if (
                screen_state(profile, tmux.capture(pane), current_command=info.current_command)
                != "idle"
            ):
                return False
        return True

    wait_for(all_idle, 30, "all panes to show their idle prompt", 0.25)
    return agent, panes


def measure(pid: int | None, tmux_pid: int, window_s: float) -> tuple[float, float, float]:
    """CPU seconds of ``pid`` (with children) and of the tmux server over ``window_s``; and the wall time."""
    c0 = cpu_seconds(pid) if pid else 0.0
    s0 = tmux_server_cpu_seconds(tmux_pid)
    t0 = Stopwatch()
    time.sleep(window_s)
    c1 = cpu_seconds(pid) if pid else 0.0
    s1 = tmux_server_cpu_seconds(tmux_pid)
    return c1 - c0, s1 - s0, t0.s("idle_watch window")


def start_subject(
    role: str, socket: str, panes: list[str], extra: list[str]
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            role,
            "--socket",
            socket,
            "--panes",
            ",".join(panes),
            *extra,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        kill_tree(proc.pid)
        raise CouldNotMeasure(f"the {role} process did not start (said {line!r})")
    return proc


def tell(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(word + "\n")
    proc.stdin.flush()


def stop_subject(proc: subprocess.Popen[str]) -> str:
    """Close the subject's stdin (it shuts down cleanly) and return what it printed last."""
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out = ""
    return out.strip()


def pct(cpu_s: float, wall_s: float) -> float:
    return 100 * cpu_s / wall_s


def main(args: argparse.Namespace, report: Report) -> None:
    window = args.window or (6.0 if args.quick else 20.0)
    with temp_home("idle") as root, private_tmux("idle") as socket:
        agent, panes = start_panes(socket, root, args.agent, TILES)
        tmux_pid = server_pid(socket)
        if tmux_pid is None:
            raise CouldNotMeasure("the tmux server is not running")
        report.info(
            f"{TILES} idle {agent} tiles ({args.agent}), window {window:.0f} s per condition, "
            f"CPU accounting resolution {CLOCK_TICK_S * 1000:.0f} ms"
        )
        time.sleep(1.0)

        _, floor_s, floor_wall = measure(None, tmux_pid, window)

        poller = start_subject("poller", socket, panes, [])
        time.sleep(1.0)
        poll_c, poll_s, poll_wall = measure(poller.pid, tmux_pid, window)
        kill_tree(poller.pid)
        poller.wait()

        hub = start_subject(
            "hub", socket, panes, ["--agent-kind", agent, "--log", str(root / "rounds.sqlite3")]
        )
        time.sleep(1.0)
        spy = start_py_spy(hub.pid, Path(args.profile), window) if args.profile else None
        tell(hub, "start")
        hub_c, hub_s, hub_wall = measure(hub.pid, tmux_pid, window)
        tell(hub, "stop")
        # Prove the hub was really watching: a turn in one tile must fire its route.
        subprocess.run(
            ["tmux", "-L", socket, "send-keys", "-t", panes[0], "-l", "--", "ping"], check=True
        )
        subprocess.run(["tmux", "-L", socket, "send-keys", "-t", panes[0], "Enter"], check=True)
        said = stop_subject(hub)
        if " 0 rounds fired" in said or "rounds fired" not in said:
            raise CouldNotMeasure(
                f"the hub did not route a finished turn, so it was not watching: {said}"
            )
        if spy is not None:
            spy.wait(30)

    poll_total = poll_c + poll_s
    hub_total = hub_c + hub_s
    report.info(
        f"floor (tmux server alone): {floor_s:.2f} s CPU in {floor_wall:.1f} s = "
        f"{pct(floor_s, floor_wall):.3f}% of a core"
    )
    report.info(
        f"poller: process+children {poll_c:.2f} s, tmux server {poll_s:.2f} s in {poll_wall:.1f} s"
    )
    report.info(
        f"hub: process+children {hub_c:.2f} s, tmux server {hub_s:.2f} s in {hub_wall:.1f} s; {said}"
    )
    hub_pct = pct(hub_total, hub_wall)
    poll_pct = pct(poll_total, poll_wall)
    report.target(
        f"idle watch ({TILES} idle tiles, on-idle routes)",
        f"{hub_pct:.3f}% of one core",
        f"< {CORE_TARGET_PCT}%",
        f"500 ms capture-pane poller {poll_pct:.2f}%",
        hub_pct < CORE_TARGET_PCT,
    )
    # CPU time is counted in clock ticks: a cost below one tick is taken as one tick.
    ratio = (poll_total / poll_wall) / (max(hub_total, CLOCK_TICK_S) / hub_wall)
    shown = (
        f"{ratio:.0f}x cheaper"
        if hub_total > 0
        else f">= {ratio:.0f}x cheaper (hub under one clock tick)"
    )
    report.target(
        "idle watch vs poller",
        shown,
        f">= {RATIO_TARGET:.0f}x cheaper (hub < 1/10 of the poller)",
        f"poller {poll_total:.2f} s CPU vs hub {hub_total:.2f} s",
        ratio >= RATIO_TARGET,
    )
    if args.profile:
        for line in summarize_collapsed(Path(args.profile)):
            report.info(f"profile: {line}")


# --------------------------------------------------------------------------- subjects


def run_poller(socket: str, panes: list[str]) -> None:
    """The baseline: capture every pane every 500 ms and hash the text, until killed."""
    last: dict[str, str] = {}
    print("READY", flush=True)
    while True:
        started = Stopwatch()
        for pane in panes:
            out = subprocess.run(
                ["tmux", "-L", socket, "capture-pane", "-p", "-t", pane], capture_output=True
            ).stdout
            digest = hashlib.sha256(out).hexdigest()
            if last.get(pane) != digest:
                last[pane] = digest
        time.sleep(max(0.0, POLL_S - started.s("idle_watch poll")))


def run_hub(socket: str, panes: list[str], agent: str, log: str) -> None:
    """The subject: a hub adopting the panes, an on-idle route from each to the next."""
    import madohub_nb as mh

    hub = mh.Hub(socket_name=socket, idle_delay_ms=LIVENESS_IDLE_MS, log_path=log)
    try:
        tiles = [hub.tile(f"t{i}", pane=pane, agent=agent) for i, pane in enumerate(panes)]
        routes = [
            hub.connect(
                tile,
                tiles[(i + 1) % len(tiles)],
                trigger="on-idle",
                transform="raw",
                dispatch="shadow",
                cooldown_ms=1000,
                max_rounds=20,
            )
            for i, tile in enumerate(tiles)
        ]
        deadline = time.monotonic() + 30
        while not all(r.ready.is_set() for r in routes) and time.monotonic() < deadline:
            time.sleep(0.05)
        with counting_tmux_calls() as (commands, _):
            print("READY", flush=True)
            # The driver says "start" and "stop" around its window: count what happened in it.
            marks = {}
            for line in sys.stdin:
                output = sum(s.bytes_total for s in hub.runtime.tiles.watcher.streams.values())
                marks[line.strip()] = (output, sum(commands.values()), Counter(commands))
        with contextlib.suppress(Exception):
            hub.wait_rounds_sync(1, 20)
        (out0, n0, c0), (out1, n1, c1) = marks["start"], marks["stop"]
        spawned = ", ".join(f"{k} {v}" for k, v in (c1 - c0).most_common()) or "none"
        active = sum(r.state == "active" for r in routes)
        print(
            f"{len(hub.tiles)} tiles, {len(routes)} routes ({active} active), {hub.rounds_written} "
            f"rounds fired, {len(hub.runtime.tiles.watcher.client_pids())} control client(s); in the window: "
            f"{out1 - out0} bytes of pane output, {n1 - n0} tmux commands ({spawned})",
            flush=True,
        )
    finally:
        hub.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="idle watching benchmark")
    p.add_argument("--quick", action="store_true", help="6 s windows instead of 20 s")
    p.add_argument("--window", type=float, help="seconds per condition")
    p.add_argument(
        "--agent",
        choices=["auto", "standin", "shell"],
        default="auto",
        help="what runs in the panes (auto: stand-in agents if available, else shells)",
    )
    p.add_argument(
        "--profile", help="write a py-spy profile (raw collapsed stacks) of the hub here"
    )
    p.add_argument("--role", choices=["poller", "hub"], help=argparse.SUPPRESS)
    p.add_argument("--socket", help=argparse.SUPPRESS)
    p.add_argument("--panes", help=argparse.SUPPRESS)
    p.add_argument("--agent-kind", help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    return p


if __name__ == "__main__":
    ns = parser().parse_known_args()[0]
    if ns.role == "poller":
        run_poller(ns.socket, ns.panes.split(","))
    elif ns.role == "hub":
        run_hub(ns.socket, ns.panes.split(","), ns.agent_kind, ns.log)
    else:
        sys.exit(run_main(main, parser()))
