"""Live ipywidgets views of a hub: tiles, routes, the round log, a dashboard.

Widgets are views with no logic of their own: they subscribe to ``hub.events``
and redraw from the hub's state with the same HTML renderers as ``_repr_html_``
(``madohub_nb.render``). Events arrive on the engine's thread and widgets are
updated there, so the views keep living while a cell blocks the kernel. Screen
redraws are coalesced to at most one per ``min_interval_s`` per tile.

Each view also carries a static HTML snapshot (``text/html`` beside the widget
in its display bundle), so a saved notebook shows the dashboard where widgets
do not run (GitHub, nbviewer).
"""

from __future__ import annotations

import asyncio
import html
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import ipywidgets as widgets

from ..agents.permission import chars_cut
from ..errors import MadohubError, MadohubValueError
from ..pipeline.events import (
    AskChanged,
    HubEvent,
    RoundLogged,
    RouteAdded,
    RouteStateChanged,
    TileAdded,
    TileOutput,
    TileStateChanged,
)
from ..pipeline.inbox import ApprovalAsk, Ask, PermissionAsk
from ..render import (
    ask_text_html,
    round_row,
    rounds_table_html,
    route_summary_html,
    screen_html,
    tile_attach_command,
    tile_header_html,
)

SNAPSHOT_WAIT_S: Final = 5.0
"""How long a view's static snapshot waits for its first drawing when it is displayed."""

if TYPE_CHECKING:
    from ..hub import Hub

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

    def snapshot_html(self) -> str:
        """Static HTML of what the view shows now."""
        return ""

    # Redraws (views that draw something slow override ``_redraw_loop``) -----------------
    _dirty = False
    _drawing = False

    def request_redraw(self) -> None:
        """Ask for a redraw from any thread; bursts coalesce into one."""
        self._dirty = True
        self.hub.engine.call_soon(self._kick)

    def _kick(self) -> None:
        if self._drawing or self._closed:
            return
        self._drawing = True
        self.hub.engine.spawn(self._drawing_task(), owner=self)

    async def _drawing_task(self) -> None:
        try:
            await self._redraw_loop()
        finally:
            self._drawing = False

    async def _redraw_loop(self) -> None:
        """Draw while ``_dirty`` is set (clearing it first), then pause; on the loop."""
        self._dirty = False

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:  # the widget where widgets run, this HTML where they do not
            bundle["text/html"] = self.snapshot_html()
        return bundle


# Widgets ---------------------------------------------------------------------------

TILE_CLASS: Final = "madohub-tile"
TILE_SCREEN_CLASS: Final = "madohub-tile-screen"
TILE_KEYS_CLASS: Final = "madohub-tile-keys"
PROMPT_KEYS: Final = (
    ("1 / Yes", "1"),
    ("2", "2"),
    ("3", "3"),
    ("Enter", "Enter"),
    ("Esc", "Escape"),
)
"""(label, key) of the buttons a TileView shows while its agent waits on a prompt."""


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
        self._drawn = threading.Event()
        self._header = widgets.HTML(value=self._header_html())
        self._screen = widgets.HTML(value=screen_html(""))
        self._screen.add_class(TILE_SCREEN_CLASS)
        self.key_buttons = [self._key_button(label, key) for label, key in PROMPT_KEYS]
        self._keys_box = widgets.HBox(self.key_buttons)
        self._keys_box.add_class(TILE_KEYS_CLASS)
        self._show_keys()
        super().__init__(hub, [self._header, self._keys_box, self._screen], TILE_CLASS)
        self._listener: Any = None
        hub.engine.call_soon(self._follow_output)
        self.request_redraw()

    def _follow_output(self) -> None:
        """Ask for the tile's output events (engine thread): tmux sends no unwatched pane's."""
        if not self._closed:
            # The tile's own machine: a pane on a host streams from that host's watcher.
            stream = self.tile.machine.watcher.stream(self.tile.pane_id, self.tile.session)
            self._listener = stream.listen(wants_bytes=False)

    def close(self) -> None:
        super().close()
        hub = getattr(self, "hub", None)  # (a view refused for bad arguments has none)
        if hub is not None:
            hub.engine.call_soon(self._unfollow_output)

    def _unfollow_output(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _key_button(self, label: str, key: str) -> widgets.Button:
        button = widgets.Button(description=label, tooltip=f"press {key} in {self.name}")
        button.layout.width = "auto"
        button.on_click(lambda _: self.press(key))
        return button

    def press(self, *keys: str) -> Any:
        """Press ``keys`` in the tile (``hub.keys``); a future of the logged round."""
        return self.hub.keys(self.name, *keys)

    def _show_keys(self) -> None:
        # Answer buttons only while the agent waits on a prompt.
        self._keys_box.layout.display = "flex" if self.state == "waiting" else "none"

    def snapshot_html(self) -> str:
        self._drawn.wait(SNAPSHOT_WAIT_S)
        return f'<div class="{TILE_CLASS}">{self._header.value}{self._screen.value}</div>'

    @property
    def screen_value(self) -> str:
        """The HTML the view shows now."""
        return str(self._screen.value)

    def _header_html(self) -> str:
        return tile_header_html(
            self.name, self.tile.agent, self.tile.pane_id, self.state,
            tile_attach_command(self.tile),
        )  # fmt: skip

    def _wants(self, event: HubEvent) -> bool:
        return isinstance(event, TileOutput | TileStateChanged) and event.name == self.name

    def _on_event(self, event: HubEvent) -> None:
        if isinstance(event, TileStateChanged):
            self.state = event.state or self.state
            self._header.value = self._header_html()
            self._show_keys()
        self.request_redraw()

    async def _redraw_loop(self) -> None:
        while self._dirty and not self._closed:
            self._dirty = False
            text = await asyncio.to_thread(self.tile.screen, True)
            # Its state too: a change comes back as a tile_state event (header, key buttons).
            try:
                await self.tile.astate()
            except MadohubError:  # a pane gone mid-read: its screen above says enough
                pass
            if self._closed:
                return
            value = screen_html(text)
            if value != self._screen.value:
                with self._screen.hold_sync():
                    self._screen.value = value
                self.redraws += 1
            self._drawn.set()
            await asyncio.sleep(self.min_interval_s)


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
        if isinstance(event, RouteStateChanged | RoundLogged):
            return event.route_id == route_id
        return False

    def _on_event(self, event: HubEvent) -> None:
        self.refresh()

    def snapshot_html(self) -> str:
        return f'<div class="{ROUTE_CLASS}">{route_summary_html(self.route)}</div>'

    def refresh(self) -> None:
        """Redraw from the route's current state."""
        state = self.route.state
        with self._summary.hold_sync():
            self._summary.value = route_summary_html(self.route)
        self.pause_button.disabled = state != "active"
        self.resume_button.disabled = state != "paused"
        self.stop_button.disabled = state in ("stopped", "exhausted")


MCP_PAIR_CLASS: Final = "madohub-mcp-pair"
MCP_TRIGGER: Final = "mcp"
"""The ``trigger`` of the rounds agents start themselves through the hub's MCP server."""


class _PairView:
    """What :func:`route_summary_html` reads, for one MCP pair: the hub's count, the last row."""

    def __init__(self, pair: Any, last: Any) -> None:
        self.id, self.source, self.target = pair.id, pair.source, pair.target
        self.state, self.rounds, self.max_rounds = pair.state, pair.rounds, pair.max_rounds
        self.trigger, self.dispatch = "mcp", str(getattr(last, "meta", {}).get("tool", ""))
        self.last_status = getattr(last, "status", None)
        self.last_error = getattr(last, "error", None)


class McpPairCard(_HubView):
    """One caller → target pair of MCP calls, shown as a route is: rounds used of
    ``mcp_max_rounds``, its state and last status (no buttons: ``hub.mcp.reset()`` and
    ``hub.mcp.revoke(name)`` are the hub's)."""

    def __init__(self, hub: Hub, route_id: str, last: Any = None) -> None:
        self.route_id = route_id
        self.last = last
        self._summary = widgets.HTML()
        super().__init__(hub, [self._summary], MCP_PAIR_CLASS)
        self.refresh()

    def _wants(self, event: HubEvent) -> bool:
        return isinstance(event, RoundLogged) and event.route_id == self.route_id

    def _on_event(self, event: HubEvent) -> None:
        if isinstance(event, RoundLogged):
            self.last = event.record
        self.refresh()

    def summary_html(self) -> str:
        return route_summary_html(_PairView(self.hub.mcp.pair(self.route_id), self.last))

    def snapshot_html(self) -> str:
        return f'<div class="{MCP_PAIR_CLASS}">{self._summary.value}</div>'

    def refresh(self) -> None:
        """Redraw from the pair's count and its last row."""
        self._summary.value = self.summary_html()


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

    def snapshot_html(self) -> str:
        return f'<div class="{ROUNDS_CLASS}">{self._table.value}</div>'

    def _wants(self, event: HubEvent) -> bool:
        return isinstance(event, RoundLogged)

    def _on_event(self, event: HubEvent) -> None:
        if isinstance(event, RoundLogged):
            self._add(round_row(event.record))
        self._draw()


TIMELINE_CLASS: Final = "madohub-timeline"


class TimelineView(_HubView):
    """The hub's round timeline (``hub.log.plot()``) as SVG, redrawn as rounds finish.

    Bursts of rounds coalesce into one redraw per ``min_interval_s``; the log is
    read and the figure drawn in a worker thread, never on the loop or the kernel.
    """

    def __init__(self, hub: Hub, *, min_interval_s: float = 1.0) -> None:
        self.min_interval_s = min_interval_s
        self.draws = 0
        self._drawn = threading.Event()
        self._image = widgets.HTML(value="<i>drawing the timeline…</i>")
        super().__init__(hub, [self._image], TIMELINE_CLASS)
        self.request_redraw()

    @property
    def svg(self) -> str:
        """The HTML (an inline SVG) the view shows now."""
        return str(self._image.value)

    def _wants(self, event: HubEvent) -> bool:
        return isinstance(event, RoundLogged)

    def _on_event(self, event: HubEvent) -> None:
        self.request_redraw()

    def _render(self) -> str:
        from ..plot import timeline_svg

        df = self.hub.log.df
        return timeline_svg(df[df["session_id"] == self.hub.session_id])

    async def _redraw_loop(self) -> None:
        while self._dirty and not self._closed:
            self._dirty = False
            started = time.monotonic()
            try:
                value = await asyncio.to_thread(self._render)
            except Exception as exc:  # a closed log at shutdown: say so, keep the view
                value = f"<i>timeline unavailable: {html.escape(str(exc))}</i>"
            if self._closed:
                return
            self._image.value = value
            self.draws += 1
            self._drawn.set()
            await asyncio.sleep(max(0.0, self.min_interval_s - (time.monotonic() - started)))

    def snapshot_html(self) -> str:
        self._drawn.wait(SNAPSHOT_WAIT_S)
        return f'<div class="{TIMELINE_CLASS}">{self._image.value}</div>'


DASHBOARD_CLASS: Final = "madohub-dashboard"
MCP_SEEN_ROWS: Final = 200
"""How many of the log's last rows a new dashboard reads for the MCP pairs already calling."""


def _is_mcp_round(hub: Hub, record: Any) -> bool:
    """A row of this hub's MCP calls (``trigger`` mcp, this session)."""
    return (
        getattr(record, "trigger", None) == MCP_TRIGGER
        and getattr(record, "session_id", None) == hub.session_id
    )


INBOX_CLASS: Final = "madohub-inbox"
BUTTON_MAX_CHARS: Final = 60
"""A choice's button shows this much of its label (a longer one says how much more; the
whole label is its tooltip)."""


class AskRow(widgets.VBox):
    """One open ask: who asks, its age, its question or editable prompt, and its buttons."""

    def __init__(self, ask: Ask, on_answer: Callable[[Ask, Callable[[], object]], None]) -> None:
        self.ask = ask
        self.shown_text = ask.text
        """The permission text drawn (a hook may add the tool's line after the row was made)."""
        self.header = widgets.HTML(self._header_html())
        self.buttons: list[widgets.Button] = []
        self.prompt: widgets.Textarea | None = None
        body: list[Any] = [self.header]
        if isinstance(ask, ApprovalAsk):
            self.prompt = widgets.Textarea(value=ask.text, layout=widgets.Layout(width="98%"))
            prompt = self.prompt
            approve = widgets.Button(description="approve", icon="check", button_style="success")
            reject = widgets.Button(description="reject", icon="times", button_style="danger")
            approve.on_click(lambda _: on_answer(ask, lambda: ask.approve(prompt.value)))
            reject.on_click(lambda _: on_answer(ask, lambda: ask.reject("rejected in the inbox")))
            self.buttons = [approve, reject]
            body.append(self.prompt)
        else:
            body.append(widgets.HTML(ask_text_html(ask.text)))
            for index, label in enumerate(ask.choices):
                description = chars_cut(f"{index + 1}. {label}", BUTTON_MAX_CHARS)
                button = widgets.Button(description=description, tooltip=label)
                button.on_click(lambda _, i=index: on_answer(ask, lambda: ask.choose(i)))
                self.buttons.append(button)
        for button in self.buttons:
            button.layout.width = "auto"
        body.append(widgets.HBox(self.buttons))
        super().__init__(body)

    def _header_html(self) -> str:
        ask = self.ask
        where = f" · route {html.escape(ask.route)}" if ask.route else ""
        return (
            f"<b>{html.escape(ask.kind)}</b> · {html.escape(ask.tile)}{where} · "
            f"waiting {ask.age_s:.0f}s"
        )

    def snapshot_html(self) -> str:
        text = self.prompt.value if self.prompt is not None else self.ask.text
        choices = " / ".join(html.escape(c) for c in self.ask.choices)
        return f"<div>{self._header_html()}{ask_text_html(text)}{choices}</div>"


class InboxView(_HubView):
    """What waits for a person (``hub.inbox``), live: each ask with its buttons; an answered
    or expired ask leaves the list by itself. ``error`` shows why an answer was refused."""

    def __init__(self, hub: Hub) -> None:
        self.rows: dict[str, AskRow] = {}
        self._title = widgets.HTML()
        self._list = widgets.VBox()
        self.error = widgets.HTML()
        super().__init__(hub, [self._title, self.error, self._list], INBOX_CLASS)
        self.sync()

    @property
    def count(self) -> int:
        """Open asks shown."""
        return len(self.rows)

    def _answer(self, ask: Ask, answer: Callable[[], object]) -> None:
        try:
            answer()
        except MadohubError as exc:  # (a ValueError too: a bad choice, an empty edit)
            self.error.value = f"<span style='color:#c62828'>{html.escape(str(exc))}</span>"
        else:
            self.error.value = ""
        self.sync()

    def sync(self) -> None:
        """Show the hub's open asks now, oldest first."""
        open_asks = {a.id: a for a in self.hub.inbox}
        for key in [k for k in self.rows if k not in open_asks]:
            self.rows.pop(key).close()
        for key, ask in open_asks.items():
            row = self.rows.get(key)
            if row is not None and isinstance(ask, PermissionAsk) and row.shown_text != ask.text:
                row.close()  # (its hook named the tool after the row was drawn)
                row = None
            if row is None:
                self.rows[key] = AskRow(ask, self._answer)
        if tuple(self._list.children) != tuple(self.rows.values()):
            self._list.children = tuple(self.rows.values())
        self._title.value = (
            f"<div style='font-family:sans-serif'><b>inbox</b> · {self.count} waiting</div>"
        )

    def snapshot_html(self) -> str:
        rows = "".join(r.snapshot_html() for r in self.rows.values())
        return f'<div class="{INBOX_CLASS}">{self._title.value}{rows}</div>'

    def _wants(self, event: HubEvent) -> bool:
        return isinstance(event, AskChanged)

    def _on_event(self, event: HubEvent) -> None:
        self.sync()


class Dashboard(_HubView):
    """All tiles, all routes and the round log of a hub, kept up to date; the pairs of
    agents calling each other through the hub's MCP server are shown as routes are."""

    def __init__(self, hub: Hub, rows: int = 10, *, min_interval_s: float = 0.25) -> None:
        self.min_interval_s = min_interval_s
        self.tile_views: dict[str, TileView] = {}
        self.route_cards: dict[str, RouteCard] = {}
        self.mcp_cards: dict[str, McpPairCard] = {}
        self._title = widgets.HTML()
        self._tiles_box = widgets.Box(layout=widgets.Layout(flex_flow="row wrap"))
        self._routes_box = widgets.VBox()
        self._mcp_box = widgets.VBox()
        self.log_table = RoundLogTable(hub, rows)
        self.timeline = TimelineView(hub)
        self.inbox = InboxView(hub)
        mcp_rounds = [r for r in hub.log.tail(MCP_SEEN_ROWS) if _is_mcp_round(hub, r)]
        super().__init__(
            hub,
            [
                self._title,
                self.inbox,
                self._tiles_box,
                self._routes_box,
                self._mcp_box,
                self.timeline,
                self.log_table,
            ],
            DASHBOARD_CLASS,
        )
        for record in mcp_rounds:  # pairs that called before the dashboard opened
            self._add_pair(record)
        self.sync()

    def snapshot_html(self) -> str:
        parts = [
            self._title.value,
            self.inbox.snapshot_html(),
            '<div style="display:flex;flex-wrap:wrap;gap:1%">',
            *(
                f'<div style="width:49%">{v.snapshot_html()}</div>'
                for v in self.tile_views.values()
            ),
            "</div>",
            *(c.snapshot_html() for c in self.route_cards.values()),
            *(c.snapshot_html() for c in self.mcp_cards.values()),
            self.timeline.snapshot_html(),
            self.log_table.snapshot_html(),
        ]
        return f'<div class="{DASHBOARD_CLASS}">{"".join(parts)}</div>'

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
        if tuple(self._mcp_box.children) != tuple(self.mcp_cards.values()):
            self._mcp_box.children = tuple(self.mcp_cards.values())
        pairs = f"{len(self.mcp_cards)} MCP pairs · " if self.mcp_cards else ""
        self._title.value = (
            '<div style="font-family:sans-serif;font-size:15px"><b>madohub</b> · '
            f"{len(self.tile_views)} tiles · {len(self.route_cards)} routes · {pairs}"
            f"{len(self.hub.inbox)} waiting</div>"
        )

    def _wants(self, event: HubEvent) -> bool:
        match event:
            case TileAdded() | TileStateChanged() | TileOutput():
                return event.name not in self.tile_views
            case RouteAdded() | RouteStateChanged():
                return event.route_id not in self.route_cards
            case RoundLogged():  # a pair's first MCP call
                record = event.record
                return _is_mcp_round(self.hub, record) and event.route_id not in self.mcp_cards
            case AskChanged():  # (the count in the title)
                return True
        return False

    def _on_event(self, event: HubEvent) -> None:
        if isinstance(event, RoundLogged):
            self._add_pair(event.record)
        self.sync()

    def _add_pair(self, record: Any) -> None:
        route_id = str(record.route_id)
        if route_id not in self.mcp_cards:
            self.mcp_cards[route_id] = McpPairCard(self.hub, route_id, record)
        else:
            self.mcp_cards[route_id].last = record

    def close(self) -> None:
        """Close the dashboard and every view in it."""
        views = (
            *self.tile_views.values(), *self.route_cards.values(), *self.mcp_cards.values(),
            self.log_table,
        )  # fmt: skip
        for view in (*views, self.timeline, self.inbox):
            view.close()
        super().close()
