"""What runs behind the hub, composed: settings, engine, log, tiles, routes, recorder.

:class:`Runtime` builds the parts and orders their shutdown; each part is its own
small class (:class:`~madohub_nb.tile_registry.TileRegistry`,
:class:`~madohub_nb.route_registry.RouteRegistry`, :class:`~madohub_nb.recorder.RoundRecorder`).
It is also the ``RouteServices`` its routes and rounds get: each of those methods
hands the call to the part that owns it.
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .agents.registry import load_agents_file
from .defaults import parse_ssh_command
from .engine import Engine, EventBus, aside
from .hub_settings import HubSettings
from .io.git import WorktreeEnd
from .io.log import RoundLog
from .io.tmux import Tmux
from .pipeline.deliver import Deliverer
from .pipeline.events import HubEvent, TileStateChanged
from .pipeline.inbox import Inbox
from .pipeline.transforms import resolve_api_key
from .recorder import RoundRecorder
from .route_registry import RouteRegistry
from .services import HubServices
from .tile_registry import TileRegistry

if TYPE_CHECKING:
    from .mcp_server import HubMcp

SHUTDOWN_TIMEOUT_S = 1.5
"""``close()`` ends routes, watchers and the engine thread within about this long."""

KILL_WAIT_S = 1.0
"""How long a close that ran out of time waits for tmux to kill the hub's session."""


@dataclass(frozen=True)
class CloseSummary:
    """What ``hub.close()`` left behind: the worktrees it kept (they hold changes) and the
    ones it removed (nothing changed there)."""

    worktrees_kept: tuple[WorktreeEnd, ...] = ()
    worktrees_removed: tuple[WorktreeEnd, ...] = ()

    def __str__(self) -> str:
        ends = (*self.worktrees_kept, *self.worktrees_removed)
        return "\n".join(str(e) for e in ends) or "closed; no worktree to keep or remove"


class Runtime:
    """The hub's parts and their order of shutdown."""

    def __init__(self, settings: HubSettings) -> None:
        import uuid

        self.settings = settings
        load_agents_file()  # $XDG_CONFIG_HOME/madohub_nb/agents.toml, if there is one
        self.session_id = uuid.uuid4().hex[:12]
        self.session_name = f"madohub-{self.session_id}"
        self.closed = False
        """The one closed state: set first by ``close()``; no tile, route or round starts after."""
        self._atexit_registered = False
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
            on_first_pane=self._end_panes_at_exit, on_secret=self.log.register_secret,
        )  # fmt: skip
        self.events.subscribe(self.routes.on_event)  # a host's up/down holds its routes
        self.services = HubServices(self)
        """What the hub's routes and rounds get (``RouteServices``)."""
        self.close_summary: CloseSummary | None = None
        """Set once ``close()`` has ended the tiles (None before, or while it runs)."""
        self.inbox = Inbox(
            self.services, tiles=lambda: self.tiles.tiles, watch=self.tiles.watch,
            submit=self.engine.submit,
            call_soon=self.engine.call_soon, emit=self.emit,
        )  # fmt: skip
        """What waits for a person: permission prompts, approval routes' prompts."""
        self.events.subscribe(self.inbox.on_event)
        self._mcp: HubMcp | None = None

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

    # life cycle: routes first, then tiles and hosts, then the engine, then the log ------
    async def _shutdown(self) -> None:
        if self._mcp is not None:  # first: no call starts a round any more
            await self._mcp.close()
        await self.routes.close()
        await self.tiles.close()  # (and the hook channel)

    def _end_panes_at_exit(self) -> None:
        """Once per hub: the panes it made end with the interpreter (unless ``keep_panes``)."""
        if not self._atexit_registered:
            self._atexit_registered = True
            atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        # The whole close, not just kill-session: killing a session while its control-mode
        # client is torn down with the process made tmux 3.3a's server exit now and then,
        # taking adopted panes with it.
        if not self.settings["keep_panes"] and not self.closed:
            self._close()

    def close(self) -> None:
        """Stop routes and watchers, kill created panes, end the engine thread; any thread."""
        atexit.unregister(self._at_exit)
        self._close()

    def _close(self) -> None:
        with self.tiles.spawn_lock:
            self.closed = True
        self.routes.end_all()
        if self.engine.in_loop_thread:
            task = self.engine.spawn(self._shutdown(), owner="shutdown")
            task.add_done_callback(lambda _: self._finish_close())
            return
        try:
            self.engine.run_sync(self._shutdown(), SHUTDOWN_TIMEOUT_S)
        except Exception:  # a dead tmux server or a stuck task: still end the thread below
            kill = (
                aside(self.tmux.kill_session, self.session_name, name="madohub kill session")
                if self.tiles.made_here
                else None
            )
            self.tiles.close_hosts_now()
            if kill is not None:
                # Not while the control client is torn down below: tmux 3.3a's server then
                # exits now and then, taking adopted panes with it (as _at_exit says).
                kill.wait(KILL_WAIT_S)
        self._finish_close()

    def _finish_close(self) -> None:
        ends = list(self.tiles.worktree_ends)
        seen = {e.tile for e in ends}
        ends += [  # (the shutdown ran out of time before it looked at them: they stay)
            WorktreeEnd(t.name, t.git_worktree, True, "not checked: close() ran out of time")
            for t in self.tiles.tiles.values()
            if t.git_worktree is not None and t.created and t.name not in seen
        ]
        self.close_summary = CloseSummary(
            tuple(e for e in ends if e.kept), tuple(e for e in ends if not e.kept)
        )
        self.engine.close(timeout_s=0.25)
        self.recorder.close()
