"""What a route works with: its source's output and answer, tile states, rounds, events and
the clock, as one small :class:`RouteContext` (so a route's loop runs without tmux in tests),
and :class:`ServicesContext`, the context a route of today's hub gets from its runtime.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from ..defaults import TARGET_WAIT_S
from ..io.agent_records.base import Extraction
from ..io.log import RoundRecord
from ..io.watch import PaneStream
from ..model import TileState
from .events import HubEvent
from .extract import extract
from .inbox import Inbox
from .round import RoundPlan, RoundServices, run_round
from .tile import Tile


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
        state = await tile.astate()
        if state == "idle" and self._services.deliverer.typing(tile.pane_id):
            # A prompt is being typed into it: the echo, then the quiet before its submit
            # (long on a loaded machine), is no finished turn. Seen: a real Claude Code's
            # start-up screen routed as its first answer while its kickoff was typed.
            return "busy"
        return state

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
