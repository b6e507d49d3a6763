"""A hub's workflows: what its tiles and routes were made with, kept and run again.

:class:`Recipes` remembers the options each tile and route was made with, so
``hub.workflow()`` can write today's tiles and routes as a
:class:`~madohub_nb.pipeline.workflow.Workflow`; :func:`run_workflow` starts a
workflow's tiles and routes in a hub (``hub.run()``), after checking all it can first.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Protocol

from .errors import MadohubError, MadohubValueError
from .pipeline.gather import Gather
from .pipeline.route import Route
from .pipeline.tile import Tile, check_new_tile
from .pipeline.transforms import make_transform_spec, require_ai_key
from .pipeline.workflow import RouteSpec, Workflow, options_named


class WorkflowHub(Protocol):
    """What running a workflow needs of a hub (:class:`madohub_nb.Hub` is one)."""

    @property
    def tiles(self) -> Mapping[str, Tile]:
        """The hub's tiles by name."""

    @property
    def api_key(self) -> str | None:
        """The Anthropic API key in use."""

    def tile(self, name: str, *args: Any, **keywords: Any) -> Tile:
        """Start a tile (``hub.tile``)."""

    def connect(self, source: str | Tile, target: str | Tile, *args: Any, **options: Any) -> Route:
        """Wire a route (``hub.connect``)."""

    def gather(
        self,
        sources: list[str | Tile] | tuple[str | Tile, ...],
        target: str | Tile,
        *args: Any,
        **options: Any,
    ) -> Gather:
        """Wire a gather (``hub.gather``)."""


class Recipes:
    """The call (``tile``, ``connect``, ``gather``) and options each tile and route of a hub
    was made with; forgotten with the object."""

    def __init__(self) -> None:
        self._made: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, Any]]] = (
            weakref.WeakKeyDictionary()
        )

    def keep(self, made: Tile | Route, kind: str, given: dict[str, Any]) -> None:
        """Remember that ``made`` came from ``hub.<kind>(**given)``."""
        self._made[made] = (kind, given)

    def workflow(self, name: str, tiles: Iterable[Tile], routes: Iterable[Route]) -> Workflow:
        """``tiles`` and ``routes`` as a :class:`Workflow` (``hub.workflow``'s rules)."""
        kept_tiles: dict[str, dict[str, Any]] = {}
        for tile in tiles:
            kind, args = self._made.get(tile, ("tile", {"pane": "?"}))
            if args.get("pane") is not None:
                raise MadohubValueError(
                    f"tile {tile.name!r} adopted a pane; a workflow keeps only tiles the hub "
                    "starts (give it command= instead of pane=)"
                )
            kept_tiles[tile.name] = _kept(args, kind)
        specs = []
        for route in routes:
            if route.state == "stopped" or route not in self._made:
                continue
            kind, args = self._made[route]
            sources = [t.name for t in route.tiles[:-1]]
            options = _kept(args, kind)
            specs.append(RouteSpec(sources, route.target_tile.name, options, kind == "gather"))
        return Workflow(name, kept_tiles, specs)


def _kept(args: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The workflow options among a call's arguments, as plain data (no defaults)."""
    kept: dict[str, Any] = {}
    for opt in options_named(kind):
        value = args.get(opt.name, opt.default)
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        if value != opt.default:
            kept[opt.name] = value
    return kept


def check_before_start(hub: WorkflowHub, workflow: Workflow) -> None:
    """What can be checked before the first tile starts (a tile name the hub already has, a
    missing ``cwd``, an AI transform without a key), each error naming ``file:table.key``."""
    where = workflow.path or workflow.name
    for name, options in workflow.tiles.items():
        if name in hub.tiles:
            raise MadohubValueError(
                f"{where}:tiles.{name}: this hub already has a tile {name!r}; "
                "run the workflow in a fresh hub (or close that tile's hub first)"
            )
        try:
            check_new_tile(name, options.get("command"), options.get("cwd"),
                           options.get("env"), remote=options.get("host") is not None)  # fmt: skip
        except MadohubValueError as exc:
            raise MadohubValueError(f"{where}:tiles.{name}: {exc}") from None
    for key, spec in zip(workflow.route_keys(), workflow.routes, strict=True):
        transform = spec.options.get("transform", "prompt-wrap")
        try:
            made_spec = make_transform_spec(
                transform, spec.options.get("template"), spec.options.get("model")
            )
            if made_spec.is_ai:
                require_ai_key(transform, hub.api_key)
        except MadohubValueError as exc:
            raise MadohubValueError(f"{where}:routes.{key}: {exc}") from None


def run_workflow(
    hub: WorkflowHub, workflow: Workflow, workflows: MutableMapping[str, tuple[str, str]]
) -> list[Route]:
    """Start ``workflow``'s tiles and routes in ``hub`` (``hub.run``); each route's id maps to
    (workflow name, hash) in ``workflows`` (the recorder's: its rounds record them)."""
    check_before_start(hub, workflow)
    where = workflow.path or workflow.name
    digest = workflow.hash or hashlib.sha256(workflow.dumps().encode()).hexdigest()
    for name, options in workflow.tiles.items():
        try:
            hub.tile(name, **options)
        except MadohubError as exc:
            raise MadohubError(f"{where}:tiles.{name}: {exc}") from exc
    made: list[Route] = []
    for key, spec in zip(workflow.route_keys(), workflow.routes, strict=True):
        try:
            if spec.gather:
                route: Route = hub.gather(
                    list[str | Tile](spec.sources), spec.target, **spec.options
                )
            else:
                route = hub.connect(spec.sources[0], spec.target, **spec.options)
        except MadohubError as exc:
            for done in made:  # no half-wired workflow: the routes made so far stop
                done.stop()
            raise MadohubError(
                f"{where}:routes.{key}: {exc} (the workflow's tiles are started; "
                "its routes made so far were stopped)"
            ) from exc
        workflows[route.id] = (workflow.name, digest)
        made.append(route)
    return made
