"""A route's state machine: active ⇄ paused, then exhausted or stopped, each transition told.

``pause``/``resume`` are the user's; ``hold``/``release`` the hub's while a tile's host is
unreachable (a turn that ends meanwhile waits, and is routed once the host is back);
``stop`` ends the route for good and ``end`` marks it stopped as the hub closes (no
event: the hub is going). Each transition calls the route's ``changed`` (which tells the
hub's listeners with a :class:`~.events.RouteStateChanged`). The state also carries why
the route stopped or waits (``last_error``) and its last round's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..model import RoundStatus, RouteState

LIVE_STATES: tuple[RouteState, ...] = ("active", "paused", "exhausted")
"""States in which a route still listens to its source (an exhausted one logs its last answer)."""


class RouteStates:
    """One route's state and its transitions (engine loop; ``pause``/``stop`` from any thread)."""

    def __init__(self, changed: Callable[[RouteState], None]) -> None:
        self.state: RouteState = "active"
        self.held = False
        """Paused by the hub because a tile's host is unreachable: turns wait, not skipped."""
        self.last_error: str | None = None
        """Why the route stopped, waits or was exhausted (None: nothing to say)."""
        self.last_status: RoundStatus | None = None
        self.last_round_id: str | None = None
        self._changed = changed
        self._unheld: asyncio.Event | None = None

    @property
    def live(self) -> bool:
        """The route still listens to its source (active, paused or exhausted)."""
        return self.state in LIVE_STATES

    def set(self, state: RouteState) -> None:
        """Move to ``state`` and tell the route (which tells the hub's listeners)."""
        self.state = state
        self._changed(state)

    def announce(self) -> None:
        """Tell the listeners of the route's state again (a round ended in it)."""
        self._changed(self.state)

    def stopped_because(self, why: str) -> None:
        """Stop for good, saying why (its source exited, its spending is unknown)."""
        self.last_error = why
        self.set("stopped")

    def round_ended(self, status: RoundStatus, round_id: str, error: str | None) -> None:
        """Keep the outcome of the route's latest round (its card shows it)."""
        self.last_status, self.last_round_id, self.last_error = status, round_id, error

    def pause(self) -> None:
        if self.state == "active":
            self.set("paused")

    def resume(self) -> None:
        if self.state == "paused":
            self.set("active")

    def hold(self, reason: str) -> None:
        """Pause while a host is unreachable (engine loop)."""
        if self.state == "active":
            self.held, self.last_error = True, reason
            self._unheld = asyncio.Event()
            self.set("paused")

    def release(self) -> None:
        """The host is back: resume what :meth:`hold` paused (engine loop)."""
        if self.held:
            self.held = False
            if self._unheld is not None:
                self._unheld.set()
            if self.state == "paused":
                self.last_error = None
                self.set("active")

    async def wait_if_held(self) -> None:
        """A turn that ended while the route is held waits until the host is back."""
        if self.held and self.state == "paused" and self._unheld is not None:
            await self._unheld.wait()

    def stop(self) -> None:
        if self.state in ("active", "paused"):
            self.set("stopped")

    def end(self) -> None:
        """The hub closes: ``stopped`` at once, no event (its listeners are going too)."""
        if self.state in LIVE_STATES:
            self.state = "stopped"
