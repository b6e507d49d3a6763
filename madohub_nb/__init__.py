"""madohub_nb: route AI coding agents in tmux panes to each other, from Jupyter.

The pipeline of one round, one module each, folders layered downwards::

    io/watch → pipeline/triggers → pipeline/extract → pipeline/transforms
             → pipeline/deliver → io/log          (pipeline/route decides when,
                                                   pipeline/round runs one)

``Hub`` (hub.py) is the public face; ``runtime.py`` the machinery behind it;
the engine (engine.py) runs in its own thread. ``%load_ext madohub_nb`` adds
the ``%madohub`` magics and widgets (notebook/).
"""

from __future__ import annotations

from typing import Any

from . import score
from .agents.registry import register_agent
from .errors import (
    DeliveryError,
    LogError,
    MadohubError,
    MadohubValueError,
    MadohubWarning,
    TileError,
    TmuxError,
    TransformError,
)
from .experiment import Experiment, experiment
from .hub import Hub
from .io.agent_records import read_last_response, read_turn_usage
from .io.agent_records.base import Extraction, TurnUsage
from .io.agent_records.claude import cwd_to_project_dir
from .io.log import RoundLog, RoundRecord
from .notebook.display import attach as _attach_views
from .pipeline.gather import Gather
from .pipeline.route import Route
from .pipeline.tile import Tile
from .pipeline.workflow import Workflow
from .playground import Playground, try_transforms

_attach_views()  # tiles', routes' and the log's notebook views (the objects import no HTML)

__version__ = "0.1.0"


def get_hub() -> Hub:
    """The kernel's hub (made on first use from ``%config MadoHub.*``)."""
    from .notebook.registry import get_hub as kernel_hub  # (the settings' traitlets load here)

    return kernel_hub()


__all__ = [
    "DeliveryError",
    "Experiment",
    "Extraction",
    "Gather",
    "Hub",
    "LogError",
    "MadohubError",
    "MadohubValueError",
    "MadohubWarning",
    "Playground",
    "Route",
    "RoundLog",
    "RoundRecord",
    "Tile",
    "TileError",
    "TmuxError",
    "TransformError",
    "TurnUsage",
    "Workflow",
    "cwd_to_project_dir",
    "experiment",
    "get_hub",
    "load_ipython_extension",
    "read_last_response",
    "read_turn_usage",
    "register_agent",
    "score",
    "try_transforms",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext madohub_nb``: register the ``%madohub`` magics and the ``MadoHub`` config."""
    from .notebook.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext madohub_nb``: remove ``%madohub`` (the hub and its routes stay)."""
    from .notebook.magics import unload_ipython_extension as unload

    unload(ipython)
