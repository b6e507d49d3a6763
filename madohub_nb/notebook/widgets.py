"""Live ipywidgets views of a hub: tiles, routes, the round log, a dashboard.

Widgets are views with no logic of their own: they subscribe to ``hub.events``
and redraw from the hub's state. Events arrive on the engine loop; every widget
update runs on the loop that made the widget (the kernel's loop in Jupyter),
marshalled there when the engine runs in a thread of its own. Screen redraws
are coalesced to at most one per ``min_interval_s`` per tile.

The ``html_for_*`` functions render the same views as static HTML, for
``_repr_html_`` of hubs, tiles, routes and rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import html
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import ipywidgets as widgets

from ..errors import MadohubValueError

if TYPE_CHECKING:
    from ..engine import HubEvent
    from ..hub import Hub

# ANSI → HTML -------------------------------------------------------------------

SCREEN_FG: Final = "#d4d4d4"
SCREEN_BG: Final = "#1e1e1e"

_BASE16: Final = (
    "#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
    "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff",
)  # fmt: skip
_CUBE_LEVELS: Final = (0, 95, 135, 175, 215, 255)

_ESCAPE: Final = re.compile(
    r"\x1b\[([0-?]*)[ -/]*([@-~])"  # CSI (only SGR "m" is drawn)
    r"|\x1b\[[0-?]*[ -/]*\Z"  # a CSI cut off at the end of the capture
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|(?=\x1b)|\Z)"  # OSC: titles, links
    r"|\x1b[PX^_][\s\S]*?(?:\x1b\\|\x07|\Z)"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]+[0-~]|\x1b[0-~]?"  # charset selects, ESC x, a lone ESC
)
_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def color_256(index: int) -> str:
    """CSS colour of xterm palette entry ``index`` (0–255)."""
    if index < 16:
        return _BASE16[index]
    if index < 232:
        n = index - 16
        r, g, b = (_CUBE_LEVELS[(n // 36) % 6], _CUBE_LEVELS[(n // 6) % 6], _CUBE_LEVELS[n % 6])
        return f"#{r:02x}{g:02x}{b:02x}"
    level = 8 + 10 * (min(index, 255) - 232)
    return f"#{level:02x}{level:02x}{level:02x}"


@dataclasses.dataclass
class _Style:
    fg: str | None = None
    bg: str | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False
    inverse: bool = False
    strike: bool = False

    def css(self) -> str:
        fg, bg = self.fg, self.bg
        if self.inverse:
            fg, bg = (bg or SCREEN_BG), (fg or SCREEN_FG)
        parts = []
        if fg:
            parts.append(f"color:{fg}")
        if bg:
            parts.append(f"background-color:{bg}")
        if self.bold:
            parts.append("font-weight:bold")
        if self.dim:
            parts.append("opacity:0.6")
        if self.italic:
            parts.append("font-style:italic")
        lines = [
            n for n, on in (("underline", self.underline), ("line-through", self.strike)) if on
        ]
        if lines:
            parts.append(f"text-decoration:{' '.join(lines)}")
        return ";".join(parts)


def _extended_color(params: list[list[int]], i: int) -> tuple[str | None, int]:
    """Read ``38;5;N`` / ``38;2;R;G;B`` (or the ``:`` forms) at ``params[i]``; return colour and next index."""
    group = params[i]
    if len(group) > 1:  # colon form: 38:5:N, 38:2::R:G:B or 38:2:R:G:B
        sub = group[1:]
        if sub[:1] == [5] and len(sub) >= 2:
            return color_256(sub[1] % 256), i + 1
        if sub[:1] == [2] and len(sub) >= 4:
            r, g, b = (v % 256 for v in sub[-3:])
            return f"#{r:02x}{g:02x}{b:02x}", i + 1
        return None, i + 1
    flat = [g[0] for g in params[i + 1 : i + 5]]
    if flat[:1] == [5] and len(flat) >= 2:
        return color_256(flat[1] % 256), i + 3
    if flat[:1] == [2] and len(flat) >= 4:
        r, g, b = (v % 256 for v in flat[1:4])
        return f"#{r:02x}{g:02x}{b:02x}", i + 5
    return None, len(params)


def _apply_sgr(style: _Style, text: str) -> _Style:
    groups = [[int(v) if v.isdigit() else 0 for v in group.split(":")] for group in text.split(";")]
    style = dataclasses.replace(style)
    i = 0
    while i < len(groups):
        code = groups[i][0]
        nxt = i + 1
        if code == 0:
            style = _Style()
        elif code == 1:
            style.bold = True
        elif code == 2:
            style.dim = True
        elif code == 3:
            style.italic = True
        elif code == 4:
            style.underline = groups[i][1:] != [0]
        elif code == 7:
            style.inverse = True
        elif code == 9:
            style.strike = True
        elif code == 22:
            style.bold = style.dim = False
        elif code == 23:
            style.italic = False
        elif code == 24:
            style.underline = False
        elif code == 27:
            style.inverse = False
        elif code == 29:
            style.strike = False
        elif 30 <= code <= 37:
            style.fg = _BASE16[code - 30]
        elif 90 <= code <= 97:
            style.fg = _BASE16[code - 90 + 8]
        elif 40 <= code <= 47:
            style.bg = _BASE16[code - 40]
        elif 100 <= code <= 107:
            style.bg = _BASE16[code - 100 + 8]
        elif code == 39:
            style.fg = None
        elif code == 49:
            style.bg = None
        elif code in (38, 48):
            color, nxt = _extended_color(groups, i)
            if code == 38:
                style.fg = color
            else:
                style.bg = color
        i = nxt
    return style


def ansi_to_html(text: str) -> str:
    """Terminal text with SGR colour codes → HTML-escaped text in styled ``<span>`` s.

    Other escape sequences (cursor moves, titles, links) and control characters
    other than newline and tab are dropped.
    """
    out: list[str] = []
    style = _Style()
    pos = 0

    def emit(chunk: str) -> None:
        chunk = _CONTROLS.sub("", chunk)
        if not chunk:
            return
        escaped = html.escape(chunk, quote=False)
        css = style.css()
        out.append(f'<span style="{css}">{escaped}</span>' if css else escaped)

    for match in _ESCAPE.finditer(text):
        emit(text[pos : match.start()])
        pos = match.end()
        if match.group(2) == "m":
            style = _apply_sgr(style, match.group(1) or "0")
    emit(text[pos:])
    return "".join(out)


SCREEN_CLASS: Final = "madohub-screen"


def screen_html(text: str, *, ansi: bool = True, max_height_em: int = 30) -> str:
    """A terminal screen as a dark ``<pre>`` block (colours kept when ``ansi``)."""
    body = ansi_to_html(text) if ansi else html.escape(text, quote=False)
    if not text.strip():
        body = '<span style="opacity:0.5">(empty screen)</span>'
    style = (
        f"background:{SCREEN_BG};color:{SCREEN_FG};font-family:monospace;font-size:12px;"
        f"line-height:1.25;padding:6px 8px;margin:0;border-radius:4px;white-space:pre;"
        f"overflow:auto;max-height:{max_height_em}em"
    )
    return f'<pre class="{SCREEN_CLASS}" style="{style}">{body}</pre>'


# Static HTML views ---------------------------------------------------------------

STATE_COLORS: Final = {
    "idle": "#2e7d32",
    "busy": "#1565c0",
    "waiting": "#ef6c00",
    "exited": "#616161",
    "unknown": "#9e9e9e",
    "active": "#2e7d32",
    "paused": "#ef6c00",
    "stopped": "#616161",
    "exhausted": "#6a1b9a",
    "delivered": "#2e7d32",
    "shadow": "#455a64",
    "error": "#c62828",
}


def badge(text: str | None) -> str:
    """A small coloured label for a state or status."""
    label = text or "—"
    color = STATE_COLORS.get(label, "#757575")
    return (
        f'<span class="madohub-badge" style="background:{color};color:white;border-radius:8px;'
        f'padding:0 6px;font-size:11px">{html.escape(label)}</span>'
    )


def tile_header_html(name: str, agent: str, pane_id: str, state: str) -> str:
    """One line naming a tile, its agent kind, pane and state."""
    return (
        f'<div class="madohub-tile-header" style="font-family:sans-serif;font-size:13px">'
        f"<b>{html.escape(name)}</b> · {html.escape(agent)} · <code>{html.escape(pane_id)}</code> "
        f"{badge(state)}</div>"
    )


def html_for_tile(tile: Any, screen: str | None = None) -> str:
    """Static HTML of a tile: its header and coloured screen (read now unless given)."""
    text = tile.screen(ansi=True) if screen is None else screen
    state = getattr(tile, "last_state", None) or "unknown"
    return tile_header_html(tile.name, tile.agent, tile.pane_id, state) + screen_html(text)


def route_summary_html(route: Any) -> str:
    """One block naming a route, its state, rounds used of max and last status."""
    max_rounds = getattr(route, "max_rounds", None)
    used = f"{route.rounds}/{max_rounds}" if max_rounds else f"{route.rounds}"
    details = " · ".join(
        html.escape(str(v))
        for v in (getattr(route, a, None) for a in ("trigger", "transform", "dispatch"))
        if v
    )
    return (
        f'<div class="madohub-route" style="font-family:sans-serif;font-size:13px">'
        f"<b>{html.escape(str(route.source))} → {html.escape(str(route.target))}</b> "
        f"<code>{html.escape(str(route.id))}</code> {badge(route.state)} "
        f"rounds <b>{used}</b> · last {badge(getattr(route, 'last_status', None))}"
        f'<div style="color:#757575;font-size:11px">{details}</div></div>'
    )


def html_for_route(route: Any) -> str:
    """Static HTML of a route (for ``Route._repr_html_``)."""
    return route_summary_html(route)


ROUND_TABLE_COLUMNS: Final = (
    ("fired_at", "time"),
    ("route_id", "route"),
    ("source", "from"),
    ("target", "to"),
    ("round", "#"),
    ("transform", "transform"),
    ("dispatch", "dispatch"),
    ("status", "status"),
    ("extraction_method", "via"),
    ("latency_ms", "ms"),
    ("cost_usd", "cost"),
    ("prompt", "prompt"),
)


def round_row(record: Any) -> dict[str, Any]:
    """A round (``RoundRecord``, mapping or pandas row) as a plain dict of its fields."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if isinstance(record, Mapping):
        return dict(record)
    if hasattr(record, "to_dict"):
        return dict(record.to_dict())
    raise MadohubValueError(f"not a round record: {type(record).__name__}")


def _cell(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):  # NaN
        return ""
    if column == "status":
        return badge(str(value))
    if column == "fired_at" and isinstance(value, datetime):
        return value.astimezone().strftime("%H:%M:%S")
    if column.endswith("_ms") and isinstance(value, (int, float)):
        return f"{value:.0f}"
    if column == "cost_usd" and isinstance(value, (int, float)):
        return f"${value:.4f}"  # blank when unknown (NaN above): never a made-up $0
    text = str(value)
    if column == "prompt":
        flat = " ".join(text.split())
        short = flat if len(flat) <= 60 else flat[:59] + "…"
        return f'<span title="{html.escape(text)}">{html.escape(short)}</span>'
    return html.escape(text)


_CELL_PADDING: Final = "padding:2px 10px 2px 0;white-space:nowrap"


def rounds_table_html(rows: Iterable[Mapping[str, Any]]) -> str:
    """An HTML table of rounds, one row each, oldest first."""
    rows = list(rows)
    head = "".join(
        f"<th style='text-align:left;{_CELL_PADDING}'>{label}</th>"
        for _, label in ROUND_TABLE_COLUMNS
    )
    if not rows:
        body = f"<tr><td colspan='{len(ROUND_TABLE_COLUMNS)}'><i>no rounds yet</i></td></tr>"
    else:
        body = "".join(
            f"<tr data-round-id='{html.escape(str(row.get('round_id', '')))}'>"
            + "".join(
                f"<td style='{_CELL_PADDING}'>{_cell(c, row.get(c))}</td>"
                for c, _ in ROUND_TABLE_COLUMNS
            )
            + "</tr>"
            for row in rows
        )
    return (
        '<table class="madohub-rounds" style="font-family:sans-serif;font-size:12px;'
        f'border-collapse:collapse"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def html_for_round(record: Any) -> str:
    """Static HTML of one round: its table row plus the full prompt."""
    row = round_row(record)
    prompt = html.escape(str(row.get("prompt") or ""))
    error = row.get("error")
    extra = f"<div style='color:#c62828'>{html.escape(str(error))}</div>" if error else ""
    return (
        rounds_table_html([row])
        + f"{extra}<pre style='white-space:pre-wrap;font-size:12px'>{prompt}</pre>"
    )


def html_for_hub(hub: Any) -> str:
    """Static HTML of a hub: its tiles, routes and last rounds."""
    tiles = "".join(
        tile_header_html(t.name, t.agent, t.pane_id, getattr(t, "last_state", "unknown"))
        for t in hub.tiles.values()
    )
    routes = "".join(route_summary_html(r) for r in hub.routes)
    rounds = rounds_table_html(round_row(r) for r in hub.log.tail(5))
    return (
        f'<div class="madohub-hub"><b>madohub</b> · {len(hub.tiles)} tiles · '
        f"{len(hub.routes)} routes{tiles or '<div><i>no tiles</i></div>'}{routes}{rounds}</div>"
    )


# Loop marshalling --------------------------------------------------------------


class _ViewLoop:
    """The loop that owns a view: the running one where it was made, else the hub's."""

    def __init__(self, hub: Hub) -> None:
        try:
            self.loop: asyncio.AbstractEventLoop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = hub.loop

    def call(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the view's loop: now if we are on it, else soon (thread-safe)."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            fn(*args)
        elif not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(fn, *args)


class _HubView(widgets.VBox):
    """A VBox that listens to its hub's events until closed."""

    _closed = True  # until subscribed: a half-made view (bad arguments) closes cleanly
    _unsubscribe: Callable[[], None] = staticmethod(lambda: None)

    def __init__(self, hub: Hub, children: list[Any], css_class: str) -> None:
        super().__init__(children)
        self.add_class(css_class)
        self.hub = hub
        self._view_loop = _ViewLoop(hub)
        self._closed = False
        self._unsubscribe = hub.events.subscribe(self._on_event_any_thread)

    def _on_event_any_thread(self, event: HubEvent) -> None:
        if not self._closed and self._wants(event):
            self._view_loop.call(self._on_event, event)

    def _wants(self, event: HubEvent) -> bool:
        return True

    def _on_event(self, event: HubEvent) -> None:
        """Handle one event on the view's loop."""

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
        self._view_loop.call(self._kick)

    def _kick(self) -> None:
        if self._drawing or self._closed:
            return
        self._drawing = True
        self._view_loop.loop.create_task(self._redraw_loop())

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
