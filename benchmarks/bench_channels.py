"""Native channels (issue 39): a prompt handed to the hub → the agent's turn started, and the
hub's CPU per delivery, through Qwen Code's channel against typed delivery to the same agent,
in the same run; then 50 deliveries each way beside three busy loops: lost or doubled prompts.

Run: ``.venv/bin/python benchmarks/bench_channels.py [--quick] [--real [--typed-cap-s S]]``.

``--real``: the real Qwen Code 0.24.4 (from the real-agent tier's cache) instead of the
stand-in, each tile against a fake OpenAI API of its own on 127.0.0.1; "its turn started" is
then its API request with the prompt arriving there (its side requests, prompt suggestions
and memory, left out). Its one typed 100 KB delivery runs last and is waited for up to
``--typed-cap-s`` (its TUI redraws the whole draft at every typed line); no paste there.

The agent is the Qwen Code stand-in (``tests/standin_qwen.py``, run as a program called
``qwen``: its screen and its ``--input-file``/``--json-file`` channel as the real Qwen Code
0.24.4 has them). Two tiles of it in one hub: ``channel=True`` (the hub adds the channel's
files and writes each prompt as a ``submit`` line) and ``channel=False`` (the hub types the
prompt line by line, as for every agent without a channel). Both stand-ins append each
turn's start to one file (``$STANDIN_QWEN_TURNS``: its wall time and prompt), so "the
agent's turn started" is one definition both ways: **the agent began its turn with the
prompt** (for the channel that is when it read the ``submit`` line, for typed when it read
the Enter after the last line), on the one wall clock of this machine. The hub's own
acknowledgement (its ``ChannelTurnStarted``, read from the agent's JSON file) comes after it,
and is printed too.

- latency: ``hub.send`` called → the agent's turn started, for a 10-line prompt and a 100 KB
  one (1,000 lines of 100 bytes), median of several deliveries each way;
- CPU: ``time.process_time()`` of the hub's process (every thread of it: the engine loop,
  its workers, the watchers) around ``hub.send(...).result()``, per delivery;
- load: three processes spinning at full speed beside (ended by pid), 50 short prompts
  fired at once each way, each tagged uniquely; what the agent received, by tag: lost
  (never received), doubled (received twice), merged (two tags in one turn).

Targets: channel ≥ 10× faster than typed for the 100 KB prompt (the same run's typed
delivery is the baseline); 0 prompts lost, doubled or merged through the channel (typed's
figures reported beside).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    REPO,
    CouldNotMeasure,
    Report,
    Stopwatch,
    elapsed_ms,
    kill_tree,
    private_tmux,
    read_json_lines,
    run_main,
    temp_home,
    wait_for,
)

STANDIN = REPO / "tests" / "standin_qwen.py"
SPEEDUP_TARGET = 10.0
BUSY_LOOPS = 3
THINK_S = "0.05"
"""How long the stand-in thinks per turn: short, so the next delivery does not wait long."""
TAG = re.compile(r"\[bench (\d+)\]")
PROMPT = re.compile(r"\[(?:10 lines|100 KB|bench) ")
"""How every prompt of this benchmark begins (the real Qwen's side requests do not)."""


def qwen_program(folder: Path) -> Path:
    """The stand-in as a program called ``qwen`` (the hub knows the agent by its process)."""
    exe = folder / "bin" / "qwen"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(STANDIN)!r}, run_name='__main__')\n"
    )
    exe.chmod(0o755)
    return exe


def prompt(lines: int, width: int, tag: str) -> str:
    """``lines`` lines of ``width`` bytes (ASCII), the tag in the first line and the last."""
    body = [f"{tag} line {i:05d} ".ljust(width - 1, "x") for i in range(lines)]
    return "\n".join(body)


class Agent:
    """One Qwen tile and the turns its agent started: ``[{"at": wall time, "text": prompt}]``,
    from the stand-in's ``$STANDIN_QWEN_TURNS`` file, or for the real Qwen Code from the
    requests its own fake API received (:class:`StampedOpenAI`)."""

    def __init__(
        self, hub: Any, root: Path, name: str, channel: bool, real: Any | None = None
    ) -> None:
        self.name = name
        self.turns_file = root / f"{name}-turns.jsonl"
        self.api = None
        cwd = root / f"proj-{name}"
        cwd.mkdir()
        if real is None:
            command = str(qwen_program(root))
            env = {"MADOHUB_STANDIN_THINK_S": THINK_S, "STANDIN_QWEN_TURNS": str(self.turns_file)}
        else:
            command, env, self.api = real(cwd)
        self.tile = hub.tile(
            name, agent="qwen", command=command, cwd=cwd, channel=channel, env=env
        )  # fmt: skip
        wait_for(lambda: self.tile.state == "idle", 120, f"{name} idle")
        if channel:
            wait_for(lambda: self.tile.channel is not None, 120, f"{name}'s channel attached")

    def turns(self) -> list[dict[str, Any]]:
        if self.api is None:
            return read_json_lines(self.turns_file)
        from madohub_nb.testing.fake_openai import prompt_text

        with self.api._lock:
            requests = list(self.api.requests)
        first: dict[str, float] = {}  # (Qwen's side requests repeat a turn's prompt, or not)
        for r in requests:
            text = prompt_text(r["body"]) or ""
            if PROMPT.match(text) and "at" in r:
                first.setdefault(text, r["at"])
        return [{"at": at, "text": text} for text, at in first.items()]

    def received(self, since: int) -> list[str]:
        """The prompts the agent took, one per turn, from its ``since``-th turn on: for the
        real Qwen, the user messages of its conversation as its last turn's API request carries it
        (a prompt doubled there shows twice)."""
        if self.api is None:
            return [t["text"] for t in self.turns()[since:]]
        from madohub_nb.testing.fake_openai import _user_texts, prompt_text

        with self.api._lock:
            requests = list(self.api.requests)
        turns = [r["body"] for r in requests if TAG.match(prompt_text(r["body"]) or "")]
        return [t for t in _user_texts(turns[-1]) if TAG.search(t)] if turns else []

    def idle(self, turns: int) -> None:
        """Wait until the agent started ``turns`` turns and shows its idle box again."""
        wait_for(lambda: len(self.turns()) >= turns, 300, f"{self.name}: turn {turns} started")
        wait_for(lambda: self.tile.state == "idle", 120, f"{self.name} idle after turn {turns}")


def real_qwen(root: Path) -> Any:
    """``make(cwd) -> (command, env, api)`` for the real Qwen Code, each tile with its own
    fake API (whose requests are stamped when they arrive); CouldNotMeasure when the real
    CLI is not installed (``tests/real_agents/install.py``)."""
    import _real_agents

    from madohub_nb.testing.fake_openai import FakeOpenAIResponses

    class StampedOpenAI(FakeOpenAIResponses):
        """The fake OpenAI API, each request stamped with the wall time it arrived: the
        moment the agent began its turn with the prompt, as far as anyone outside sees."""

        def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
            with self._lock:
                self.requests.append(
                    {"method": method, "path": path, "headers": headers, "body": body,
                     "at": time.time()}
                )  # fmt: skip
                self._lock.notify_all()

    home = root / "home"

    def make(cwd: Path) -> tuple[str, dict[str, str], Any]:
        api = StampedOpenAI()
        api.__enter__()
        APIS.append(api)
        agent = _real_agents.setup("qwen", home, [cwd], {"openai": api})
        exe = _real_agents.installed("qwen")
        assert exe is not None
        return str(exe[1]), agent.env, api

    return make


APIS: list[Any] = []
"""The fake APIs started for the real Qwen tiles (stopped at the end)."""


WHOLE: dict[str, int] = {}
"""Deliveries whose prompt the agent did not receive whole, by tile (printed)."""


def deliver_once(
    hub: Any, agent: Agent, text: str, tag: str, delivery: str | None = None
) -> tuple[float, float, float | None]:
    """One ``hub.send`` of ``text``: (ms to the agent's turn start, hub CPU ms, ms to the hub's
    channel acknowledgement or None)."""
    count = len(agent.turns())
    cpu0, wall0 = time.process_time(), time.time()
    rec = hub.send(agent.name, text, delivery=delivery).result(600)
    cpu_ms = elapsed_ms(cpu0, time.process_time(), "hub CPU of one delivery")
    if rec.status != "delivered":
        raise CouldNotMeasure(f"{agent.name}: delivery of {tag} was {rec.status}: {rec.error}")
    agent.idle(count + 1)
    turn = agent.turns()[count]
    if tag not in turn["text"]:
        seen = [t["text"][:40] for t in agent.turns()]
        raise CouldNotMeasure(f"{agent.name}: its turn {count + 1} is not {tag}: {seen}")
    if turn["text"].strip() != text.strip():
        WHOLE[agent.name] = WHOLE.get(agent.name, 0) + 1
    ack_ms = None
    if rec.delivery_mode == "channel" and rec.delivered_at is not None:  # (the hub's ack)
        ack_ms = elapsed_ms(datetime.fromtimestamp(wall0, timezone.utc), rec.delivered_at, "ack")
    return elapsed_ms(wall0, float(turn["at"]), f"{agent.name} send → turn"), cpu_ms, ack_ms


def measure(
    hub: Any,
    report: Report,
    channel: Agent,
    typed: Agent,
    what: str,
    lines: int,
    reps: dict[str, int],
) -> dict[str, float]:
    """Median latency through the channel and typed (and pasted, when ``reps`` has
    ``paste``) for one prompt size; prints them; returns the medians (ms) by way in."""
    figures: dict[str, list[tuple[float, float, float | None]]] = {k: [] for k in reps}
    for key, n in reps.items():
        agent = channel if key == "channel" else typed
        for k in range(n):
            tag = f"[{what} {key} {k}]"
            delivery = "paste" if key == "paste" else None
            figures[key].append(deliver_once(hub, agent, prompt(lines, 100, tag), tag, delivery))
    med = {k: statistics.median(x[0] for x in v) for k, v in figures.items()}
    cpu = {k: statistics.median(x[1] for x in v) for k, v in figures.items()}
    acks = [x[2] for x in figures["channel"] if x[2] is not None]
    if not acks:
        raise CouldNotMeasure(f"{what}: no channel delivery recorded the hub's acknowledgement")
    report.info(
        f"{what}: channel send → turn started median {med['channel']:.1f} ms "
        f"(max {max(x[0] for x in figures['channel']):.1f}, n={reps['channel']}), the hub's "
        f"ack median {statistics.median(acks):.1f} ms; hub CPU per delivery {cpu['channel']:.1f} ms"
    )
    if "typed" in reps:
        report.info(
            f"{what}: typed send → turn started median {med['typed']:.1f} ms (n={reps['typed']}); "
            f"hub CPU per delivery {cpu['typed']:.1f} ms "
            f"({cpu['typed'] / max(cpu['channel'], 0.01):.0f}× the channel's)"
        )
    if "paste" in reps:
        report.info(
            f"{what}, for information: paste delivery (one bracketed paste, channel=False tile) "
            f"send → turn started median {med['paste']:.1f} ms (n={reps['paste']}), "
            f"{med['paste'] / med['channel']:.1f}× the channel's; hub CPU {cpu['paste']:.1f} ms"
        )
    return med


def capped_typed(hub: Any, agent: Agent, text: str, tag: str, cap_s: float) -> tuple[float, bool]:
    """One typed delivery of ``text``: (ms from ``hub.send`` to the agent's turn started, True),
    or (the ms waited, False) when its turn had not started after ``cap_s`` (the real Qwen
    Code redraws its whole draft at each typed line: 1,000 lines take many minutes). The
    delivery is left to the hub's close."""
    count = len(agent.turns())
    wall0 = time.time()
    hub.send(agent.name, text)
    watch = Stopwatch()
    while watch.s("typed, capped") < cap_s:
        turns = agent.turns()
        if len(turns) > count and tag in turns[count]["text"]:
            return elapsed_ms(wall0, float(turns[count]["at"]), "typed send → turn"), True
        time.sleep(0.5)
    return watch.ms("typed, capped"), False


def under_load(hub: Any, agent: Agent, count: int, first: int) -> dict[str, int]:
    """``count`` short tagged prompts fired at once to ``agent``; what it received, by tag."""
    before = len(agent.turns())
    futures = [
        hub.send(agent.name, f"[bench {first + k}] prompt {k} of the load run\nsecond line")
        for k in range(count)
    ]
    delivered = sum(f.result(900).status == "delivered" for f in futures)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # (a typed turn may still be starting)
        if len(agent.turns()) >= before + delivered:
            break
        time.sleep(0.1)
    wait_for(lambda: agent.tile.state == "idle", 60, f"{agent.name} idle after the load run")
    seen: Counter[int] = Counter()
    merged = 0
    for text in agent.received(before):
        tags = [int(t) for t in TAG.findall(text)]
        merged += len(tags) > 1
        seen.update(tags)
    wanted = range(first, first + count)
    return {
        "lost": sum(1 for t in wanted if seen[t] == 0),
        "doubled": sum(1 for t in wanted if seen[t] > 1),
        "merged": merged,
        "failed": count - delivered,
        "turns": len(agent.turns()) - before,
    }


def main(args: argparse.Namespace, report: Report) -> None:
    if not STANDIN.exists():
        raise CouldNotMeasure(f"the Qwen stand-in {STANDIN} is not in this checkout")
    import madohub_nb as mh

    small = {"channel": 3 if args.quick else 10, "typed": 2 if args.quick else 5}
    large = {
        "channel": 3 if args.quick else 5, "typed": 1 if args.quick else 2,
        "paste": 2 if args.quick else 5,
    }  # fmt: skip
    load_n = 20 if args.quick else 50
    if args.real:  # (before HOME moves: the agent cache is found from the person's HOME)
        import _real_agents

        if _real_agents.installed("qwen") is None:
            raise CouldNotMeasure(
                "the real Qwen Code is not installed (tests/real_agents/install.py)"
            )
    with temp_home("channels") as root, private_tmux("channels") as sock:
        hub = mh.Hub(socket_name=sock, idle_delay_ms=500, log_path=root / "r.sqlite3")
        loops: list[subprocess.Popen[bytes]] = []
        try:
            real = real_qwen(root) if args.real else None
            channel = Agent(hub, root, "qwen-channel", channel=True, real=real)
            typed = Agent(hub, root, "qwen-typed", channel=False, real=real)
            if typed.tile.channel is not None:
                raise CouldNotMeasure("the channel=False tile has a channel")
            report.info(
                "agent: the real Qwen Code (against a fake OpenAI API on 127.0.0.1 each; its "
                "turn started = its API request with the prompt arrived)"
                if args.real
                else "agent: the Qwen Code stand-in (tests/standin_qwen.py), both tiles"
            )
            measure(hub, report, channel, typed, "10 lines", 10, small)
            if args.real:
                del large["typed"]  # (capped, at the end: see capped_typed)
                del large["paste"]  # (a 100 KB paste started no turn of the real Qwen in 300 s)
            large_ms = measure(hub, report, channel, typed, "100 KB", 1000, large)
            loops = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(BUSY_LOOPS)
            ]
            got = {
                "channel": under_load(hub, channel, load_n, 0),
                "typed": under_load(hub, typed, load_n, 1000),
            }
            for p in loops:
                kill_tree(p.pid)
            finished = True
            if args.real:
                tag = "[100 KB typed 0]"
                typed_ms, finished = capped_typed(
                    hub, typed, prompt(1000, 100, tag), tag, args.typed_cap_s
                )
                large_ms["typed"] = typed_ms
                report.info(
                    f"100 KB: typed send → turn started {typed_ms:.0f} ms (n=1)"
                    if finished
                    else f"100 KB: typed had not started its turn after {typed_ms:.0f} ms "
                    f"(cut at --typed-cap-s {args.typed_cap_s:.0f}): the figure below is at least"
                )
            speedup = large_ms["typed"] / large_ms["channel"]
            report.target(
                "100 KB prompt, send → agent's turn started: channel against typed",
                f"{'' if finished else '≥ '}{speedup:.0f}× faster",
                f"≥ {SPEEDUP_TARGET:.0f}×",
                "typed delivery to the same agent (channel=False tile), same run",
                speedup >= SPEEDUP_TARGET,
            )
        finally:
            for p in loops:
                kill_tree(p.pid)
            hub.close()
            for api in APIS:
                api.__exit__(None, None, None)
    if WHOLE:
        report.info(f"prompts not received whole (tag seen, text differs), by tile: {WHOLE}")
    c, t = got["channel"], got["typed"]
    report.target(
        f"{load_n} prompts fired at once beside {BUSY_LOOPS} busy loops, through the channel",
        f"lost {c['lost']}, doubled {c['doubled']}, merged {c['merged']} "
        f"(failed rounds {c['failed']}, {c['turns']} turns)",
        "0 lost, doubled or merged",
        f"typed, same run: lost {t['lost']}, doubled {t['doubled']}, merged {t['merged']} "
        f"(failed rounds {t['failed']}, {t['turns']} turns)",
        c["lost"] == c["doubled"] == c["merged"] == c["failed"] == 0,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="native channel against typed delivery (Qwen)")
    p.add_argument("--quick", action="store_true", help="fewer deliveries, 20 under load")
    p.add_argument(
        "--real", action="store_true",
        help="the real Qwen Code 0.24.4 (installed by the real-agent tier) instead of the stand-in",
    )  # fmt: skip
    p.add_argument(
        "--typed-cap-s", type=float, default=300.0,
        help="with --real: how long the one typed 100 KB delivery is waited for (default 300)",
    )  # fmt: skip
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
