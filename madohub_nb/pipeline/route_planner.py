"""A route's rounds: whether a finished turn fires one, what it is, and what it spent.

A turn fires a round when the route's condition (``when``/``unless``) lets its answer
through, the route is active and its cooldown is over; the round is a
:class:`~.round.RoundPlan` (the extraction, the transform, the dispatch mode, loop
protection's round number and stop keyword, the approval hand-off) run by the context.
Its outcome moves the route's state: a stop keyword stops it, ``max_rounds`` or a budget
spent exhausts it, a budgeted round whose spending is unknown stops it, saying why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..io.git import Changes
from ..io.log import RoundRecord
from .conditions import Condition
from .protection import Budget, LoopGuard
from .round import Dispatch, GatherRound, RoundPlan, round_tokens
from .route_approvals import RouteApprovals
from .route_context import RouteContext
from .route_listener import SourceListener
from .route_state import RouteStates
from .tile import Tile
from .transforms import TransformSpec
from .triggers import Turn


class RoundPlanner:
    """Turns one route's finished turns into rounds (engine loop)."""

    def __init__(
        self,
        context: RouteContext,
        route_id: str,
        source: str,
        target: Tile,
        *,
        trigger: str,
        spec: TransformSpec,
        guard: LoopGuard,
        budget: Budget,
        condition: Condition,
        dispatch: Dispatch,
        delivery: str,
        allow_shell: bool,
        states: RouteStates,
        listener: SourceListener,
        approvals: RouteApprovals,
        gather_round: Callable[[], GatherRound | None],
        tracks_changes: bool,
    ) -> None:
        self._context = context
        self._route_id = route_id
        self._source = source
        self._target = target
        self._trigger = trigger
        self._spec = spec
        self._guard = guard
        self._budget = budget
        self._condition = condition
        self._dispatch = dispatch
        self._delivery = delivery
        self._allow_shell = allow_shell
        self._states = states
        self._listener = listener
        self._approvals = approvals
        self._gather_round = gather_round
        self._tracks_changes = tracks_changes
        self.target_wait_s: float | None = None
        """How long each round waits for the target to be ready; None: the hub's setting."""
        self.in_round = False
        """A round runs now (a stop lets it finish)."""

    async def fire(self, turn: Turn) -> bool:
        """Apply the route's condition and loop protection, and run one round; False once
        the exhausted route has logged its last answer (it listens no more)."""
        states = self._states
        if (why := self._condition.why_not(turn.found.text if turn.found else None)) is not None:
            self._listener.skipped(why)  # before the transform, and nothing counted
            return True
        await states.wait_if_held()  # a host is unreachable: route this turn once it is back
        if states.state == "paused":
            self._listener.skipped("paused")
            return True
        if states.state == "exhausted":
            # Log the answer to the last delivered prompt, so the conversation's end is on record.
            await self._round(turn, exhausted=True)
            return False
        left = self._guard.cooldown_left_ms(self._context.now_ms())
        if left > 0:
            await self._context.sleep(left / 1000)
            if states.state != "active":
                self._listener.skipped(states.state)
                return True
        await self._round(turn)
        return True

    async def _turn_changes(self) -> Changes | None:
        """What the source's turn changed in its git working tree since this route's previous
        round (git, on a thread); None outside git, or when the route keeps no changes."""
        if not self._tracks_changes:
            return None
        return await asyncio.to_thread(self._listener.source.changes.take, self._route_id)

    async def _plan(self, turn: Turn, exhausted: bool) -> RoundPlan:
        """The round ``turn`` fires (counted by loop protection unless ``exhausted``)."""
        changes = await self._turn_changes()
        screen_tail = None
        if self._spec.transform.reads_screen:
            history = await self._context.history(self._listener.source)
            screen_tail = history.rstrip("\n").splitlines()
        guard, states = self._guard, self._states
        number = guard.rounds + (1 if exhausted else 0)
        if not exhausted:
            number = guard.fire(self._context.now_ms())
        wait_s = self.target_wait_s
        approvals = self._approvals
        return RoundPlan(
            route_id=self._route_id,
            source=self._source,
            target=self._target,
            round=number,
            max_rounds=guard.max_rounds,
            trigger=self._trigger,
            spec=self._spec,
            dispatch=self._dispatch,
            delivery=self._delivery,
            extraction=turn.found,
            extract_ms=round(turn.extract_ms, 3),
            turn_signal=turn.signal or None,
            screen_tail=screen_tail,
            stop_keyword=guard.stop_keyword,
            allow_shell=self._allow_shell,
            exhausted=exhausted,
            exhausted_reason=self._budget.spent() if exhausted else None,
            still_wanted=lambda: states.state != "stopped",
            target_wait_s=wait_s if wait_s is not None else self._context.target_wait_s,
            gather=self._gather_round(),
            changes=changes,
            approve=approvals.wait_for_person if approvals.approve and not exhausted else None,
        )

    async def _round(self, turn: Turn, exhausted: bool = False) -> None:
        plan = await self._plan(turn, exhausted)
        self.in_round = True
        try:
            rec = await self._context.run_round(plan)
        finally:
            self.in_round = False
            approval = self._approvals.round_over()
        if approval is not None:
            self._approvals.done(approval, rec)
            self._listener.keep_newest_turn()  # (turns that ended while the person decided)
        states = self._states
        states.round_ended(rec.status, rec.round_id, rec.error)
        unknown = None if exhausted else self._count_spending(rec)
        if rec.status == "stopped":
            states.set("stopped")
        elif unknown is not None:
            states.stopped_because(unknown)
        elif not exhausted and states.state == "active" and (spent := self._budget.spent()):
            states.last_error = spent
            states.set("exhausted")
        elif not exhausted and self._guard.exhausted and states.state == "active":
            states.set("exhausted")
        else:
            states.announce()

    def _count_spending(self, rec: RoundRecord) -> str | None:
        """Count a round against the budget; why the route must stop when a part is unknown."""
        budget = self._budget
        if not budget.limited:
            return None
        unknown = budget.count(rec.cost_usd, round_tokens(rec))
        if unknown is None:
            return None
        why = (
            f"model {rec.model!r} has no price in the price table (hub prices=)"
            if unknown == "cost" and rec.input_tokens is not None
            else "its usage could not be read (a screen-extracted turn, or no usage reported)"
        )
        return (
            f"stopped: the {unknown} of round {rec.round} is unknown ({why}); a budgeted "
            f"route never counts an unknown as free (spent so far: {budget.summary()})"
        )
