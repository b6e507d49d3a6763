"""A route's loop without tmux: an in-memory RouteContext drives a real Route.

The context scripts what the route would see (output chunks at given times,
the source's answers and states) on a clock the test owns, and runs each round
through the real ``run_round`` in shadow dispatch (nothing is typed), so the
loop's promises are checked fast and exactly. The same promises are checked on
real tmux with stand-in agents in test_routing.py and test_replay_and_ai.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from madohub_nb.defaults import PRICES_USD_PER_MTOK
from madohub_nb.errors import LogError, MadohubValueError
from madohub_nb.io.log import RoundRecord
from madohub_nb.io.machine import LocalMachine
from madohub_nb.io.tmux import Tmux
from madohub_nb.io.transcripts import Extraction, TurnUsage
from madohub_nb.model import TileState
from madohub_nb.pipeline.deliver import Deliverer
from madohub_nb.pipeline.events import HubEvent, RouteStateChanged, TurnSkipped
from madohub_nb.pipeline.round import RoundPlan, round_tokens, run_round
from madohub_nb.pipeline.route import Route, build_route
from madohub_nb.pipeline.tile import Tile
from madohub_nb.pipeline.transforms import AIClientConfig

HORIZON_S = 120.0
"""How far past the last scripted event the clock runs before the route is left waiting."""


def _tile(name: str) -> Tile:
    """A Tile object for a tmux server that is never started (the context does all I/O)."""
    machine = LocalMachine(Tmux("mh-never-started"))
    return Tile(name, "%99", "claude", machine, session="s", created=False)


def answer(text: str, key: str, method: str = "jsonl") -> Extraction:
    return Extraction(text, method, None, message_id=key)  # type: ignore[arg-type]


@dataclass
class Script:
    """What the source does, on the test's clock (seconds)."""

    output: list[tuple[float, str | bytes]] = field(default_factory=list)
    answers: list[tuple[float, Extraction | None]] = field(default_factory=list)
    """The source's last answer from each time on (before the first: none)."""
    states: list[tuple[float, TileState]] = field(default_factory=list)
    """The source's state from each time on (before the first: idle)."""
    actions: list[tuple[float, Callable[[Route], None]]] = field(default_factory=list)
    """Calls made when the clock passes their time (pause, resume, stop)."""


class MemoryStream:
    """A source's output as a scripted stream: one listener, the route's."""

    def __init__(self, ctx: MemoryContext) -> None:
        self.ctx = ctx
        self.ended = False
        self.pane_exited = False
        self._buffer = b""
        self._activity: float | None = None

    # OutputStream
    def listen(self, wants_bytes: bool = True, pollable: bool = False) -> MemoryStream:
        return self

    async def settled(self) -> None:
        return None

    # OutputListener
    async def wait(self, timeout_s: float | None) -> bool:
        ctx = self.ctx
        await asyncio.sleep(0)  # let the test's other tasks run, as a real loop would
        ctx.deliver_due()
        if self._buffer:
            return True
        due = ctx.next_output_at()
        if due is not None and (timeout_s is None or due <= ctx.now_s + timeout_s):
            ctx.advance_to(due)
            return True
        if timeout_s is None or ctx.now_s + timeout_s > ctx.end_s:
            ctx.waiting.set()  # nothing more will happen: the test looks now
            await asyncio.Event().wait()
        ctx.advance_to(ctx.now_s + (timeout_s or 0.0))
        return False

    def take(self) -> bytes:
        self.ctx.deliver_due()
        data, self._buffer = self._buffer, b""
        return data

    def take_activity(self) -> float | None:
        at, self._activity = self._activity, None
        return at

    def wake(self) -> None:
        return None  # (no hooks in memory: the loop's sources have none)

    def close(self) -> None:
        return None

    def push(self, data: bytes, at_s: float) -> None:
        self._buffer += data
        self._activity = at_s


class MemoryContext:
    """A RouteContext (and the RoundServices of its rounds) held in memory, on a test clock."""

    session_id = "loop"
    prices: Mapping[str, Mapping[str, float]] = PRICES_USD_PER_MTOK
    target_wait_s = 5.0

    def __init__(self, script: Script, idle_delay_ms: int = 1000) -> None:
        self.script = script
        self.idle_delay_ms = idle_delay_ms
        self.now_s = 0.0
        self._output = sorted(script.output, key=lambda e: e[0])
        self._actions = sorted(script.actions, key=lambda e: e[0])
        times = [t for t, _ in [*script.output, *script.answers, *script.states, *script.actions]]
        self.end_s = max(times, default=0.0) + HORIZON_S
        self.stream = MemoryStream(self)
        self.waiting = asyncio.Event()
        self.deliverer = Deliverer()
        self.rows: list[RoundRecord] = []
        self.fired_at_s: list[float] = []
        self.answer_reads_s: list[float] = []
        self.events: list[HubEvent] = []
        self.plans: list[RoundPlan] = []
        self.route: Route | None = None

    # the clock
    def now_ms(self) -> float:
        return self.now_s * 1000

    async def sleep(self, seconds: float) -> None:
        self.advance_to(self.now_s + seconds)
        await asyncio.sleep(0)

    def advance_to(self, at_s: float) -> None:
        self.now_s = max(self.now_s, at_s)
        self.deliver_due()

    def next_output_at(self) -> float | None:
        return self._output[0][0] if self._output else None

    def deliver_due(self) -> None:
        while self._actions and self._actions[0][0] <= self.now_s:
            assert self.route is not None
            self._actions.pop(0)[1](self.route)
        while self._output and self._output[0][0] <= self.now_s:
            at, text = self._output.pop(0)
            self.stream.push(text.encode() if isinstance(text, str) else text, at)

    def _latest(self, timeline: list[tuple[float, Any]], default: Any) -> Any:
        found = default
        for at, value in sorted(timeline, key=lambda e: e[0]):
            if at <= self.now_s:
                found = value
        return found

    # RouteContext
    async def watch(self, tile: Tile) -> MemoryStream:
        return self.stream

    async def answer(self, tile: Tile, *, transcript: bool) -> Extraction | None:
        self.answer_reads_s.append(self.now_s)
        return self._latest(self.script.answers, None)

    async def state(self, tile: Tile) -> TileState:
        return self._latest(self.script.states, "idle")

    async def pane_gone(self, tile: Tile) -> bool:
        return False

    async def history(self, tile: Tile) -> str:
        return "\n".join(str(text) for at, text in self.script.output if at <= self.now_s)

    async def run_round(self, plan: RoundPlan) -> RoundRecord:
        self.fired_at_s.append(self.now_s)
        self.plans.append(plan)
        return await run_round(self, plan)

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        self.rows.append(rec)
        return rec

    def emit(self, event: HubEvent) -> None:
        self.events.append(event)

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        fn(*args)

    # RoundServices
    def ai_config(self, model: str | None = None) -> AIClientConfig:
        return AIClientConfig(api_key=None)

    def ensure_writable(self) -> None:
        return None

    def log_unwritable(self, exc: LogError) -> None:
        raise AssertionError(f"the in-memory log is always writable: {exc}")

    async def record(self, rec: RoundRecord) -> RoundRecord:
        self.rows.append(rec)
        return rec

    # what the tests read
    def skipped(self) -> list[str]:
        return [e.why for e in self.events if isinstance(e, TurnSkipped)]


def run_route(
    script: Script, idle_delay_ms: int = 1000, target_wait_s: float | None = None, **options: Any
) -> tuple[MemoryContext, Route]:
    """Start a shadow route on the script and run it until nothing more can happen."""
    settings: dict[str, Any] = dict(
        trigger="on-idle", transform="prompt-wrap", template="{output}", max_rounds=5,
        cooldown_ms=1000, stop_keyword=None, dispatch="shadow", pattern=None,
        allow_shell=False, delivery="typed", model=None, api_key=None,
    )  # fmt: skip
    settings.update(options)

    async def main() -> tuple[MemoryContext, Route]:
        ctx = MemoryContext(script, idle_delay_ms)
        route = ctx.route = build_route(ctx, 1, _tile("w"), _tile("r"), **settings)
        route.target_wait_s = target_wait_s
        route.start()
        done = asyncio.ensure_future(route.wait_closed())
        waiting = asyncio.ensure_future(ctx.waiting.wait())
        await asyncio.wait({done, waiting}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert done.done() or waiting.done(), "the route neither ended nor waited"
        route.cancel()
        await route.wait_closed()
        waiting.cancel()
        return ctx, route

    return asyncio.run(main())


def statuses(ctx: MemoryContext) -> list[str]:
    return [r.status for r in ctx.rows]


# on-idle ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion_pattern", "states", "fired_at_s"),
    [
        # No pattern: silence from t=4, but busy until t=6; the recheck 2 s later sees idle.
        (None, [(0.0, "busy"), (6.0, "idle")], [6.0]),
        # The pattern is the evidence: it showed at t=3, the silence after it is enough.
        ("DONE", [(0.0, "busy")], [4.0]),
    ],
)
def test_on_idle_waits_for_the_marker_then_silence(
    completion_pattern: str | None, states: list[tuple[float, TileState]], fired_at_s: list[float]
) -> None:
    script = Script(
        output=[(1.0, "working"), (2.0, "still working"), (3.0, "DONE")],
        answers=[(0.0, answer("old", "m0")), (2.5, answer("the answer", "m1"))],
        states=states,
    )
    ctx, route = run_route(script, completion_pattern=completion_pattern)
    assert ctx.fired_at_s == fired_at_s
    assert [(r.status, r.extracted, r.trigger) for r in ctx.rows] == [
        ("shadow", "the answer", "on-idle")
    ]
    assert route.rounds == 1


def test_on_idle_never_routes_the_turn_that_was_there_before_the_route() -> None:
    script = Script(output=[(1.0, "a repaint")], answers=[(0.0, answer("old", "m0"))])
    ctx, route = run_route(script)
    assert ctx.rows == [] and ctx.skipped() == ["already routed"]


def test_an_idle_source_whose_record_lags_its_screen_is_read_again_until_it_holds_the_turn() -> (
    None
):
    """Qwen Code 0.24.4 goes idle on screen before its chat file holds the answer: the first
    read finds the turn routed before; with no more output to wake the route, the record is
    read again RECHECK_MS apart (no event for the rereads) and the turn is routed once there."""
    script = Script(
        output=[(1.0, "Done: turn two")],
        answers=[(0.0, answer("turn one", "m0")), (4.5, answer("turn two", "m1"))],
    )
    ctx, route = run_route(script)
    assert ctx.fired_at_s == [6.0]  # read at 2 s (old), 4 s (old), 6 s (new)
    assert [r.extracted for r in ctx.rows] == ["turn two"]
    assert ctx.skipped() == ["already routed"]


def test_a_record_that_never_catches_up_is_read_again_a_bounded_number_of_times() -> None:
    script = Script(output=[(1.0, "a repaint")], answers=[(0.0, answer("old", "m0"))])
    ctx, route = run_route(script)
    assert ctx.rows == [] and ctx.skipped() == ["already routed"]
    reads_after_the_first = [t for t in ctx.answer_reads_s if t > 2.0]
    assert reads_after_the_first == [4.0, 6.0, 8.0]  # RECORD_LAG_CHECKS, RECHECK_MS apart


@pytest.mark.parametrize(
    ("second", "reason"),
    [
        (answer("the answer", "m1"), "already routed"),  # the same transcript message
        (answer("the  answer", "screen:2", "terminal"), "not new"),  # its text, from the screen
        (None, "no answer"),
    ],
)
def test_a_repeated_answer_is_not_routed_twice(second: Extraction | None, reason: str) -> None:
    script = Script(
        output=[(1.0, "turn one"), (10.0, "turn two")],
        answers=[(2.0, answer("the answer", "m1")), (10.5, second)],
    )
    ctx, route = run_route(script)
    assert [r.extracted for r in ctx.rows] == ["the answer"]
    assert ctx.skipped() == [reason]


# on-keyword ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "chunks",
    [
        ["waiting", "say GO now", "more output after the match"],
        ["waiting G", "O and more"],  # a match split across two chunks
    ],
)
def test_on_keyword_fires_once_on_a_match(chunks: list[str]) -> None:
    script = Script(output=[(1.0 + i, text) for i, text in enumerate(chunks)])
    ctx, route = run_route(script, trigger="on-keyword", pattern="GO")
    assert [(r.extracted, r.extraction_method) for r in ctx.rows] == [("GO", "terminal")]
    assert route.rounds == 1


def test_on_keyword_routes_the_answer_when_there_is_one() -> None:
    script = Script(output=[(1.0, "GO")], answers=[(0.5, answer("the answer", "m1"))])
    ctx, _ = run_route(script, trigger="on-keyword", pattern="GO")
    assert [(r.extracted, r.extraction_method) for r in ctx.rows] == [("the answer", "jsonl")]


# always -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "rounds", "fired_at_s"),
    [
        # Far apart: every chunk is a round of its own.
        ([(1.0, "a"), (10.0, "b"), (20.0, "c")], ["a", "b", "c"], [1.0, 10.0, 20.0]),
        # During the cooldown after "a" (3 s), "b" and "c" arrive: one round, at its end.
        ([(1.0, "a"), (1.5, "b"), (3.0, "c")], ["a", "bc"], [1.0, 4.0]),
    ],
)
def test_always_streams_every_chunk(
    output: list[tuple[float, str | bytes]], rounds: list[str], fired_at_s: list[float]
) -> None:
    ctx, _ = run_route(
        Script(output=output), trigger="always", transform="raw", template=None, cooldown_ms=3000
    )
    assert [r.extracted for r in ctx.rows] == rounds
    assert ctx.fired_at_s == fired_at_s


def test_a_utf8_character_split_across_chunks_arrives_whole() -> None:
    script = Script(output=[(1.0, b"un caf\xc3"), (2.0, b"\xa9 au lait")])
    ctx, _ = run_route(script, trigger="on-keyword", pattern="café")
    assert [r.extracted for r in ctx.rows] == ["café"]


# loop protection ----------------------------------------------------------------------


def test_cooldown_spaces_rounds_out() -> None:
    script = Script(output=[(1.0, "GO"), (2.0, "GO")])
    ctx, _ = run_route(script, trigger="on-keyword", pattern="GO", cooldown_ms=3000)
    assert ctx.fired_at_s == [1.0, 4.0]
    assert [r.round for r in ctx.rows] == [1, 2]


def test_max_rounds_exhausts_the_route_and_logs_the_last_answer() -> None:
    script = Script(output=[(1.0, "GO"), (5.0, "GO"), (9.0, "GO"), (13.0, "GO")])
    ctx, route = run_route(script, trigger="on-keyword", pattern="GO", max_rounds=2)
    assert statuses(ctx) == ["shadow", "shadow", "exhausted"]
    assert [r.round for r in ctx.rows] == [1, 2, 3]
    assert route.state == "exhausted" and route.rounds == 2


def test_the_stop_keyword_stops_the_route() -> None:
    script = Script(
        output=[(1.0, "GO"), (5.0, "GO"), (9.0, "GO")],
        answers=[(0.0, answer("keep going", "m1")), (4.0, answer("LGTM", "m2"))],
    )
    ctx, route = run_route(script, trigger="on-keyword", pattern="GO", stop_keyword="LGTM")
    assert statuses(ctx) == ["shadow", "stopped"]
    assert route.state == "stopped" and "LGTM" in (ctx.rows[-1].error or "")


def test_a_paused_route_skips_turns_until_resumed() -> None:
    script = Script(
        output=[(1.0, "GO"), (4.0, "GO"), (8.0, "GO")],
        actions=[(3.0, Route.pause), (6.0, Route.resume)],
    )
    ctx, route = run_route(script, trigger="on-keyword", pattern="GO")
    assert ctx.fired_at_s == [1.0, 8.0]
    assert ctx.skipped() == ["paused"]
    assert [e.state for e in ctx.events if isinstance(e, RouteStateChanged)] == [
        "active",  # after round 1
        "paused",
        "active",
        "active",  # after round 2
    ]
    assert route.state == "active"


@pytest.mark.parametrize(("route_wait_s", "plan_wait_s"), [(None, 5.0), (2.5, 2.5)])
def test_each_round_takes_the_target_wait_of_its_route_else_the_hubs(
    route_wait_s: float | None, plan_wait_s: float
) -> None:
    script = Script(output=[(1.0, "GO")])
    ctx, _ = run_route(script, target_wait_s=route_wait_s, trigger="on-keyword", pattern="GO")
    assert [p.target_wait_s for p in ctx.plans] == [plan_wait_s]


# budgets ------------------------------------------------------------------------------


def priced(
    text: str, key: str, model: str | None = "claude-sonnet-4-5", **tokens: Any
) -> Extraction:
    """An answer whose turn used ``tokens`` (input_tokens=..., output_tokens=...) at ``model``."""
    counts = {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    counts.update(tokens)
    usage = TurnUsage(model=model, complete=True, **counts)
    return Extraction(text, "jsonl", None, message_id=key, usage=usage)


def turns(*found: Extraction) -> Script:
    """One on-keyword turn every 4 s, each with its answer."""
    return Script(
        output=[(1.0 + 4 * i, "GO") for i in range(len(found))],
        answers=[(0.5 + 4 * i, a) for i, a in enumerate(found)],
    )


def test_a_money_budget_ends_the_route_exhausted_before_the_round_over_it() -> None:
    # Sonnet 4.5 input: $3 per million; each turn reads 100k tokens: $0.30 a round.
    script = turns(*(priced(f"answer {i}", f"m{i}", input_tokens=100_000) for i in range(5)))
    ctx, route = run_route(
        script, trigger="on-keyword", pattern="GO", max_rounds=10, max_cost_usd=0.5
    )
    # Round 1 spent $0.30 (under), round 2 $0.60 (over): no third delivery; the next
    # turn is logged exhausted, naming what was spent against the limit.
    assert statuses(ctx) == ["shadow", "shadow", "exhausted"]
    assert route.state == "exhausted" and route.rounds == 2
    assert route.spent_usd == pytest.approx(0.6)
    assert "$0.6000 of max_cost_usd=$0.5" in (route.last_error or "")
    assert ctx.rows[-1].error == route.last_error
    assert "budget=$0.6000/$0.5" in repr(route)


def test_a_token_budget_counts_each_turns_input_and_output() -> None:
    script = turns(
        *(
            priced(
                f"answer {i}", f"m{i}", input_tokens=700, output_tokens=300, cache_read_tokens=9_000
            )
            for i in range(5)
        )
    )
    ctx, route = run_route(
        script, trigger="on-keyword", pattern="GO", max_rounds=10, max_tokens=2_500
    )
    # 1,000 tokens a round (cache reads are not counted): 1,000, 2,000, 3,000 ≥ 2,500.
    assert statuses(ctx) == ["shadow", "shadow", "shadow", "exhausted"]
    assert route.spent_tokens == 3_000 and route.state == "exhausted"
    assert "spent 3,000 tokens of max_tokens=2,500" in (route.last_error or "")


def test_without_a_budget_nothing_is_counted_and_max_rounds_still_rules() -> None:
    script = turns(*(priced(f"answer {i}", f"m{i}", input_tokens=10**6) for i in range(4)))
    ctx, route = run_route(script, trigger="on-keyword", pattern="GO", max_rounds=2)
    assert statuses(ctx) == ["shadow", "shadow", "exhausted"]
    assert "max_rounds=2" in (route.last_error or "") and route.budget_spent == ""


@pytest.mark.parametrize(
    ("found", "budget", "why"),
    [
        # A model the price table does not know: its cost is unknown, not free.
        (
            priced("a", "m1", model="mystery-model-9", input_tokens=10),
            {"max_cost_usd": 1.0},
            "no price",
        ),
        # A screen-extracted turn has no usage at all.
        (answer("a", "m1", "terminal"), {"max_cost_usd": 1.0}, "usage could not be read"),
        (answer("a", "m1"), {"max_tokens": 1000}, "usage could not be read"),
    ],
)
def test_a_budgeted_route_whose_spending_is_unknown_says_so_and_stops(
    found: Extraction, budget: dict[str, Any], why: str
) -> None:
    script = turns(found, priced("b", "m2", input_tokens=10))
    ctx, route = run_route(script, trigger="on-keyword", pattern="GO", **budget)
    assert statuses(ctx) == ["shadow"]  # the second turn is never routed
    assert route.state == "stopped"
    assert "unknown" in (route.last_error or "") and why in (route.last_error or "")


@pytest.mark.parametrize(
    ("budget", "match"),
    [
        ({"max_cost_usd": 0}, "max_cost_usd must be a number of US dollars above 0"),
        ({"max_cost_usd": -2.5}, "above 0.*got -2.5"),
        ({"max_cost_usd": float("inf")}, "above 0"),
        ({"max_cost_usd": "2.5"}, "got '2.5'"),
        ({"max_cost_usd": True}, "above 0"),
        ({"max_tokens": 0}, "max_tokens must be a whole number of tokens of 1 or more"),
        ({"max_tokens": -5}, "1 or more.*got -5"),
        ({"max_tokens": 1.5}, "whole number"),
    ],
)
def test_a_zero_negative_or_non_number_budget_is_a_range_error(
    budget: dict[str, Any], match: str
) -> None:
    with pytest.raises(MadohubValueError, match=match):
        run_route(Script(), **budget)


def test_a_rounds_tokens_add_its_ai_transforms_and_are_unknown_when_a_count_is() -> None:
    rec = RoundRecord(
        route_id="r", source="w", target="r", round=1, trigger="on-idle", transform="summary",
        dispatch="shadow", status="shadow", input_tokens=100, output_tokens=20,
        cache_read_tokens=5_000, ai_model="claude-haiku-4-5", ai_input_tokens=40,
        ai_output_tokens=7,
    )  # fmt: skip
    assert round_tokens(rec) == 167
    rec.ai_output_tokens = None  # the API reply carried no usage
    assert round_tokens(rec) is None
