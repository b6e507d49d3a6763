"""What the hub tells its listeners (widgets, the route registry, the inbox): one frozen
dataclass per kind of event, matched by type (``isinstance`` or ``match``), never by string.

Each keeps ``kind`` (``"tile_output"``, ``"round"``...), the string the events were told
apart by before they were types: listeners of ``hub.events`` written against it still work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, TypeAlias

from ..model import AskKind, AskState, EventKind, HostState, RoundStatus, RouteState, TileState

if TYPE_CHECKING:
    from ..io.log import RoundRecord
    from .tile import Tile


class RouteLike(Protocol):
    """What an event says of its route (a :class:`~madohub_nb.pipeline.route.Route` or a
    gather); named by what it reads, so the routes that emit events are not imported here."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> RouteState: ...


class AskLike(Protocol):
    """What an event says of its ask (a :class:`~madohub_nb.pipeline.inbox.PermissionAsk` or
    :class:`~madohub_nb.pipeline.inbox.ApprovalAsk`; match on those to answer it)."""

    @property
    def id(self) -> str: ...

    @property
    def kind(self) -> AskKind: ...

    @property
    def tile(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def state(self) -> AskState: ...


@dataclass(frozen=True)
class TileOutput:
    """A tile's pane printed ``nbytes`` bytes."""

    kind: ClassVar[EventKind] = "tile_output"
    name: str
    nbytes: int = 0


@dataclass(frozen=True)
class TileStateChanged:
    """A tile's state changed (idle, busy, waiting, exited...)."""

    kind: ClassVar[EventKind] = "tile_state"
    name: str
    state: TileState


@dataclass(frozen=True)
class TileAdded:
    """A tile joined the hub (made or adopted)."""

    kind: ClassVar[EventKind] = "tile_added"
    name: str
    state: TileState
    tile: Tile = field(compare=False)


@dataclass(frozen=True)
class RouteAdded:
    """A route (or gather) was registered."""

    kind: ClassVar[EventKind] = "route_added"
    route_id: str
    state: RouteState
    route: RouteLike = field(compare=False)


@dataclass(frozen=True)
class RouteStateChanged:
    """A route's state changed (active, paused, stopped, exhausted)."""

    kind: ClassVar[EventKind] = "route_state"
    route_id: str
    state: RouteState
    route: RouteLike = field(compare=False)


@dataclass(frozen=True)
class RoundLogged:
    """A round was recorded (written to the log, or kept for it)."""

    kind: ClassVar[EventKind] = "round"
    route_id: str
    status: RoundStatus
    record: RoundRecord = field(compare=False)


@dataclass(frozen=True)
class TurnSkipped:
    """A route let a finished turn go: ``why`` is ``already routed``, ``not new``,
    ``no answer`` or ``paused``..."""

    kind: ClassVar[EventKind] = "turn_skipped"
    route_id: str
    why: str
    route: RouteLike = field(compare=False)


@dataclass(frozen=True)
class HostStateChanged:
    """A remote host became reachable or unreachable (``why``: the reason, or None)."""

    kind: ClassVar[EventKind] = "host_state"
    host: str
    state: HostState
    why: str | None = None


@dataclass(frozen=True)
class AskChanged:
    """An ask opened, changed (its tool became known) or closed."""

    kind: ClassVar[EventKind] = "ask"
    ask_id: str
    state: AskState
    ask: AskLike = field(compare=False)


@dataclass(frozen=True)
class ChannelChanged:
    """A tile's native channel attached, failed to attach, or broke (``why``: the reason);
    on ``failed`` and ``broken`` its prompts are typed from then on."""

    kind: ClassVar[EventKind] = "channel"
    tile: str
    state: Literal["attached", "failed", "broken"]
    why: str | None = None


HubEvent: TypeAlias = (
    TileOutput
    | TileStateChanged
    | TileAdded
    | RouteAdded
    | RouteStateChanged
    | RoundLogged
    | TurnSkipped
    | HostStateChanged
    | AskChanged
    | ChannelChanged
)
"""Every event the hub emits."""
