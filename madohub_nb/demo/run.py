"""``make demo``: two built-in demo agents route a draft back and forth.

A writer (Claude-like stand-in) drafts, a reviewer (another stand-in) reviews;
two routes carry each answer to the other until the reviewer says ``LGTM`` or
the rounds run out. No API key, no network; everything lives in a temporary
folder and a private tmux socket, and the round log is printed at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from ..hub import Hub
from ..pipeline.tile import Tile
from . import standin_command

KICKOFF = "Write a tiny Python function that checks whether a string is a palindrome."
COLUMNS = ["round", "route_id", "status", "extraction_method", "latency_ms", "prompt"]


def _agent_env(kind: str, root: Path) -> dict[str, str]:
    """Keep the demo agents' files out of the user's own ~/.claude and ~/.codex."""
    env = {"CLAUDE_CONFIG_DIR": str(root / "claude"), "CODEX_HOME": str(root / "codex")}
    if os.environ.get("MADOHUB_DEMO_AGENT") == "claude" and kind == "claude":
        env = {}  # a real Claude Code uses the user's own configuration and key
    return env


def _writer_command(root: Path) -> tuple[str, dict[str, str]]:
    if os.environ.get("MADOHUB_DEMO_AGENT") == "claude":
        real = subprocess.run(
            ["sh", "-c", "command -v claude"], capture_output=True, text=True
        ).stdout.strip()
        if real and os.environ.get("ANTHROPIC_API_KEY"):
            return real, {}
        print(
            "MADOHUB_DEMO_AGENT=claude needs `claude` on PATH and ANTHROPIC_API_KEY; using the stand-in"
        )
    return standin_command("claude", persona="writer"), _agent_env("claude", root)


def run_demo(
    idle_delay_ms: int = 1500, max_rounds: int = 4, timeout_s: float = 180.0
) -> pd.DataFrame:
    """Run the demo and return its round log as a DataFrame."""
    root = Path(tempfile.mkdtemp(prefix="madohub-demo-"))
    work = root / "work"
    work.mkdir()
    socket = f"madohub-demo-{os.getpid()}"
    hub = Hub(socket_name=socket, idle_delay_ms=idle_delay_ms, log_path=root / "rounds.sqlite3")
    try:
        writer_cmd, writer_env = _writer_command(root)
        writer = hub.tile("writer", agent="claude", command=writer_cmd, cwd=work, env=writer_env)
        reviewer = hub.tile(
            "reviewer",
            agent="claude",
            command=standin_command("claude", persona="reviewer"),
            cwd=work,
            env=_agent_env("claude", root),
        )
        print(
            f"tiles: {writer.name} ({writer.pane_id}), {reviewer.name} ({reviewer.pane_id}) "
            f"on tmux socket {socket!r}; watch with: tmux -L {socket} attach"
        )
        to_review = hub.connect(
            "writer",
            "reviewer",
            template="Please review this draft (round {round} of {maxRounds}):\n{output}",
            max_rounds=max_rounds,
            cooldown_ms=1000,
        )
        to_revise = hub.connect(
            "reviewer",
            "writer",
            template="Reviewer feedback:\n{output}\nPlease revise the draft.",
            max_rounds=max_rounds,
            cooldown_ms=1000,
            stop_keyword="LGTM",
        )
        _wait_idle(writer, 30)
        print(f"kick-off → writer: {KICKOFF}")
        hub.send("writer", KICKOFF).result(60)
        # The conversation ends when the reviewer says LGTM (its route stops) or rounds run out.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = {to_review.state, to_revise.state}
            if "stopped" in states or states == {"exhausted"}:
                break
            time.sleep(0.2)
        for r in hub.routes:
            r.stop()
        for r in hub.routes:
            print(
                f"route {r.id}: {r.state}, {r.rounds}/{r.max_rounds} rounds, last {r.last_status}"
            )
        return hub.log.df
    finally:
        hub.close()
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def _wait_idle(tile: Tile, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and tile.state != "idle":
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m madohub_nb.demo", description=__doc__)
    parser.add_argument("--idle-delay-ms", type=int, default=1500)
    parser.add_argument("--max-rounds", type=int, default=4)
    args = parser.parse_args(argv)
    df = run_demo(args.idle_delay_ms, args.max_rounds)
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        shown = df[COLUMNS].copy()
        shown["prompt"] = shown["prompt"].fillna("").str.replace("\n", " ⏎ ").str.slice(0, 60)
        print(shown.to_string(index=False))
    delivered = int((df["status"] == "delivered").sum())
    print(f"{len(df)} rounds logged, {delivered} delivered")
    return 0 if delivered >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
