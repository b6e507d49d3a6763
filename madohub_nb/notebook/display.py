"""How the hub's objects show themselves in a notebook, attached from this layer so the
objects import no HTML and no plotting: a tile's and a route's ``_repr_html_``
(:mod:`madohub_nb.render`), the playground's widget, ``RoundLog.plot()`` (:mod:`madohub_nb.plot`, whose
matplotlib loads only when a plot is asked for) and an experiment's plot, table and report
(:mod:`madohub_nb.notebook.experiment_view`, loaded on first use). The package attaches them when it is
imported (``madohub_nb/__init__.py``), before any of those objects can exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..experiment import Experiment
from ..io.log import RoundLog
from ..pipeline.route import Route
from ..pipeline.tile import Tile
from ..playground import Playground
from ..render import html_for_route, html_for_tile

if TYPE_CHECKING:
    import pandas as pd


def timeline_figure(df: pd.DataFrame, *, title: str | None = None) -> Any:
    """:func:`madohub_nb.plot.timeline_figure`, imported on first use (matplotlib is slow
    to load and most sessions never plot)."""
    from ..plot import timeline_figure as draw

    return draw(df, title=title)


def attach() -> None:
    """Give tiles, routes and the round log their notebook views."""
    Tile.html_view = html_for_tile
    Route.html_view = html_for_route
    RoundLog.plotter = timeline_figure
    Playground.view_maker = playground_view
    Experiment.plotter = _experiment_figure
    Experiment.html_view = _experiment_html
    Experiment.reporter = _write_report


def playground_view(played: Playground) -> Any:
    """The playground's side-by-side widget, imported on first use (ipywidgets is slow to load)."""
    from .playground_view import PlaygroundView

    return PlaygroundView(played)


def _experiment_figure(exp: Experiment, confidence: float = 0.95) -> Any:
    from .experiment_view import experiment_figure

    return experiment_figure(exp, confidence)


def _experiment_html(exp: Experiment) -> str:
    from .experiment_view import experiment_html

    return experiment_html(exp)


def _write_report(exp: Experiment, path: Any, compare: Any, confidence: float) -> Any:
    from .experiment_view import write_report

    return write_report(exp, path, compare, confidence)
