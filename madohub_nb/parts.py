"""What the runtime's helpers ask of it: :class:`RuntimeParts`, a Protocol the runtime satisfies.

The routes' services (:mod:`.services`) and the MCP server (:mod:`.mcp_server`) are
built by the runtime and ask it for its parts at each call (so a part swapped later, a
log reopened or a test's deliverer, is the one used); the hub's features (:mod:`.by_hand`,
:mod:`.route_start`) are handed it. They name this Protocol rather than the runtime
itself, so nothing the runtime imports imports it back: no circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .engine import Engine
    from .hub_settings import HubSettings
    from .io.log import RoundLog
    from .pipeline.deliver import Deliverer
    from .pipeline.events import HubEvent
    from .pipeline.inbox import Inbox
    from .pipeline.route import RouteServices
    from .recorder import RoundRecorder
    from .route_registry import RouteRegistry
    from .tile_registry import TileRegistry


class RuntimeParts(Protocol):
    """The parts of one hub's runtime (:class:`madohub_nb.runtime.Runtime`), read-only."""

    @property
    def settings(self) -> HubSettings:
        """The hub's settings (live ones change under it)."""

    @property
    def api_key(self) -> str | None:
        """The Anthropic API key in use (the setting, else ``ANTHROPIC_API_KEY``)."""

    @property
    def session_id(self) -> str:
        """This hub's id in the round log."""

    @property
    def session_name(self) -> str:
        """The tmux session it makes."""

    @property
    def closed(self) -> bool:
        """True once ``close()`` began."""

    @property
    def engine(self) -> Engine:
        """The loop every task runs on."""

    @property
    def log(self) -> RoundLog:
        """The round log."""

    @property
    def deliverer(self) -> Deliverer:
        """What types prompts into panes."""

    @property
    def tiles(self) -> TileRegistry:
        """The tiles, their hosts and watchers."""

    @property
    def routes(self) -> RouteRegistry:
        """The routes, in order made."""

    @property
    def recorder(self) -> RoundRecorder:
        """What writes finished rounds to the log."""

    @property
    def inbox(self) -> Inbox:
        """What waits for a person."""

    @property
    def services(self) -> RouteServices:
        """What the hub's routes and rounds get."""

    def emit(self, event: HubEvent) -> None:
        """Tell listeners from any thread."""
