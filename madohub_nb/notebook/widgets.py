"""Live ipywidgets views of a hub: tiles, routes, the round log, a dashboard.

Widgets are views with no logic of their own: they subscribe to ``hub.events``
and redraw from the hub's state with the same HTML renderers as ``_repr_html_``
(``madohub_nb.render``). Events arrive on the engine's thread and widgets are
updated there, so the views keep living while a cell blocks the kernel. Screen
redraws are coalesced to at most one per ``min_interval_s`` per tile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import ipywidgets as widgets

from ..errors import MadohubValueError
from ..render import (
    round_row,
    rounds_table_html,
    route_summary_html,
    screen_html,
    tile_header_html,
)

if TYPE_CHECKING:
    from ..hub import Hub
    from ..model import HubEvent

# Views ---------------------------------------------------------------------------


class _HubView(widgets.VBox):
    """A VBox that listens to its hub's events until closed."""

    _closed = True  # until subscribed: a half-made view (bad arguments) closes cleanly
    _unsubscribe: Callable[[], None] = staticmethod(lambda: None)

    def __init__(self, hub: Hub, children: list[Any], css_class: str) -> None:
        super().__init__(children)
        self.add_class(css_class)
        self.hub = hub
        self._closed = False
        self._unsubscribe = hub.events.subscribe(self._on_event_any_thread)

    def _on_event_any_thread(self, event: HubEvent) -> None:
        # Events arrive on the engine thread; widgets are updated right there (the
        # kernel's IOPub channel is thread-safe), so views live while a cell blocks.
        if not self._closed and self._wants(event):
            self._on_event(event)

    def _wants(self, event: HubEvent) -> bool:
        return True

    def _on_event(self, event: HubEvent) -> None:
        """Handle one event (on the engine thread)."""

    def close(self) -> None:
        """Stop listening to the hub and close the widget."""
        self._closed = True
        self._unsubscribe()
        super().close()


# Widgets ---------------------------------------------------------------------------

TILE_CLASS: Final = "madohub-tile"
TILE_SCREEN_CLASS: Final = "madohub-tile-screen"


class TileView(_HubView):
    """A tile's live screen in colour, with its name, agent kind and state.

    Redraws on the tile's output events, at most once per ``min_interval_s``;
    the screen is read from tmux in a worker thread, never on the loop.
    """

    def __init__(self, hub: Hub, name: str, *, min_interval_s: float = 0.25) -> None:
        if name not in hub.tiles:
            known = ", ".join(hub.tiles) or "none yet"
            raise MadohubValueError(f"no tile named {name!r}; tiles: {known}")
        self.name = name
        self.tile = hub.tiles[name]
        self.min_interval_s = min_interval_s
        self.state = getattr(self.tile, "last_state", None) or "unknown"
        self.redraws = 0
        self._dirty = False
        self._drawing = False
        self._header = widgets.HTML(value=self._header_html())
        self._screen = widgets.HTML(value=screen_html(""))
        self._screen.add_class(TILE_SCREEN_CLASS)
        super().__init__(hub, [self._header, self._screen], TILE_CLASS)
        self.request_redraw()

    @property
    def screen_value(self) -> str:
        """The HTML the view shows now."""
        return str(self._screen.value)

    def _header_html(self) -> str:
        return tile_header_html(self.name, self.tile.agent, self.tile.pane_id, self.state)

    def _wants(self, event: HubEvent) -> bool:
        return event.name == self.name and event.kind in ("tile_output", "tile_state")

    def _on_event(self, event: HubEvent) -> None:
        if event.kind == "tile_state":
            self.state = event.state or self.state
            self._header.value = self._header_html()
        self.request_redraw()

    def request_redraw(self) -> None:
        """Ask for a redraw from any thread; bursts coalesce into one."""
        self._dirty = True
        self.hub.engine.call_soon(self._kick)

    def _kick(self) -> None:
        if self._drawing or self._closed:
            return
        self._drawing = True
        self.hub.engine.loop.create_task(self._redraw_loop())

    async def _redraw_loop(self) -> None:
        try:
            while self._dirty and not self._closed:
                self._dirty = False
                text = await asyncio.to_thread(self.tile.screen, True)
                if self._closed:
                    return
                value = screen_html(text)
                if value != self._screen.value:
                    with self._screen.hold_sync():
                        self._screen.value = value
                    self.redraws += 1
                await asyncio.sleep(self.min_interval_s)
        finally:
            self._drawing = False


ROUTE_CLASS: Final = "madohub-route-card"


class RouteCard(_HubView):
    """A route's state, rounds used of max, last status, and pause/resume/stop buttons."""

    def __init__(self, hub: Hub, route: Any) -> None:
        self.route = route
        self._summary = widgets.HTML()
        self.pause_button = widgets.Button(description="pause", icon="pause")
        self.resume_button = widgets.Button(description="resume", icon="play")
        self.stop_button = widgets.Button(description="stop", icon="stop", button_style="danger")
        for button, action in (
            (self.pause_button, route.pause),
            (self.resume_button, route.resume),
            (self.stop_button, route.stop),
        ):
            button.layout.width = "auto"
            button.on_click(self._clicked(action))
        buttons = widgets.HBox([self.pause_button, self.resume_button, self.stop_button])
        super().__init__(hub, [self._summary, buttons], ROUTE_CLASS)
        self.refresh()

    def _clicked(self, action: Callable[[], object]) -> Callable[[Any], None]:
        def on_click(_: Any) -> None:
            action()
            self.refresh()

        return on_click

    def _wants(self, event: HubEvent) -> bool:
        route_id = str(self.route.id)
        if event.kind == "route_state":
            return event.name == route_id
        if event.kind == "round":
            return str(getattr(event.data, "route_id", "")) == route_id
        return False

    def _on_event(self, event: HubEvent) -> None:
        self.refresh()

    def refresh(self) -> None:
        """Redraw from the route's current state."""
        state = self.route.state
        with self._summary.hold_sync():
            self._summary.value = route_summary_html(self.route)
        self.pause_button.disabled = state != "active"
        self.resume_button.disabled = state != "paused"
        self.stop_button.disabled = state in ("stopped", "exhausted")


ROUNDS_CLASS: Final = "madohub-round-log"


class RoundLogTable(_HubView):
    """The last ``rows`` rounds of the log as a live HTML table."""

    def __init__(self, hub: Hub, rows: int = 10) -> None:
        self.rows = rows
        self._records: dict[str, dict[str, Any]] = {}
        self._table = widgets.HTML()
        super().__init__(hub, [self._table], ROUNDS_CLASS)
        for record in hub.log.tail(rows):
            self._add(round_row(record))
        self._draw()

    @property
    def records(self) -> list[dict[str, Any]]:
        """The rounds shown, oldest first."""
        return list(self._records.values())

    def _add(self, row: dict[str, Any]) -> None:
        key = str(row.get("round_id"))
        self._records.pop(key, None)
        self._records[key] = row
        while len(self._records) > self.rows:
            del self._records[next(iter(self._records))]

    def _draw(self) -> None:
        with self._table.hold_sync():
            self._table.value = rounds_table_html(self._records.values())

    def _wants(self, event: HubEvent) -> bool:
        return event.kind == "round"

    def _on_event(self, event: HubEvent) -> None:
        self._add(round_row(event.data))
        self._draw()


DASHBOARD_CLASS: Final = "madohub-dashboard"


class Dashboard(_HubView):
    """All tiles, all routes and the round log of a hub, kept up to date."""

    def __init__(self, hub: Hub, rows: int = 10, *, min_interval_s: float = 0.25) -> None:
        self.min_interval_s = min_interval_s
        self.tile_views: dict[str, TileView] = {}
        self.route_cards: dict[str, RouteCard] = {}
        self._title = widgets.HTML()
        self._tiles_box = widgets.Box(layout=widgets.Layout(flex_flow="row wrap"))
        self._routes_box = widgets.VBox()
        self.log_table = RoundLogTable(hub, rows)
        super().__init__(
            hub,
            [self._title, self._tiles_box, self._routes_box, self.log_table],
            DASHBOARD_CLASS,
        )
        self.sync()

    def sync(self) -> None:
        """Add views for tiles and routes the hub has gained."""
        for name in list(self.hub.tiles):
            if name not in self.tile_views:
                view = TileView(self.hub, name, min_interval_s=self.min_interval_s)
                view.layout = widgets.Layout(width="49%", margin="0 1% 8px 0")
                self.tile_views[name] = view
        for route in list(self.hub.routes):
            if str(route.id) not in self.route_cards:
                self.route_cards[str(route.id)] = RouteCard(self.hub, route)
        if tuple(self._tiles_box.children) != tuple(self.tile_views.values()):
            self._tiles_box.children = tuple(self.tile_views.values())
        if tuple(self._routes_box.children) != tuple(self.route_cards.values()):
            self._routes_box.children = tuple(self.route_cards.values())
        self._title.value = (
            '<div style="font-family:sans-serif;font-size:15px"><b>madohub</b> · '
            f"{len(self.tile_views)} tiles · {len(self.route_cards)} routes</div>"
        )

    def _wants(self, event: HubEvent) -> bool:
        if event.kind in ("tile_added", "tile_state", "tile_output"):
            return event.name not in self.tile_views
        if event.kind in ("route_added", "route_state"):
            return event.name not in self.route_cards
        return False

    def _on_event(self, event: HubEvent) -> None:
        self.sync()

    def close(self) -> None:
        """Close the dashboard and every view in it."""
        for view in (*self.tile_views.values(), *self.route_cards.values(), self.log_table):
            view.close()
        super().close()
