"""The round timeline: one lane per route, a bar per round, latency beneath.

``timeline_figure(df)`` draws a round-log DataFrame (``RoundLog.df``) as a
matplotlib :class:`~matplotlib.figure.Figure`: each round is a bar from
``fired_at`` to ``delivered_at`` in its route's lane, coloured by status, and a
second axis beneath shows each round's latency. Pure: no pyplot, no global
state, so it may run on any thread (the dashboard renders it off the kernel's).
"""

from __future__ import annotations

import io
from typing import Any, Final

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .render import STATE_COLORS

MIN_BAR_S: Final = 0.15
"""A round without a delivery (shadow, error, stopped) is drawn this wide, so it shows."""
LANE_HEIGHT_IN: Final = 0.45
EMPTY_TEXT: Final = "no rounds yet: the timeline fills as routes fire"


class TimelineFigure(Figure):
    """A matplotlib Figure that shows itself as a PNG in a notebook, with or without pyplot."""

    def _repr_png_(self) -> bytes:
        return figure_bytes(self, "png")


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    """``fig`` saved as ``png`` or ``svg`` bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    return buf.getvalue()


def _new_figure(lanes: int) -> TimelineFigure:
    fig = TimelineFigure(figsize=(9, 1.6 + LANE_HEIGHT_IN * max(lanes, 1) + 1.6))
    FigureCanvasAgg(fig)
    return fig


def timeline_figure(df: pd.DataFrame, *, title: str | None = None) -> TimelineFigure:
    """The timeline of the rounds in ``df``; an empty ``df`` gives a Figure that says so."""
    if df is None or len(df) == 0:
        fig = _new_figure(1)
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, EMPTY_TEXT, ha="center", va="center", fontsize=12, color="#757575")
        if title:
            fig.suptitle(title)
        return fig
    fired = pd.to_datetime(df["fired_at"], utc=True)
    delivered = pd.to_datetime(df["delivered_at"], utc=True)
    lanes = list(dict.fromkeys(df["route_id"].astype(str)))
    fig = _new_figure(len(lanes))
    bars, lat = fig.subplots(
        2, 1, sharex=True, gridspec_kw={"height_ratios": [max(len(lanes), 1), 2]}
    )
    start = fired.min()
    left_s = (fired - start).dt.total_seconds()
    width_s = ((delivered - fired).dt.total_seconds()).fillna(0).clip(lower=MIN_BAR_S)
    statuses = df["status"].astype(str)
    for lane, route_id in enumerate(lanes):
        mine = df["route_id"].astype(str) == route_id
        bars.broken_barh(
            list(zip(left_s[mine], width_s[mine], strict=True)),
            (lane - 0.35, 0.7),
            facecolors=[STATE_COLORS.get(s, "#757575") for s in statuses[mine]],
        )
        latency = df.loc[mine, "latency_ms"]
        lat.plot(left_s[mine], latency, marker="o", linestyle="-", label=route_id)
    bars.set_yticks(range(len(lanes)), labels=lanes)
    bars.set_ylim(-0.6, len(lanes) - 0.4)
    bars.invert_yaxis()
    bars.set_ylabel("route")
    bars.grid(axis="x", alpha=0.3)
    shown = list(dict.fromkeys(statuses))
    bars.legend(
        handles=[Patch(color=STATE_COLORS.get(s, "#757575"), label=s) for s in shown],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        title="status",
    )
    lat.set_ylabel("latency (ms)")
    lat.set_xlabel(f"seconds since {start.tz_convert(None):%Y-%m-%d %H:%M:%S} UTC")
    lat.grid(alpha=0.3)
    if len(lanes) > 1:
        lat.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.suptitle(title or f"{len(df)} rounds on {len(lanes)} routes")
    return fig


def timeline_svg(df: pd.DataFrame, **kwargs: Any) -> str:
    """:func:`timeline_figure` as an inline SVG string (for HTML widgets and saved notebooks)."""
    svg = figure_bytes(timeline_figure(df, **kwargs), "svg").decode("utf-8")
    return svg[svg.index("<svg") :]  # drop the XML prolog and doctype: it sits inside a <div>


def lanes_of(fig: Figure) -> list[str]:
    """The route lanes of a timeline figure, top to bottom (empty for the empty figure)."""
    axes = fig.get_axes()
    if not axes or not axes[0].axison:
        return []
    return [t.get_text() for t in axes[0].get_yticklabels()]
