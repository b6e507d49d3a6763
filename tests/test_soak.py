"""Soak: a seeded run of 1,000+ rounds with a replayable schedule of faults, checked against invariants.

Several stand-in sources take turns (hand sends, some hostile); many routes
fan their answers out to stand-in Claude sinks, byte recorders (typed and
pasted) and shadow routes; routes use small ``max_rounds`` and are replaced
when spent.

Replayable: the run goes in steps. A step sends one prompt to each source, in
order, then waits until every route of those sources has reacted (a logged
round, or the hub's ``turn_skipped`` event for a paused route). Between steps,
the faults of the schedule are applied. The schedule is drawn up front from
the seed, by step (that is, by hand-send round count, never by the clock), and
every random choice (prompt texts, route settings, fault targets) comes from
the seed and a fixed name, never from a shared generator whose draws depend
on timing. One seed replays the same faults in the same order
(``test_one_seed_replays_the_same_faults_and_outcome``).

Invariants, checked on the durable log and at every receiving end:
- no lost round: every fired round has exactly one row (numbers 1..n, no gap,
  no duplicate), every hand send has its row, nothing is left unlogged;
- a round never fires twice for one turn (each answer routed once per route);
- ``max_rounds`` is never exceeded, and at most one ``exhausted`` row per route;
- every delivered row (routed and hand sends) is found at its target, in order,
  as the test's own reference cleaner says it must arrive: the expected text is
  computed here from the promises of docs/concepts/promises.md, not with the product's
  cleaner;
- the prompt of each templated row is its template filled (by the test) with
  the row's extracted answer;
- no control byte reaches a target (recorders see only text, LF, tab, submit);
- approval routes (two live at a time) carry the person's verdicts in order: approved
  and edited prompts are typed (an edit: the person's text, found at the target, the
  template's text in ``proposed_prompt``), rejected and expired ones are not;
- each permission ask answered from ``hub.inbox`` has one ``inbox`` row, and its key's
  effect (the tool ran, or was rejected) is in the sink's transcript, in order;
- MCP calls made with a source's token through the SDK's client: bad tokens, an ask back
  that would close a cycle and calls beyond 20 a second are refused with their reason (a
  known caller's refusal is one ``error`` row, nothing typed); good sends and asks are
  delivered rows found at their targets, and each ask's answer row holds what it returned;
- each fault kind fired at least its minimum number of times.

``MADOHUB_SOAK_SEED`` picks the seed, ``MADOHUB_SOAK_STEPS`` the length (the
figures are printed; the time a run takes is a benchmark figure,
``benchmarks/bench_soak.py``, not a test budget).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections import Counter, deque
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import (
    repaint,
    send_hook,
    standin_from_bash,
    start_recorder,
    start_standin,
    type_at_prompt,
    wait_until,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import madohub_nb as mh
from madohub_nb.agents.foreground import read_stat
from madohub_nb.agents.kinds import claude as claude_kind
from madohub_nb.agents.profiles import get_profile
from madohub_nb.io.hooks.command import build_message
from madohub_nb.pipeline.events import (
    AskChanged,
    RoundLogged,
    RouteStateChanged,
    TileStateChanged,
    TurnSkipped,
)
from madohub_nb.pipeline.extract import transcript_path
from madohub_nb.pipeline.inbox import ApprovalAsk, PermissionAsk
from madohub_nb.testing.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.soak

SEED = int(os.environ.get("MADOHUB_SOAK_SEED", "20261130"))
STEPS = int(os.environ.get("MADOHUB_SOAK_STEPS", "45"))
"""Steps of the full run: 45 give 1,000+ rounds (5 sources, 3-5 routes each)."""
MIN_ROUNDS = 1000 if STEPS >= 45 else 0
SOAK_API_KEY = "sk-ant-api03-soak-0123456789-never-in-a-file"
"""The hub's API key (in its environment too): no file may hold it."""
IDLE_DELAY_MS = 250
REACT_TIMEOUT_S = 90.0
"""Longest a step waits for its routes to react (a sink may be busy with queued prompts)."""
SUBMIT = "".join(get_profile("amp").submit_keys).encode()  # the Amp-like recorders' Enter
PASTED = re.compile(rb"\x1b\[200~(.*?)\x1b\[201~" + re.escape(SUBMIT), re.DOTALL)

FAULT_QUOTAS = {
    "pause": 8,  # each pause is followed, 1-3 steps later, by a resume
    "stop": 5,
    "api": 5,
    "hostile answer": 8,
    "cut": 5,
    "clear": 4,
    "kill sink": 2,
    "kill source": 2,
    # Foreground changes (issue 11): nothing may be typed into a terminal whose reader changed.
    # Sinks are started from a bash prompt (bash is the pane's process, the agent its
    # foreground job), so a stopped agent stays stopped: tmux would SIGCONT a pane's own process.
    "agent suspended": 2,  # Ctrl-Z (SIGTSTP) or SIGSTOP for a step, then `fg`; nothing reaches bash
    "kill mid-typing": 2,  # a sink's agent killed while a 40-line hand send is typed
    # The sources' own Stop hooks (issue 28): the hub must neither lose a turn nor route one
    # twice, whatever reaches its hook channel.
    "hook lost": 2,  # the channel's socket moved away for a step: turns end on status files
    "hook duplicated": 2,  # the source's last Stop hook sent again, as the agent would
    "hook forged": 2,  # a wrong token, another pane, a replayed nonce, junk: each refused
    "hook late": 2,  # a Stop hook carrying an older turn's answer, after newer turns
    # Fan-in (issue 26): a gathered source dies; its gather goes on with the others and names it.
    "gather source killed": 2,
    # The person in the loop (issue 24). Approval routes' prompts wait in the inbox; the
    # soak's person answers each at once, drawn from the seed (approved, edited, rejected,
    # or left to expire); each fault forces the next verdict of one approval route.
    "approval approved": 2,
    "approval edited": 2,
    "approval rejected": 2,
    "approval expired": 2,
    # A sink asks permission for a Bash tool; the ask is answered from ``hub.inbox``.
    "permission answered": 3,
    # MCP calls (issue 25), made through the SDK's own client with a source's token as its
    # agent would: refusals type nothing; good calls are delivered rows like any other.
    "mcp bad token": 2,  # none, junk, a revoked one, one that may not reach the target: refused
    "mcp cycle": 2,  # the target asks back while its caller's ask waits on it: refused, named
    "mcp burst": 2,  # 40 calls at once: those beyond 20 a second refused
    "mcp send": 3,  # typed into a sink or a typed recorder, found there
    "mcp ask": 3,  # typed into a sink; its answer (the echo of the question) comes back
    # Issue 38. A new source works in a git repository (or a worktree of one) whose config an
    # attacker set: fsmonitor, a hooks folder, a clean/smudge filter; none may run, no key may
    # reach a file, and its routes' rows still count what each turn changed.
    "git hooks": 2,
    # Asks in flight at once: two callers ask one sink, one of them a second sink too, and the
    # first sink asks that caller back (a ring through its first ask): each ask gets its own
    # answer, the ask back is refused, nothing waits forever.
    "concurrent asks": 3,
    # A source's transcript gets junk, an oversized line and a half-written record (issue 38):
    # the reader returns, the routes go on, the next turn's rounds carry that turn's answer.
    "crafted record": 3,
    # An OpenCode tile's database (issue 38): its ``message`` table made a view over an endless
    # recursive query, then put back; the reader gives up at its deadline, rounds go on.
    "crafted database": 2,
}
SHORT_QUOTAS = {kind: 1 for kind in FAULT_QUOTAS}
HOSTILE_SEND_SHARE = 0.3
APPROVAL_ROUTES = 2
"""Approval routes live at a time (replaced by approval routes when spent)."""
APPROVE_TIMEOUT_S = 1.0
"""An approval route's timeout: a prompt the person leaves alone expires after it."""
VERDICTS = {"approved": 4, "edited": 3, "rejected": 2, "expired": 1}
"""The person's verdicts and their weights (an expired one costs a step the timeout)."""
PERMISSION_ANSWERS = ("Yes", 0, "1", "approve", "No", 2, "3", "reject")
"""How the person answers a permission ask: a label, an index, a shown number, or a method."""
MCP_BURST = 40
MCP_CALLS_PER_S = 20
"""The hub's refusal threshold for one caller's calls (madohub_nb/pipeline/handoff.py)."""
BAD_TOKENS = {
    "none": "carries no bearer token",
    "junk": "not one this hub gave",
    "revoked": "not one this hub gave",
    "out of reach": "you may not reach",
}
"""The bad calls of an ``mcp bad token`` fault, each with what its refusal must say."""
CONCURRENT_ASKS_S = 120.0
"""Longest the asks of one ``concurrent asks`` fault may take together (beyond it: a deadlock)."""
ARMED_HOOKS = ("post-checkout", "post-index-change", "reference-transaction", "pre-commit",
               "post-commit", "pre-auto-gc", "post-rewrite")  # fmt: skip
"""Hooks a ``git hooks`` repository's hooks folder holds: each would leave a marker."""
OVERSIZED_LINE_BYTES = 8 * 1024 * 1024
"""The oversized line of a ``crafted record`` fault: one JSON record this long, unclosed."""
CRAFTED_JUNK = (
    b"not json", b"{", b"[1, 2, 3]", b"null", b'"a string"', b"{}",
    b'{"type": "assistant", "message": "x"}',
    b'{"type": "assistant", "message": {"role": "assistant", "content": 5}}',
    b'{"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text"}]}}',
    b'{"type": "user", "message": {"content": ["x"]}}', b"\x00\xff garbage \xc3\x28",
)  # fmt: skip
"""Lines a ``crafted record`` fault appends to a transcript: none is an answer."""
HALF_RECORD = (b'{"type": "system", "subtype": "soak", "content": "half', b' written"}\n')
"""A record the fault writes in two parts, the hub looking in between (a non-answer)."""
RECORDS = Path(__file__).parent / "fixtures" / "agent_records"
OPENCODE_ANSWER = (RECORDS / "long_answer.md").read_text().rstrip()
"""The answer in the real OpenCode database the soak's OpenCode tile reads."""
ENDLESS_VIEW = (
    "ALTER TABLE message RENAME TO message_real",
    "CREATE VIEW message AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) "
    "SELECT 'msg_' || i AS id, {session} AS session_id, i AS time_created, i AS time_updated, "
    "'{{}}' AS data FROM r WHERE i < 0",
)
"""What a ``crafted database`` fault does to the OpenCode database: a query that never ends
(its rows claim the tile's own session, so a reader narrowed to it runs the query too)."""
CRAFTED_DB_WAIT_S = 30.0
"""Longest the OpenCode tile's route may take to look at a crafted database (its reader's
deadline is 1 s a query)."""
OPENCODE_SCRIPT = """#!/bin/sh
# Prints (then removes) the file named by $1 whenever it appears, as an agent repaints.
while :; do
  if [ -f "$1" ]; then cat "$1"; rm -f "$1"; fi
  sleep 0.1
done
"""
"""The soak's OpenCode: a process named ``opencode`` whose screen shows what the test says."""
WRITE_FILE = "answer.txt"
"""The file a git source's stand-in writes each answer to (what its turns change)."""

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


def _rng(*names: object) -> random.Random:
    """A generator for one named choice: the same seed and name give the same draws."""
    return random.Random("/".join(str(n) for n in (SEED, *names)))


def _hostile(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(HOSTILE_BITS) + rng.choice("abcxyz ") for _ in range(n))


# --- the reference cleaner: what the docs promise reaches a target ---------------------------

_CSI = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]")
_STRING_SEQ = re.compile(
    r"(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
)
_OTHER_ESC = re.compile(r"\x1b[ -/]*[0-~]")
_PASTE_MARKER = re.compile(r"\[20[01]~")


def reference_clean(text: str) -> str:
    """The promise of docs/concepts/promises.md, written independently of the product.

    Escape sequences (CSI 7- and 8-bit, OSC/DCS/APC/PM/SOS, two-byte escapes) go;
    bracketed-paste markers go with or without their ESC; CR (and CR LF) becomes a
    line break; every other C0 and C1 control and DEL goes, only LF and tab stay;
    lone surrogates become U+FFFD; blank lines at both ends go.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _STRING_SEQ.sub("", text)
    text = _CSI.sub("", text)
    text = _OTHER_ESC.sub("", text)
    text = "".join(
        "\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c
        for c in text
        if c in "\n\t" or not (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)
    )
    return _PASTE_MARKER.sub("", text).strip("\n")


def test_reference_cleaner_keeps_text_and_drops_control_input() -> None:
    assert reference_clean("a\x1b[31mb\x03c\x1b]0;t\x07d[201~e\x9b2Jf\rg\udc9bh\ti") == (
        "abcdef\ng\ufffdh\ti"
    )
    assert reference_clean("\n\nx{output};;C-c é\n") == "x{output};;C-c é"


# --- the schedule -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: applied after step ``step``; ``pick`` in [0, 1) chooses its target."""

    step: int
    kind: str
    pick: float
    times: int


def draw_schedule(steps: int, quotas: dict[str, int]) -> list[Fault]:
    """Every fault of a run, from the seed alone: each kind its quota, shuffled over the steps."""
    rng = _rng("faults", steps)
    kinds = [kind for kind, n in quotas.items() for _ in range(n)]
    rng.shuffle(kinds)
    last = max(1, steps - 4)  # the last steps run fault-free, so spent states settle
    faults: list[Fault] = []
    for kind in kinds:
        step = rng.randrange(1, last)
        faults.append(Fault(step, kind, rng.random(), rng.randint(1, 3)))
        if kind == "pause":
            faults.append(Fault(min(step + rng.randint(1, 3), last), "resume", 0.0, 1))
    order = {f: i for i, f in enumerate(faults)}
    return sorted(faults, key=lambda f: (f.step, f.kind == "resume", order[f]))


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Received:
    """Where a Claude-like tile's received prompts are: its transcripts, and what cuts took away."""

    paths: list[Path] = field(default_factory=list)
    frozen: dict[Path, list[str]] = field(default_factory=dict)
    tail_from: dict[Path, int] = field(default_factory=dict)

    def note(self, path: Path | None) -> None:
        if path is not None and path not in self.paths:
            self.paths.append(path)

    def before_cut(self, path: Path, cut_at: int) -> None:
        """Keep the prompts read so far; records appended after the cut start at ``cut_at``."""
        self.note(path)
        self.frozen[path] = self.prompts_of(path)
        self.tail_from[path] = cut_at

    def prompts_of(self, path: Path) -> list[str]:
        data = path.read_bytes()[self.tail_from.get(path, 0) :]
        return self.frozen.get(path, []) + _prompts_in(data)

    def prompts(self) -> list[str]:
        return [p for path in self.paths for p in self.prompts_of(path)]


@dataclass
class Soak:
    """The run's state: tiles by role, routes, sends, reactions and the faults applied."""

    hub: mh.Hub
    project: Path
    fake: FakeAnthropic
    sources: list[str] = field(default_factory=list)
    sinks: list[str] = field(default_factory=list)
    recorders: dict[str, tuple[Path, bool]] = field(default_factory=dict)
    received: dict[str, Received] = field(default_factory=dict)
    sends: list[tuple[str, str]] = field(default_factory=list)
    send_records: list[mh.RoundRecord] = field(default_factory=list)
    applied: list[tuple[int, str, str]] = field(default_factory=list)
    hostile_sends: int = 0
    paused: list[mh.Route] = field(default_factory=list)
    replaced: set[str] = field(default_factory=set)
    shells: dict[str, Path] = field(default_factory=dict)
    """Each sink's bash history file: every line its bash ran, appended before each prompt."""
    suspended: list[tuple[str, int, Path]] = field(default_factory=list)
    """Sinks stopped for a step: (name, agent pid, the marker a probe would have created)."""
    reactions: Counter[str] = field(default_factory=Counter)
    skips: Counter[str] = field(default_factory=Counter)
    last_skip: dict[str, str] = field(default_factory=dict)
    recent: dict[str, deque[str]] = field(default_factory=dict)
    """Each route's and tile's last events (for a failure's message: what it did last)."""
    started: float = field(default_factory=time.monotonic)
    planted_unrouted: int = 0
    moved_socket: tuple[str, str] | None = None
    """The hook channel's socket while a "hook lost" fault has it moved away: (path, away)."""
    lost_steps: int = 0
    """Steps the socket stays away (a second "hook lost" in one step keeps it away one more)."""
    hook_refusals: Counter[str] = field(default_factory=Counter)
    """Refusals the forged hooks must add to the channel's counts (checked at the end)."""
    names: int = 0
    routes_made: int = 0
    gathers: list[str] = field(default_factory=list)
    """Every gather made, by id (two live at a time, replaced when spent)."""
    gather_kills: list[tuple[str, str, int]] = field(default_factory=list)
    """(gather id, the source killed, the gather's rounds then): its next round names it."""
    approval_routes: list[str] = field(default_factory=list)
    """Every approval route made, by id, in the order made."""
    verdicts: dict[str, list[str]] = field(default_factory=dict)
    """The person's verdict on each prompt of each approval route, in the order asked."""
    forced: dict[str, list[str]] = field(default_factory=dict)
    """Verdicts an ``approval ...`` fault set for a route's next prompts."""
    edits: dict[tuple[str, str], str] = field(default_factory=dict)
    """(route id, the proposed prompt): the text the person edited it into."""
    person_errors: list[str] = field(default_factory=list)
    permissions: list[tuple[str, bool]] = field(default_factory=list)
    """Permission asks answered from the inbox: (sink, whether the tool was allowed)."""
    mcp_answers: list[tuple[str, str]] = field(default_factory=list)
    """Each MCP ask's pair id and the answer the tool returned (its row must hold it)."""
    mcp_refused_rows: Counter[str] = field(default_factory=Counter)
    """Refusals of known callers, by pair id: each must be an ``error`` row of that pair."""
    mcp_errors: list[str] = field(default_factory=list)
    """MCP calls whose outcome was not the one promised (violations)."""
    tokens: set[str] = field(default_factory=set)
    """Every MCP token the soak had the hub grant: none may reach a file."""
    git_sources: list[str] = field(default_factory=list)
    """Sources started in an armed git repository or worktree (``git hooks``)."""
    crafted_errors: list[str] = field(default_factory=list)
    """Rounds after a ``crafted record`` fault whose answer was not their own turn's."""
    opencode: tuple[str, Path, Path, str] | None = None
    """The OpenCode tile: (name, its database, the file it repaints from, its route's id)."""
    crafted_slowest_s: float = 0.0
    """The longest the routes took to react to a crafted transcript (a figure)."""
    leaks: Path | None = None
    """Where an armed repository's programs would leave their markers and ``env`` dumps."""

    def __post_init__(self) -> None:
        self.hub.events.subscribe(self._on_event)

    def _on_event(self, event: Any) -> None:
        match event:
            case AskChanged(state="open", ask=ApprovalAsk() as ask):
                self.person(ask)
            case RoundLogged(route_id=route_id):
                # A route reacted to a turn: it logged a round, or it saw the turn while paused.
                self.reactions[route_id] += 1
            case TurnSkipped(route_id=route_id, why=why):
                if why == "paused":
                    self.reactions[route_id] += 1
                self.skips[route_id] += 1
                self.last_skip[route_id] = why
        match event:
            case RoundLogged(route_id=name, status=what) | TurnSkipped(route_id=name, why=what):
                pass
            case TileStateChanged(name=name, state=what):
                pass
            case RouteStateChanged(route_id=name, state=what):
                pass
            case _:
                return
        seen = self.recent.setdefault(name, deque(maxlen=6))
        seen.append(f"{time.monotonic() - self.started:.1f}s {event.kind} {what}")

    def person(self, ask: Any) -> None:
        """The person answers an approval the moment it opens (on the engine thread, so no
        timeout can overtake them), with a verdict drawn from the seed; ``expired``: they
        leave it, and the route's timeout closes it."""
        route = str(ask.route)
        done = self.verdicts.setdefault(route, [])
        n = len(done)
        rng = _rng("verdict", route, n)
        forced = self.forced.get(route)
        verdict = (
            forced.pop(0) if forced else rng.choices(list(VERDICTS), list(VERDICTS.values()))[0]
        )
        done.append(verdict)
        try:
            if verdict == "approved":
                ask.approve()
            elif verdict == "edited":
                text = f"edited {route}.{n} " + _hostile(rng, rng.randint(0, 2)) + " by the soak"
                self.edits[(route, _as_logged(ask.text))] = _as_logged(text)
                ask.approve(text)
            elif verdict == "rejected":
                ask.reject(f"the soak rejects {route}.{n}")
        except Exception as exc:  # (the event bus would only log it)
            self.person_errors.append(f"{route}.{n} {verdict}: {exc!r}")

    def grant(self, caller: str, reach: bool | list[str] = True) -> str:
        """A new MCP token for ``caller`` (its old one ends), noted: no file may hold it."""
        token = self.hub.mcp.grant(caller, reach)
        self.tokens.add(token)
        return token

    def name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    # tiles and routes ---------------------------------------------------------------------
    def add_source(self) -> str:
        name = self.name("s")
        start_standin(self.hub, name, cwd=self.project, think_s=0.05)
        self.sources.append(name)
        self.received[name] = Received()
        for _ in range(_rng("routes of", name).randint(3, 5)):
            self.add_route(name)
        return name

    def add_git_source(self, n: int, worktree: bool) -> str:
        """A source in a new git repository (``worktree``: in a worktree of it) whose config an
        attacker set after its first commit: fsmonitor, a hooks folder, a required clean and
        smudge filter for every file. Each program, if run, leaves a marker and its ``env`` in
        ``self.leaks``. The stand-in writes each answer to ``WRITE_FILE`` (a change per turn)."""
        from madohub_nb.demo import standin_command

        assert self.leaks is not None
        repo, hooks = self.project.parent / f"git{n}", self.project.parent / f"git{n}-hooks"
        repo.mkdir()
        hooks.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "config", "user.email", "soak@example.invalid")
        _git(repo, "config", "user.name", "soak")
        (repo / "README").write_text("one\ntwo\n")
        (repo / ".gitattributes").write_text("* filter=x\n")
        _git(repo, "add", "README", ".gitattributes")
        _git(repo, "commit", "-q", "-m", "first")  # (filter x not defined yet: nothing ran)

        def leave(what: str) -> str:
            return f"touch {self.leaks}/{what}-{n}; env > {self.leaks}/{what}-{n}.env"

        _git(repo, "config", "core.fsmonitor", f"{leave('fsmonitor')}; false")
        _git(repo, "config", "core.hooksPath", str(hooks))
        _git(repo, "config", "filter.x.clean", f"{leave('clean')}; cat")
        _git(repo, "config", "filter.x.smudge", f"{leave('smudge')}; cat")
        _git(repo, "config", "filter.x.required", "true")
        for hook in ARMED_HOOKS:
            (hooks / hook).write_text(f"#!/bin/sh\n{leave(hook)}\n")
            (hooks / hook).chmod(0o755)
        name = self.name("g")
        tile = self.hub.tile(
            name, agent="claude", command=standin_command("claude", persona="echo"),
            cwd=repo, worktree=worktree,
            env={"MADOHUB_STANDIN_THINK_S": "0.05", "MADOHUB_STANDIN_WRITE_FILE": WRITE_FILE},
        )  # fmt: skip
        wait_until(lambda: tile.state == "idle", 15, what=f"{name} idle")
        self.sources.append(name)
        self.git_sources.append(name)
        self.received[name] = Received()
        for _ in range(_rng("routes of", name).randint(3, 5)):
            self.add_route(name)
        return f"{name} ({'worktree' if worktree else 'repository'})"

    def add_sink(self) -> str:
        """A stand-in Claude started from a bash prompt: bash is the pane's own process."""
        name = self.name("k")
        history = self.project.parent / f"bash-history-{name}"
        standin_from_bash(self.hub, name, cwd=self.project, think_s=0.05, history=history)
        self.shells[name] = history
        self.sinks.append(name)
        self.received[name] = Received()
        return name

    def add_route(self, source: str, approve: bool = False) -> mh.Route:
        """A route of a kind drawn from the seed; ``approve``: an approval route (typed into a
        sink or a recorder, each prompt held for the person)."""
        self.routes_made += 1
        rng = _rng("route", self.routes_made)
        kind = rng.choices(["shadow", "sink", "recorder", "ai"], weights=[5, 3, 2, 1])[0]
        if approve:
            kind = rng.choice(["sink", "recorder"])
        targets = [*self.sinks, *self.recorders]
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
        if approve:
            kwargs.update(approve=True, approve_timeout_s=APPROVE_TIMEOUT_S)
        route = self.hub.connect(source, target, **kwargs)
        if approve:
            self.approval_routes.append(route.id)
        wait_until(lambda: route.ready.is_set(), 15, what=f"route {route.id} listening")
        return route

    def add_gather(self) -> mh.Route | None:
        """A fan-in of two or three live sources into a sink or a recorder (typed, or shadow)."""
        self.routes_made += 1
        rng = _rng("gather", self.routes_made)
        if len(self.sources) < 2:
            return None
        sources = rng.sample(self.sources, min(len(self.sources), rng.randint(2, 3)))
        target = rng.choice([*self.sinks, *self.recorders])
        kwargs: dict[str, Any] = {
            "template": f"{{source}}>{target} r{{round}}/{{maxRounds}}\n{{answers}}",
            "max_rounds": rng.randint(4, 20),
            "cooldown_ms": 1000,
            "dispatch": rng.choice(["shadow", "madoagent"]),
        }
        if target in self.recorders and self.recorders[target][1]:
            kwargs["delivery"] = "paste"
        gather = self.hub.gather(sources, target, **kwargs)
        wait_until(lambda: gather.ready.is_set(), 15, what=f"gather {gather.id} listening")
        self.gathers.append(gather.id)
        return gather

    def replace_spent_routes(self) -> None:
        for route in list(self.hub.routes):
            if route.state in ("exhausted", "stopped") and route.id not in self.replaced:
                self.replaced.add(route.id)
                if route.id in self.gathers:
                    self.add_gather()
                elif route.id in self.approval_routes:  # (its source may be dead: another)
                    live = route.source in self.sources
                    source = (
                        route.source if live else _rng("approval of", route.id).choice(self.sources)
                    )
                    self.add_route(source, approve=True)
                elif route.source in self.sources:
                    self.add_route(route.source)

    def listening(self, sources: list[str]) -> dict[str, int]:
        """Routes of ``sources`` that will react to their next turn, with their reactions so far.

        A gather reacts once each of its sources has a new turn: it is counted only when every
        one of its live sources is in ``sources`` (a step prompts them all; a planted answer or a
        ``/clear`` in one source makes it wait for the others)."""
        return {
            r.id: self.reactions[r.id]
            for r in self.hub.routes
            if r.state in ("active", "paused") and self._reacts_to(r, sources)
        }

    def _reacts_to(self, route: mh.Route, sources: list[str]) -> bool:
        if route.id not in self.gathers:
            return route.source in sources
        alive = [s for s in route.sources if s in self.sources]
        return bool(alive) and set(alive) <= set(sources)

    def wait_reactions(
        self, before: dict[str, int], what: str, skips: dict[str, int] | None = None
    ) -> None:
        """Wait until each route in ``before`` reacted (or, given ``skips``, skipped any turn)."""
        routes = {r.id: r for r in self.hub.routes}

        def reacted() -> bool:
            return all(
                self.reactions[rid] > n
                or routes[rid].state == "stopped"
                or (skips is not None and self.skips[rid] > skips[rid])
                for rid, n in before.items()
            )

        try:
            wait_until(reacted, REACT_TIMEOUT_S, interval_s=0.02, what=what)
        except AssertionError as exc:
            late = {
                rid: (routes[rid].state, list(self.recent.get(rid, [])))
                for rid, n in before.items()
                if self.reactions[rid] <= n
            }
            seen = {
                s for rid in late for s in getattr(routes[rid], "sources", [routes[rid].source])
            }
            tiles = "; ".join(self.whereabouts(name) for name in sorted(seen))
            raise AssertionError(
                f"{exc} at {time.monotonic() - self.started:.1f}s; not reacted (state, last "
                f"events): {late}; their sources: {tiles}"
            ) from None

    def whereabouts(self, name: str) -> str:
        """What the hub sees of tile ``name`` now, for a failure's message: its state, agent
        process, sessions file, transcript, output stream and screen."""
        tile = self.hub.tiles.get(name)
        if tile is None:
            return f"{name}: no tile"
        proc = tile.agent_process()
        facts = [f"{name}: {tile.state} by {tile.last_signal}", f"agent {proc}"]
        if proc is not None:
            config = claude_kind.config_dir(tile, proc)
            session, stale = claude_kind.read_session(tile, proc)
            facts.append(f"sessions file {session.session_id if session else None} stale {stale}")
            raw = config / "sessions" / f"{proc.pid}.json" if config is not None else None
            if raw is not None and raw.is_file():
                facts.append(raw.read_text(errors="replace")[:240])
        facts.append(f"transcript {_transcript(self.hub, name)}")
        watcher = getattr(tile.machine, "watcher", None)
        stream = watcher.streams.get(tile.pane_id) if watcher is not None else None
        if stream is not None:
            ago = time.monotonic() - (stream.last_output_mono or self.started)
            facts.append(
                f"output {stream.mode} (wanted {stream.wanted()}, {len(stream.listeners)} "
                f"listeners, {stream.bytes_total} bytes, last {ago:.1f}s ago)"
            )
        facts.append(f"events {list(self.recent.get(name, []))}")
        facts.append(f"screen {tile.screen()[-300:]!r}")
        return ", ".join(facts)

    # driving ------------------------------------------------------------------------------
    def step(self, number: int) -> None:
        """One prompt to each source, in order; then wait for every route of theirs to react."""
        sources = list(self.sources)
        before = self.listening(sources)
        futures = []
        for source in sources:
            rng = _rng("send", number, source)
            text = f"t{number}-{source} "
            if rng.random() < HOSTILE_SEND_SHARE:
                text += _hostile(rng, 4)
                self.hostile_sends += 1
            text += f" q{number}"
            self.sends.append((source, text))
            futures.append(self.hub.send(source, text))
        for future in futures:
            self.send_records.append(future.result(60))
        self.wait_reactions(before, f"the routes to react to step {number}")
        self.resume_suspended()
        self.lost_steps = max(0, self.lost_steps - 1)
        if self.moved_socket is not None and self.lost_steps <= 0:
            # the "hook lost" steps are over: hooks reach the channel again
            path, away = self.moved_socket
            os.rename(away, path)
            self.moved_socket = None

    def suspend(self, name: str, sig: int) -> Path:
        """Stop the sink's agent as Ctrl-Z would (bash takes the terminal back); then a probe
        hand send, which would create a marker file if bash ran it, must be refused."""
        tile = self.hub.tiles[name]
        wait_until(lambda: tile.state == "idle", 30, what=f"{name} idle before suspending")
        proc = tile.agent_process()
        assert proc is not None, f"sink {name} runs no agent"
        os.kill(proc.pid, sig)
        wait_until(lambda: "Stopped" in tile.screen(), 10, what=f"bash to see {name} stop")
        marker = f"ran-in-bash-{name}-{len(self.applied)}"  # bash runs in the project folder
        text = f"touch {marker}"
        self.sends.append((name, text))
        rec = self.hub.send(name, text).result(60)
        self.send_records.append(rec)
        assert rec.status == "error", f"a prompt for suspended {name} was {rec.status}"
        assert "is stopped" in (rec.error or "") and "nothing was typed" in (rec.error or ""), (
            rec.error
        )
        self.suspended.append((name, proc.pid, self.project / marker))
        return self.project / marker

    def resume_suspended(self) -> None:
        """Sinks suspended for a step: nothing ran in their bash; `fg`, and they take prompts again."""
        for name, pid, marker in self.suspended:
            tile = self.hub.tiles[name]
            assert not marker.exists(), f"a line typed for suspended {name} ran in its bash"
            type_at_prompt(self.hub, tile.pane_id, "fg")

            def back(pid: int = pid, tile: mh.Tile = tile) -> bool:
                st = read_stat(pid)
                in_front = st is not None and st.state not in "Tt" and st.pgrp == st.tpgid
                return in_front and "Stopped" not in tile.screen() and tile.state == "idle"

            wait_until(back, 15, what=f"{name} in the foreground and idle after fg")
        self.suspended.clear()

    def apply(self, fault: Fault) -> None:
        """Apply one scheduled fault; its target is chosen by ``fault.pick`` from a stable order."""
        hub = self.hub

        def pick(items: list[Any]) -> Any:
            return items[int(fault.pick * len(items))]

        live = [r for r in hub.routes if r.state == "active"]
        target = ""
        if fault.kind == "pause" and live:
            route = pick(live)
            route.pause()
            self.paused.append(route)
            target = route.id
        elif fault.kind == "resume" and self.paused:
            route = self.paused.pop(0)
            route.resume()
            target = route.id
        elif fault.kind == "stop" and live:
            route = pick(live)
            route.stop()
            target = route.id
        elif fault.kind == "api":
            self.fake.fail_next(
                [500, 429, 529][int(fault.pick * 3)], times=fault.times, retry_after=0
            )
            target = f"next {fault.times} calls"
        elif fault.kind == "hostile answer":
            with_transcript = self.prompted_sources()
            if with_transcript:
                source = pick(with_transcript)
                self.plant_answer(source, len(self.applied))
                target = source
        elif fault.kind == "cut" and self.prompted_sources():
            source = pick(self.prompted_sources())
            path = wait_until(lambda: _transcript(hub, source), 15, what=f"{source}'s transcript")
            if isinstance(path, Path):
                cut_at = max(0, path.stat().st_size - 1 - int(fault.pick * 400))
                self.received[source].before_cut(path, cut_at)
                os.truncate(path, cut_at)
                target = source
        elif fault.kind == "clear":
            source = pick(self.sources)
            self.received[source].note(_transcript(hub, source))
            before = self.listening([source])
            skips = {rid: self.skips[rid] for rid in before}
            self.sends.append((source, "/clear"))
            self.send_records.append(hub.send(source, "/clear").result(60))
            # A cleared screen holds no new answer: the routes skip it (or route the screen).
            self.wait_reactions(before, f"the routes of {source} to see /clear", skips)
            target = source
        elif fault.kind == "kill sink" and len(self.sinks) > 1:
            name = pick(self.sinks)
            self.received[name].note(_transcript(hub, name))
            self.sinks.remove(name)
            hub.runtime.tmux.kill_pane(hub.tiles[name].pane_id)
            self.add_sink()
            target = name
        elif fault.kind == "agent suspended" and self.sinks:
            name = pick(self.sinks)
            # Ctrl-Z, or a SIGSTOP the agent cannot catch: bash takes the terminal back either way.
            self.suspend(name, signal.SIGTSTP if fault.times % 2 else signal.SIGSTOP)
            target = name
        elif fault.kind == "kill mid-typing" and len(self.sinks) > 1:
            name = pick(self.sinks)
            tile = hub.tiles[name]
            self.received[name].note(_transcript(hub, name))
            lines = "\n".join(f"soak long {fault.step} line {i:02d}" for i in range(40))
            self.sends.append((name, lines))
            future = hub.send(name, lines)
            wait_until(lambda: "line 05" in tile.screen(), 30, what=f"typing into {name}")
            proc = tile.agent_process()
            assert proc is not None, f"sink {name} runs no agent"
            os.kill(proc.pid, signal.SIGKILL)
            rec = future.result(60)
            assert rec.status == "error", f"a prompt typed into a killed agent was {rec.status}"
            self.send_records.append(rec)
            self.sinks.remove(name)
            self.add_sink()
            target = name
        elif fault.kind == "kill source" and len(self.sources) > 1:
            name = pick(self.sources)
            self.received[name].note(_transcript(hub, name))
            self.sources.remove(name)
            proc = hub.tiles[name].agent_process()
            assert proc is not None, f"source {name} runs no agent"
            # its routes stop once the hub sees the pane gone; no turn is sent to it
            os.kill(proc.pid, signal.SIGKILL)
            self.add_source()
            target = name
        elif fault.kind == "gather source killed":
            target = self.kill_gathered_source(pick)
        elif fault.kind.startswith("approval "):
            # The next prompt of one listening approval route gets this verdict.
            listening = [
                rid for rid in self.approval_routes
                if (r := self.route(rid)).state in ("active", "paused") and r.rounds < r.max_rounds
            ]  # fmt: skip
            if listening:
                target = pick(listening)
                self.forced.setdefault(target, []).append(fault.kind.removeprefix("approval "))
        elif fault.kind == "permission answered" and self.awake_sinks():
            target = self.answer_permission(pick(self.awake_sinks()), len(self.applied))
        elif fault.kind.startswith("mcp ") and self.awake_sinks() and self.sources:
            target = self.mcp_fault(fault.kind, pick, len(self.applied))
        elif fault.kind == "git hooks":
            target = self.add_git_source(len(self.applied), worktree=fault.times % 2 == 1)
        elif (
            fault.kind == "concurrent asks"
            and len(self.awake_sinks()) > 1
            and (len(self.sources) > 1)
        ):
            target = self.concurrent_asks(len(self.applied))
        elif fault.kind == "crafted record" and self.prompted_sources():
            source = pick(self.prompted_sources())
            target = self.craft_record(source, len(self.applied))
        elif fault.kind == "crafted database":
            target = self.craft_database(len(self.applied))
        elif fault.kind.startswith("hook ") and self.hooked_sources():
            target = self.hook_fault(fault.kind, pick(self.hooked_sources()))
        if target:
            self.applied.append((fault.step, fault.kind, target))

    def awake_sinks(self) -> list[str]:
        """Sinks not suspended by an ``agent suspended`` fault of this step."""
        stopped = {name for name, _, _ in self.suspended}
        return [name for name in self.sinks if name not in stopped]

    def route(self, rid: str) -> mh.Route:
        return next(r for r in self.hub.routes if r.id == rid)

    def answer_permission(self, name: str, n: int) -> str:
        """A hand send makes sink ``name`` ask permission for a Bash tool; the ask is answered
        from ``hub.inbox`` as the seed draws it; the sink goes on (its transcript is checked)."""
        tile = self.hub.tiles[name]
        text = f"p{n} please [[bash touch perm-{n}]]"
        self.sends.append((name, text))
        self.send_records.append(self.hub.send(name, text).result(60))

        def asked() -> Any:
            return next(
                (a for a in self.hub.inbox if isinstance(a, PermissionAsk) and a.tile == name), None
            )

        ask = wait_until(asked, 60, what=f"{name}'s permission ask in the inbox")
        assert ask.choices[0] == "Yes" and ask.choices[-1] == "No", ask.choices
        assert f"touch perm-{n}" in ask.text, ask.text
        how = _rng("permission", n).choice(PERMISSION_ANSWERS)
        if how == "approve":
            future = ask.approve()
        elif how == "reject":
            future = ask.reject("the soak says no")
        else:
            future = ask.choose(how)
        rec = future.result(60)
        assert (rec.status, rec.route_id, rec.target) == ("delivered", "inbox", name), rec.error
        allowed = how in ("Yes", 0, "1", "approve")
        assert rec.decision == ("approved" if allowed else "rejected"), (how, rec.decision)
        self.permissions.append((name, allowed))
        wait_until(lambda: tile.state == "idle", 30, what=f"{name} idle after its answer")
        assert self.hub.inbox == [], self.hub.inbox
        return f"{name} ({how!r})"

    # MCP calls ---------------------------------------------------------------------------------
    def mcp_call(self, token: str | None, tool: str, **args: Any) -> tuple[bool, str]:
        """One tool call in a new MCP session carrying ``token``: (is_error, its text)."""

        async def one(client: Any) -> tuple[bool, str]:
            return await _mcp_call(client, tool, args)

        try:
            return asyncio.run(_mcp_session(self.hub.mcp.url, token, one))
        except Exception as exc:  # refused at the transport (HTTP 401): no session at all
            return True, _messages(exc)

    def mcp_expect(self, what: str, got: tuple[bool, str], error: bool, says: str) -> None:
        if got[0] != error or says not in got[1]:
            self.mcp_errors.append(f"{what}: got {got!r}, expected error={error} with {says!r}")

    def mcp_fault(self, kind: str, pick: Any, n: int) -> str:
        """One MCP fault: a source calls the hub's tools as its agent would, to an idle target."""
        hub = self.hub
        caller = pick(self.sources)
        typed = [name for name, (_, paste) in self.recorders.items() if not paste]
        sinks = self.awake_sinks()
        target = pick(sinks if kind in ("mcp ask", "mcp cycle") else [*sinks, *typed])
        pair = f"mcp:{caller}->{target}"
        if target in self.sinks:
            tile = hub.tiles[target]
            wait_until(lambda: tile.state == "idle", 30, what=f"{target} idle before MCP calls")
        if kind == "mcp send":
            # (JSON over HTTP carries no lone surrogate: an agent's text never holds one)
            text = f"m{n} {caller} sends " + _as_logged(_hostile(_rng("mcp", n), 2))
            got = self.mcp_call(self.grant(caller), "send", to=target, text=text)
            self.mcp_expect(f"{pair} send", got, False, "delivered")
        elif kind == "mcp ask":
            text = f"m{n} {caller} asks {target}"
            got = self.mcp_call(self.grant(caller), "ask", to=target, text=text, timeout_s=60)
            self.mcp_expect(f"{pair} ask", got, False, _echo(text))
            self.mcp_answers.append((pair, got[1]))
        elif kind == "mcp bad token":
            old = self.grant(caller)
            tokens = {"none": None, "junk": "x" * 32, "revoked": old}
            self.grant(caller)  # the old token ends
            other = next((k for k in sinks if k != target), None)
            tokens["out of reach"] = self.grant(caller, [other] if other else [])
            for bad, says in BAD_TOKENS.items():
                got = self.mcp_call(tokens[bad], "send", to=target, text=f"m{n} {bad} token")
                self.mcp_expect(f"{pair} send with a {bad} token", got, True, says)
            self.mcp_refused_rows[pair] += 1  # (only a known caller's refusal is a row)
        elif kind == "mcp cycle":
            self.mcp_cycle(caller, target, n)
        elif kind == "mcp burst":
            self.mcp_burst(caller)
        return f"{caller}->{target}"

    def mcp_cycle(self, caller: str, target: str, n: int) -> None:
        """``caller`` asks ``target`` (who thinks 2 s); meanwhile ``target`` asks ``caller``
        back: refused at once, naming the cycle; the first ask is answered."""
        hub, tile = self.hub, self.hub.tiles[target]
        first_token, back_token = self.grant(caller), self.grant(target)
        text = f"m{n} {caller} asks {target} [[sleep 2]]"
        url = hub.mcp.url

        async def both() -> tuple[tuple[bool, str], tuple[bool, str]]:
            async def ask(client: Any) -> tuple[bool, str]:
                return await _mcp_call(client, "ask", {"to": target, "text": text, "timeout_s": 60})

            async def ask_back(client: Any) -> tuple[bool, str]:
                back = {"to": caller, "text": f"m{n} back", "timeout_s": 60}
                return await _mcp_call(client, "ask", back)

            first = asyncio.ensure_future(_mcp_session(url, first_token, ask))
            for _ in range(200):  # until the question is typed: the target thinks on it
                if first.done() or await asyncio.to_thread(lambda: tile.state) == "busy":
                    break
                await asyncio.sleep(0.02)
            back = await _mcp_session(url, back_token, ask_back)
            return await first, back

        first, back = asyncio.run(both())
        self.mcp_expect(f"mcp:{caller}->{target} ask", first, False, _echo(text))
        self.mcp_answers.append((f"mcp:{caller}->{target}", first[1]))
        chain = f"would wait on you: {target} -> {caller} -> {target}"
        self.mcp_expect(f"mcp:{target}->{caller} ask back", back, True, chain)
        self.mcp_refused_rows[f"mcp:{target}->{caller}"] += 1

    def concurrent_asks(self, n: int) -> str:
        """Caller ``a`` asks sink ``k1`` (who thinks 6 s); while that ask is typed, caller ``b``
        asks ``k1`` too and ``a`` asks sink ``k2``; once ``k2`` thinks, ``k1`` asks ``a`` back:
        a ring through ``a``'s first ask (not its last), refused at once. Each of the three asks
        must get the echo of its own question; all of it within ``CONCURRENT_ASKS_S``."""
        rng = _rng("concurrent", n)
        a, b = rng.sample(self.sources, 2)
        k1, k2 = rng.sample(self.awake_sinks(), 2)
        for k in (k1, k2):
            tile = self.hub.tiles[k]
            wait_until(lambda t=tile: t.state == "idle", 30, what=f"{k} idle before the asks")
        url = self.hub.mcp.url
        token_a, token_b, token_k1 = self.grant(a), self.grant(b), self.grant(k1)
        asks = [
            (a, token_a, k1, f"c{n} {a} asks {k1} [[sleep 6]]"),
            (b, token_b, k1, f"c{n} {b} asks {k1} too"),
            (a, token_a, k2, f"c{n} {a} asks {k2} [[sleep 1]]"),
        ]

        def ask(token: str, to: str, text: str) -> Any:
            args = {"to": to, "text": text, "timeout_s": 60}
            return _mcp_session(url, token, lambda c: _mcp_call(c, "ask", args))

        async def busy(name: str, first: Any) -> None:
            tile = self.hub.tiles[name]
            while not first.done() and await asyncio.to_thread(lambda: tile.state) != "busy":
                await asyncio.sleep(0.02)

        async def all_of_them() -> tuple[list[tuple[bool, str]], tuple[bool, str]]:
            first = asyncio.ensure_future(ask(*asks[0][1:]))
            await busy(k1, first)  # a's first ask is typed: k1 thinks on it
            rest = [asyncio.ensure_future(ask(*one[1:])) for one in asks[1:]]
            await busy(k2, rest[1])  # a's second ask is typed too
            back = await ask(token_k1, a, f"c{n} {k1} asks {a} back")
            return list(await asyncio.gather(first, *rest)), back

        try:
            got, back = asyncio.run(asyncio.wait_for(all_of_them(), CONCURRENT_ASKS_S))
        except TimeoutError:
            self.mcp_errors.append(f"concurrent asks c{n}: not all done in {CONCURRENT_ASKS_S} s")
            return f"{a},{b}->{k1},{k2}"
        for (caller, _, to, text), result in zip(asks, got, strict=True):
            if result != (False, _echo(text)):
                self.mcp_errors.append(f"c{n} {caller}->{to} ask: got {result!r}, not its echo")
            self.mcp_answers.append((f"mcp:{caller}->{to}", result[1]))
        chain = f"would wait on you: {k1} -> {a} -> {k1}"
        self.mcp_expect(f"c{n} {k1}->{a} ask back", back, True, chain)
        self.mcp_refused_rows[f"mcp:{k1}->{a}"] += 1
        return f"{a},{b}->{k1},{k2}"

    def mcp_burst(self, caller: str) -> None:
        """``MCP_BURST`` calls at once from one caller: those beyond 20 a second are refused."""
        token = self.grant(caller)

        async def burst(client: Any) -> list[tuple[bool, str]]:
            calls = (_mcp_call(client, "list_agents", {}) for _ in range(MCP_BURST))
            return list(await asyncio.gather(*calls))

        results = asyncio.run(_mcp_session(self.hub.mcp.url, token, burst))
        refused = [text for is_error, text in results if is_error]
        says = f"more than {MCP_CALLS_PER_S} calls within a second"
        if not refused or len(results) - len(refused) < MCP_CALLS_PER_S:
            self.mcp_errors.append(f"burst of {MCP_BURST}: {len(refused)} refused")
        if any(says not in text for text in refused):
            self.mcp_errors.append(f"burst refusals: {refused[:2]}")

    def kill_gathered_source(self, pick: Any) -> str:
        """Kill one live source of a listening gather (as "kill source" does; a new source
        joins); with no such gather, one is made for it first."""

        def candidates() -> list[Any]:
            return [
                r
                for r in self.hub.routes
                if r.id in self.gathers
                and r.state in ("active", "paused")
                and sum(s in self.sources for s in r.sources) >= 2
            ]

        if not candidates() and self.add_gather() is None:
            return ""
        gather = pick(candidates())
        name = pick([s for s in gather.sources if s in self.sources])
        self.received[name].note(_transcript(self.hub, name))
        self.sources.remove(name)
        proc = self.hub.tiles[name].agent_process()
        assert proc is not None, f"source {name} runs no agent"
        self.gather_kills.append((gather.id, name, gather.rounds))
        os.kill(proc.pid, signal.SIGKILL)
        self.add_source()
        return f"{name} of {gather.id}"

    # hook faults ------------------------------------------------------------------------------
    def hooked_sources(self) -> list[str]:
        """Prompted sources whose panes run their Stop hook into the hub's channel."""
        return [s for s in self.prompted_sources() if self.hub.tiles[s].hooks is not None]

    def hook_fault(self, kind: str, source: str) -> str:
        channel = self.hub.runtime.tiles.hook_channel()
        assert channel is not None, "hooked sources but no hook channel"
        tile = self.hub.tiles[source]
        assert tile.hooks is not None
        path, token = channel.socket_path, tile.hooks.token
        if self.moved_socket is not None:  # (lost for the agents; the test still finds it)
            path = self.moved_socket[1]
        if kind == "hook lost":
            self.lost_steps += 1  # lost for the next step (one more if already lost)
            if self.moved_socket is not None:
                return source
            away = f"{path}.away"
            os.rename(path, away)  # the listening socket stays; a hook cannot reach it by name
            self.moved_socket = (path, away)
            return source
        # The agent's own answers (its Stop hooks carry only those): not a planted one, which
        # no hook of the agent ever carried.
        answers = [
            r["extracted"] for r in self.hub.log.df.to_dict("records")
            if r["source"] == source and r["route_id"] != "send" and r["extracted"]
            and not str(r["extracted"]).startswith("planted ")
        ]  # fmt: skip
        if not answers:
            return ""
        if kind == "hook duplicated":
            payload = json.dumps({"last_assistant_message": answers[-1]}).encode()
            send_hook(path, build_message(token=token, pane=tile.pane_id, kind="stop",
                                           payload=payload))  # fmt: skip
        elif kind == "hook late":
            payload = json.dumps({"last_assistant_message": answers[0]}).encode()
            send_hook(path, build_message(token=token, pane=tile.pane_id, kind="stop",
                                           payload=payload))  # fmt: skip
        elif kind == "hook forged":
            forged = json.dumps({"last_assistant_message": "FORGED by the soak"}).encode()
            send_hook(path, build_message(token="x" * 32, pane=tile.pane_id, kind="stop",
                                           payload=forged))  # fmt: skip
            send_hook(path, build_message(token=token, pane="%9999", kind="stop",
                                           payload=forged))  # fmt: skip
            once = build_message(token=token, pane=tile.pane_id, kind="stop",
                                 payload=b"{}", nonce=f"soak-{len(self.applied):04d}" * 2)  # fmt: skip
            send_hook(path, once)
            send_hook(path, once)
            send_hook(path, b"\x00junk\n" * 50)
            self.hook_refusals.update({"token": 1, "pane": 1, "replay": 1, "malformed": 1})
        return source

    def craft_record(self, source: str, n: int) -> str:
        """Junk lines, an oversized unclosed line and half a record appended to ``source``'s
        transcript, the routes looking after each (a repaint: they skip, there is no new
        answer); the half record is then finished and a hand send prompts the source: each
        route's round for it must carry that turn's answer, the echo of the prompt."""
        tile = self.hub.tiles[source]
        path = wait_until(lambda: _transcript(self.hub, source), 15, what=f"{source}'s transcript")
        assert isinstance(path, Path)
        self.received[source].note(path)
        rng = _rng("crafted", n)
        junk = list(CRAFTED_JUNK)
        rng.shuffle(junk)
        oversized = b'{"type": "assistant", "message": {"role": "assistant", "content": "'
        oversized += b"A" * OVERSIZED_LINE_BYTES
        starts_line = path.read_bytes().endswith(b"\n")  # a cut may have left half a line
        parts = [
            (b"" if starts_line else b"\n") + b"\n".join(junk) + b"\n" + oversized + b"\n",
            HALF_RECORD[0],
            HALF_RECORD[1],
        ]
        for part in parts:
            with path.open("ab") as f:
                f.write(part)
            self.look(source, tile, "a crafted transcript")
        text = f"x{n} after crafted records"
        before = self.listening([source])
        rounds = {r.id: r.rounds for r in self.hub.routes if r.id in before}
        self.sends.append((source, text))
        self.send_records.append(self.hub.send(source, text).result(60))
        self.wait_reactions(before, f"the routes of {source} after crafted records")
        rows = self.hub.log.df.to_dict("records")
        for r in rows:
            rid = r["route_id"]
            if rid in rounds and r["round"] > rounds[rid] and r["status"] != "exhausted":
                if rid not in self.gathers and r["extracted"] != _echo(text):
                    self.crafted_errors.append(f"{rid} round {r['round']}: {r['extracted']!r}")
        return source

    def add_opencode(self) -> tuple[str, Path, Path, str]:
        """An OpenCode tile (a process named ``opencode``) over the real OpenCode database
        (its session moved to the tile's folder), with a shadow route: its answer comes only
        from the database (its screen shows what the soak writes to its ``say`` file)."""
        from madohub_nb.agents.kinds.opencode import opencode_database

        name = self.name("o")
        folder = self.project.parent / name
        (folder / "bin").mkdir(parents=True)
        exe, say = folder / "bin" / "opencode", folder / "say"
        exe.write_text(OPENCODE_SCRIPT)
        exe.chmod(0o755)
        home = os.environ["HOME"]
        db = Path(opencode_database({"HOME": home}) or "")
        db.parent.mkdir(parents=True, exist_ok=True)
        self.write_opencode_db(db, folder)
        tile = self.hub.tile(
            name,
            agent="opencode",
            command=f"exec {exe} {say}",
            cwd=folder,
            env={"HOME": home},
            channel=False,  # (a shell stand-in serves no channel: its record is what is soaked)
        )
        wait_until(lambda: tile.agent_process() is not None, 15, what=f"{name}'s process")
        route = self.hub.connect(
            name, "r0", template="{output}", dispatch="shadow", max_rounds=20, cooldown_ms=1000
        )
        wait_until(lambda: route.ready.is_set(), 15, what=f"route {route.id} listening")
        self.opencode = (name, db, say, route.id)
        return self.opencode

    @staticmethod
    def write_opencode_db(db: Path, folder: Path, crafted: bool = False) -> None:
        """The real OpenCode database at ``db``, its session in ``folder``; ``crafted``: its
        ``message`` table made the endless view (``ENDLESS_VIEW``)."""
        tmp = db.with_name(db.name + ".soak")
        shutil.copy(RECORDS / "opencode" / "opencode.db", tmp)
        with closing(sqlite3.connect(tmp, isolation_level=None)) as conn:
            conn.execute("UPDATE session SET directory = ?", (str(folder),))
            if crafted:
                conn.execute("PRAGMA legacy_alter_table = ON")
                (session,) = conn.execute("SELECT quote(id) FROM session LIMIT 1").fetchone()
                for sql in ENDLESS_VIEW:
                    conn.execute(sql.format(session=session))
        os.replace(tmp, db)  # (the reader sees the old file or the new one, whole)

    def craft_database(self, n: int) -> str:
        """The OpenCode database's ``message`` made an endless view, and the tile repaints;
        a source's ``list_agents`` (which reads each tile's state on the hub's shared thread
        pool, the OpenCode one from its database) must return within ``CRAFTED_DB_WAIT_S``
        with the OpenCode tile's state unknown (no evidence). The database put back, it must
        say idle (the database's finished turn). The route's rounds are checked at the end:
        the database's own answer, never another."""
        name, db, say, _ = self.opencode or self.add_opencode()
        folder = self.project.parent / name
        self.write_opencode_db(db, folder, crafted=True)
        token = self.grant(_rng("crafted database", n).choice(self.sources))
        for state, want in ((f"crafted {n}", "unknown"), (f"put back {n}", "idle")):
            say.write_text(f"({state})\n")  # a repaint: the route looks too
            started = time.monotonic()
            try:
                got = asyncio.run(
                    asyncio.wait_for(
                        _mcp_session(self.hub.mcp.url, token, _list_agents), CRAFTED_DB_WAIT_S
                    )
                )
            except TimeoutError:
                self.crafted_errors.append(f"{state}: list_agents held over {CRAFTED_DB_WAIT_S} s")
                self.write_opencode_db(db, folder)
                return name
            self.crafted_slowest_s = max(self.crafted_slowest_s, time.monotonic() - started)
            if got.get(name) != want:
                self.crafted_errors.append(f"{state}: {name} is {got.get(name)!r}, not {want}")
            self.write_opencode_db(db, folder)
        return name

    def look(self, source: str, tile: mh.Tile, what: str) -> None:
        """A repaint, and wait until each listening route of ``source`` reacted or skipped."""
        before = self.listening([source])
        skips = {rid: self.skips[rid] for rid in before}
        started = time.monotonic()
        self.repaint(tile)
        self.wait_reactions(before, f"the routes of {source} to look at {what}", skips)
        self.crafted_slowest_s = max(self.crafted_slowest_s, time.monotonic() - started)

    def repaint(self, tile: mh.Tile) -> None:
        """Output that is no new turn (conftest's repaint: x typed, seen, deleted)."""
        repaint(self.hub, tile)

    def prompted_sources(self) -> list[str]:
        """Sources that have answered a prompt (so have a transcript), from the run's own
        record: the disk may or may not hold a just-started source's file yet."""
        prompted = {name for name, _ in self.sends}
        return [n for n in self.sources if n in prompted]

    def plant_answer(self, source: str, n: int) -> None:
        """A hostile assistant answer appended to the source's transcript, then a repaint.

        Waits until each listening route of the source routed it (or, paused, skipped
        it). A route that looks and skips it as already routed gets another repaint,
        up to three; one still skipping is counted in ``planted_unrouted``.
        """
        tile = self.hub.tiles[source]
        try:
            found = wait_until(lambda: _transcript(self.hub, source), 15)
        except AssertionError:
            raise AssertionError(
                f"no transcript for {source} for 15 s: {self.whereabouts(source)}; "
                f"applied {self.applied[-6:]}"
            ) from None
        assert isinstance(found, Path)
        path = found
        rng = _rng("planted", n)
        text = f"planted {rng.getrandbits(32):08x} " + _hostile(rng, 6)
        record = {
            "type": "assistant",
            "isSidechain": False,
            "uuid": f"planted-{n}-{rng.getrandbits(64):016x}",
            "message": {
                "id": f"msg_planted_{n}_{rng.getrandbits(48):012x}",
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
            },
        }
        before = self.listening([source])
        starts_line = path.read_bytes().endswith(b"\n")  # a cut may have left half a line
        with path.open("a", encoding="utf-8") as f:
            f.write(("" if starts_line else "\n") + json.dumps(record) + "\n")
        for _ in range(3):
            skips = {rid: self.skips[rid] for rid in before}
            self.repaint(tile)
            self.wait_reactions(before, f"the routes of {source} to see a planted answer", skips)
            if all(self.reactions[rid] > k for rid, k in before.items()):
                return
            before = {rid: k for rid, k in before.items() if self.reactions[rid] <= k}
        self.planted_unrouted += len(before)

    def finish(self) -> None:
        """Resume what is paused or suspended, let the last rounds end, note every transcript."""
        self.resume_suspended()
        for route in self.paused:
            route.resume()
        self.paused.clear()
        wait_until(
            lambda: not any(r._in_round for r in self.hub.routes), 60, what="rounds in flight"
        )
        for name in [*self.sources, *self.sinks]:
            self.received[name].note(_transcript(self.hub, name))


async def _mcp_session(url: str, token: str | None, work: Any) -> Any:
    """``work(client)`` in one MCP session of the SDK's own client, carrying ``token``."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await work(client)


async def _list_agents(client: Any) -> dict[str, str]:
    """``list_agents``' answer: each reachable tile's state, by name."""
    result = await client.call_tool("list_agents", {})
    texts = [getattr(c, "text", "") for c in result.content]
    if result.is_error:
        return {"error": "".join(texts)}
    agents = [json.loads(text) for text in texts]  # (one block a tile)
    return {a["name"]: a["state"] for a in agents}


def _messages(exc: BaseException) -> str:
    """Every message of ``exc`` and of the exceptions grouped in it (the SDK's 401 error)."""
    return " | ".join([str(exc), *(_messages(e) for e in getattr(exc, "exceptions", ()))])


async def _mcp_call(client: Any, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
    result = await client.call_tool(tool, args)
    return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True)


def _echo(text: str) -> str:
    """The echo stand-in's answer to ``text`` (its persona, written here: the fixtures' API)."""
    return "Done: " + text[:40].replace("\n", "\\n")


def _transcript(hub: mh.Hub, name: str) -> Path | None:
    tile = hub.tiles.get(name)
    return transcript_path(tile) if tile is not None else None


def _records(data: bytes) -> list[dict[str, Any]]:
    """JSON records of a transcript; a line cut short (a truncated file) is skipped."""
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _prompts_in(data: bytes) -> list[str]:
    """User prompts in transcript bytes; a ``/clear`` command shows as ``/clear``."""
    out = []
    for rec in _records(data):
        if rec.get("type") != "user" or rec.get("isMeta") or rec.get("isSidechain"):
            continue
        content = rec.get("message", {}).get("content")
        if not isinstance(content, str) or content.startswith("<local-command-stdout>"):
            continue
        out.append("/clear" if content.startswith("<command-name>/clear") else content)
    return out


def _as_logged(text: str) -> str:
    """Text as the round log keeps it: lone surrogates become U+FFFD."""
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _tool_results(data: bytes) -> list[bool]:
    """Each Bash tool's result in transcript bytes: True if it ran, False if rejected."""
    return [
        not block.get("is_error")
        for rec in _records(data)
        if rec.get("type") == "user" and isinstance(rec.get("message", {}).get("content"), list)
        for block in rec["message"]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def _check_approvals(soak: Soak, by_route: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each approval route's rows carry the person's verdicts in order: approved and edited
    ones typed (an edit: the edited text, the template's in ``proposed_prompt``), rejected and
    expired ones not; every verdict an ``approval ...`` fault forced was given."""
    out = [f"the person: {e}" for e in soak.person_errors]
    for rid in soak.approval_routes:
        mine = [r for r in by_route.get(rid, []) if r["status"] != "exhausted"]
        given = soak.verdicts.get(rid, [])
        if [r["decision"] for r in mine] != given:
            out.append(f"{rid}: decisions {[r['decision'] for r in mine]}, person gave {given}")
            continue
        for r in mine:
            typed = r["status"] in ("delivered", "error")
            if typed != (r["decision"] in ("approved", "edited")):
                out.append(f"{rid} round {r['round']}: {r['decision']} but {r['status']}")
            if r["decision"] == "edited" and (
                r["prompt"] != soak.edits.get((rid, r["proposed_prompt"]))
            ):
                out.append(f"{rid} round {r['round']}: edited prompt is not the person's text")
            if r["decision"] != "edited" and r["proposed_prompt"] is not None:
                out.append(f"{rid} round {r['round']}: proposed_prompt on a {r['decision']} row")
    # (a route stopped before its next prompt, by a ``stop`` fault or its source killed in the
    # same step, is never asked again: a verdict forced on it stays unasked)
    left = {rid: v for rid, v in soak.forced.items() if v and soak.route(rid).state != "stopped"}
    if left:
        out.append(f"forced verdicts never asked: {left}")
    return out


def _by_pair(answers: Any) -> dict[str, list[str]]:
    """MCP answers ``(pair id, text)`` by pair, each pair's in order."""
    out: dict[str, list[str]] = {}
    for pair, text in answers:
        out.setdefault(pair, []).append(text)
    return out


def _check_git_sources(
    soak: Soak, rows: list[dict[str, Any]], routes: dict[str, mh.Route]
) -> list[str]:
    """No program of an armed repository ran (no marker, no ``env`` dump); each round of a git
    source's routes (not gathers: theirs have no change columns) counts what its turn changed,
    and the stand-in's answer file shows among the changes. (A git source killed by a later
    fault in its own step has no rounds.)"""
    assert soak.leaks is not None
    out = [f"git: {p.name} left by the repository's program" for p in soak.leaks.iterdir()]
    mine = [
        r
        for r in rows
        if r["source"] in soak.git_sources
        and r["route_id"] in routes
        and r["route_id"] not in soak.gathers
        and r["status"] in ("delivered", "shadow")
    ]
    out += [
        f"git: {r['route_id']} round {r['round']} has no change counts"
        for r in mine
        if r["files_changed"] is None or math.isnan(r["files_changed"])
    ]
    if mine and not any(WRITE_FILE in (_meta(r).get("changed_paths") or []) for r in mine):
        seen = [(r["route_id"], r["status"], r["files_changed"], _meta(r)) for r in mine]
        out.append(f"git: no round of {soak.git_sources} counted {WRITE_FILE} changed: {seen[:4]}")
    return out


def _check_no_secret_in_files(soak: Soak, roots: list[Path]) -> list[str]:
    """No file under ``roots`` holds the hub's API key or an MCP token it granted."""
    secrets = [s.encode() for s in (SOAK_API_KEY, *sorted(soak.tokens))]
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if any(secret in data for secret in secrets):
                found.append(str(path.relative_to(root)))
    return [f"a secret in {found[:5]}"] if found else []


def _meta(row: dict[str, Any]) -> dict[str, Any]:
    """A row's ``meta`` as a dict (the log may give it as JSON text)."""
    meta = row["meta"]
    return meta if isinstance(meta, dict) else json.loads(meta or "{}")


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


def _filled(row: dict[str, Any], max_rounds: int) -> str:
    """The row's template filled by the test: plain placeholders first, the output last."""
    text = str(row["template"])
    for key, value in (
        ("{source}", row["source"]),
        ("{round}", row["round"]),
        ("{maxRounds}", max_rounds),
    ):
        text = text.replace(key, str(value))
    return text.replace("{output}", str(row["extracted"])).replace(
        "{answers}", str(row["extracted"])
    )


def _typed(text: str, kind: str) -> str:
    """What typing ``text`` into an agent of ``kind`` must leave: cleaned, tabs as its profile types them."""
    return reference_clean(text).replace("\t", get_profile(kind).typed_tab)


def check(
    hub: mh.Hub, soak: Soak, log: mh.RoundLog, quotas: dict[str, int]
) -> tuple[list[str], dict[str, Any], dict[str, list[Any]]]:
    """Every invariant over the durable log and the receiving ends.

    Returns (violations, figures, what each target received).
    """
    violations: list[str] = []
    df = log.df
    rows = df.to_dict("records")
    by_route: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_route.setdefault(row["route_id"], []).append(row)
    routes = {r.id: r for r in hub.routes}

    # No lost round; max_rounds never exceeded; one turn fires once.
    if hub.unlogged:
        violations.append(f"{len(hub.unlogged)} rounds left unlogged")
    if not df["round_id"].is_unique:
        violations.append("a round_id appears twice")
    logged_ids = set(df["round_id"])
    for rec in soak.send_records:
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
            twice = [
                (r["round"], r["extracted"]) for r in mine if answers.count(r["extracted"]) > 1
            ]
            violations.append(f"{route.id}: one answer routed twice: {twice[:4]!r}"[:400])
        for r in mine:
            if r["transform"] == "prompt-wrap" and r["status"] in ("delivered", "shadow"):
                proposed = r["proposed_prompt"] if r["decision"] == "edited" else r["prompt"]
                if proposed != _filled(r, route.max_rounds):
                    violations.append(f"{route.id} round {r['round']}: prompt is not its template")
    violations += _check_approvals(soak, by_route)

    # Every delivered row at its target, in order (routed rounds, hand sends and MCP calls
    # alike); an MCP ask's answer row went back to its caller through the tool, not typed.
    typed_rows = (
        r
        for r in rows
        if r["status"] == "delivered" and r["route_id"] != "inbox" and "answer_to" not in _meta(r)
    )
    delivered: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(typed_rows, key=lambda r: r["delivered_at"]):
        delivered.setdefault(row["target"], []).append(row)
    received: dict[str, list[Any]] = {}
    checked = 0
    for name, where in soak.received.items():
        got = [p.strip() for p in where.prompts()]
        want = [
            r["prompt"] if r["prompt"] == "/clear" else _typed(r["prompt"] or "", "claude").strip()
            for r in delivered.get(name, [])
        ]
        received[name] = got
        for p in got:
            if _control_chars(p):
                violations.append(f"{name}: control input {_control_chars(p)}")
        checked += min(len(got), len(want))
        if got != want:
            violations.append(_mismatch(name, got, want))
    for name, (out, paste) in soak.recorders.items():
        data = out.read_bytes()
        want_rows = delivered.get(name, [])
        if paste:  # tmux pastes the cleaned text as it is, LF turned into CR
            got_b = PASTED.findall(data)
            want_b = [
                reference_clean(r["prompt"] or "").replace("\n", "\r").encode() for r in want_rows
            ]
            rest = PASTED.sub(b"", data)
        else:
            got_b = data.split(SUBMIT)[:-1]
            want_b = [_typed(r["prompt"] or "", "amp").encode() for r in want_rows]
            rest = data.split(SUBMIT)[-1]
        received[name] = got_b
        if rest:
            violations.append(f"{name}: {len(rest)} stray bytes outside prompts")
        checked += min(len(got_b), len(want_b))
        if got_b != want_b:
            violations.append(_mismatch(name, got_b, want_b))
        for chunk in got_b:
            text = chunk.decode("utf-8", "replace").replace("\r", "\n")
            if _control_chars(text) or b"\x1b" in chunk:
                violations.append(f"{name}: control input typed")
    # Nothing typed for a sink reached its bash: bash ran only what the test typed there.
    for name, history in soak.shells.items():
        ran = history.read_text(errors="replace").splitlines() if history.exists() else []
        stray = [line for line in ran if line != "fg" and "MADOHUB_STANDIN_THINK_S=" not in line]
        if stray:
            violations.append(f"{name}: its bash ran {stray[:3]}")
    # Permission asks answered from the inbox: one row each, its key's effect in the sink's
    # transcript (the tool ran, or was rejected), in order.
    inbox_rows = by_route.get("inbox", [])
    want_rows = [("delivered", "approved" if ok else "rejected") for _, ok in soak.permissions]
    if [(r["status"], r["decision"]) for r in inbox_rows] != want_rows:
        violations.append(f"inbox rows {len(inbox_rows)} for {len(soak.permissions)} answers")
    for name in {name for name, _ in soak.permissions}:
        ran = [ok for path in soak.received[name].paths for ok in _tool_results(path.read_bytes())]
        want = [ok for n, ok in soak.permissions if n == name]
        if ran != want:
            violations.append(f"{name}: tools allowed {ran}, answered {want}")
        else:
            checked += len(want)
    violations += [f"MCP: {e}" for e in soak.mcp_errors]
    # Each MCP ask's answer row holds the answer the tool returned, in order; each refusal of
    # a known caller is an error row of its pair (and typed nothing: the targets' checks).
    # (by pair: the asks of a ``concurrent asks`` fault end in the engine's order)
    answer_rows = [r for r in rows if "answer_to" in _meta(r)]
    got_answers = _by_pair((r["route_id"], r["extracted"]) for r in answer_rows)
    if got_answers != _by_pair(soak.mcp_answers):
        violations.append(
            f"MCP answers {list(got_answers.items())[:3]}, the tool returned {soak.mcp_answers[:3]}"
        )
    else:
        checked += len(answer_rows)
    refused = Counter(
        r["route_id"]
        for r in rows
        if str(r["route_id"]).startswith("mcp:") and str(r["error"] or "").startswith("refused: ")
    )
    if refused != soak.mcp_refused_rows:
        violations.append(f"MCP refusal rows {dict(refused)}, made {dict(soak.mcp_refused_rows)}")
    n_delivered = sum(len(v) for v in delivered.values()) + len(inbox_rows) + len(answer_rows)
    if checked != n_delivered:
        violations.append(f"{checked} of {n_delivered} delivered rows found at their targets")

    applied = Counter(kind for _, kind, _ in soak.applied)
    for kind, quota in quotas.items():
        if applied[kind] < quota:
            violations.append(f"fault {kind!r} applied {applied[kind]} times, fewer than {quota}")
    hand = sum(1 for _, text in soak.sends if text != "/clear")
    if soak.hostile_sends < hand // 6:  # drawn at 30%: half of that is far below any seed's share
        violations.append(f"only {soak.hostile_sends} hostile prompts in {hand} sends")
    if applied["resume"] < quotas.get("pause", 0):
        violations.append(f"{applied['resume']} resumes for {quotas.get('pause')} pauses")
    channel = hub.runtime.tiles.hook_channel()
    counts = Counter(channel.counts) if channel is not None else Counter()
    for reason, n in soak.hook_refusals.items():
        if counts[reason] < n:
            violations.append(f"hook channel refused {counts[reason]} for {reason!r}, sent {n}")
    if any("FORGED by the soak" in str(r["extracted"]) for r in rows):
        violations.append("a forged hook's answer was routed")
    for gid, name, rounds_then in soak.gather_kills:
        # The round after the kill may still hold an answer the source gave before it died
        # (planted after the step); from then on the dead source is named as missing.
        later = [
            r
            for r in by_route.get(gid, [])
            if r["round"] > rounds_then and r["status"] != "exhausted"
        ]
        for k, row in enumerate(later):
            meta = _meta(row)
            named = name in meta.get("gather_missing", {})
            if not named and (k > 0 or name not in meta.get("gathered", [])):
                violations.append(f"{gid} round {row['round']}: killed source {name} not named")
    violations += [f"crafted record: {e}" for e in soak.crafted_errors]
    if soak.opencode is not None:  # its rounds carry the database's own answer, never another
        oc_rows = [r for r in by_route.get(soak.opencode[3], []) if r["status"] != "exhausted"]
        violations += [
            f"{r['route_id']} round {r['round']}: not the database's answer"
            for r in oc_rows
            if r["extracted"] != OPENCODE_ANSWER
        ]
    violations += _check_git_sources(soak, rows, routes)
    violations += _check_no_secret_in_files(soak, [Path(os.environ["HOME"]), soak.project.parent])
    unknown = [
        rid
        for rid in by_route
        if rid not in ("send", "inbox") and not rid.startswith("mcp:") and rid not in routes
    ]
    if unknown:
        violations.append(f"rows of routes the hub does not know: {unknown[:5]}")

    figures = {
        "seed": SEED,
        "steps": STEPS,
        "rounds": len(df),
        "route rounds": int((df["route_id"] != "send").sum()),
        "hand sends": int((df["route_id"] == "send").sum()),
        "by status": dict(Counter(df["status"])),
        "errors by cause": dict(
            Counter(str(e)[:48] for e in df.loc[df["status"] == "error", "error"]).most_common(8)
        ),
        "routes": len(hub.routes),
        "tiles": len(hub.tiles),
        "delivered rows checked at targets": checked,
        "gathers": len(soak.gathers),
        "gather rounds": int(df["route_id"].isin(soak.gathers).sum()),
        "approval routes": len(soak.approval_routes),
        "approvals": dict(Counter(v for vs in soak.verdicts.values() for v in vs)),
        "permissions answered": len(soak.permissions),
        "mcp rows": int(df["route_id"].str.startswith("mcp:").sum()),
        "mcp answers": len(soak.mcp_answers),
        "mcp refusal rows": sum(soak.mcp_refused_rows.values()),
        "faults applied": len(soak.applied),
        "faults": dict(applied),
        "hostile prompts": soak.hostile_sends,
        "planted answers a route skipped after 3 repaints": soak.planted_unrouted,
        "git sources": len(soak.git_sources),
        "crafted record slowest look s": round(soak.crafted_slowest_s, 2),
        "violations": len(violations),
    }
    return violations, figures, received


def run_soak(
    tmux_socket: str, folder: Path, steps: int, quotas: dict[str, int]
) -> tuple[Soak, list[str], dict[str, Any], dict[str, list[Any]]]:
    """One seeded run in ``folder``: set-up, ``steps`` steps with the schedule's faults, checks."""
    folder.mkdir(parents=True, exist_ok=True)
    project = folder / "proj"
    project.mkdir(exist_ok=True)
    log_path = folder / "soak.sqlite3"
    schedule = draw_schedule(steps, quotas)
    started = time.monotonic()
    key_before = os.environ.get("ANTHROPIC_API_KEY")
    os.environ["ANTHROPIC_API_KEY"] = SOAK_API_KEY  # (the hub's own environment holds its key)
    with FakeAnthropic(reply="AI says hi", api_key=SOAK_API_KEY) as fake:
        hub = mh.Hub(
            tmux_socket,
            IDLE_DELAY_MS,
            log_path,
            api_key=SOAK_API_KEY,
            base_url=fake.base_url,
        )
        hub.mcp_max_rounds, hub.mcp_cooldown_ms = 20, 1000  # (a pair's calls are few, spread)
        leaks = folder / "git-leaks"
        leaks.mkdir(exist_ok=True)
        soak = Soak(hub, project, fake, leaks=leaks)
        try:
            for i, paste in enumerate((False, True)):
                out = folder / f"rec{i}.bin"
                start_recorder(hub, f"r{i}", out, paste=paste)
                soak.recorders[f"r{i}"] = (out, paste)
            for _ in range(3):
                soak.add_sink()
            for _ in range(5):
                soak.add_source()
            for _ in range(2):
                soak.add_gather()
            for source in soak.sources[:APPROVAL_ROUTES]:
                soak.add_route(source, approve=True)
            for number in range(steps):
                soak.step(number)
                for fault in (f for f in schedule if f.step == number):
                    soak.apply(fault)
                soak.replace_spent_routes()
            soak.finish()
        finally:
            hub.close()
            if key_before is None:
                os.environ.pop("ANTHROPIC_API_KEY", None)
            else:
                os.environ["ANTHROPIC_API_KEY"] = key_before
    log = mh.RoundLog(log_path, read_only=True)
    try:
        violations, figures, received = check(hub, soak, log, quotas)
    finally:
        log.close()
    figures["seconds"] = round(time.monotonic() - started, 1)
    return soak, violations, figures, received


def test_schedule_is_drawn_from_the_seed_alone() -> None:
    first, again = draw_schedule(STEPS, FAULT_QUOTAS), draw_schedule(STEPS, FAULT_QUOTAS)
    assert first == again
    kinds = Counter(f.kind for f in first)
    assert {k: kinds[k] for k in FAULT_QUOTAS} == FAULT_QUOTAS
    assert kinds["resume"] == FAULT_QUOTAS["pause"]
    assert all(0 < f.step < STEPS for f in first)
    assert [f.step for f in first] == sorted(f.step for f in first)


@pytest.mark.timeout(900)
def test_soak_thousand_rounds_with_faults_keeps_every_invariant(
    tmux_socket: str, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, violations, figures, _ = run_soak(tmux_socket, tmp_path / "run", STEPS, FAULT_QUOTAS)
    with capsys.disabled():
        print(f"\nsoak figures: {json.dumps(figures)}")
    assert figures["rounds"] >= MIN_ROUNDS
    assert violations == [], violations[:20]


@pytest.mark.timeout(600)
def test_one_seed_replays_the_same_faults_and_outcome(
    tmux_socket: str, home: Path, tmp_path: Path
) -> None:
    runs = [run_soak(tmux_socket, tmp_path / f"run{i}", 8, SHORT_QUOTAS) for i in range(2)]
    (one, v1, f1, got1), (two, v2, f2, got2) = runs
    assert v1 == [] and v2 == [], (v1[:10], v2[:10])
    assert one.applied == two.applied
    assert len(one.applied) >= len(SHORT_QUOTAS)
    assert one.sends == two.sends
    # Routes of different sources deliver into one target at once: their order within a
    # step is the engine's, so what each target received is compared as a multiset.
    assert {k: sorted(v) for k, v in got1.items()} == {k: sorted(v) for k, v in got2.items()}
    assert (f1["rounds"], f1["by status"]) == (f2["rounds"], f2["by status"])
