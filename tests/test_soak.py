"""Soak: a seeded, randomized run of 1,000+ rounds with faults, checked against invariants.

Several stand-in sources take turns (hand sends, some hostile); many routes
fan their answers out to stand-in Claude sinks, byte recorders (typed and
pasted) and shadow routes; routes use small ``max_rounds`` and are replaced
when spent. Faults are injected along the way: routes paused, resumed and
stopped from the driver thread, sinks and sources killed, transcripts cut and
rotated, hostile answers planted in transcripts, the AI API failing.

Invariants, checked on the durable log and at every receiving end:
- no lost round: every fired round has exactly one row (numbers 1..n, no gap,
  no duplicate), every hand send has its row, nothing is left unlogged;
- a round never fires twice for one turn (each answer routed once per route);
- ``max_rounds`` is never exceeded;
- no interleaving, and the log agrees with what targets received: each
  target's prompts, in order, are exactly its delivered rows' prompts as typed;
- no control byte reaches a target (recorders see only text, LF, tab, submit).

``MADOHUB_SOAK_SEED`` picks the seed (printed with the figures).
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import start_recorder, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.agents.profiles import get_profile
from madohub_nb.pipeline.deliver import prepare_content
from madohub_nb.pipeline.extract import transcript_path
from madohub_nb.testing.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.soak

SEED = int(os.environ.get("MADOHUB_SOAK_SEED", "20261130"))
TARGET_ROUNDS = 1000
BUDGET_S = 200.0
"""Driving stops at TARGET_ROUNDS rows, or fails after this long."""
IDLE_DELAY_MS = 250
SUBMIT = b"\r\r"
PASTED = re.compile(rb"\x1b\[200~(.*?)\x1b\[201~\r\r", re.DOTALL)

HOSTILE_BITS = (
    "\x1b[31m",
    "\x03",
    "\x04",
    "\x1a",
    "\x1b]0;t\x07",
    "\x1b[201~",
    "[201~",
    "\t",
    ";",
    ";;",
    "\x9b2J",
    "\udc9b",
    "\r",
    "é",
    "{output}",
    "C-c",
)


def _hostile(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(HOSTILE_BITS) + rng.choice("abcxyz ") for _ in range(n))


@dataclass
class Soak:
    """The run's state: tiles by role, routes, sends and the fault tally."""

    hub: mh.Hub
    rng: random.Random
    project: Path
    sources: list[str] = field(default_factory=list)
    sinks: list[str] = field(default_factory=list)
    recorders: dict[str, tuple[Path, bool]] = field(default_factory=dict)
    dead_sinks: dict[str, Path | None] = field(default_factory=dict)
    sink_paths: dict[str, Path] = field(default_factory=dict)
    sends: list[Any] = field(default_factory=list)
    last_send: dict[str, tuple[Any, float]] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)
    paused: list[mh.Route] = field(default_factory=list)
    counter: int = 0
    names: int = 0

    def name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    # tiles ------------------------------------------------------------------
    def add_source(self) -> str:
        name = self.name("s")
        start_standin(self.hub, name, cwd=self.project, think_s=0.05)
        self.sources.append(name)
        for _ in range(self.rng.randint(3, 5)):
            self.add_route(name)
        return name

    def add_sink(self) -> str:
        name = self.name("k")
        start_standin(self.hub, name, cwd=self.project, think_s=0.05)
        self.sinks.append(name)
        return name

    def add_route(self, source: str) -> mh.Route:
        rng = self.rng
        kind = rng.choices(["shadow", "sink", "recorder", "ai"], weights=[5, 3, 2, 1])[0]
        targets = [t for t in (*self.sinks, *self.recorders) if t != source]
        target = rng.choice(self.sinks if kind == "sink" else targets)
        if kind == "recorder":
            target = rng.choice(list(self.recorders))
        lines = rng.randint(1, 3)
        template = "\n".join(
            [f"{{source}}>{target} r{{round}}/{{maxRounds}}", "{output}"]
            + [f"-- {target} tail {i}" for i in range(lines - 1)]
        )
        kwargs: dict[str, Any] = {
            "max_rounds": rng.randint(4, 20),
            "cooldown_ms": 1000,
            "dispatch": "shadow" if kind in ("shadow", "ai") else "madoagent",
        }
        if kind == "ai":
            kwargs["transform"] = rng.choice(["ai-routing", "summary"])
        else:
            kwargs["template"] = template
        if kind == "recorder" and self.recorders[target][1]:
            kwargs["delivery"] = "paste"
        return self.hub.connect(source, target, **kwargs)

    # driving ----------------------------------------------------------------
    def send_turns(self) -> None:
        """A new prompt to every source whose last turn has had time to be routed."""
        now = time.monotonic()
        for source in list(self.sources):
            last = self.last_send.get(source)
            if last is not None and (not last[0].done() or now - last[1] < 1.6):
                continue
            self.counter += 1
            text = f"t{self.counter} "
            if self.rng.random() < 0.3:
                text += _hostile(self.rng, 4)
                self.faults["hostile prompt"] += 1
            text += f" q{self.counter}"
            future = self.hub.send(source, text)
            self.sends.append(future)
            future.add_done_callback(
                lambda f, s=source: self.last_send.update({s: (f, time.monotonic())})
            )
            self.last_send[source] = (future, float("inf"))

    def inject_fault(self, fake: FakeAnthropic) -> None:
        hub, rng = self.hub, self.rng
        live = [r for r in hub.routes if r.state == "active"]
        fault = rng.choices(
            ["pause", "resume", "stop", "api", "hostile answer", "cut", "clear", "kill sink",
             "kill source"],
            weights=[6, 6, 3, 3, 4, 2, 2, 1, 1],
        )[0]  # fmt: skip
        if fault == "pause" and live:
            route = rng.choice(live)
            route.pause()
            self.paused.append(route)
        elif fault == "resume" and self.paused:
            self.paused.pop(rng.randrange(len(self.paused))).resume()
        elif fault == "stop" and live:
            rng.choice(live).stop()
        elif fault == "api":
            fake.fail_next(rng.choice([500, 429, 529]), times=rng.randint(1, 3), retry_after=0)
        elif fault == "hostile answer":
            self.plant_answer(rng.choice(self.sources))
        elif fault == "cut":
            path = _transcript(hub, rng.choice(self.sources))
            if path is None:
                return
            os.truncate(path, max(0, path.stat().st_size - rng.randint(1, 400)))
        elif fault == "clear":
            self.sends.append(hub.send(rng.choice(self.sources), "/clear"))
        elif fault == "kill sink" and len(self.sinks) > 1 and self.faults["kill sink"] < 2:
            name = rng.choice(self.sinks)
            self.dead_sinks[name] = _transcript(hub, name)
            self.sinks.remove(name)
            hub.tmux.kill_pane(hub.tiles[name].pane_id)
            self.add_sink()
        elif fault == "kill source" and self.faults["kill source"] < 2:
            name = rng.choice(self.sources)
            self.sources.remove(name)
            proc = hub.tiles[name].agent_process()
            if proc is not None:
                proc.kill()
            self.add_source()
        else:
            return
        self.faults[fault] += 1

    def plant_answer(self, source: str) -> None:
        """A hostile assistant answer appended to the source's transcript, then a repaint."""
        path = _transcript(self.hub, source)
        if path is None:
            return
        text = f"planted {uuid.uuid4().hex[:8]} " + _hostile(self.rng, 6)
        record = {
            "type": "assistant",
            "isSidechain": False,
            "uuid": str(uuid.uuid4()),
            "message": {
                "id": f"msg_planted_{uuid.uuid4().hex[:12]}",
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
            },
        }
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        pane = self.hub.tiles[source].pane_id
        self.hub.tmux.run("send-keys", "-t", pane, "-l", "--", "x")
        self.hub.tmux.run("send-keys", "-t", pane, "BSpace")

    def replace_spent_routes(self) -> None:
        for route in list(self.hub.routes):
            if route.state in ("exhausted", "stopped") and not getattr(route, "_replaced", False):
                route._replaced = True  # type: ignore[attr-defined]
                if route.source in self.sources and route.source in self.hub.tiles:
                    self.add_route(route.source)

    def quiet(self) -> bool:
        return all(f.done() for f in self.sends) and not any(r._in_round for r in self.hub.routes)


def _transcript(hub: mh.Hub, name: str) -> Path | None:
    tile = hub.tiles.get(name)
    return transcript_path(tile) if tile is not None else None


def _prompts_in(path: Path) -> list[str]:
    """The user prompts recorded in a Claude transcript file (like conftest.user_prompts)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "user" and not rec.get("isMeta"):
            content = rec.get("message", {}).get("content")
            if isinstance(content, str):
                out.append(content)
    return out


def _control_chars(text: str) -> list[str]:
    return [
        f"U+{ord(c):04X}"
        for c in text
        if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
    ]


def _mismatch(name: str, got: list[Any], want: list[Any]) -> str:
    """Where a target's received prompts first differ from the log's."""
    i = next(
        (i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
        min(len(got), len(want)),
    )
    seen = repr(got[i])[:120] if i < len(got) else "nothing"
    logged = repr(want[i])[:120] if i < len(want) else "nothing"
    return f"{name}: {len(got)} received vs {len(want)} logged; #{i}: got {seen}, log {logged}"


def _check(
    hub: mh.Hub, soak: Soak, log: mh.RoundLog, send_records: list[Any]
) -> tuple[list[str], dict[str, Any]]:
    """Every invariant over the durable log and the receiving ends; returns (violations, figures)."""
    violations: list[str] = []
    df = log.df
    rows = df.to_dict("records")
    by_route: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_route.setdefault(row["route_id"], []).append(row)

    # No lost round; max_rounds never exceeded; one turn fires once.
    if hub.unlogged:
        violations.append(f"{len(hub.unlogged)} rounds left unlogged")
    if not df["round_id"].is_unique:
        violations.append("a round_id appears twice")
    logged_ids = set(df["round_id"])
    for rec in send_records:
        if rec.round_id not in logged_ids:
            violations.append(f"hand send {rec.round_id} has no row")
    for route in hub.routes:
        mine = by_route.get(route.id, [])
        fired = sorted(r["round"] for r in mine if r["status"] != "exhausted")
        if fired != list(range(1, route.rounds + 1)):
            violations.append(f"{route.id}: rounds {fired} but {route.rounds} fired")
        if route.rounds > route.max_rounds or any(n > route.max_rounds for n in fired):
            violations.append(f"{route.id}: more than max_rounds={route.max_rounds}")
        if sum(r["status"] == "exhausted" for r in mine) > 1:
            violations.append(f"{route.id}: more than one exhausted row")
        answers = [r["extracted"] for r in mine if r["status"] != "exhausted"]
        if len(answers) != len(set(answers)):
            violations.append(f"{route.id}: one answer routed twice")

    # The log agrees with what each target received, in order: no interleaving.
    delivered: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(
        rows, key=lambda r: r["delivered_at"] if r["status"] == "delivered" else r["fired_at"]
    ):
        if row["status"] == "delivered" and row["route_id"] != "send":
            delivered.setdefault(row["target"], []).append(row)

    def typed(row: dict[str, Any], kind: str) -> str:
        return prepare_content(row["prompt"] or "").replace("\t", get_profile(kind).typed_tab)

    checked = 0
    for name in [*soak.sinks, *soak.dead_sinks]:
        path = soak.sink_paths.get(name) or soak.dead_sinks.get(name)
        got = [p.strip() for p in _prompts_in(path)] if path is not None else []
        want = [typed(r, "claude").strip() for r in delivered.get(name, [])]
        for p in got:
            if _control_chars(p):
                violations.append(f"{name}: control input {_control_chars(p)}")
        checked += len(got)
        # A sink killed mid-run may have died between its last submit and its transcript.
        cut_short = name not in soak.sinks and got == want[: len(got)] and len(want) - len(got) <= 1
        if got != want and not cut_short:
            violations.append(_mismatch(name, got, want))
    for name, (out, paste) in soak.recorders.items():
        data = out.read_bytes()
        want_rows = delivered.get(name, [])
        if paste:  # tmux pastes the cleaned text as it is, LF turned into CR
            got_b = PASTED.findall(data)
            want_b = [
                prepare_content(r["prompt"] or "").replace("\n", "\r").encode() for r in want_rows
            ]
            rest = PASTED.sub(b"", data)
        else:
            got_b = data.split(SUBMIT)[:-1]
            want_b = [typed(r, "amp").encode() for r in want_rows]
            rest = data.split(SUBMIT)[-1]
        if rest:
            violations.append(f"{name}: {len(rest)} stray bytes outside prompts")
        checked += len(got_b)
        if got_b != want_b:
            violations.append(_mismatch(name, got_b, want_b))
        for chunk in got_b:
            text = chunk.decode("utf-8", "replace").replace("\r", "\n")
            if _control_chars(text) or b"\x1b" in chunk:
                violations.append(f"{name}: control input typed")

    statuses = Counter(df["status"])
    figures = {
        "seed": SEED,
        "rounds": len(df),
        "route rounds": int((df["route_id"] != "send").sum()),
        "hand sends": int((df["route_id"] == "send").sum()),
        "by status": dict(statuses),
        "routes": len(hub.routes),
        "tiles": len(hub.tiles),
        "prompts checked at targets": checked,
        "faults injected": sum(soak.faults.values()),
        "faults": dict(soak.faults),
        "violations": len(violations),
    }
    return violations, figures


@pytest.mark.timeout(420)
def test_soak_thousand_rounds_with_faults_keeps_every_invariant(
    tmux_socket: str, home: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(SEED)
    log_path = tmp_path / "soak.sqlite3"
    started = time.monotonic()
    with FakeAnthropic(reply="AI says hi", api_key="sk-ant-soak-0123456789") as fake:
        hub = mh.Hub(
            tmux_socket,
            IDLE_DELAY_MS,
            log_path,
            api_key="sk-ant-soak-0123456789",
            base_url=fake.base_url,
        )
        soak = Soak(hub, rng, project)
        try:
            for i, paste in enumerate((False, True)):
                out = tmp_path / f"rec{i}.bin"
                name = f"r{i}"
                start_recorder(hub, name, out, paste=paste)
                soak.recorders[name] = (out, paste)
            for _ in range(3):
                soak.add_sink()
            for _ in range(5):
                soak.add_source()
            next_fault = time.monotonic() + 2
            while len(hub.log) < TARGET_ROUNDS:
                assert time.monotonic() - started < BUDGET_S, (
                    f"only {len(hub.log)} rounds in {BUDGET_S}s"
                )
                soak.send_turns()
                if time.monotonic() >= next_fault:
                    soak.inject_fault(fake)
                    next_fault = time.monotonic() + rng.uniform(0.3, 1.5)
                soak.replace_spent_routes()
                time.sleep(0.05)
            for route in soak.paused:
                route.resume()
            for name in soak.sinks:
                soak.sink_paths[name] = _transcript(hub, name)  # type: ignore[assignment]
            wait_until(soak.quiet, 60, what="rounds in flight to end")
            # A turn that finished just now may still fire: wait until the log stops growing.
            settled = -1
            while settled != len(hub.log) or not soak.quiet():
                settled = len(hub.log)
                time.sleep((IDLE_DELAY_MS + 1500) / 1000)
            send_records = [f.result() for f in soak.sends]
            for name in soak.sinks:
                soak.sink_paths[name] = _transcript(hub, name)  # type: ignore[assignment]
        finally:
            hub.close()
    log = mh.RoundLog(log_path, read_only=True)
    try:
        violations, figures = _check(hub, soak, log, send_records)
    finally:
        log.close()
    figures["seconds"] = round(time.monotonic() - started, 1)
    with capsys.disabled():
        print(f"\nsoak figures: {json.dumps(figures)}")
    assert figures["rounds"] >= TARGET_ROUNDS
    assert violations == [], violations[:20]
