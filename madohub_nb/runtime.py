"""What runs behind the hub, composed: settings, engine, log, tiles, routes, recorder.

:class:`Runtime` builds the parts and orders their shutdown; each part is its own
small class (:class:`~madohub_nb.tile_registry.TileRegistry`,
:class:`~madohub_nb.route_registry.RouteRegistry`, :class:`~madohub_nb.recorder.RoundRecorder`;
the close itself, from any thread and at exit: :class:`~madohub_nb.shutdown.Shutdown`).
Its routes and rounds get :class:`~madohub_nb.services.HubServices`, which asks it for
its parts (as :class:`~madohub_nb.parts.RuntimeParts`) at each call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .agents.registry import load_agents_file
from .defaults import parse_ssh_command
from .engine import Engine, EventBus
from .hub_settings import HubSettings
from .io.log import RoundLog
from .io.tmux import Tmux
from .pipeline.deliver import Deliverer
from .pipeline.events import HubEvent, TileStateChanged
from .pipeline.inbox import Inbox
from .pipeline.transforms import resolve_api_key
from .recorder import RoundRecorder
from .route_registry import RouteRegistry
from .services import HubServices
from .shutdown import CloseSummary, Shutdown
from .tile_registry import TileRegistry

if TYPE_CHECKING:
    from .mcp_server import HubMcp


class Runtime:
    """The hub's parts and their order of shutdown."""

    def __init__(self, settings: HubSettings) -> None:
        import uuid

        self.settings = settings
        load_agents_file()  # $XDG_CONFIG_HOME/madohub_nb/agents.toml, if there is one
        self.session_id = uuid.uuid4().hex[:12]
        self.session_name = f"madohub-{self.session_id}"
        self.engine = Engine()
        self.events: EventBus[HubEvent] = EventBus()
        key = settings["api_key"]
        self.log = RoundLog(settings["log_path"], secrets=[key] if key else ())
        self.deliverer = Deliverer()
        self.routes = RouteRegistry(emit=self.emit, call_soon=self.engine.call_soon)
        self.recorder = RoundRecorder(
            self.log, emit=self.emit, call_soon=self.engine.call_soon,
            current_key=lambda: self.api_key, on_unwritable=self.routes.pause_all,
        )  # fmt: skip
        self.tmux = Tmux(settings["socket_name"])
        self.tiles = TileRegistry(
            tmux=self.tmux, session_name=self.session_name, engine=self.engine,
            events=self.events, emit=self.emit, tile_options=self._tile_options,
            ssh_command=lambda: parse_ssh_command(settings["ssh_command"]),
            remote_socket_name=settings["remote_socket_name"],
            closed=lambda: self.closed,
            on_first_pane=self._end_panes_at_exit,
            on_secret=self.log.register_secret, channels=lambda: bool(settings["channels"]),
        )  # fmt: skip
        self.events.subscribe(self.routes.on_event)  # a host's up/down holds its routes
        self.services = HubServices(self)
        """What the hub's routes and rounds get (``RouteServices``)."""
        self.inbox = Inbox(
            self.services, tiles=lambda: self.tiles.tiles, watch=self.tiles.watch,
            submit=self.engine.submit,
            call_soon=self.engine.call_soon, emit=self.emit,
        )  # fmt: skip
        """What waits for a person: permission prompts, approval routes' prompts."""
        self.events.subscribe(self.inbox.on_event)
        self._mcp: HubMcp | None = None
        self.shutdown: Shutdown = Shutdown(
            engine=self.engine, tmux=self.tmux, session_name=self.session_name,
            tiles=self.tiles, routes=self.routes, recorder=self.recorder, stop=self._stop_parts,
            keep_panes=lambda: bool(settings["keep_panes"]),
        )  # fmt: skip
        """The close (any thread, bounded) and the one closed state."""

    @property
    def closed(self) -> bool:
        """True once ``close()`` began: no tile, route or round starts after."""
        return self.shutdown.closed

    @property
    def close_summary(self) -> CloseSummary | None:
        """What ``close()`` kept and removed (None until it has ended the tiles)."""
        return self.shutdown.summary

    @property
    def mcp(self) -> HubMcp:
        """The hub's MCP server (made on first use: the ``mcp`` SDK loads only then)."""
        if self._mcp is None:
            from .mcp_server import HubMcp

            self._mcp = HubMcp(self)
        return self._mcp

    # settings ----------------------------------------------------------------------
    def set_setting(self, name: str, value: Any) -> None:
        """Change a live setting, validated as the constructor validates it."""
        checked = self.settings.set(name, value)
        if name == "api_key" and checked:
            self.log.register_secret(checked)

    @property
    def api_key(self) -> str | None:
        """The Anthropic API key in use (this setting, else ANTHROPIC_API_KEY); never logged."""
        return resolve_api_key(self.settings["api_key"])

    def _tile_options(self) -> dict[str, Any]:
        return dict(
            claude_home=lambda: self.settings["claude_home"],
            on_state=lambda name, state: self.emit(TileStateChanged(name, state)),
            redact=self.log.redact_text,
        )

    def emit(self, event: HubEvent) -> None:
        """Tell listeners (widgets, the route registry) from any thread."""
        self.engine.call_soon(self.events.emit, event)

    # life cycle: routes first, then tiles and hosts (then the engine, then the log) ------
    async def _stop_parts(self) -> None:
        if self._mcp is not None:  # first: no call starts a round any more
            await self._mcp.close()
        await self.routes.close()
        await self.tiles.close()  # (and the hook channel)

    def _end_panes_at_exit(self) -> None:
        self.shutdown.end_panes_at_exit()

    def close(self) -> CloseSummary | None:
        """Stop routes and watchers, kill created panes, end the engine thread; any thread,
        idempotent; what it kept and removed (:meth:`Shutdown.close`)."""
        return self.shutdown.close()
