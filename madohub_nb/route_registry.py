"""The route registry: the hub's routes, numbered, trimmed, found, paused and ended.

Routes are kept in a list that is copied on write, so the engine thread reads it
while another thread adds a route. Ended routes beyond ``ENDED_ROUTES_KEPT``
leave the list (their rounds stay in the log). While a host is unreachable
(``host_state`` events), the routes touching its tiles are held.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Callable

from .defaults import ENDED_ROUTES_KEPT
from .errors import LogError, MadohubValueError, MadohubWarning
from .pipeline.conditions import describe_cycle, endless_cycles
from .pipeline.events import HostStateChanged, HubEvent, RouteAdded
from .pipeline.route import Route
from .pipeline.transforms import user_stacklevel


class RouteRegistry:
    """Every route of one hub, in the order made."""

    def __init__(self, *, emit: Callable[[HubEvent], None], call_soon: Callable[..., None]) -> None:
        self._emit = emit
        self._call_soon = call_soon
        self._lock = threading.Lock()
        self._counter = 0
        self.routes: list[Route] = []
        """Routes in the order made (the newest ``ENDED_ROUTES_KEPT`` ended ones kept)."""
        self.routes_dropped = 0
        """Ended routes no longer in ``routes`` (beyond ``ENDED_ROUTES_KEPT``)."""
        self._held: dict[str, list[Route]] = {}
        """Routes held while their tiles' host is unreachable, by host."""

    def add(self, make: Callable[[int], Route]) -> Route:
        """Number, register and start the route ``make(number)`` builds (it validates)."""
        with self._lock:
            route = make(self._counter + 1)
            self._counter += 1
            self.routes = self._without_oldest_ended([*self.routes, route])
        self._warn_endless_cycles(route)
        self._call_soon(route.start, owner=route)  # its task, and what it starts, are the route's
        self._emit(RouteAdded(route.id, route.state, route))
        return route

    def _warn_endless_cycles(self, route: Route) -> None:
        """Warn (``MadohubWarning``) for each cycle through ``route`` of live routes that
        nothing but ``max_rounds`` can end (see :func:`~.pipeline.conditions.endless_cycles`)."""
        live = [r for r in self.routes if r.state in ("active", "paused")]
        edges = [e for r in live for e in r.edges()]
        for cycle in endless_cycles(edges, route.edges()):
            warnings.warn(
                f"the conditional routes {describe_cycle(cycle)} make a cycle that can never "
                "stop: no stop keyword on it, and every condition on it passes any answer; "
                "only max_rounds will end it. Give one route a stop_keyword or an "
                "unless=/when= that an answer can fail",
                MadohubWarning,
                stacklevel=user_stacklevel(),
            )

    def _without_oldest_ended(self, routes: list[Route]) -> list[Route]:
        """``routes`` keeping every live route and the newest ``ENDED_ROUTES_KEPT`` ended ones.

        A long session makes and ends routes without end (a user re-arming them): the
        ended ones would otherwise be held for good. Their rows stay in the log, and a
        replay of their rounds takes its settings from the row.
        """
        ended = [r for r in routes if r.ended]
        extra = len(ended) - ENDED_ROUTES_KEPT
        if extra <= 0:
            return routes
        dropped = {id(r) for r in ended[:extra]}
        self.routes_dropped += extra
        return [r for r in routes if id(r) not in dropped]

    def find(self, key: str | int) -> Route:
        """A route by id (``writer->reviewer#1``), by number (``1``) or by list index."""
        routes = self.routes
        for r in routes:
            if r.id == key or (isinstance(key, str) and r.id.endswith(f"#{key}")):
                return r
        if isinstance(key, int) and -len(routes) <= key < len(routes):
            return routes[key]
        known = ", ".join(r.id for r in routes) or "none yet"
        gone = (
            f" ({self.routes_dropped} ended routes made earlier are no longer listed; "
            "their rounds stay in hub.log)"
            if self.routes_dropped
            else ""
        )
        raise MadohubValueError(f"no route {key!r}; routes: {known}{gone}")

    def by_id(self, route_id: str) -> Route | None:
        """The listed route with exactly this id, or None."""
        return next((r for r in self.routes if r.id == route_id), None)

    def pause_all(self, exc: LogError) -> None:
        """The log refused a write: pause every active route until it is writable again."""
        for route in self.routes:
            if route.state == "active":
                route.last_error = f"paused: the round log cannot be written ({exc})"
                route.pause()

    def on_event(self, event: HubEvent) -> None:
        """``host_state`` (engine loop): while a host is unreachable the active routes touching
        its tiles are held, paused with why (a turn that finishes meanwhile waits); once it is
        back they resume and look at their sources again, so a turn is routed once."""
        if not isinstance(event, HostStateChanged):
            return
        host, why = event.host, event.why
        if event.state != "unreachable":
            for route in self._held.pop(host, []):
                route.release()
            return
        held = self._held.setdefault(host, [])
        for route in self.routes:
            if route in held:
                if route.held:
                    route.last_error = f"paused: {why}"
            elif route.state == "active" and any(t.machine.name == host for t in route.tiles):
                route.hold(f"paused: {why}")
                held.append(route)

    def end_all(self) -> None:
        """Mark every route ended (from any thread): no new round starts."""
        for route in self.routes:
            route.end()

    async def close(self) -> None:
        """Cancel every route's task and wait until each has closed (engine thread)."""
        for route in self.routes:
            route.cancel()
        await asyncio.gather(*(r.wait_closed() for r in self.routes), return_exceptions=True)
