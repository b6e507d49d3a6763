"""The hub's own overhead of one MCP ``ask``, beyond the target agent's own time.

Run: ``.venv/bin/python benchmarks/bench_mcp.py [--quick]``.

One hub, one stand-in Claude Code target (echo persona, its Stop hook on), and the
SDK's own MCP client holding one session with a caller's token. Per ask: the client's
wall time of ``call_tool("ask")`` minus the target's own turn (its transcript: the
prompt's record to the turn's ``turn_duration`` record, stamped to the millisecond).
What is left is the hub's part: the call over HTTP, the checks, typing and submitting
the prompt, hearing the end of the turn, reading the answer, the two log rows and the
reply.

Baseline in the same run: the plainest hand-off the hub offers without MCP,
``hub.send`` (the same typing) and then polling the target's transcript every 5 ms
for the end of the turn, minus the same agent time.

Target: what MCP adds, the ask's overhead minus the hand send's (p50 of each, same run),
< 100 ms. Most of both is delivery itself (Claude Code's profile pauses 500 ms before
its Enter: text submitted sooner is lost, REAL-AGENTS.md); the absolute figures are
printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    CouldNotMeasure,
    Report,
    Stopwatch,
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
    from madohub_nb.pipeline.tile import Tile

OVERHEAD_P50_TARGET_MS = 100.0
GAP_S = 1.1
"""Between two asks: past the pair's cooldown (mcp_cooldown_ms 1000), so none waits."""


def _turns(tile: Tile) -> list[tuple[datetime, datetime]]:
    """(prompt recorded, turn ended) of every turn in ``tile``'s transcript."""
    path = tile.transcript_path()
    if path is None:
        return []
    starts, ends = [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rec: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        stamp = rec.get("timestamp")
        if not isinstance(stamp, str):
            continue
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        content = rec.get("message", {}).get("content") if rec.get("type") == "user" else None
        if isinstance(content, str) and not rec.get("isMeta"):
            starts.append(when)
        elif rec.get("subtype") == "turn_duration":
            ends.append(when)
    return list(zip(starts, ends, strict=False))


def _agent_ms(turn: tuple[datetime, datetime]) -> float:
    return elapsed_ms(turn[0], turn[1], "the target's turn in its transcript")


def main(args: argparse.Namespace, report: Report) -> None:
    if not standin_available():
        raise CouldNotMeasure("the stand-in agents are not available in this checkout")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    import madohub_nb as mh
    from madohub_nb.demo import standin_command

    n = args.asks or (5 if args.quick else 15)
    with temp_home("mcp") as root, private_tmux("mcp") as sock:
        hub = mh.Hub(socket_name=sock, idle_delay_ms=1000, log_path=root / "r.sqlite3")
        try:
            hub.mcp_cooldown_ms, hub.mcp_max_rounds = 1000, 20
            env = {"MADOHUB_STANDIN_THINK_S": "0.3"}
            for name in ("lead", "target"):
                hub.tile(name, agent="claude", command=standin_command("claude"), env=env)
            target = hub.tiles["target"]
            for t in hub.tiles.values():
                wait_for(lambda t=t: t.state == "idle", 30, f"{t.name} idle")
            token, url = hub.mcp.grant("lead"), hub.mcp.url

            async def asks() -> list[float]:
                walls = []
                headers = {"Authorization": f"Bearer {token}"}
                async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                    async with Client(streamable_http_client(url, http_client=http)) as c:
                        await c.call_tool("list_agents", {})  # (the session's first call)
                        for i in range(n):
                            await asyncio.sleep(GAP_S)
                            started = Stopwatch()
                            got = await c.call_tool(
                                "ask", {"to": "target", "text": f"ask {i}", "timeout_s": 60}
                            )
                            walls.append(started.ms("mcp walls"))
                            text = "".join(getattr(b, "text", "") for b in got.content)
                            if got.is_error or text != f"Done: ask {i}":
                                raise CouldNotMeasure(f"ask {i} answered {text!r}")
                return walls

            ask_walls = asyncio.run(asks())
            send_walls = []
            for i in range(n):
                time.sleep(GAP_S)
                before = len(_turns(target))
                started = Stopwatch()
                hub.send("target", f"send {i}").result(30)
                wait_for(lambda b=before: len(_turns(target)) > b, 30, "the turn's end", 0.005)
                send_walls.append(started.ms("mcp send_walls"))
            turns = _turns(target)
        finally:
            hub.close()
    if len(turns) != 2 * n:
        raise CouldNotMeasure(f"{len(turns)} turns in the target's transcript, not {2 * n}")
    # A wall (perf_counter here) minus the turn (the transcript's two stamps): two durations,
    # each on one clock; the turn lies inside the wall, so an overhead below zero is refused.
    ask_over = durations_ms(
        [w - _agent_ms(t) for w, t in zip(ask_walls, turns[:n], strict=True)], "ask overhead"
    )
    send_over = durations_ms(
        [w - _agent_ms(t) for w, t in zip(send_walls, turns[n:], strict=True)], "send overhead"
    )
    agent = [_agent_ms(t) for t in turns]
    report.info(
        f"{n} asks and {n} hand sends; the target's own turn p50 {percentile(agent, 0.5):.0f} ms"
    )
    p50, base = percentile(ask_over, 0.5), percentile(send_over, 0.5)
    report.info(
        f"one ask: the hub's overhead beyond the agent's turn p50 {p50:.0f} ms (p95 "
        f"{percentile(ask_over, 0.95):.0f}, wall p50 {percentile(ask_walls, 0.5):.0f} ms)"
    )
    report.target(
        "one MCP ask: what MCP adds to the hand-off (overhead p50 beyond the hand send's)",
        gap_ms_text(p50 - base, "more", "less"),
        f"< {OVERHEAD_P50_TARGET_MS:.0f} ms",
        f"hub.send + polling the transcript every 5 ms: overhead p50 {base:.0f} ms "
        f"(p95 {percentile(send_over, 0.95):.0f})",
        p50 - base < OVERHEAD_P50_TARGET_MS,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="MCP benchmark: the hub's overhead of one ask")
    p.add_argument("--quick", action="store_true", help="5 asks instead of 15")
    p.add_argument("--asks", type=int, help="asks (and hand sends)")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
