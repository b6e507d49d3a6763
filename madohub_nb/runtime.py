"""What runs behind the hub: settings, the engine thread, the log, watching and delivery.

:class:`Runtime` is the one concrete collaborator that routes and rounds get,
through the narrow ``RouteServices`` / ``RoundServices`` protocols: output to
watch, events to emit, rounds to record, the AI client's settings. It also
holds the hub's tiles and routes (copied on write, so the engine thread can
read them while another thread adds one).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .agents.detect import kind_from_command
from .agents.profiles import known_kinds
from .agents.registry import load_agents_file
from .engine import Engine, EventBus, HubFuture
from .errors import LogError, MadohubError, MadohubValueError, TileError, TmuxError
from .io.log import RoundLog, RoundRecord
from .io.machine import LocalMachine, Machine, PaneRef
from .io.remote import check_host, parse_ssh_command
from .io.tmux import Tmux, check_socket_name
from .io.watch import OutputWatcher, PaneStream
from .model import HubEvent
from .pipeline.deliver import Deliverer
from .pipeline.hosts import HostLink, HostState
from .pipeline.keys import check_keys, press_keys
from .pipeline.route import Route
from .pipeline.tile import Tile, watch_start
from .pipeline.transforms import AIClientConfig, resolve_api_key
from .secrets import MIN_SECRET_CHARS
from .settings import (
    AI_MAX_RETRIES,
    AI_TIMEOUT_S,
    DELIVERY_MODES,
    ENDED_ROUTES_KEPT,
    IDLE_DELAY_MS_RANGE,
    check_choice,
    check_prices,
    check_range,
)

SHUTDOWN_TIMEOUT_S = 1.5
"""``close()`` ends routes, watchers and the engine thread within about this long."""


class Runtime:
    """The hub's machinery; implements ``RouteServices`` for its routes and rounds."""

    def __init__(
        self,
        *,
        socket_name: str | None,
        idle_delay_ms: int,
        log_path: str | os.PathLike[str] | None,
        api_key: str | None,
        base_url: str | None,
        model: str | None,
        claude_home: str | os.PathLike[str] | None,
        delivery: str,
        ai_timeout_s: float = AI_TIMEOUT_S,
        ai_max_retries: int = AI_MAX_RETRIES,
        prices: Mapping[str, Mapping[str, float]] | None = None,
        keep_panes: bool = False,
        ssh_command: str = "ssh",
        remote_socket_name: str | None = None,
    ) -> None:
        self.keep_panes = keep_panes
        """Leave the panes this hub made running at interpreter exit (close() still ends them)."""
        self._atexit_registered = False
        self.idle_delay_ms = idle_delay_ms
        self.delivery = check_choice("delivery", delivery, DELIVERY_MODES)
        self.socket_name = socket_name
        self.base_url = base_url
        self.model = model
        load_agents_file()  # $XDG_CONFIG_HOME/madohub_nb/agents.toml, if there is one
        self.claude_home = os.path.expanduser(claude_home) if claude_home is not None else None
        self._api_key = api_key
        self.ai_timeout_s = ai_timeout_s
        self.ai_max_retries = ai_max_retries
        self.prices = prices
        self.session_id = uuid.uuid4().hex[:12]
        self.session_name = f"madohub-{self.session_id}"
        self.tmux = Tmux(socket_name)
        self.log = RoundLog(log_path, secrets=[api_key] if api_key else ())
        self.events = EventBus()
        self.engine = Engine()
        self.watcher = OutputWatcher(self.tmux, on_output=self._on_output)
        self.machine = LocalMachine(self.tmux, self.watcher)
        """This machine (its tmux server and output watcher)."""
        self.ssh_command = ssh_command
        self.remote_socket_name = check_socket_name(remote_socket_name)
        """The tmux socket (``tmux -L``) used on remote hosts; None: their default server."""
        self.hosts: dict[str, HostLink] = {}
        """Remote hosts in use, by name (one ssh control connection each)."""
        self._hosts_lock = threading.Lock()
        self.deliverer = Deliverer()
        self.tiles: dict[str, Tile] = {}
        self._names_by_pane: dict[PaneRef, str] = {}
        self._held: dict[str, list[Route]] = {}
        """Routes held while their tiles' host is unreachable, by host."""
        self.routes: list[Route] = []
        self.routes_dropped = 0
        """Ended routes no longer in ``routes`` (beyond ``ENDED_ROUTES_KEPT``)."""
        self.unlogged: list[RoundRecord] = []
        """Rounds that could not be written (log full or read-only); kept so nothing is lost,
        and written (each once) before the next round once the log takes writes again."""
        self.rounds_written = 0
        self._round_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._spawn_lock = threading.Lock()
        self._route_counter = 0
        self.closed = False
        self.lock = threading.RLock()
        """Held while tiles and routes are added, so that calls from many threads stay orderly."""

    # settings ------------------------------------------------------------------
    @property
    def idle_delay_ms(self) -> int:
        return self._idle_delay_ms

    @idle_delay_ms.setter
    def idle_delay_ms(self, value: int) -> None:
        self._idle_delay_ms = check_range("idle_delay_ms", value, IDLE_DELAY_MS_RANGE, " ms")

    @property
    def prices(self) -> Mapping[str, Mapping[str, float]]:
        """USD per million tokens by model, for each round's ``cost_usd``."""
        return self._prices

    @prices.setter
    def prices(self, value: Mapping[str, Mapping[str, float]] | None) -> None:
        self._prices = check_prices(value)

    @property
    def api_key(self) -> str | None:
        """The Anthropic API key in use (this setting, else ANTHROPIC_API_KEY); never logged."""
        return resolve_api_key(self._api_key)

    @api_key.setter
    def api_key(self, value: str | None) -> None:
        self._api_key = value
        if value:
            self.log.register_secret(value)

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        key = self.api_key
        if key:
            self.log.register_secret(key)
        kwargs: dict[str, Any] = {
            "api_key": key,
            "base_url": self.base_url,
            "timeout_s": self.ai_timeout_s,
            "max_retries": self.ai_max_retries,
        }
        if model or self.model:
            kwargs["model"] = model or self.model
        return AIClientConfig(**kwargs)

    def claude_home_setting(self) -> str | None:
        return self.claude_home

    @property
    def ssh_command(self) -> str:
        """How hosts are reached (``ssh``, ``ssh -F ~/.ssh/config.work``); split as a shell would."""
        return self._ssh_command

    @ssh_command.setter
    def ssh_command(self, value: str) -> None:
        parse_ssh_command(value)
        self._ssh_command = value

    def host_link(self, host: str) -> HostLink:
        """The link to ``host``, made (and the host checked: ssh, tmux) on first use."""
        check_host(host)
        with self._hosts_lock:
            link = self.hosts.get(host)
            if link is None:
                link = HostLink(
                    host, parse_ssh_command(self.ssh_command), self.remote_socket_name,
                    self._on_remote_output, self._host_state,
                )  # fmt: skip
                link.probe()  # a one-line error within about 10 s for a bad or dead host
                self.hosts = {**self.hosts, host: link}
        if not link.reachable:
            raise TmuxError(link.last_error or f"host {host!r} is unreachable")
        return link

    # tiles ---------------------------------------------------------------------------
    def create_tile(
        self,
        name: str,
        agent: str | None,
        command: str | None,
        workdir: str | None,
        env: Mapping[str, str] | None,
        host: str | None = None,
    ) -> Tile:
        """A new pane running ``command``; its start-up is checked on the engine thread."""
        self._check_name_free(name)
        guessed = agent or kind_from_command(command)
        tmux = self._machine(host).tmux
        with self._spawn_lock:  # the first pane also makes the session: one at a time
            if self.closed:  # (close() raced this call; make no pane it would not kill)
                raise MadohubError("this hub is closed; make a new one with madohub_nb.Hub()")
            pane_id, pid = tmux.new_pane(
                self.session_name, command, cwd=workdir, env=env, window_name=name
            )
            self._end_panes_at_exit()
        tile = self._add_tile(name, pane_id, guessed or "shell", self.session_name, True, pid, host)
        started = self.engine.submit(watch_start(tile, command, detect=guessed is None))
        started.add_done_callback(lambda f: self._started(f, tile))
        return self._watched(tile)

    def _started(self, started: concurrent.futures.Future[Tile], tile: Tile) -> None:
        _copy_outcome(started, tile)
        if tile.error is not None:  # its pane is gone: stop streaming it
            self.call_soon(tile.machine.watcher.forget, tile.pane_id)

    def adopt_tile(self, name: str, pane: str, agent: str | None, host: str | None = None) -> Tile:
        """An existing pane; its agent is detected from its process tree unless given."""
        info = self._machine(host).tmux.resolve_pane(pane)
        if info.dead:
            raise TileError(f"pane {pane!r} is dead (its program exited); pick a live pane")
        probe = self._make_tile(
            name, info.pane_id, agent or "shell", info.session, False, None, host
        )
        kind = agent or probe.detect_kind(info)
        if kind not in known_kinds():
            raise TileError(
                f"could not tell which agent runs in pane {info.pane_id} (it runs "
                f"{info.current_command!r}); pass agent= one of {', '.join(known_kinds())}"
            )
        tile = self._add_tile(name, info.pane_id, kind, info.session, False, info.pid, host)
        tile.ready.set_result(tile)
        return self._watched(tile)

    def _make_tile(
        self, name: str, pane_id: str, kind: str, session: str, created: bool, pid: int | None,
        host: str | None,
    ) -> Tile:  # fmt: skip
        machine: Machine = self.hosts[host].machine if host is not None else self.machine
        watcher = machine.watcher
        return Tile(
            name, pane_id, kind, machine,
            session=session, created=created, claude_home=self.claude_home_setting,
            on_state=self.tile_state_changed, pane_pid=pid, redact=self.log.redact_text,
            last_output_mono=lambda: watcher.last_output_mono(pane_id),
        )  # fmt: skip

    def _machine(self, host: str | None) -> Machine:
        """This machine, or ``host`` (its link made and checked on first use)."""
        return self.host_link(host).machine if host is not None else self.machine

    def _add_tile(
        self, name: str, pane_id: str, kind: str, session: str, created: bool, pid: int | None,
        host: str | None = None,
    ) -> Tile:  # fmt: skip
        tile = self._make_tile(name, pane_id, kind, session, created, pid, host)
        key = tile.ref
        with self.lock:
            clash = self._check_name_free(name, key, raise_=False)
            if clash is None:
                self.tiles = {**self.tiles, name: tile}
                self._names_by_pane = {**self._names_by_pane, key: name}
        if clash is not None:
            if created:
                tile.tmux.kill_pane(pane_id)
            raise MadohubValueError(clash)
        return tile

    def _watched(self, tile: Tile) -> Tile:
        self.engine.submit(self.watch(tile))
        self.emit(HubEvent("tile_added", tile.name, tile.last_state, tile))
        return tile

    def tile_named(self, name: str | Tile, role: str) -> Tile:
        """The tile called ``name`` (or ``name`` itself), or a teaching error naming the tiles."""
        key = name if isinstance(name, str) else name.name
        tile = self.tiles.get(key)
        if tile is None:
            known = ", ".join(sorted(self.tiles)) or "none yet; make one with hub.tile(...)"
            raise MadohubValueError(f"no {role} tile named {key!r}; tiles: {known}")
        return tile

    def _check_name_free(
        self, name: str, pane: PaneRef | None = None, raise_: bool = True
    ) -> str | None:
        problem = None
        if name in self.tiles and self.tiles[name].error is None:
            # (a tile whose command failed at start-up may be made again under its name)
            problem = f"a tile named {name!r} already exists; pick another name"
        for other in self.tiles.values():
            if pane is not None and other.ref == pane and other.error is None:
                problem = f"pane {pane} is already the tile {other.name!r}"
        if problem and raise_:
            raise MadohubValueError(problem)
        return problem

    # routes --------------------------------------------------------------------------
    def add_route(self, make: Callable[[int], Route]) -> Route:
        """Number, register and start the route ``make(number)`` builds (it validates)."""
        with self.lock:
            route = make(self._route_counter + 1)
            self._route_counter += 1
            self.routes = self._without_oldest_ended([*self.routes, route])
        self.call_soon(route.start)
        self.emit(HubEvent("route_added", route.id, route.state, route))
        return route

    def _without_oldest_ended(self, routes: list[Route]) -> list[Route]:
        """``routes`` keeping every live route and the newest ``ENDED_ROUTES_KEPT`` ended ones.

        A long session makes and ends routes without end (a user re-arming them): the
        ended ones would otherwise be held for good. Their rows stay in the log, and a
        replay of their rounds takes its settings from the row.
        """
        ended = [r for r in routes if r.ended]
        extra = len(ended) - ENDED_ROUTES_KEPT
        if extra <= 0:
            return routes
        dropped = {id(r) for r in ended[:extra]}
        self.routes_dropped += extra
        return [r for r in routes if id(r) not in dropped]

    def find_route(self, key: str | int) -> Route:
        routes = self.routes
        for r in routes:
            if r.id == key or (isinstance(key, str) and r.id.endswith(f"#{key}")):
                return r
        if isinstance(key, int) and -len(routes) <= key < len(routes):
            return routes[key]
        known = ", ".join(r.id for r in routes) or "none yet"
        gone = (
            f" ({self.routes_dropped} ended routes made earlier are no longer listed; "
            "their rounds stay in hub.log)"
            if self.routes_dropped
            else ""
        )
        raise MadohubValueError(f"no route {key!r}; routes: {known}{gone}")

    # keys ------------------------------------------------------------------------------
    def keys(self, tile: str | Tile, keys: tuple[str, ...]) -> HubFuture[RoundRecord]:
        """Press allow-listed ``keys`` in a tile (logged as a ``keys`` round); a future of it."""
        target, names = self.tile_named(tile, "target"), check_keys(keys)
        return self.engine.submit(press_keys(self, target, names))

    # what routes need --------------------------------------------------------------
    async def watch(self, tile: Tile) -> PaneStream:
        return await tile.machine.watch(tile.pane_id, tile.session, tile.pane_pid)

    def emit(self, event: HubEvent) -> None:
        self.engine.call_soon(self.events.emit, event)

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        self.engine.call_soon(fn, *args)

    def ensure_writable(self) -> None:
        self.log.ensure_writable()

    def log_unwritable(self, exc: LogError) -> None:
        for route in self.routes:
            if route.state == "active":
                route.last_error = f"paused: the round log cannot be written ({exc})"
                route.pause()

    def _register_current_key(self) -> None:
        """The key as it is now (set by %config or in the environment after the hub was made)
        is redacted before anything of a round is logged."""
        key = self.api_key
        if key and len(key.strip()) >= MIN_SECRET_CHARS:
            self.log.register_secret(key)

    async def record(self, rec: RoundRecord) -> RoundRecord:
        self._register_current_key()
        rec = self.log.redact(rec)
        await asyncio.to_thread(self._write_unlogged)
        try:
            await asyncio.to_thread(self.log.append, rec)
        except LogError as exc:
            return self._kept(rec, exc)
        return self._written(rec)

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        self._register_current_key()
        rec = self.log.redact(rec)
        self._write_unlogged()
        try:
            self.log.append(rec)
        except LogError as exc:
            return self._kept(rec, exc)
        return self._written(rec)

    def _write_unlogged(self) -> None:
        """Write the rounds kept while the log was unwritable, oldest first, each once."""
        while self.unlogged:
            try:
                self.log.append(self.unlogged[0])
            except LogError:
                return  # still unwritable: keep them for the next round
            self.unlogged.pop(0)
            self.rounds_written += 1

    def _kept(self, rec: RoundRecord, exc: LogError) -> RoundRecord:
        self.unlogged.append(rec)
        self.log_unwritable(exc)
        return self._finished(rec)

    def _written(self, rec: RoundRecord) -> RoundRecord:
        self.rounds_written += 1
        return self._finished(rec)

    def _finished(self, rec: RoundRecord) -> RoundRecord:
        self.emit(HubEvent("round", rec.route_id, rec.status, rec))
        self.call_soon(self._wake_round_waiters)
        return rec

    # waiting for rounds ---------------------------------------------------------------
    @property
    def rounds_finished(self) -> int:
        return self.rounds_written + len(self.unlogged)

    def _wake_round_waiters(self) -> None:
        for n, fut in self._round_waiters:
            if self.rounds_finished >= n and not fut.done():
                fut.set_result(None)
        self._round_waiters = [(n, f) for n, f in self._round_waiters if not f.done()]

    async def wait_rounds(self, n: int, timeout_s: float) -> int:
        """Wait (on the engine) until ``n`` rounds have finished in all; returns the count."""
        if self.rounds_finished < n:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._round_waiters.append((n, fut))
            await asyncio.wait_for(fut, timeout_s)
        return self.rounds_finished

    # events from below -------------------------------------------------------------
    def tile_state_changed(self, name: str, state: str) -> None:
        self.emit(HubEvent("tile_state", name, state))

    def _on_remote_output(self, host: str, pane_id: str, nbytes: int) -> None:
        self._output_of(PaneRef(host, pane_id), nbytes)

    def _on_output(self, pane_id: str, nbytes: int) -> None:
        self._output_of(PaneRef(None, pane_id), nbytes)

    def _output_of(self, pane: PaneRef, nbytes: int) -> None:
        name = self._names_by_pane.get(pane)
        if name is not None:
            self.events.emit(HubEvent("tile_output", name, data=nbytes))

    def _host_state(self, host: str, state: HostState, why: str | None) -> None:
        """A host went or came back (engine loop): its tiles' routes are held with ``why``
        while it is unreachable, and resume (looking at their sources again) once it is back."""
        self.events.emit(HubEvent("host_state", host, state, why))
        if state == "unreachable":
            held = self._held.setdefault(host, [])
            for route in self.routes:
                touches = any(
                    t is not None and t.machine.name == host
                    for t in (route.source_tile, route.target_tile)
                )
                if route.held and route in held:
                    route.last_error = f"paused: {why}"
                elif touches and route.state == "active":
                    route.hold(f"paused: {why}")
                    held.append(route)
            return
        for route in self._held.pop(host, []):
            route.release()

    # life cycle --------------------------------------------------------------------
    async def _shutdown(self) -> None:
        for route in self.routes:
            route.cancel()
        await asyncio.gather(*(r.wait_closed() for r in self.routes), return_exceptions=True)
        await self.watcher.close()
        made = {t.machine.name for t in self.tiles.values() if t.created}
        await asyncio.gather(
            *(link.close(self.session_name if name in made else None)
              for name, link in self.hosts.items()),
            return_exceptions=True,
        )  # fmt: skip
        if None in made:
            await asyncio.to_thread(self.tmux.kill_session, self.session_name)

    def _end_panes_at_exit(self) -> None:
        """Once per hub: the panes it made end with the interpreter (unless ``keep_panes``)."""
        if not self._atexit_registered:
            self._atexit_registered = True
            atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        # The whole close, not just kill-session: killing a session while its control-mode
        # client is torn down with the process made tmux 3.3a's server exit now and then,
        # taking adopted panes with it.
        if not self.keep_panes and not self.closed:
            self._close()

    def close(self) -> None:
        """Stop routes and watchers, kill created panes, end the engine thread; any thread."""
        atexit.unregister(self._at_exit)
        self._close()

    def _close(self) -> None:
        with self._spawn_lock:
            self.closed = True
        for route in self.routes:
            route.end()
        if self.engine.in_loop_thread:
            task = self.engine.loop.create_task(self._shutdown())
            task.add_done_callback(lambda _: self._finish_close())
            return
        try:
            self.engine.run_sync(self._shutdown(), SHUTDOWN_TIMEOUT_S)
        except Exception:  # a dead tmux server or a stuck task: still end the thread below
            if any(t.created and t.machine.name is None for t in self.tiles.values()):
                threading.Thread(
                    target=self.tmux.kill_session, args=(self.session_name,), daemon=True
                ).start()
        self._finish_close()

    def _finish_close(self) -> None:
        self.engine.close(timeout_s=0.25)
        self.log.close()


def _copy_outcome(started: concurrent.futures.Future[Tile], tile: Tile) -> None:
    """``tile.ready`` takes the outcome of its start-up check."""
    if started.cancelled():
        tile.ready.cancel()
    elif (exc := started.exception()) is not None:
        tile.ready.set_exception(exc)
    else:
        tile.ready.set_result(tile)
