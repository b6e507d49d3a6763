"""Routes: source tile → target tile, with a trigger, a transform and loop protection.

A route is a small task on the engine loop: it listens to the source's pushed
output, asks its trigger (a :class:`~madohub_nb.pipeline.triggers.TurnDetector`)
for the next finished turn, applies loop protection, and hands each firing to a
round (:func:`madohub_nb.pipeline.round.run_round`). Everything it needs from
around it (the source's output stream and answer, tile states, rounds, events,
the clock) comes through one small :class:`RouteContext`, so its loop runs
without tmux in tests.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import html
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from ..agents.screen import strip_ansi
from ..defaults import DELIVERY_MODES, TARGET_WAIT_S, check_choice
from ..engine import spawn
from ..errors import MadohubValueError
from ..io.git import Changes
from ..io.hooks import HookEvent
from ..io.log import RoundRecord
from ..io.transcripts import Extraction
from ..io.watch import PaneStream
from ..model import RoundStatus, RouteState, TileState
from .conditions import Condition, Edge, make_condition
from .events import HubEvent, RouteStateChanged, TurnSkipped
from .extract import extract
from .inbox import Approval, Inbox, check_approve_timeout
from .options import with_defaults
from .protection import Budget, LoopGuard
from .round import (
    Dispatch,
    GatherRound,
    RoundPlan,
    RoundServices,
    dispatch_named,
    round_tokens,
    run_round,
)
from .tile import Tile
from .transforms import TransformSpec, make_transform_spec, require_ai_key
from .triggers import Heard, Turn, TurnDetector, check_completion_pattern, make_detector


class RouteServices(RoundServices, Protocol):
    """What a route needs from the hub around it today (the hub's Runtime implements it).

    Routes reach it through :func:`route_context`; new code should offer a
    :class:`RouteContext` directly.
    """

    @property
    def idle_delay_ms(self) -> int:
        """Silence after the completion evidence before on-idle fires (live setting)."""

    async def watch(self, tile: Tile) -> PaneStream:
        """The pushed output of ``tile``'s pane (engine thread)."""

    def emit(self, event: HubEvent) -> None:
        """Tell listeners (widgets) something changed; from any thread."""

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the engine thread."""

    @property
    def inbox(self) -> Inbox:
        """Where an approval route's prompts wait for a person."""


class OutputListener(Protocol):
    """One route's view of its source's output (:class:`madohub_nb.io.watch.Listener`)."""

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait for new output (or the stream ending); False on timeout."""

    def take(self) -> bytes:
        """The bytes that arrived since the last call."""

    def take_activity(self) -> float | None:
        """When the source last spoke since the last call (seconds, the context's clock)."""

    def wake(self) -> None:
        """End a :meth:`wait` now (the route's own reason: its source's hook)."""

    def close(self) -> None: ...


class OutputStream(Protocol):
    """A source's pushed output (:class:`madohub_nb.io.watch.PaneStream`)."""

    ended: bool
    """The stream stopped (a host's link dropped): open it again once the host is back."""
    pane_exited: bool
    """The pane's own process ended."""

    def listen(self, wants_bytes: bool = True, pollable: bool = False) -> OutputListener: ...

    async def settled(self) -> None:
        """Wait until the source's output reaches the listeners as they asked."""


class RouteContext(Protocol):
    """Exactly what a route works with: its source's output and answer, tile states, rounds,
    events and the clock. The hub gives each route one; tests give an in-memory one."""

    @property
    def session_id(self) -> str:
        """The hub session whose log the route's rows go to."""

    @property
    def idle_delay_ms(self) -> int:
        """Silence after the completion evidence before on-idle fires (live setting)."""

    @property
    def target_wait_s(self) -> float:
        """How long a round waits for its target to be ready (live setting)."""

    def now_ms(self) -> float:
        """The clock of triggers and cooldowns (monotonic ms; output activity is on it too)."""

    async def sleep(self, seconds: float) -> None:
        """Wait on that clock (a cooldown)."""

    async def watch(self, tile: Tile) -> OutputStream:
        """The pushed output of ``tile``'s pane (as :meth:`RouteServices.watch`)."""

    async def answer(self, tile: Tile, *, transcript: bool) -> Extraction | None:
        """``tile``'s last answer: its agent's own record when ``transcript``, else its screen."""

    async def state(self, tile: Tile) -> TileState:
        """``tile``'s state now."""

    async def pane_gone(self, tile: Tile) -> bool:
        """``tile``'s pane is gone or dead."""

    async def history(self, tile: Tile) -> str:
        """``tile``'s screen and scrollback, ANSI stripped (the terminal transforms)."""

    async def run_round(self, plan: RoundPlan) -> RoundRecord:
        """Run one round and log it (:func:`madohub_nb.pipeline.round.run_round`)."""

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        """Log a row at once (the route ended on an error)."""

    def emit(self, event: HubEvent) -> None:
        """Tell listeners (widgets, tests) something changed; from any thread."""

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the engine thread."""

    @property
    def inbox(self) -> Inbox:
        """Where an approval route's prompts wait for a person (``hub.inbox``)."""


class ServicesContext:
    """Today's :class:`RouteServices` (the hub's Runtime) as a :class:`RouteContext`.

    The tmux and file work a route needs (extract, state, history) runs in a
    thread, never on the loop itself.
    """

    def __init__(self, services: RouteServices) -> None:
        self._services = services

    @property
    def session_id(self) -> str:
        return self._services.session_id

    @property
    def idle_delay_ms(self) -> int:
        return self._services.idle_delay_ms

    @property
    def target_wait_s(self) -> float:
        # The hub's live setting once its runtime offers one; until then the default.
        return float(getattr(self._services, "target_wait_s", TARGET_WAIT_S))

    def now_ms(self) -> float:
        return time.monotonic() * 1000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def watch(self, tile: Tile) -> OutputStream:
        return await self._services.watch(tile)

    async def answer(self, tile: Tile, *, transcript: bool) -> Extraction | None:
        return await asyncio.to_thread(extract, tile, not transcript)

    async def state(self, tile: Tile) -> TileState:
        return await tile.astate()

    async def pane_gone(self, tile: Tile) -> bool:
        return await asyncio.to_thread(_pane_gone, tile)

    async def history(self, tile: Tile) -> str:
        return await asyncio.to_thread(tile.history)

    async def run_round(self, plan: RoundPlan) -> RoundRecord:
        return await run_round(self._services, plan)

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        return self._services.record_now(rec)

    def emit(self, event: HubEvent) -> None:
        self._services.emit(event)

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        self._services.call_soon(fn, *args)

    @property
    def inbox(self) -> Inbox:
        return self._services.inbox


def route_context(services: RouteServices) -> RouteContext:
    """The context a route of today's hub gets (see :class:`ServicesContext`)."""
    return ServicesContext(services)


def _pane_gone(tile: Tile) -> bool:
    info = tile.pane_info()
    return info is None or info.dead


class Route:
    """A live connection between two tiles. Made by :meth:`Hub.connect`."""

    def __init__(
        self,
        context: RouteContext,
        route_id: str,
        source: Tile,
        target: Tile,
        *,
        detector: TurnDetector,
        pattern: str | None,
        spec: TransformSpec,
        guard: LoopGuard,
        dispatch: Dispatch,
        delivery: str,
        allow_shell: bool,
        budget: Budget | None = None,
        condition: Condition | None = None,
        approve: bool = False,
        approve_timeout_s: float | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = route_id
        self.options: Mapping[str, Any] = MappingProxyType(dict(options or {}))
        """Every option it was made with (:data:`~.options.ROUTE`), defaults filled in."""
        self._context = context
        self.source_tile = source
        self.target_tile = target
        self.detector = detector
        """The trigger, as the one question the route asks it (see triggers.py)."""
        self.pattern = pattern
        self.spec = spec
        self.guard = guard
        self.budget = budget if budget is not None else Budget()
        """Money and token limits, and what the rounds spent (loop protection too)."""
        self.dispatch_mode = dispatch
        self.delivery = delivery
        self.allow_shell = allow_shell
        self.condition = condition if condition is not None else Condition()
        """``when`` / ``unless``: which answers the route routes (the others are skipped)."""
        self.approve = approve
        """Every prompt waits in ``hub.inbox`` for a person to approve, edit or reject it."""
        self.approve_timeout_s = approve_timeout_s
        """An unanswered prompt expires after this long (nothing typed); None: it waits."""
        self._approval: Approval | None = None
        """The prompt waiting for a person now (engine loop)."""
        self.target_wait_s: float | None = None
        """How long each round waits for the target to be ready; None: the hub's setting."""
        self.state: RouteState = "active"
        self.last_status: RoundStatus | None = None
        self.last_round_id: str | None = None
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set once the route listens to its source (a turn finishing later will fire it)."""
        # Output arrives in arbitrary chunks: keep a UTF-8 character split across two whole.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._listener: OutputListener | None = None
        self._hook_events: collections.deque[HookEvent] = collections.deque(maxlen=64)
        """The source's end-of-turn hooks not yet handed to the trigger (engine loop)."""

    # the public face ------------------------------------------------------
    @property
    def source(self) -> str:
        """The source tile's name."""
        return self.source_tile.name

    @property
    def target(self) -> str:
        """The target tile's name."""
        return self.target_tile.name

    @property
    def tiles(self) -> tuple[Tile, ...]:
        """Every tile the route touches, its source(s) first and its target last."""
        return (self.source_tile, self.target_tile)

    def edges(self) -> list[Edge]:
        """The route's hops source → target, as the cycle check sees them."""
        return [
            Edge(self.id, tile.name, self.target, self.condition, self.guard.stop_keyword)
            for tile in self.tiles[:-1]
        ]

    @property
    def notes(self) -> str:
        """What else shapes the route, for cards and reprs (its condition; '' without)."""
        return self.condition.describe()

    def gather_round(self) -> GatherRound | None:
        """The gather's round the next plan is (a :class:`Gather`'s); None for a route."""
        return None

    @property
    def when(self) -> str | None:
        """The regex an answer must match to be routed (None: any answer)."""
        return self.condition.when.pattern if self.condition.when is not None else None

    @property
    def unless(self) -> str | None:
        """The regex an answer must not match to be routed (None: no such rule)."""
        return self.condition.unless.pattern if self.condition.unless is not None else None

    @property
    def trigger(self) -> str:
        """The trigger's name, as ``hub.connect`` took it and the round log writes it."""
        return self.detector.name

    @property
    def dispatch(self) -> str:
        """The dispatch mode's name, as ``hub.connect`` took it and the round log writes it."""
        return self.dispatch_mode.name

    @property
    def rounds(self) -> int:
        """Rounds fired so far."""
        return self.guard.rounds

    @property
    def max_rounds(self) -> int:
        """Rounds this route may fire before it is exhausted (1 to 20)."""
        return self.guard.max_rounds

    @property
    def max_cost_usd(self) -> float | None:
        """US dollars the route may spend before it is exhausted (None: no money budget)."""
        return self.budget.max_cost_usd

    @property
    def max_tokens(self) -> int | None:
        """Input + output tokens the route may spend before it is exhausted (None: no limit)."""
        return self.budget.max_tokens

    @property
    def spent_usd(self) -> float:
        """What the route's rounds cost so far (counted when it has a money budget)."""
        return self.budget.spent_usd

    @property
    def spent_tokens(self) -> int:
        """Input + output tokens the route's rounds used so far (counted with a token budget)."""
        return self.budget.spent_tokens

    @property
    def budget_spent(self) -> str:
        """What was spent of each limit, e.g. ``$0.0123/$2.5 · 1,234/200,000 tokens`` ('' without)."""
        return self.budget.summary()

    @property
    def transform(self) -> str:
        """The name of the transform that turns each answer into the next prompt."""
        return self.spec.name

    @property
    def ended(self) -> bool:
        """Stopped or exhausted, and its task is over: it will never fire or log again."""
        return self.state in ("stopped", "exhausted") and self._task is None and self._started

    def pause(self) -> None:
        """Stop firing until :meth:`resume`; turns that finish meanwhile are skipped."""
        if self.state == "active":
            self._set_state("paused")

    def resume(self) -> None:
        """Fire again on the next finished turn after :meth:`pause`."""
        if self.state == "paused":
            self._set_state("active")

    held = False
    """Paused by the hub because a tile's host is unreachable: turns wait, not skipped."""
    _unheld: asyncio.Event | None = None

    def hold(self, reason: str) -> None:
        """Pause while a host is unreachable (engine loop); a turn that finishes meanwhile
        waits for :meth:`release` and is routed then, once."""
        if self.state == "active":
            self.held, self.last_error = True, reason
            self._unheld = asyncio.Event()
            self._set_state("paused")

    def release(self) -> None:
        """The host is back: resume a route :meth:`hold` paused (engine loop)."""
        if self.held:
            self.held = False
            if self._unheld is not None:
                self._unheld.set()
            if self.state == "paused":
                self.last_error = None
                self._set_state("active")

    def stop(self) -> None:
        """End the route for good (a round already typing finishes first)."""
        if self.state in ("active", "paused"):
            self._set_state("stopped")
        self._context.call_soon(self._expire_approval, f"route {self.id} was stopped")
        self._context.call_soon(self._cancel_if_idle)

    def end(self) -> None:
        """The hub closes: the route reads ``stopped`` at once (its task is cancelled next)."""
        if self.state in ("active", "paused", "exhausted"):
            self.state = "stopped"

    def cancel(self) -> None:
        """Cancel the route's task (engine thread)."""
        if self._task is not None:
            self._task.cancel()

    def _expire_approval(self, reason: str) -> None:
        if self._approval is not None:
            self._approval.expire(reason)

    def _cancel_if_idle(self) -> None:
        if self._task is not None and not self._in_round:
            self._task.cancel()

    def _set_state(self, state: RouteState) -> None:
        self.state = state
        self._context.emit(RouteStateChanged(self.id, state, self))

    # the task -------------------------------------------------------------
    _in_round = False
    _started = False

    def start(self) -> None:
        """Start listening (engine loop only)."""
        self._started = True
        self._task = spawn(self._run(), name=f"route {self.id}")
        self._task.add_done_callback(self._task_done)
        self._task.add_done_callback(self._forget_task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task that ended on an exception leaves the route ``stopped``, with the reason logged."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        error = f"the route stopped on an unexpected error: {type(exc).__name__}: {exc}"
        rec = self._context.record_now(
            RoundRecord(
                route_id=self.id, source=self.source, target=self.target, round=self.rounds,
                trigger=self.trigger, transform=self.transform, dispatch=self.dispatch,
                status="error", error=error, session_id=self._context.session_id,
            )
        )  # fmt: skip
        self.last_status, self.last_round_id, self.last_error = rec.status, rec.round_id, error
        self._set_state("stopped")

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        # A cancelled task keeps its CancelledError, whose traceback holds the task's
        # frames (listener, timers, trigger state): an ended route must not keep them.
        if self._task is task:
            self._task = None

    async def _run(self) -> None:
        """Listen to the source and ask the trigger, after each output or silence, for a turn."""
        stream = await self._listen()
        seen = _SeenSource(self)
        await self.detector.start(seen)
        hooks = self.source_tile.hooks
        unsubscribe = hooks.subscribe(self._on_hook) if hooks is not None else None
        await asyncio.to_thread(self.source_tile.changes.start, self.id)  # (git: what turns change)
        self.ready.set()
        try:
            while self.state in ("active", "paused", "exhausted"):
                heard = await self._hear(self.detector.wait_s(self.now_ms()))
                if heard.quiet and (stream.pane_exited or stream.ended):
                    if await self._source_gone(stream):
                        return
                    if stream.ended:  # (a remote host: once it is back)
                        stream = await self._listen()  # a turn may have ended unseen: look again
                        heard = Heard(self.now_ms(), spoke_ms=self.now_ms())
                turn = await self.detector.next_turn(heard, seen)
                if turn is not None and turn.skipped:
                    self._skipped(turn.skipped)
                elif turn is not None:
                    await self._fire(turn)
        finally:
            if unsubscribe is not None:
                unsubscribe()
            if self._listener is not None:
                self._listener.close()

    def _on_hook(self, event: HookEvent) -> None:
        """The source's agent ended a turn (its hook, from the channel): wake the route."""
        if event.kind != "stop":
            return
        self._hook_events.append(event)
        if self._listener is not None:
            self._listener.wake()  # (the route's one wake-up: output or its hook)

    async def _listen(self) -> OutputStream:
        """(Re)open the source's output and listen to it until it has settled."""
        stream = await self._context.watch(self.source_tile)
        if self._listener is not None:
            self._listener.close()
        self._listener = stream.listen(pollable=self.detector.pollable)
        await stream.settled()
        return stream

    async def _hear(self, timeout_s: float | None) -> Heard:
        """What the source said within ``timeout_s`` (``quiet`` when nothing came)."""
        assert self._listener is not None
        got = await self._wait(self._listener, timeout_s)
        data = self._listener.take() if got else b""
        spoke = self._listener.take_activity() if got else None
        hook = self._hook_events.popleft() if self._hook_events else None
        # (An on-idle listener of a polled source gets the times it spoke, not bytes.)
        return Heard(
            self.now_ms(), self._decode(data), spoke * 1000 if spoke is not None else None, hook
        )

    async def _wait(self, listener: OutputListener, timeout_s: float | None) -> bool:
        """Wait for output, or for the source's hook (which wakes the listener); False: no
        output came (a hook's event is in ``_hook_events``), or one waits already."""
        if self._hook_events:
            return False
        return await listener.wait(timeout_s)

    async def _output_after(self, delay_s: float) -> str:
        """Wait ``delay_s``, then the output that arrived meanwhile (an ``always`` batch)."""
        await self._context.sleep(delay_s)
        return self._decode(self._listener.take()) if self._listener is not None else ""

    def _decode(self, data: bytes) -> str:
        """The one place output bytes become text: UTF-8 across chunks, ANSI stripped."""
        return strip_ansi(self._decoder.decode(data)) if data else ""

    async def _source_gone(self, stream: OutputStream) -> bool:
        """Did the source go for good? Then the route stops, saying why."""
        source = self.source_tile
        if stream.pane_exited and await self._context.pane_gone(source):
            # Pushed by the pane process's pidfd (io/watch.py): no polling needed.
            self.last_error = f"source {source.name!r} exited (its pane is gone)"
        elif stream.ended and await self._context.state(source) == "exited":
            self.last_error = f"source {source.name!r} exited"
        else:
            return False
        self._set_state("stopped")
        return True

    def now_ms(self) -> float:
        """The route's clock (its context's: monotonic ms, or a test's own)."""
        return self._context.now_ms()

    # firing ---------------------------------------------------------------
    async def _fire(self, turn: Turn) -> None:
        """Apply the route's condition and loop protection, and run one round."""
        if (why := self.condition.why_not(turn.found.text if turn.found else None)) is not None:
            self._skipped(why)  # before the transform, and nothing counted
            return
        if self.held and self.state == "paused" and self._unheld is not None:
            await self._unheld.wait()  # a host is unreachable: route this turn once it is back
        if self.state == "paused":
            self._skipped("paused")
            return
        if self.state == "exhausted":
            # Log the answer to the last delivered prompt, so the conversation's end is on record.
            await self._round(turn, exhausted=True)
            self._stop_listening()
            return
        left = self.guard.cooldown_left_ms(self.now_ms())
        if left > 0:
            await self._context.sleep(left / 1000)
            if self.state != "active":
                self._skipped(self.state)
                return
        await self._round(turn)

    async def _turn_changes(self) -> Changes | None:
        """What the source's turn changed in its git working tree since this route's previous
        round (git, on a thread); None outside git."""
        return await asyncio.to_thread(self.source_tile.changes.take, self.id)

    def _skipped(self, reason: str) -> None:
        """Tell listeners the trigger saw a finished turn and let it go (tests wait on this)."""
        self._context.emit(TurnSkipped(self.id, reason, self))

    async def _round(self, turn: Turn, exhausted: bool = False) -> None:
        changes = await self._turn_changes()
        screen_tail = None
        if self.spec.transform.reads_screen:
            screen_tail = (await self._context.history(self.source_tile)).rstrip("\n").splitlines()
        number = self.guard.rounds + (1 if exhausted else 0)
        if not exhausted:
            number = self.guard.fire(self.now_ms())
        wait_s = self.target_wait_s
        plan = RoundPlan(
            route_id=self.id,
            source=self.source,
            target=self.target_tile,
            round=number,
            max_rounds=self.guard.max_rounds,
            trigger=self.trigger,
            spec=self.spec,
            dispatch=self.dispatch_mode,
            delivery=self.delivery,
            extraction=turn.found,
            extract_ms=round(turn.extract_ms, 3),
            turn_signal=turn.signal or None,
            screen_tail=screen_tail,
            stop_keyword=self.guard.stop_keyword,
            allow_shell=self.allow_shell,
            exhausted=exhausted,
            exhausted_reason=self.budget.spent() if exhausted else None,
            still_wanted=lambda: self.state != "stopped",
            target_wait_s=wait_s if wait_s is not None else self._context.target_wait_s,
            gather=self.gather_round(),
            changes=changes,
            approve=self._wait_for_person if self.approve and not exhausted else None,
        )
        self._in_round = True
        try:
            rec = await self._context.run_round(plan)
        finally:
            self._in_round = False
            approval, self._approval = self._approval, None
            if approval is not None and approval.ask.open:  # (cancelled: the hub closed)
                approval.abandon("its round ended before anyone answered (the hub closed)")
        if approval is not None:
            self._context.inbox.approval_done(approval, rec)
            # Turns that ended while the person decided: only the newest is routed next.
            while len(self._hook_events) > 1:
                self._hook_events.popleft()
        self.last_status, self.last_round_id, self.last_error = rec.status, rec.round_id, rec.error
        unknown = None if exhausted else self._count_spending(rec)
        if rec.status == "stopped":
            self._set_state("stopped")
        elif unknown is not None:
            self.last_error = unknown
            self._set_state("stopped")
        elif not exhausted and self.state == "active" and (spent := self.budget.spent()):
            self.last_error = spent
            self._set_state("exhausted")
        elif not exhausted and self.guard.exhausted and self.state == "active":
            self._set_state("exhausted")
        else:
            self._context.emit(RouteStateChanged(self.id, self.state, self))

    async def _wait_for_person(self, prompt: str) -> tuple[str, str]:
        """The prompt waits in the inbox: the person's decision and the text to type.

        The route reads no new turn meanwhile; once decided, its next round routes the
        source's newest finished turn (turns in between are not routed one by one).
        """
        approval = self._context.inbox.open_approval(self.id, self.target, prompt)
        self._approval = approval
        if self.state == "stopped":
            approval.expire(f"route {self.id} was stopped")
        verdict = await approval.verdict(self.approve_timeout_s)
        return verdict.decision, verdict.text

    def _count_spending(self, rec: RoundRecord) -> str | None:
        """Count a round against the budget; why the route must stop when a part is unknown."""
        if not self.budget.limited:
            return None
        unknown = self.budget.count(rec.cost_usd, round_tokens(rec))
        if unknown is None:
            return None
        why = (
            f"model {rec.model!r} has no price in the price table (hub prices=)"
            if unknown == "cost" and rec.input_tokens is not None
            else "its usage could not be read (a screen-extracted turn, or no usage reported)"
        )
        return (
            f"stopped: the {unknown} of round {rec.round} is unknown ({why}); a budgeted "
            f"route never counts an unknown as free (spent so far: {self.budget.summary()})"
        )

    def _stop_listening(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the route's task has ended (after :meth:`stop` or the hub's close)."""
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # display ------------------------------------------------------------
    def __repr__(self) -> str:
        budget = f" budget={self.budget_spent}" if self.budget.limited else ""
        if self.notes:
            budget += f" ({self.notes})"
        return (
            f"<Route {self.id} {self.source}->{self.target} {self.state} "
            f"rounds={self.rounds}/{self.max_rounds} trigger={self.trigger} transform={self.spec.name} "
            f"dispatch={self.dispatch}{budget}>"
        )

    html_view: ClassVar[Callable[[Route], str] | None] = None
    """Draws a route (or gather) for Jupyter; attached by the notebook layer
    (madohub_nb.notebook.display, with madohub_nb.render's), so the route imports no HTML."""

    def _repr_html_(self) -> str:
        draw = Route.html_view
        return draw(self) if draw is not None else f"<pre>{html.escape(repr(self))}</pre>"


class _SeenSource:
    """The source as the route's trigger sees it (:class:`~.triggers.TurnSource`)."""

    def __init__(self, route: Route) -> None:
        self._route = route

    def now_ms(self) -> float:
        return self._route.now_ms()

    async def answer(self) -> Extraction | None:
        route = self._route
        transcript = route.dispatch_mode.extracts_from_transcript
        return await route._context.answer(route.source_tile, transcript=transcript)

    async def state(self) -> str:
        return await self._route._context.state(self._route.source_tile)

    def cooldown_left_ms(self) -> float:
        route = self._route
        if route.state != "active" or route.guard.exhausted:
            return 0.0
        return route.guard.cooldown_left_ms(route.now_ms())

    async def output_after(self, delay_s: float) -> str:
        return await self._route._output_after(delay_s)

    @property
    def reads_records(self) -> bool:
        return self._route.dispatch_mode.extracts_from_transcript

    @property
    def keeps_record(self) -> bool:
        return self._route.source_tile.profile.has_transcript

    @property
    def records_turn_ms(self) -> bool:
        return self._route.source_tile.profile.records_turn_ms

    def signal(self) -> str:
        tile = self._route.source_tile
        return tile.last_signal or ("quiet" if tile.profile.ready_quiet_ms else "screen")


def make_route(
    services: RouteServices, number: int, source: Tile, target: Tile, **options: Any
) -> Route:
    """A route of a hub: its services as the context; ``options`` as :func:`build_route`'s."""
    return build_route(route_context(services), number, source, target, **options)


def build_route(
    context: RouteContext,
    number: int,
    source: Tile,
    target: Tile,
    *,
    api_key: str | None = None,
    **given: Any,
) -> Route:
    """A route ``source`` → ``target`` (route number ``number``), every argument checked.

    ``given``: options of :data:`~.options.ROUTE` (``connect``'s) by name, the others at
    their default; ``delivery`` must be resolved (typed or paste). The names (trigger,
    transform, dispatch) become the types that do the work: a turn detector, a transform,
    a dispatch mode. The route keeps every option's value as ``route.options``.
    """
    options = with_defaults("connect", given)
    trigger, transform, template = options["trigger"], options["transform"], options["template"]
    pattern, dispatch, delivery = options["pattern"], options["dispatch"], options["delivery"]
    completion_pattern, allow_shell = options["completion_pattern"], options["allow_shell"]
    approve, approve_timeout_s = options["approve"], options["approve_timeout_s"]
    if source is target:
        raise MadohubValueError(
            f"a route from {source.name!r} to itself would feed the agent its own output"
        )
    completion = check_completion_pattern(trigger, completion_pattern)
    detector = make_detector(
        trigger,
        pattern=pattern,
        idle_delay_ms=lambda: context.idle_delay_ms,
        completion_pattern=completion or source.completion_pattern,
    )
    spec = make_transform_spec(transform, template, options["model"])
    guard = LoopGuard(
        max_rounds=options["max_rounds"], cooldown_ms=options["cooldown_ms"],
        stop_keyword=options["stop_keyword"],
    )  # fmt: skip
    budget = Budget(max_cost_usd=options["max_cost_usd"], max_tokens=options["max_tokens"])
    condition = make_condition(options["when"], options["unless"])
    mode = dispatch_named(dispatch)
    check_choice("delivery", delivery, DELIVERY_MODES)
    if target.profile.executes_input and mode.types_text and not allow_shell:
        raise MadohubValueError(
            f"target {target.name!r} is a {target.agent}: whatever is typed there runs as a command; "
            "pass allow_shell=True to route into it anyway"
        )
    if spec.is_ai:
        require_ai_key(transform, api_key)
    if not isinstance(approve, bool):
        raise MadohubValueError(f"approve must be True or False, got {approve!r}")
    timeout_s = check_approve_timeout(approve_timeout_s)
    if approve and not mode.types_text:
        raise MadohubValueError(
            f"approve=True holds each prompt for a person before it is typed; dispatch "
            f"{dispatch!r} types nothing (use madoagent or legacy)"
        )
    if timeout_s is not None and not approve:
        raise MadohubValueError("approve_timeout_s needs approve=True")
    return Route(
        context, f"{source.name}->{target.name}#{number}", source, target,
        detector=detector, pattern=pattern, spec=spec, guard=guard, dispatch=mode,
        delivery=delivery, allow_shell=allow_shell, budget=budget, condition=condition,
        approve=approve, approve_timeout_s=timeout_s,
        options={**options, "approve_timeout_s": timeout_s},
    )  # fmt: skip
