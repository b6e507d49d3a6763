"""Routes: source tile → target tile, with a trigger, a transform and loop protection.

A route is a small task on the engine loop: it listens to the source's pushed
output, asks its trigger whether to fire, applies loop protection, and hands
each firing to :func:`madohub_nb.pipeline.round.run_round`.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import re
import time
from collections.abc import Callable
from typing import Protocol

from ..agents.screen import strip_ansi
from ..errors import MadohubValueError
from ..io.log import RoundRecord
from ..io.transcripts import Extraction
from ..io.watch import PaneStream
from ..model import HubEvent, RouteState
from ..render import html_for_route
from ..settings import AI_TRANSFORMS, DELIVERY_MODES, DISPATCH_MODES, check_choice
from .extract import extract
from .protection import LoopGuard
from .round import RoundPlan, RoundServices, run_round
from .tile import Tile
from .transforms import TransformSpec, make_transform_spec, require_ai_key
from .triggers import (
    IdleTrigger,
    KeywordTrigger,
    StreamTrigger,
    check_completion_pattern,
    check_trigger,
)


class RouteServices(RoundServices, Protocol):
    """What a route needs from the hub around it: its rounds' needs, output, events, timing."""

    @property
    def idle_delay_ms(self) -> int:
        """Silence after the completion evidence before on-idle fires (live setting)."""

    async def watch(self, tile: Tile) -> PaneStream:
        """The pushed output of ``tile``'s pane (engine thread)."""

    def emit(self, event: HubEvent) -> None:
        """Tell listeners (widgets) something changed; from any thread."""

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the engine thread."""


def _text_key(found: Extraction | None) -> str | None:
    """The identity of an answer's text, whichever way it was read (transcript or screen)."""
    if found is None:
        return None
    return hashlib.sha1(" ".join(found.text.split()).encode("utf-8", "replace")).hexdigest()


def _now_ms() -> float:
    return time.monotonic() * 1000


def _pane_gone(tile: Tile) -> bool:
    info = tile.pane_info()
    return info is None or info.dead


class Route:
    """A live connection between two tiles. Made by :meth:`Hub.connect`."""

    def __init__(
        self,
        services: RouteServices,
        route_id: str,
        source: Tile,
        target: Tile,
        *,
        trigger: str,
        pattern: str | None,
        spec: TransformSpec,
        guard: LoopGuard,
        dispatch: str,
        delivery: str,
        allow_shell: bool,
    ) -> None:
        self.id = route_id
        self._services = services
        self.source_tile = source
        self.target_tile = target
        self.trigger = trigger
        self.pattern = pattern
        self.spec = spec
        self.guard = guard
        self.dispatch = dispatch
        self.delivery = delivery
        self.allow_shell = allow_shell
        self.state: RouteState = "active"
        self.last_status: str | None = None
        self.last_round_id: str | None = None
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set once the route listens to its source (a turn finishing later will fire it)."""

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
    def rounds(self) -> int:
        """Rounds fired so far."""
        return self.guard.rounds

    @property
    def max_rounds(self) -> int:
        """Rounds this route may fire before it is exhausted (1 to 20)."""
        return self.guard.max_rounds

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
        self._services.call_soon(self._cancel_if_idle)

    def end(self) -> None:
        """The hub closes: the route reads ``stopped`` at once (its task is cancelled next)."""
        if self.state in ("active", "paused", "exhausted"):
            self.state = "stopped"

    def cancel(self) -> None:
        """Cancel the route's task (engine thread)."""
        if self._task is not None:
            self._task.cancel()

    def _cancel_if_idle(self) -> None:
        if self._task is not None and not self._in_round:
            self._task.cancel()

    def _set_state(self, state: RouteState) -> None:
        self.state = state
        self._services.emit(HubEvent("route_state", self.id, state, self))

    # the task -------------------------------------------------------------
    _in_round = False
    _started = False
    completion_pattern: re.Pattern[str] | None = None
    """Output that ends the source's turn (on-idle/on-complete); else the tile's, else its state."""

    def start(self) -> None:
        """Start listening (engine loop only)."""
        self._started = True
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"route {self.id}")
        self._task.add_done_callback(self._task_done)
        self._task.add_done_callback(self._forget_task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task that ended on an exception leaves the route ``stopped``, with the reason logged."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        error = f"the route stopped on an unexpected error: {type(exc).__name__}: {exc}"
        rec = self._services.record_now(
            RoundRecord(
                route_id=self.id, source=self.source, target=self.target, round=self.rounds,
                trigger=self.trigger, transform=self.transform, dispatch=self.dispatch,
                status="error", error=error, session_id=self._services.session_id,
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
        hub = self._services
        source = self.source_tile
        stream = await hub.watch(source)
        legacy = self.dispatch == "legacy"
        idle: IdleTrigger | None = None
        keyword: KeywordTrigger | None = None
        streamer: StreamTrigger | None = None
        completion = self.completion_pattern or source.completion_pattern
        # An on-idle route without a completion pattern can do without the bytes: a source
        # flooding output is polled instead of streamed (see io/watch.py).
        pollable = self.trigger in ("on-idle", "on-complete") and completion is None
        listener = stream.listen(pollable=pollable)
        await stream.settled()
        if self.trigger in ("on-idle", "on-complete"):
            idle = IdleTrigger(hub.idle_delay_ms, completion)
            first = await asyncio.to_thread(extract, source, legacy)
            idle.baseline(first.message_id if first else None, _text_key(first))
        elif self.trigger == "on-keyword":
            keyword = KeywordTrigger(self.pattern or "")
        else:
            streamer = StreamTrigger()
        # Output arrives in arbitrary chunks: keep a UTF-8 character split across two whole.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.ready.set()
        try:
            while self.state in ("active", "paused", "exhausted"):
                timeout_s: float | None = None
                if idle is not None:
                    idle.idle_delay_ms = hub.idle_delay_ms
                    due = idle.next_check_ms()
                    if due is not None:
                        timeout_s = max(0.0, (due - _now_ms()) / 1000)
                got = await listener.wait(timeout_s)
                data = listener.take() if got else b""
                spoke = listener.take_activity() if got else None
                heard = bool(data) or spoke is not None  # (an on-idle listener gets no bytes)
                if stream.pane_exited and not heard and await asyncio.to_thread(_pane_gone, source):
                    # Pushed by the pane process's pidfd (watchers.py): no polling needed.
                    self.last_error = f"source {source.name!r} exited (its pane is gone)"
                    self._set_state("stopped")
                    return
                if stream.ended and not heard:
                    if await source.astate() == "exited":
                        self.last_error = f"source {source.name!r} exited"
                        self._set_state("stopped")
                        return
                    stream = await hub.watch(source)  # (a remote host: once it is back)
                    listener.close()
                    listener = stream.listen(pollable=pollable)
                    await stream.settled()
                    if idle is not None:  # a turn may have ended unseen: look again
                        idle.output(_now_ms())
                    continue
                now = _now_ms()
                if idle is not None:
                    if data:
                        idle.output(now, strip_ansi(decoder.decode(data)))
                    elif spoke is not None:  # seen by polling a flooding source
                        idle.output(min(now, spoke * 1000))
                    due = idle.next_check_ms()
                    if due is None or now < due:
                        continue
                    decision = idle.evaluate(now, await source.astate())
                    if decision.action != "fire":
                        continue
                    started = time.monotonic()
                    found = await asyncio.to_thread(extract, source, legacy)
                    unique = found is not None and found.method != "terminal"
                    key = found.message_id if found else None
                    if not idle.accept(key, unique=unique, text_key=_text_key(found)):
                        self._skipped(idle.skip_reason)
                        continue
                    await self._fire(found, (time.monotonic() - started) * 1000)
                elif data:
                    text = strip_ansi(decoder.decode(data))
                    if keyword is not None:
                        decision = keyword.output(now, text)
                        if decision.action != "fire":
                            continue
                        started = time.monotonic()
                        found = await asyncio.to_thread(extract, source, legacy)
                        # No answer yet (the match is mid-turn): route what matched.
                        found = found or Extraction(decision.text, "terminal", None)
                        await self._fire(found, (time.monotonic() - started) * 1000)
                    elif streamer is not None:
                        streamer.output(now, text)
                        left = self.guard.cooldown_left_ms(_now_ms())
                        if left > 0 and self.state == "active" and not self.guard.exhausted:
                            await asyncio.sleep(left / 1000)
                            streamer.output(_now_ms(), strip_ansi(decoder.decode(listener.take())))
                        chunk = streamer.take()
                        if chunk.strip():
                            await self._fire(Extraction(chunk, "terminal", None), 0.0)
        finally:
            listener.close()

    async def _fire(self, found: Extraction | None, extract_ms: float) -> None:
        """Apply loop protection and run one round."""
        if self.held and self.state == "paused" and self._unheld is not None:
            await self._unheld.wait()  # a host is unreachable: route this turn once it is back
        if self.state == "paused":
            self._skipped("paused")
            return
        if self.state == "exhausted":
            # Log the answer to the last delivered prompt, so the conversation's end is on record.
            await self._round(found, extract_ms, exhausted=True)
            self._stop_listening()
            return
        left = self.guard.cooldown_left_ms(_now_ms())
        if left > 0:
            await asyncio.sleep(left / 1000)
            if self.state != "active":
                self._skipped(self.state)
                return
        await self._round(found, extract_ms)

    def _skipped(self, reason: str) -> None:
        """Tell listeners the trigger saw a finished turn and let it go (tests wait on this)."""
        self._services.emit(HubEvent("turn_skipped", self.id, reason, self))

    async def _round(
        self, found: Extraction | None, extract_ms: float, exhausted: bool = False
    ) -> None:
        screen_tail = None
        if self.spec.name in ("full-output", "raw"):
            screen_tail = (
                (await asyncio.to_thread(self.source_tile.history)).rstrip("\n").splitlines()
            )
        number = self.guard.rounds + (1 if exhausted else 0)
        if not exhausted:
            number = self.guard.fire(_now_ms())
        plan = RoundPlan(
            route_id=self.id,
            source=self.source,
            target=self.target_tile,
            round=number,
            max_rounds=self.guard.max_rounds,
            trigger=self.trigger,
            spec=self.spec,
            dispatch=self.dispatch,
            delivery=self.delivery,
            extraction=found,
            extract_ms=round(extract_ms, 3),
            screen_tail=screen_tail,
            stop_keyword=self.guard.stop_keyword,
            exhausted=exhausted,
            still_wanted=lambda: self.state != "stopped",
        )
        self._in_round = True
        try:
            rec = await run_round(self._services, plan)
        finally:
            self._in_round = False
        self.last_status, self.last_round_id, self.last_error = rec.status, rec.round_id, rec.error
        if rec.status == "stopped":
            self._set_state("stopped")
        elif not exhausted and self.guard.exhausted and self.state == "active":
            self._set_state("exhausted")
        else:
            self._services.emit(HubEvent("route_state", self.id, self.state, self))

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
        return (
            f"<Route {self.id} {self.source}->{self.target} {self.state} "
            f"rounds={self.rounds}/{self.max_rounds} trigger={self.trigger} transform={self.spec.name} "
            f"dispatch={self.dispatch}>"
        )

    def _repr_html_(self) -> str:
        return html_for_route(self)


def make_route(
    services: RouteServices,
    number: int,
    source: Tile,
    target: Tile,
    *,
    trigger: str,
    transform: str,
    template: str | None,
    max_rounds: int,
    cooldown_ms: int,
    stop_keyword: str | None,
    dispatch: str,
    pattern: str | None,
    allow_shell: bool,
    delivery: str,
    model: str | None,
    api_key: str | None,
    completion_pattern: str | None = None,
) -> Route:
    """A route ``source`` → ``target`` (route number ``number``), every argument checked."""
    if source is target:
        raise MadohubValueError(
            f"a route from {source.name!r} to itself would feed the agent its own output"
        )
    check_trigger(trigger, pattern)
    completion = check_completion_pattern(trigger, completion_pattern)
    spec = make_transform_spec(transform, template, model)
    guard = LoopGuard(max_rounds=max_rounds, cooldown_ms=cooldown_ms, stop_keyword=stop_keyword)
    check_choice("dispatch", dispatch, DISPATCH_MODES)
    check_choice("delivery", delivery, DELIVERY_MODES)
    if target.profile.executes_input and dispatch != "shadow" and not allow_shell:
        raise MadohubValueError(
            f"target {target.name!r} is a {target.agent}: whatever is typed there runs as a command; "
            "pass allow_shell=True to route into it anyway"
        )
    if transform in AI_TRANSFORMS:
        require_ai_key(transform, api_key)
    route = Route(
        services, f"{source.name}->{target.name}#{number}", source, target,
        trigger=trigger, pattern=pattern, spec=spec, guard=guard, dispatch=dispatch,
        delivery=delivery, allow_shell=allow_shell,
    )  # fmt: skip
    route.completion_pattern = completion
    return route
