"""Routes: source tile → target tile, with a trigger, a transform and loop protection.

A route is a small task on the engine loop, made of four parts, each in its module:

- its state machine (:mod:`.route_state`): active ⇄ paused, exhausted, stopped, each
  transition an event;
- its ear on the source (:mod:`.route_listener`): output and hooks, and the trigger (a
  :class:`~madohub_nb.pipeline.triggers.TurnDetector`) asked for the next finished turn;
- its rounds (:mod:`.route_planner`): the condition, loop protection and budgets decide
  whether a turn fires one, a :class:`~.round.RoundPlan` says what it is, and its outcome
  moves the state;
- its approvals (:mod:`.route_approvals`): with ``approve=True`` each prompt waits in the
  inbox for a person.

:class:`Route` is what users hold (``route.pause()``, ``route.state``, ``route.rounds``):
those parts composed, and the task that runs the listener. Everything it needs from around
it comes through one small :class:`~.route_context.RouteContext`, so its loop runs without
tmux in tests.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from ..defaults import DELIVERY_MODES, check_choice
from ..engine import spawn
from ..errors import MadohubValueError
from ..io.log import RoundRecord
from ..model import RoundStatus, RouteState
from .conditions import Condition, Edge, make_condition
from .events import RouteStateChanged
from .inbox import check_approve_timeout
from .options import with_defaults
from .protection import Budget, LoopGuard
from .round import Dispatch, GatherRound, dispatch_named
from .route_approvals import RouteApprovals
from .route_context import RouteContext, RouteServices, route_context
from .route_listener import SourceListener
from .route_planner import RoundPlanner
from .route_state import RouteStates
from .tile import Tile
from .transforms import TransformSpec, make_transform_spec, require_ai_key
from .triggers import Turn, TurnDetector, check_completion_pattern, make_detector


class Route:
    """A live connection between two tiles. Made by :meth:`Hub.connect`."""

    tracks_changes: ClassVar[bool] = True
    """Each round records what the source's turn changed in its git working tree."""

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
        self.states = RouteStates(self._state_changed)
        """Its state machine (active, paused, stopped, exhausted)."""
        self.listener = SourceListener(
            context, self, source, detector, self.states, guard,
            transcript=dispatch.extracts_from_transcript,
        )  # fmt: skip
        """Its ear on the source: the loop that waits for the next finished turn."""
        self.approvals = RouteApprovals(
            context, route_id, target.name, self.states,
            approve=approve, timeout_s=approve_timeout_s,
        )  # fmt: skip
        """Its prompts that wait in the inbox for a person (``approve=True``)."""
        self.planner = RoundPlanner(
            context, route_id, self.source, target, trigger=detector.name, spec=spec,
            guard=guard, budget=self.budget, condition=self.condition, dispatch=dispatch,
            delivery=delivery, allow_shell=allow_shell, states=self.states,
            listener=self.listener, approvals=self.approvals,
            gather_round=self.gather_round, tracks_changes=self.tracks_changes,
        )  # fmt: skip
        """Its rounds: whether a finished turn fires one, what it is, what it spent."""
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self.ready = asyncio.Event()
        """Set once the route listens to its source (a turn finishing later will fire it)."""

    # the public face ------------------------------------------------------
    @property
    def state(self) -> RouteState:
        """``active``, ``paused``, ``stopped`` or ``exhausted``."""
        return self.states.state

    @property
    def held(self) -> bool:
        """Paused by the hub because a tile's host is unreachable: turns wait, not skipped."""
        return self.states.held

    @property
    def last_error(self) -> str | None:
        """Why the route stopped, waits or was exhausted (None: nothing to say)."""
        return self.states.last_error

    @last_error.setter
    def last_error(self, why: str | None) -> None:
        self.states.last_error = why

    @property
    def last_status(self) -> RoundStatus | None:
        """Its latest round's status."""
        return self.states.last_status

    @property
    def last_round_id(self) -> str | None:
        """Its latest round's id."""
        return self.states.last_round_id

    @property
    def approve(self) -> bool:
        """Every prompt waits in ``hub.inbox`` for a person to approve, edit or reject it."""
        return self.approvals.approve

    @property
    def approve_timeout_s(self) -> float | None:
        """An unanswered prompt expires after this long (nothing typed); None: it waits."""
        return self.approvals.timeout_s

    @property
    def target_wait_s(self) -> float | None:
        """How long each round waits for the target to be ready; None: the hub's setting."""
        return self.planner.target_wait_s

    @target_wait_s.setter
    def target_wait_s(self, seconds: float | None) -> None:
        self.planner.target_wait_s = seconds

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
        self.states.pause()

    def resume(self) -> None:
        """Fire again on the next finished turn after :meth:`pause`."""
        self.states.resume()

    def hold(self, reason: str) -> None:
        """Pause while a host is unreachable (engine loop); a turn that finishes meanwhile
        waits for :meth:`release` and is routed then, once."""
        self.states.hold(reason)

    def release(self) -> None:
        """The host is back: resume a route :meth:`hold` paused (engine loop)."""
        self.states.release()

    def stop(self) -> None:
        """End the route for good (a round already typing finishes first)."""
        self.states.stop()
        self._context.call_soon(self.approvals.expire, f"route {self.id} was stopped")
        self._context.call_soon(self._cancel_if_idle)

    def end(self) -> None:
        """The hub closes: the route reads ``stopped`` at once (its task is cancelled next)."""
        self.states.end()

    def cancel(self) -> None:
        """Cancel the route's task (engine thread)."""
        if self._task is not None:
            self._task.cancel()

    def now_ms(self) -> float:
        """The route's clock (its context's: monotonic ms, or a test's own)."""
        return self._context.now_ms()

    def _state_changed(self, state: RouteState) -> None:
        """Its state machine moved (or a round ended): tell the hub's listeners."""
        self._context.emit(RouteStateChanged(self.id, state, self))

    # the task -------------------------------------------------------------
    @property
    def _in_round(self) -> bool:
        """A round runs now (a stop lets it finish; the soak test waits on it)."""
        return self.planner.in_round

    def start(self) -> None:
        """Start listening (engine loop only)."""
        self._started = True
        self._task = spawn(self._run(), name=f"route {self.id}")
        self._task.add_done_callback(self._task_done)
        self._task.add_done_callback(self._forget_task)

    async def _run(self) -> None:
        """Listen to the source; each finished turn it hears goes to :meth:`_fire`."""
        await self.listener.run(self.ready, self._fire)

    async def _fire(self, turn: Turn) -> None:
        """A finished turn: the planner decides whether it makes a round (and runs it)."""
        if not await self.planner.fire(turn):
            self.cancel()  # (exhausted: its last answer is logged, it listens no more)

    def _cancel_if_idle(self) -> None:
        if self._task is not None and not self._in_round:
            self._task.cancel()

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
        self.states.round_ended(rec.status, rec.round_id, error)
        self.states.set("stopped")

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        # A cancelled task keeps its CancelledError, whose traceback holds the task's
        # frames (listener, timers, trigger state): an ended route must not keep them.
        if self._task is task:
            self._task = None

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
