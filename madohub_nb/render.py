"""HTML views of tiles, routes, rounds and hubs: one renderer per object.

``_repr_html_`` of each object and the live widgets draw the same HTML from
these functions. Pure: they read the objects they are given and do no I/O,
except :func:`html_for_tile` and :func:`html_for_hub`, which read the screen or
the last rounds when not given them.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from .agents.screen import CONTROL_CHARS, ESCAPE_SEQUENCE
from .errors import MadohubValueError


def _escape(text: str, quote: bool = True) -> str:
    """``html.escape``, imported on the first drawing (not by ``import madohub_nb``)."""
    import html

    return html.escape(text, quote=quote)


# ANSI → HTML -------------------------------------------------------------------

SCREEN_FG: Final = "#d4d4d4"
SCREEN_BG: Final = "#1e1e1e"

_BASE16: Final = (
    "#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
    "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff",
)  # fmt: skip
_CUBE_LEVELS: Final = (0, 95, 135, 175, 215, 255)


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
        chunk = CONTROL_CHARS.sub("", chunk)
        if not chunk:
            return
        escaped = _escape(chunk, quote=False)
        css = style.css()
        out.append(f'<span style="{css}">{escaped}</span>' if css else escaped)

    for match in ESCAPE_SEQUENCE.finditer(text):
        emit(text[pos : match.start()])
        pos = match.end()
        if match.group("final") == "m":
            style = _apply_sgr(style, match.group("params") or "0")
    emit(text[pos:])
    return "".join(out)


SCREEN_CLASS: Final = "madohub-screen"


def screen_html(text: str, *, ansi: bool = True, max_height_em: int = 30) -> str:
    """A terminal screen as a dark ``<pre>`` block (colours kept when ``ansi``)."""
    body = ansi_to_html(text) if ansi else _escape(text, quote=False)
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
    "unreachable": "#c62828",
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
        f'padding:0 6px;font-size:11px">{_escape(label)}</span>'
    )


def attach_command(socket_name: str | None, session: str) -> str:
    """The shell command that shows a tile's tmux session (attach read-only with ``-r``)."""
    server = f"-L {shlex.quote(socket_name)} " if socket_name else ""
    return f"tmux {server}attach -r -t {shlex.quote(session)}"


def tile_attach_command(tile: Any) -> str:
    """:func:`attach_command` of a tile (its hub's socket, its session); over ssh for a tile
    on a remote host (``ssh -t box 'tmux … attach -r …'``)."""
    machine = tile.machine
    return str(
        machine.terminal_command(attach_command(machine.tmux.socket_name, str(tile.session)))
    )


def tile_header_html(
    name: str, agent: str, pane_id: str, state: str, attach: str | None = None
) -> str:
    """One line naming a tile, its agent kind, pane and state (and how to attach to it)."""
    hint = (
        f' <code class="madohub-attach" title="read-only attach from a terminal" '
        f'style="color:#757575;font-size:11px">{_escape(attach)}</code>'
        if attach
        else ""
    )
    return (
        f'<div class="madohub-tile-header" style="font-family:sans-serif;font-size:13px">'
        f"<b>{_escape(name)}</b> · {_escape(agent)} · <code>{_escape(pane_id)}</code> "
        f"{badge(state)}{hint}</div>"
    )


def html_for_tile(tile: Any, screen: str | None = None) -> str:
    """Static HTML of a tile: its header and coloured screen (read now unless given)."""
    text = tile.screen(ansi=True) if screen is None else screen
    state = getattr(tile, "last_state", None) or "unknown"
    header = tile_header_html(tile.name, tile.agent, tile.pane_id, state, tile_attach_command(tile))
    return header + screen_html(text)


def route_summary_html(route: Any) -> str:
    """One block naming a route, its state, rounds used of max and last status."""
    max_rounds = getattr(route, "max_rounds", None)
    used = f"{route.rounds}/{max_rounds}" if max_rounds else f"{route.rounds}"
    spent = getattr(route, "budget_spent", "")
    budget = (
        f' · <span class="madohub-budget">budget <b>{_escape(spent)}</b></span>' if spent else ""
    )
    details = " · ".join(
        _escape(str(v))
        for v in (getattr(route, a, None) for a in ("trigger", "transform", "dispatch", "notes"))
        if v
    )
    return (
        f'<div class="madohub-route" style="font-family:sans-serif;font-size:13px">'
        f"<b>{_escape(str(route.source))} → {_escape(str(route.target))}</b> "
        f"<code>{_escape(str(route.id))}</code> {badge(route.state)} "
        f"rounds <b>{used}</b>{budget} · last {badge(getattr(route, 'last_status', None))}"
        f'<div style="color:#757575;font-size:11px">{details}</div>{_last_error_html(route)}</div>'
    )


def _last_error_html(route: Any) -> str:
    error = getattr(route, "last_error", None)
    if not error:
        return ""
    return (
        f'<div class="madohub-route-error" style="color:#c62828;font-size:12px">'
        f"last error: {_escape(str(error))}</div>"
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
    ("files_changed", "files"),
    ("lines_added", "+"),
    ("lines_removed", "−"),
    ("prompt", "prompt"),
    ("error", "error"),
)

_CHANGE_COLUMNS: Final = ("files_changed", "lines_added", "lines_removed")

SHORT_CELL_CHARS: Final = 60
"""Prompts and errors longer than this are shortened in tables (full text on hover)."""


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
    if column in _CHANGE_COLUMNS and isinstance(value, (int, float)):
        return f"{int(value)}"  # (what the source turn changed in its git working tree)
    text = str(value)
    if column in ("prompt", "error"):
        flat = " ".join(text.split())
        short = flat if len(flat) <= SHORT_CELL_CHARS else flat[: SHORT_CELL_CHARS - 1] + "…"
        color = ' style="color:#c62828"' if column == "error" else ""
        return f'<span title="{_escape(text)}"{color}>{_escape(short)}</span>'
    return _escape(text)


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
            f"<tr data-round-id='{_escape(str(row.get('round_id', '')))}'>"
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


ASK_TEXT_STYLE: Final = "white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0"
"""An ask's text wraps instead of running off the view's edge: a command shown in one
long line stays whole in view, its end (``| sh``) too."""


def ask_text_html(text: str) -> str:
    """An inbox ask's text, whole (the dialog and the tool's whole command), as a ``<pre>``."""
    return f"<pre style='{ASK_TEXT_STYLE}'>{_escape(text)}</pre>"


def html_for_round(record: Any) -> str:
    """Static HTML of one round: its table row plus the full prompt."""
    row = round_row(record)
    prompt = _escape(str(row.get("prompt") or ""))
    error = row.get("error")
    extra = f"<div style='color:#c62828'>{_escape(str(error))}</div>" if error else ""
    return (
        rounds_table_html([row])
        + f"{extra}<pre style='white-space:pre-wrap;font-size:12px'>{prompt}</pre>"
    )


def html_for_hub(hub: Any) -> str:
    """Static HTML of a hub: its tiles, routes and last rounds."""
    tiles = "".join(
        tile_header_html(
            t.name, t.agent, t.pane_id, getattr(t, "last_state", "unknown"), tile_attach_command(t)
        )
        for t in hub.tiles.values()
    )
    routes = "".join(route_summary_html(r) for r in hub.routes)
    rounds = rounds_table_html(round_row(r) for r in hub.log.tail(5))
    return (
        f'<div class="madohub-hub"><b>madohub</b> · {len(hub.tiles)} tiles · '
        f"{len(hub.routes)} routes{tiles or '<div><i>no tiles</i></div>'}{routes}{rounds}</div>"
    )


def repr_hub(hub: Any) -> str:
    """``repr(hub)``: its socket, counts and settings (the API key only as set or unset)."""
    return (
        f"<Hub socket={hub.socket_name!r} tiles={len(hub.tiles)} routes={len(hub.routes)} "
        f"rounds={hub.rounds_written} idle_delay_ms={hub.idle_delay_ms} "
        f"api_key={'set' if hub.api_key else 'unset'}{' closed' if hub.closed else ''}>"
    )
