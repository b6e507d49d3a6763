"""A chatty pane: what a tile printing at full speed (``yes``) costs the hub.

Run: ``.venv/bin/python benchmarks/bench_chatty_pane.py [--quick] [--window S]``.

One hub in this process, on a private tmux server, with three shell tiles:
``chatty`` (runs ``yes`` during each window), ``other`` (takes a turn now and
then) and ``sink`` (a shadow target). For each window of ``--window`` seconds
(10 by default) the CPU time of the hub's process and of its control-mode
client (``tmux -C``, its child) is read from ``psutil`` ``cpu_times`` before
and after, over wall time, in percent of one core:

- idle: nothing prints (the floor);
- unrouted: ``yes`` runs in ``chatty``, no route reads it;
- routed on-idle: the same with an on-idle route ``chatty → sink``; meanwhile
  ``other`` finishes a turn every ~1.5 s and its own on-idle route's trigger
  latency is measured as in bench_trigger_latency.py (round's ``fired_at`` minus
  the turn's last output byte + ``idle_delay_ms``; the bytes are timestamped by
  a control client of this script's, which pauses ``chatty`` for itself);
- on-keyword: ``chatty`` runs ``yes``, prints ``KEY-42`` after a third of the
  window, then runs ``yes`` again; an on-keyword route on it must fire. Then the same
  once more while a second control client (this script's) holds ``chatty`` paused, for
  information only: tmux 3.3a then reads the pane ahead of the hub's client, ``yes`` loses
  its backpressure, and the bytes a route reads queue in tmux (seen as the keyword firing
  seconds late, or not at all, with the hub nearly idle). The first runs of this benchmark
  measured that queue without knowing it: the script's observer paused ``chatty`` then.

Baseline, in the same run: a second hub with per-pane output control switched
off (``hub.runtime.tiles.watcher.output_control = False``: every pane's output is streamed
and parsed, and an on-idle route decodes its source's: the old behaviour),
unrouted and routed on-idle.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    SHELL_COMMAND,
    CouldNotMeasure,
    Report,
    Stopwatch,
    elapsed_ms,
    percentile,
    private_tmux,
    run_main,
    temp_home,
    wait_for,
)

if TYPE_CHECKING:
    from madohub_nb.hub import Hub

IDLE_DELAY_MS = 1000
CPU_TARGET_PCT = 5.0
FIRE_P95_TARGET_MS = 100.0
TURN_EVERY_S = 1.6
KEYWORD_WAIT_S = 60.0
PAUSED_ELSEWHERE_WAIT_S = 20.0
KEYWORD_FIRE_TARGET_S = 1.0
KEYWORD_CPU_TARGET_PCT = 25.0


BENCH_THREADS: set[int] = set()
"""Native ids of this script's own threads (the main one, the observer's): not the hub's."""


def hub_cpu_seconds(hub: Hub) -> tuple[float, float]:
    """CPU seconds (user + system) of the hub in this process, and of its control clients.

    The hub's share is the process's time less this script's own threads (which
    start ``tmux send-keys`` processes and read the round log to measure latency);
    it includes the engine thread, the worker threads and threads that ended.
    """
    me = psutil.Process()
    t = me.cpu_times()
    mine = sum(th.user_time + th.system_time for th in me.threads() if th.id in BENCH_THREADS)
    clients = 0.0
    for pid in hub.runtime.tiles.watcher.client_pids():
        try:
            c = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        clients += c.user + c.system
    return t.user + t.system - mine, clients


@dataclass
class Window:
    name: str
    hub_pct: float = 0.0
    client_pct: float = 0.0
    events: int = 0
    fire_ms: list[float] = field(default_factory=list)

    @property
    def total_pct(self) -> float:
        return self.hub_pct + self.client_pct


class Observer:
    """A control client of this script's: the wall time of each ``%output`` of ``watched`` panes.

    It pauses every other pane for itself (``refresh-client -A %N:pause``), so a
    flood it does not need costs this process nothing.
    """

    def __init__(self, socket: str, session: str, watched: str, paused: list[str]) -> None:
        self.proc = subprocess.Popen(
            ["tmux", "-L", socket, "-C", "attach-session", "-t", f"={session}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdin is not None
        for pane in paused:
            self.proc.stdin.write(f"refresh-client -A '{pane}:pause'\n".encode())
        self.proc.stdin.flush()
        self.watched = watched.encode()
        self.times: list[float] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        BENCH_THREADS.add(threading.get_native_id())
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(b"%output ") and line.split(b" ", 2)[1] == self.watched:
                now = time.time()
                with self.lock:
                    self.times.append(now)

    def last_output(self, before: float) -> float | None:
        with self.lock:
            return next((t for t in reversed(self.times) if t <= before), None)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


def type_line(socket: str, pane: str, line: str) -> None:
    tmux = ["tmux", "-L", socket, "send-keys", "-t", pane]
    subprocess.run([*tmux, "-l", "--", line], check=True)
    subprocess.run([*tmux, "Enter"], check=True)


def stop_program(socket: str, pane: str) -> None:
    subprocess.run(["tmux", "-L", socket, "send-keys", "-t", pane, "C-c"], check=True)


def cpu_window(hub: Hub, name: str, seconds: float, during: object = None) -> Window:
    """CPU of the hub over ``seconds`` (``during()`` runs on this thread meanwhile, if given)."""
    events0 = hub.runtime.tiles.watcher.output_events
    h0, c0 = hub_cpu_seconds(hub)
    t0 = Stopwatch()
    if callable(during):
        during(time.monotonic() + seconds)  # (a deadline on the clock `during` reads)
    else:
        time.sleep(seconds)
    wall = t0.s("chatty_pane wall")
    h1, c1 = hub_cpu_seconds(hub)
    return Window(
        name,
        hub_pct=max(0.0, h1 - h0) / wall * 100,  # (thread times tick apart: never below 0)
        client_pct=(c1 - c0) / wall * 100,
        events=hub.runtime.tiles.watcher.output_events - events0,
    )


def take_turns(
    hub: Hub, socket: str, pane: str, observer: Observer, window: Window, until: float
) -> None:
    """``other`` finishes a turn every TURN_EVERY_S; each turn's condition → fire latency."""
    k = 0
    while time.monotonic() + TURN_EVERY_S < until:
        done = hub.rounds_written + 1
        type_line(socket, pane, f"echo turn-{k}-other")
        k += 1
        hub.wait_rounds_sync(done, 60)  # (with every output streamed, rounds wait long)
        rec = hub.log.df.sort_values("fired_at").iloc[-1]
        if rec["source"] != "other":
            raise CouldNotMeasure(f"a round from {rec['source']!r} came instead of 'other'")
        fired = rec["fired_at"].timestamp()
        last = observer.last_output(fired)
        if last is None:
            raise CouldNotMeasure("the observer saw no output from 'other'")
        window.fire_ms.append(  # (wall time both: the hub's fired_at, the observer's %output)
            elapsed_ms(last + IDLE_DELAY_MS / 1000, fired, "other: condition → fired_at")
        )
        time.sleep(0.3)


def keyword_window(
    hub: Hub, socket: str, chatty: str, root: Path, seconds: float, name: str, wait_s: float
) -> Window:
    """An on-keyword route on ``chatty`` while it floods: its CPU window, and how late it fired."""
    keyword = hub.connect(
        "chatty", "sink", trigger="on-keyword", pattern=r"KEY-42", dispatch="shadow",
        cooldown_ms=1000, max_rounds=1,
    )  # fmt: skip
    wait_for(keyword.ready.is_set, 10, "the keyword route to listen")
    third = max(1, round(seconds / 3))
    stamp = root / "keyword-printed"
    stamp.unlink(missing_ok=True)
    type_line(socket, chatty, f"timeout {third} yes; date +%s.%N > {stamp}; echo KEY-$((6*7)); yes")
    kw = cpu_window(hub, name, seconds)
    # Bytes a route reads may queue up in tmux behind the flood: it may fire late.
    with contextlib.suppress(CouldNotMeasure):
        wait_for(lambda: keyword.rounds >= 1, wait_s, "the keyword round", 0.1)
    stop_program(socket, chatty)
    if keyword.rounds >= 1:
        rec = hub.log.df.sort_values("fired_at").iloc[-1]
        kw.fire_ms = [  # (wall time both: the hub's fired_at, date +%s.%N in the pane)
            elapsed_ms(
                float(stamp.read_text()), rec["fired_at"].timestamp(), "keyword printed → fired_at"
            )
        ]
    keyword.stop()
    return kw


def run_hub(root: Path, tag: str, seconds: float, output_control: bool) -> list[Window]:
    import madohub_nb as mh

    windows: list[Window] = []
    with private_tmux(f"chatty-{tag}") as socket:
        hub = mh.Hub(
            socket_name=socket, idle_delay_ms=IDLE_DELAY_MS, log_path=root / f"{tag}.sqlite3"
        )
        hub.runtime.tiles.watcher.output_control = output_control
        observer: Observer | None = None
        try:
            tiles = {
                n: hub.tile(n, agent="shell", command=SHELL_COMMAND, cwd=root)
                for n in ("chatty", "other", "sink")
            }
            for t in tiles.values():
                wait_for(lambda t=t: t.state == "idle", 30, f"tile {t.name} idle", 0.1)  # type: ignore[misc]
            chatty, other = tiles["chatty"].pane_id, tiles["other"].pane_id
            other_route = hub.connect(
                "other", "sink", dispatch="shadow", cooldown_ms=1000, max_rounds=20
            )
            wait_for(other_route.ready.is_set, 10, "the other route to listen")
            time.sleep(1.0)
            if output_control:
                windows.append(cpu_window(hub, "idle hub", seconds))

            type_line(socket, chatty, "yes")
            time.sleep(1.0)
            windows.append(cpu_window(hub, "unrouted", seconds))

            route = hub.connect("chatty", "sink", dispatch="shadow", cooldown_ms=1000)
            wait_for(route.ready.is_set, 10, "the chatty route to listen")
            time.sleep(1.0)
            observer = Observer(socket, hub.session_name, other, [chatty, tiles["sink"].pane_id])
            routed = Window("routed on-idle")

            def turns(until: float) -> None:
                assert observer is not None
                take_turns(hub, socket, other, observer, routed, until)
                time.sleep(max(0.0, until - time.monotonic()))

            measured = cpu_window(hub, "routed on-idle", seconds, turns)
            measured.fire_ms = routed.fire_ms
            windows.append(measured)
            route.stop()
            stop_program(socket, chatty)
            # The observer's pause of ``chatty`` is its own; but while a second control client
            # holds a flooding pane paused, tmux 3.3a reads the pane ahead of the hub's client
            # (``yes`` loses its backpressure), bytes queue in tmux, and a route reading them
            # lags by that queue: not the hub's doing, so it is measured apart, after.
            observer.close()
            observer = None
            if not output_control:
                return windows

            wait_for(lambda: tiles["chatty"].state == "idle", 10, "yes to stop", 0.1)
            windows.append(
                keyword_window(hub, socket, chatty, root, seconds, "on-keyword", KEYWORD_WAIT_S)
            )
            wait_for(lambda: tiles["chatty"].state == "idle", 10, "yes to stop", 0.1)
            observer = Observer(socket, hub.session_name, other, [chatty])
            windows.append(
                keyword_window(
                    hub,
                    socket,
                    chatty,
                    root,
                    seconds,
                    "on-keyword, paused elsewhere",
                    PAUSED_ELSEWHERE_WAIT_S,
                )  # fmt: skip
            )
        finally:
            if observer is not None:
                observer.close()
            hub.close()
    return windows


def main(args: argparse.Namespace, report: Report) -> None:
    seconds = args.window or (4.0 if args.quick else 10.0)
    BENCH_THREADS.add(threading.get_native_id())
    with temp_home("chatty") as root:
        new = run_hub(root, "new", seconds, output_control=True)
        old = run_hub(root, "old", seconds, output_control=False)
    by = {w.name: w for w in new}
    base = {w.name: w for w in old}
    for w in [*new, *old]:
        which = "output control" if w in new else "baseline (all output streamed)"
        report.info(
            f"{which}, {w.name}: hub {w.hub_pct:.1f}% + its tmux -C client {w.client_pct:.1f}% "
            f"of a core, {w.events} %output events read"
        )
    report.info(f"idle hub (floor): {by['idle hub'].total_pct:.1f}% of a core")
    for name in ("unrouted", "routed on-idle"):
        w, b = by[name], base[name]
        report.target(
            f"`yes` for {seconds:.0f} s, {name}: hub CPU",
            f"{w.total_pct:.1f}% of a core ({w.events} %output events read)",
            f"< {CPU_TARGET_PCT:.0f}%",
            f"{b.total_pct:.1f}% with every pane's output streamed ({b.events} events)",
            w.total_pct < CPU_TARGET_PCT,
        )
    lat, lat_base = by["routed on-idle"].fire_ms, base["routed on-idle"].fire_ms
    if not lat:
        raise CouldNotMeasure("no turn of 'other' was measured")
    p95 = percentile(lat, 0.95)
    report.target(
        f"other route's trigger latency meanwhile ({len(lat)} turns, condition → fired_at)",
        f"p95 {p95:.1f} ms (p50 {percentile(lat, 0.5):.1f}, max {max(lat):.1f})",
        f"p95 < {FIRE_P95_TARGET_MS:.0f} ms",
        f"p95 {percentile(lat_base, 0.95):.1f} ms with every pane's output streamed"
        if lat_base
        else "not measured",
        p95 < FIRE_P95_TARGET_MS,
    )
    elsewhere = by["on-keyword, paused elsewhere"]
    report.info(
        "on-keyword route while a second control client holds the pane paused (tmux then reads "
        "the pane ahead of the hub: a queue in tmux): "
        + (f"fired {elsewhere.fire_ms[0] / 1000:.2f} s after the keyword was printed"
           if elsewhere.fire_ms else f"did not fire within {PAUSED_ELSEWHERE_WAIT_S:.0f} s")
    )  # fmt: skip
    kw, unrouted = by["on-keyword"], by["unrouted"]
    fired_s = kw.fire_ms[0] / 1000 if kw.fire_ms else None
    report.target(
        "on-keyword route on the chatty pane: printed → fired, hub CPU meanwhile",
        (f"fired {fired_s:.2f} s after the keyword was printed" if fired_s is not None
         else f"did NOT fire within {KEYWORD_WAIT_S:.0f} s")
        + f", hub {kw.total_pct:.1f}% of a core",
        f"< {KEYWORD_FIRE_TARGET_S:.0f} s, < {KEYWORD_CPU_TARGET_PCT:.0f}%",
        f"{unrouted.total_pct:.1f}% with the same flood unrouted",
        fired_s is not None
        and fired_s < KEYWORD_FIRE_TARGET_S
        and kw.total_pct < KEYWORD_CPU_TARGET_PCT,
    )  # fmt: skip


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="chatty pane benchmark")
    p.add_argument("--quick", action="store_true", help="4 s windows instead of 10 s")
    p.add_argument("--window", type=float, help="seconds per measured window")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
