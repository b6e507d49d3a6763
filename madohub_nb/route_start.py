"""``hub.connect`` / ``hub.gather``'s work: name the tiles, complete the options, add the route.

A route's options are those given, its delivery the hub's unless given, and the hub's
API key; the route registry numbers it, registers it and starts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from .errors import MadohubValueError
from .pipeline.gather import Gather, build_gather
from .pipeline.route import Route, make_route, route_context

if TYPE_CHECKING:
    from .parts import RuntimeParts
    from .pipeline.tile import Tile


def _route_options(rt: RuntimeParts, given: Mapping[str, Any]) -> dict[str, Any]:
    """A route's options as given, its delivery the hub's unless given, and the hub's key."""
    return {
        **given,
        "delivery": given.get("delivery") or rt.settings["delivery"],
        "api_key": rt.api_key,
    }


def start_route(
    rt: RuntimeParts, source: str | Tile, target: str | Tile, given: Mapping[str, Any]
) -> Route:
    """The route ``source`` → ``target`` with the options ``given`` (by name), started."""
    src, dst = rt.tiles.named(source, "source"), rt.tiles.named(target, "target")
    resolved = _route_options(rt, given)
    return rt.routes.add(lambda number: make_route(rt.services, number, src, dst, **resolved))


def start_gather(
    rt: RuntimeParts, sources: Sequence[str | Tile], target: str | Tile, given: Mapping[str, Any]
) -> Gather:
    """The gather of ``sources`` into ``target`` with the options ``given`` (by name), started."""
    if isinstance(sources, str) or not isinstance(sources, (list, tuple)):
        raise MadohubValueError(
            f"sources must be a list of tile names, e.g. ['r1', 'r2'], got {sources!r}"
        )
    srcs = [rt.tiles.named(s, "source") for s in sources]
    dst = rt.tiles.named(target, "target")
    resolved = _route_options(rt, given)
    context = route_context(rt.services)
    made = rt.routes.add(lambda number: build_gather(context, number, srcs, dst, **resolved))
    return cast(Gather, made)
