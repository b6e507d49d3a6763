"""What runs behind the hub, composed: settings, engine, log, tiles, routes, recorder.

:class:`Runtime` builds the parts and orders their shutdown; each part is its own
small class (:class:`~madohub_nb.tiles.TileRegistry`,
:class:`~madohub_nb.routes.RouteRegistry`, :class:`~madohub_nb.recorder.RoundRecorder`).
It is also the ``RouteServices`` its routes and rounds get: each of those methods
hands the call to the part that owns it.
"""

from __future__ import annotations

import atexit
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .agents.registry import load_agents_file
from .engine import Engine, EventBus
from .errors import LogError
from .hub_settings import HubSettings
from .io.hooks import HookChannel
from .io.log import RoundLog, RoundRecord
from .io.remote import parse_ssh_command
from .io.tmux import Tmux
from .io.watch import PaneStream
from .model import HubEvent
from .pipeline.deliver import Deliverer
from .pipeline.tile import Tile
from .pipeline.transforms import AIClientConfig, resolve_api_key
from .recorder import RoundRecorder
from .routes import RouteRegistry
from .tiles import TileRegistry

HOOK_START_TIMEOUT_S = 10.0
"""How long the hook channel may take to make its folder and socket."""
SHUTDOWN_TIMEOUT_S = 1.5
"""``close()`` ends routes, watchers and the engine thread within about this long."""


class Runtime:
    """The hub's parts and their order of shutdown; ``RouteServices`` for its routes."""

    def __init__(self, settings: HubSettings) -> None:
        self.settings = settings
        load_agents_file()  # $XDG_CONFIG_HOME/madohub_nb/agents.toml, if there is one
        self.session_id = uuid.uuid4().hex[:12]
        self.session_name = f"madohub-{self.session_id}"
        self.closed = False
        """The one closed state: set first by ``close()``; no tile, route or round starts after."""
        self._atexit_registered = False
        self.engine = Engine()
        self.events = EventBus()
        key = settings["api_key"]
        self.log = RoundLog(settings["log_path"], secrets=[key] if key else ())
        self.deliverer = Deliverer()
        self.routes = RouteRegistry(emit=self.emit, call_soon=self.call_soon)
        self.recorder = RoundRecorder(
            self.log, emit=self.emit, call_soon=self.call_soon,
            current_key=lambda: self.api_key, on_unwritable=self.routes.pause_all,
        )  # fmt: skip
        self.tmux = Tmux(settings["socket_name"])
        self.tiles = TileRegistry(
            tmux=self.tmux, session_name=self.session_name, engine=self.engine,
            events=self.events, emit=self.emit, tile_options=self._tile_options,
            ssh_command=lambda: parse_ssh_command(settings["ssh_command"]),
            remote_socket_name=settings["remote_socket_name"],
            closed=lambda: self.closed,
            on_first_pane=self._end_panes_at_exit, hook_channel=self.hook_channel,
        )  # fmt: skip
        self._hooks: HookChannel | None = None
        self._hooks_lock = threading.Lock()
        self.events.subscribe(self.routes.on_event)  # a host's up/down holds its routes

    # the hook channel ----------------------------------------------------------------
    def hook_channel(self) -> HookChannel | None:
        """The hub's hook channel, started on the engine loop on first use (any thread but
        the engine's own: None there). It ends with ``close()``."""
        if self.engine.in_loop_thread:
            return self._hooks if self._hooks is not None and self._hooks.serving else None
        with self._hooks_lock:
            if self._hooks is None:
                channel = HookChannel(self.tiles.on_hook)
                self.engine.run_sync(channel.start(), HOOK_START_TIMEOUT_S)
                self._hooks = channel
            return self._hooks

    # settings ----------------------------------------------------------------------
    def set_setting(self, name: str, value: Any) -> None:
        """Change a live setting, validated as the constructor validates it."""
        checked = self.settings.set(name, value)
        if name == "api_key" and checked:
            self.log.register_secret(checked)

    def replace_part(self, name: str, part: Any) -> None:
        """Swap the round log or the deliverer for another (tests, a log reopened read-only)."""
        if name == "log":
            self.log = self.recorder.log = part
        elif name == "deliverer":
            self.deliverer = part
        else:
            raise AttributeError(f"hub.{name} cannot be replaced")

    @property
    def api_key(self) -> str | None:
        """The Anthropic API key in use (this setting, else ANTHROPIC_API_KEY); never logged."""
        return resolve_api_key(self.settings["api_key"])

    def _tile_options(self) -> dict[str, Any]:
        return dict(
            claude_home=lambda: self.settings["claude_home"],
            on_state=lambda name, state: self.emit(HubEvent("tile_state", name, state)),
            redact=self.log.redact_text,
        )

    # RouteServices: what routes and rounds need, each from the part that owns it -----
    @property
    def idle_delay_ms(self) -> int:
        return int(self.settings["idle_delay_ms"])

    @property
    def target_wait_s(self) -> float:
        return float(self.settings["target_wait_s"])

    @property
    def prices(self) -> Mapping[str, Mapping[str, float]]:
        return self.settings["prices"]

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        key = self.api_key
        if key:
            self.log.register_secret(key)
        kwargs: dict[str, Any] = {
            "api_key": key,
            "base_url": self.settings["base_url"],
            "timeout_s": self.settings["ai_timeout_s"],
            "max_retries": self.settings["ai_max_retries"],
        }
        if model or self.settings["model"]:
            kwargs["model"] = model or self.settings["model"]
        return AIClientConfig(**kwargs)

    async def watch(self, tile: Tile) -> PaneStream:
        return await self.tiles.watch(tile)

    def emit(self, event: HubEvent) -> None:
        self.engine.call_soon(self.events.emit, event)

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        self.engine.call_soon(fn, *args)

    def ensure_writable(self) -> None:
        self.recorder.ensure_writable()

    def log_unwritable(self, exc: LogError) -> None:
        self.routes.pause_all(exc)

    async def record(self, rec: RoundRecord) -> RoundRecord:
        return await self.recorder.record(rec)

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        return self.recorder.record_now(rec)

    # life cycle: routes first, then tiles and hosts, then the engine, then the log ------
    async def _shutdown(self) -> None:
        await self.routes.close()
        await self.tiles.close()
        if self._hooks is not None:
            await self._hooks.close()

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
            if self.tiles.made_here:
                threading.Thread(
                    target=self.tmux.kill_session, args=(self.session_name,), daemon=True
                ).start()
        self._finish_close()

    def _finish_close(self) -> None:
        self.engine.close(timeout_s=0.25)
        self.recorder.close()
