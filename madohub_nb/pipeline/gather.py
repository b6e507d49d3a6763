"""Fan-in: a route from several sources into one target (``hub.gather``).

A gather listens to each source as a route would (one *arm* per source: the same
trigger, the same listening, the same hook handling) and keeps each source's newest
finished turn since its last round. It fires once every source still there has one,
or ``timeout_s`` after the first of them arrived with those that have. Its round is
a route's round: the answers, each under its source's name, are the extracted text
(and the template's ``{answers}``); the condition, loop protection, budgets and the
dispatch mode are the route's own (:class:`~.route.Route`, which it is).

A source that exits, or stays silent past the timeout, is named in the answers
block (so in the prompt and the ``extracted`` column) and in the row's ``meta``
(``gather_missing``). Its id is ``a+b+c->target#N``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, cast

from ..engine import spawn
from ..errors import MadohubValueError
from ..io.transcripts import Extraction, TurnUsage
from ..model import EXTRACTION_METHODS, TURN_SIGNALS, ExtractionMethod, RouteState
from .events import RouteStateChanged
from .options import with_defaults
from .round import GatherRound
from .route import Route, RouteContext, build_route
from .tile import Tile
from .transforms import answer_heading
from .triggers import Turn, TurnDetector, check_completion_pattern, make_detector

GATHER_TEMPLATE = "The latest answers (round {round} of {maxRounds}):\n\n{answers}"
"""The prompt-wrap template of a gather made without one."""


def answers_text(answers: dict[str, str], missing: dict[str, str]) -> str:
    """Each answer under its source's name, in ``answers``' order; a missing source says why."""
    blocks = [f"{answer_heading(name)}\n{text.strip()}" for name, text in answers.items()]
    blocks += [f"{answer_heading(name)}\n(no answer: {why})" for name, why in missing.items()]
    return "\n\n".join(blocks)


def check_gather(sources: Sequence[Tile], target: Tile, timeout_s: object) -> float | None:
    """Bad input of a gather, refused before anything starts; the timeout as a float."""
    names = [t.name for t in sources]
    if len(names) < 2:
        raise MadohubValueError(
            f"a gather needs at least two sources, got {names}; for one source use hub.connect"
        )
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise MadohubValueError(f"a gather lists each source once; {twice} appear more than once")
    if target.name in names:
        raise MadohubValueError(
            f"a gather into {target.name!r} cannot have it as a source too (it would be fed "
            "its own answer); remove it from the sources"
        )
    if timeout_s is None:
        return None
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise MadohubValueError(
            f"timeout_s must be a number of seconds > 0 (or None: wait for every source), "
            f"got {timeout_s!r}"
        )
    return float(timeout_s)


def _weakest(values: Sequence[str], order: Sequence[str]) -> str | None:
    """The weakest evidence of ``values`` (last in ``order``): a gather is as sure as its
    least sure answer."""
    known = [v for v in values if v in order]
    return max(known, key=order.index) if known else None


def _summed_usage(usages: Sequence[TurnUsage | None]) -> TurnUsage | None:
    """The answers' turns together: counts summed (None when one is unknown), the longest
    turn, the model when they share one (else None: the cost is unknown, NaN)."""
    if not usages or any(u is None for u in usages):
        return None
    known = [u for u in usages if u is not None]
    values: dict[str, Any] = {}
    for f in fields(TurnUsage):
        parts = [getattr(u, f.name) for u in known]
        if f.name == "model":
            values[f.name] = parts[0] if len(set(parts)) == 1 else None
        elif f.name == "complete":
            values[f.name] = all(parts)
        elif any(p is None for p in parts):
            values[f.name] = None
        elif f.name == "turn_ms":
            values[f.name] = max(parts)
        else:
            values[f.name] = sum(parts)
    return TurnUsage(**values)


class _Arm(Route):
    """One source of a gather, listened to exactly as a route listens to its source; each
    finished turn goes to the gather instead of into a round."""

    def __init__(self, gather: Gather, source: Tile, detector: TurnDetector) -> None:
        super().__init__(
            gather._context, gather.id, source, gather.target_tile, detector=detector,
            pattern=gather.pattern, spec=gather.spec, guard=gather.guard,
            dispatch=gather.dispatch_mode, delivery=gather.delivery,
            allow_shell=gather.allow_shell, budget=gather.budget,
        )  # fmt: skip
        self._gather = gather

    def _set_state(self, state: RouteState) -> None:
        self.state = state  # (an arm is no route of the hub: no route_state event of its own)
        if state == "stopped":
            self._gather._source_left(self.source, self.last_error or "it stopped")

    async def _fire(self, turn: Turn) -> None:
        gather = self._gather
        if gather.held and gather.state == "paused" and gather._unheld is not None:
            await gather._unheld.wait()  # a host is unreachable: keep this turn for when it is back
        if gather.state == "paused":
            self._skipped("paused")
        elif gather.state in ("active", "exhausted"):
            gather._arrive(self.source, turn)


class Gather(Route):
    """A fan-in route: several sources, one target. Made by :meth:`Hub.gather`."""

    def __init__(
        self,
        context: RouteContext,
        route_id: str,
        sources: Sequence[Tile],
        target: Tile,
        *,
        detectors: Sequence[TurnDetector],
        timeout_s: float | None,
        **parts: Any,
    ) -> None:
        super().__init__(context, route_id, sources[0], target, detector=detectors[0], **parts)
        self.source_tiles = tuple(sources)
        self.timeout_s = timeout_s
        """Seconds after the first new answer to fire with the answers in (None: wait for all)."""
        self._arms = [_Arm(self, tile, d) for tile, d in zip(sources, detectors, strict=True)]
        self._arrived: dict[str, Turn] = {}
        self._first_arrival_ms: float | None = None
        self._gone: dict[str, str] = {}
        """Sources that exited, and why (they are named, not waited for)."""
        self._wake: asyncio.Event | None = None

    # the public face ------------------------------------------------------
    @property
    def source(self) -> str:
        """The sources' names joined by ``+`` (the round log's ``source`` column)."""
        return "+".join(t.name for t in self.source_tiles)

    @property
    def sources(self) -> list[str]:
        """The sources' names, in the order given."""
        return [t.name for t in self.source_tiles]

    @property
    def tiles(self) -> tuple[Tile, ...]:
        """Every source tile, in the order given, then the target."""
        return (*self.source_tiles, self.target_tile)

    async def _turn_changes(self) -> None:
        """A gather's round has several sources, often in one working tree: their turns'
        changes are not one source's, so its change columns stay empty (each source's own
        routes record theirs)."""
        return None

    @property
    def arrived(self) -> list[str]:
        """The sources whose new answer waits for the next round."""
        return list(self._arrived)

    @property
    def waiting_for(self) -> list[str]:
        """The sources still there whose new answer the next round waits for."""
        return [n for n in self.sources if n not in self._arrived and n not in self._gone]

    @property
    def notes(self) -> str:
        """``gather of 3 · timeout 600 s · has r1; waiting for r2, r3`` (and any condition)."""
        timeout = f"timeout {self.timeout_s:g} s" if self.timeout_s is not None else "no timeout"
        parts = [f"gather of {len(self.source_tiles)} · {timeout}"]
        if self._arrived:
            parts.append(f"has {', '.join(self._arrived)}; waiting for "
                         f"{', '.join(self.waiting_for) or 'nobody'}")  # fmt: skip
        if self._gone:
            parts.append("gone: " + ", ".join(self._gone))
        if note := super().notes:
            parts.append(note)
        return " · ".join(parts)

    # the arms' news (engine loop) ------------------------------------------
    def _arrive(self, source: str, turn: Turn) -> None:
        """A source finished a turn: keep it (the newest one wins) and look again."""
        if not self._arrived:
            self._first_arrival_ms = self.now_ms()
        self._arrived[source] = turn
        self._poke()

    def _source_left(self, source: str, why: str) -> None:
        """A source exited: the gather stops waiting for it, and names it."""
        self._gone[source] = why
        self._poke()

    def _poke(self) -> None:
        self._context.emit(RouteStateChanged(self.id, self.state, self))
        if self._wake is not None:
            self._wake.set()

    # the task -------------------------------------------------------------
    async def _run(self) -> None:
        """Start the arms, then fire each time the answers are in (or the timeout is up)."""
        self._wake = asyncio.Event()
        for arm in self._arms:
            arm.start()
        try:
            for arm in self._arms:
                await self._ready_or_done(arm)
            self.ready.set()
            while self.state in ("active", "paused", "exhausted"):
                if len(self._gone) == len(self._arms) and not self._arrived:
                    self.last_error = "every source of the gather exited: " + "; ".join(
                        self._gone.values()
                    )
                    self._set_state("stopped")
                    return
                wait_s = self._wait_s()
                if wait_s == 0:
                    await self._fire(self._gathered_turn())
                    continue
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), wait_s)
                except TimeoutError:
                    pass
        finally:
            for arm in self._arms:
                arm.cancel()
            await asyncio.gather(*(a.wait_closed() for a in self._arms), return_exceptions=True)

    async def _ready_or_done(self, arm: _Arm) -> None:
        """Wait until ``arm`` listens to its source, or has already ended (its source gone)."""
        ready = spawn(arm.ready.wait(), name=f"gather {self.id}: {arm.source} ready")
        waits: set[asyncio.Future[Any]] = {ready}
        if arm._task is not None:
            waits.add(arm._task)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()

    def _wait_s(self) -> float | None:
        """0: fire now; else how long until the timeout (None: until an arm has news)."""
        if not self._arrived:
            return None
        if not self.waiting_for:
            return 0
        if self.timeout_s is None or self._first_arrival_ms is None:
            return None
        left_ms = self._first_arrival_ms + self.timeout_s * 1000 - self.now_ms()
        return max(0.0, left_ms / 1000)

    def _gathered_turn(self) -> Turn:
        """The answers in as one turn (and a fresh start for the next round)."""
        turns, self._arrived, self._first_arrival_ms = self._arrived, {}, None
        ordered = {n: turns[n] for n in self.sources if n in turns}
        missing = {
            n: self._gone.get(n) or f"{n} finished no new turn within timeout_s={self.timeout_s:g}"
            for n in self.sources
            if n not in ordered
        }
        answers = {n: t.found.text if t.found else "" for n, t in ordered.items()}
        found = [t.found for t in ordered.values() if t.found is not None]
        method = _weakest([f.method for f in found], EXTRACTION_METHODS) or "terminal"
        text = answers_text(answers, missing)
        usage = _summed_usage([f.usage for f in found])
        extraction = Extraction(text, cast(ExtractionMethod, method), None, usage=usage)
        self._gathered = GatherRound(
            arrived=tuple(ordered),
            missing=missing,
            how_read={
                n: {"method": t.found.method if t.found else None, "turn_signal": t.signal or None}
                for n, t in ordered.items()
            },
        )
        return Turn(
            extraction,
            max((t.extract_ms for t in ordered.values()), default=0.0),
            signal=_weakest([t.signal for t in ordered.values()], TURN_SIGNALS) or "",
        )

    _gathered: GatherRound | None = None

    def gather_round(self) -> GatherRound | None:
        """The round of the answers last gathered: the sources in, why the others are not,
        how each answer was read (its row's ``gathered``, ``gather_missing``,
        ``gather_answers``)."""
        return self._gathered

    def __repr__(self) -> str:
        return super().__repr__().replace("<Route ", "<Gather ", 1)


def build_gather(
    context: RouteContext,
    number: int,
    sources: Sequence[Tile],
    target: Tile,
    *,
    api_key: str | None = None,
    **given: Any,
) -> Gather:
    """A gather ``sources`` → ``target`` (route number ``number``), every argument checked as
    :func:`~.route.build_route` checks a route's (``given``: its options, as there)."""
    options = with_defaults("gather", given)
    timeout = check_gather(sources, target, options.pop("timeout_s"))
    if options["template"] is None and options["transform"] == "prompt-wrap":
        options["template"] = GATHER_TEMPLATE
    first = build_route(context, number, sources[0], target, api_key=api_key, **options)
    if first.spec.transform.reads_screen:
        raise MadohubValueError(
            f"transform {first.spec.name!r} reads one terminal's lines; a gather routes answers: "
            "use prompt-wrap (with {answers}), ai-routing or summary"
        )
    completion = check_completion_pattern(options["trigger"], options.get("completion_pattern"))
    detectors = [first.detector] + [
        make_detector(
            options["trigger"],
            pattern=options.get("pattern"),
            idle_delay_ms=lambda: context.idle_delay_ms,
            completion_pattern=completion or tile.completion_pattern,
        )
        for tile in sources[1:]
    ]
    route_id = f"{'+'.join(t.name for t in sources)}->{target.name}#{number}"
    return Gather(
        context, route_id, sources, target, detectors=detectors, timeout_s=timeout,
        pattern=first.pattern, spec=first.spec, guard=first.guard, dispatch=first.dispatch_mode,
        delivery=first.delivery, allow_shell=first.allow_shell, budget=first.budget,
        condition=first.condition, approve=first.approve,
        approve_timeout_s=first.approve_timeout_s, options={**first.options, "timeout_s": timeout},
    )  # fmt: skip
