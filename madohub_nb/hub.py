"""The hub: the public face of tiles, routes, the round log and the engine.

Every call validates its arguments at once (a ``ValueError`` that names the
bad value and what is allowed), builds the object, and only *schedules* work
on the engine thread, so it returns at once, from any thread. Calls that take
time return a :class:`HubFuture`. The machinery lives in :class:`Runtime`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .agents.profiles import known_kinds
from .engine import HubFuture
from .errors import MadohubError, MadohubValueError
from .io.log import RoundRecord
from .pipeline.replay import replay_plan
from .pipeline.round import hand_send_plan, run_round
from .pipeline.route import Route, make_route
from .pipeline.tile import Tile, check_new_tile, check_tile_name, pane_reference, tile_options
from .pipeline.transforms import AIClientConfig
from .render import html_for_hub, repr_hub
from .runtime import Runtime
from .settings import (
    AI_MAX_RETRIES,
    AI_TIMEOUT_S,
    COOLDOWN_MS_DEFAULT,
    IDLE_DELAY_MS,
    MAX_ROUNDS_DEFAULT,
    check_choice,
)


def _forward(name: str, doc: str, writable: bool = True) -> Any:
    """A hub attribute that is the runtime's (settings may be changed live)."""

    def get(hub: Hub) -> Any:
        return getattr(hub._rt, name)

    def put(hub: Hub, value: Any) -> None:
        setattr(hub._rt, name, value)

    return property(get, put if writable else None, doc=doc)


class Hub:
    """Tiles, routes, the round log and the engine thread of one kernel (or script)."""

    idle_delay_ms = _forward("idle_delay_ms", "Silence (ms) after completion before on-idle fires.")
    api_key = _forward("api_key", "Anthropic key (setting, else ANTHROPIC_API_KEY); never logged.")
    base_url = _forward("base_url", "Anthropic API base URL (None: the SDK's default).")
    model = _forward("model", "Model of the AI transforms (None: the toolkit's default).")
    claude_home = _forward("claude_home", "Claude config dir used when an agent's cannot be read.")
    delivery = _forward("delivery", "Default delivery of routes and sends: typed or paste.")
    ai_timeout_s = _forward("ai_timeout_s", "Per-attempt timeout (s) of one Anthropic request.")
    ai_max_retries = _forward("ai_max_retries", "Retries of a failed Anthropic request.")
    prices = _forward("prices", "USD per million tokens by model, for cost_usd (None: defaults).")
    socket_name = _forward("socket_name", "The tmux socket (tmux -L); fixed.", writable=False)
    tmux = _forward("tmux", "The tmux adapter.", writable=False)
    log = _forward("log", "The round log; ``hub.log.df`` is a DataFrame of it.")
    events = _forward("events", "Events for widgets and listeners.", writable=False)
    engine = _forward("engine", "The engine thread and its loop.", writable=False)
    watcher = _forward("watcher", "Pushed pane output.", writable=False)
    deliverer = _forward("deliverer", "Types prompts into panes, one at a time per pane.")
    tiles = _forward("tiles", "{name: Tile}", writable=False)
    routes = _forward("routes", "[Route] in order made (256 newest ended)", writable=False)
    unlogged = _forward("unlogged", "Rounds the log refused (kept, not lost).", writable=False)
    rounds_written = _forward("rounds_written", "Rounds written to the log.", writable=False)
    session_id = _forward("session_id", "This hub's id in the round log.", writable=False)
    session_name = _forward("session_name", "The tmux session of its new panes.", writable=False)
    keep_panes = _forward("keep_panes", "Leave the panes it made running at interpreter exit.")
    ssh_command = _forward("ssh_command", "How hosts are reached: 'ssh', 'ssh -F cfg'.")
    hosts = _forward("hosts", "{host: HostLink}: remote hosts in use.", writable=False)

    def __init__(
        self,
        socket_name: str | None = None,
        idle_delay_ms: int = IDLE_DELAY_MS,
        log_path: str | os.PathLike[str] | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        claude_home: str | os.PathLike[str] | None = None,
        *,
        delivery: str = "typed",
        ai_timeout_s: float = AI_TIMEOUT_S,
        ai_max_retries: int = AI_MAX_RETRIES,
        prices: Mapping[str, Mapping[str, float]] | None = None,
        keep_panes: bool = False,
        ssh_command: str = "ssh",
        remote_socket_name: str | None = None,
    ) -> None:
        self._rt = Runtime(
            socket_name=socket_name, idle_delay_ms=idle_delay_ms, log_path=log_path,
            api_key=api_key, base_url=base_url, model=model, claude_home=claude_home,
            delivery=delivery, ai_timeout_s=ai_timeout_s, ai_max_retries=ai_max_retries,
            prices=prices, keep_panes=keep_panes, ssh_command=ssh_command,
            remote_socket_name=remote_socket_name,
        )  # fmt: skip
        self.log_path = str(self._rt.log.path)
        self.closed = False

    loop = property(lambda self: self._rt.engine.loop, doc="The engine thread's event loop.")

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        """The Anthropic client settings the AI transforms use now (the key is never shown)."""
        return self._rt.ai_config(model)

    # tiles ------------------------------------------------------------------
    def tile(
        self,
        name: str,
        agent: str | None = None,
        command: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        pane: Any = None,
        *,
        ready_quiet_ms: int | None = None,
        ready_pattern: str | None = None,
        completion_pattern: str | None = None,
        host: str | None = None,
    ) -> Tile:
        """Start ``command`` in a new pane, or adopt ``pane`` (``%3``, ``sess:win.pane``, a
        ``libtmux.Pane``); on ``host``'s tmux over ssh if given. ``tile.ready`` resolves once it
        has started. ``ready_quiet_ms``/``ready_pattern``: when a terminal program is ready (quiet
        that long; its last line matches). ``completion_pattern``: output that ends a turn."""
        self._check_open()
        if agent is not None:
            check_choice("agent kind", agent, known_kinds())
        options = tile_options(ready_quiet_ms, ready_pattern, completion_pattern)
        if pane is None:
            workdir = check_new_tile(name, command, cwd, env, remote=host is not None)
            tile = self._rt.create_tile(name, agent, command, workdir, env, host)
        elif command is not None or cwd is not None or env:
            raise MadohubValueError("pane= adopts; command=, cwd= and env= only apply to new panes")
        else:
            check_tile_name(name)
            ref = pane if host is not None else pane_reference(pane, self.socket_name)
            tile = self._rt.adopt_tile(name, ref, agent, host)
        tile.ready_quiet_ms, tile.ready_pattern, tile.completion_pattern = options
        return tile

    # routes -----------------------------------------------------------------
    def connect(
        self,
        source: str | Tile,
        target: str | Tile,
        trigger: str = "on-idle",
        transform: str = "prompt-wrap",
        template: str | None = None,
        max_rounds: int = MAX_ROUNDS_DEFAULT,
        cooldown_ms: int = COOLDOWN_MS_DEFAULT,
        stop_keyword: str | None = None,
        dispatch: str = "madoagent",
        pattern: str | None = None,
        allow_shell: bool = False,
        delivery: str | None = None,
        model: str | None = None,
        completion_pattern: str | None = None,
    ) -> Route:
        """Wire ``source`` → ``target``; from now on each finished turn of the source is routed."""
        self._check_open()
        src, dst = self._rt.tile_named(source, "source"), self._rt.tile_named(target, "target")
        options = dict(
            trigger=trigger, transform=transform, template=template, max_rounds=max_rounds,
            cooldown_ms=cooldown_ms, stop_keyword=stop_keyword, dispatch=dispatch,
            pattern=pattern, allow_shell=allow_shell, delivery=delivery or self.delivery,
            model=model, api_key=self.api_key, completion_pattern=completion_pattern,
        )  # fmt: skip
        return self._rt.add_route(lambda number: make_route(self._rt, number, src, dst, **options))

    def route(self, key: str | int) -> Route:
        """A route by id (``writer->reviewer#1``), by its number (``1``), or by list index."""
        return self._rt.find_route(key)

    # hand delivery, replay, waiting ----------------------------------------------
    def send(
        self, tile: str | Tile, text: str, *, delivery: str | None = None, allow_shell: bool = False
    ) -> HubFuture[RoundRecord]:
        """Type ``text`` into a tile by hand (logged as round 0 of route ``send``)."""
        self._check_open()
        dst = self._rt.tile_named(tile, "target")
        plan = hand_send_plan(
            dst, text, delivery=delivery or self.delivery, allow_shell=allow_shell
        )
        return self._rt.engine.submit(run_round(self._rt, plan))

    def replay(
        self,
        round_id: str,
        transform: str | None = None,
        template: str | None = None,
        deliver: bool = False,
        model: str | None = None,
    ) -> HubFuture[RoundRecord]:
        """Recompute a logged round's prompt (another transform or template) as a new row."""
        self._check_open()
        orig = self._rt.log.get(round_id)
        plan = replay_plan(
            orig, transform=transform, template=template, deliver=deliver, model=model,
            route=next((r for r in self._rt.routes if r.id == orig.route_id), None),
            target=self._rt.tiles.get(orig.target), delivery=self.delivery, api_key=self.api_key,
        )  # fmt: skip
        return self._rt.engine.submit(run_round(self._rt, plan))

    async def replay_async(self, round_id: str, **kwargs: Any) -> RoundRecord:
        """``await hub.replay_async(...)``: the same as ``await hub.replay(...)``."""
        return await self.replay(round_id, **kwargs)

    def keys(self, tile: str | Tile, *keys: str) -> HubFuture[RoundRecord]:
        """Press keys in a tile (``hub.keys("writer", "Escape")``, ``"1"``, ``"C-c"``)."""
        self._check_open()
        return self._rt.keys(tile, keys)

    def wait_rounds(self, n: int, timeout_s: float = 60.0) -> HubFuture[int]:
        """A future that resolves once this hub has finished ``n`` rounds in all."""
        return self._rt.engine.submit(self._rt.wait_rounds(n, timeout_s))

    def wait_rounds_sync(self, n: int, timeout_s: float = 60.0) -> int:
        """Block until ``n`` rounds have finished (not from the engine thread)."""
        return self.wait_rounds(n, timeout_s).result(timeout_s + 5)

    # life cycle -----------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise MadohubError("this hub is closed; make a new one: madohub_nb.Hub() or get_hub()")

    def close(self) -> None:
        """Stop routes and watchers; kill the panes this hub created. Any thread; idempotent."""
        with self._rt.lock:
            if self.closed:
                return
            self.closed = True
        self._rt.close()

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr_hub(self)

    def _repr_html_(self) -> str:
        return html_for_hub(self)
