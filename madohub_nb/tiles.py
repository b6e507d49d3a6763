"""The tile registry: the hub's tiles by name and by pane, made, adopted, watched, ended.

Tiles are kept in dicts that are copied on write, so the engine thread reads them
while another thread adds a tile. A tile lives on a machine: this one
(:class:`~madohub_nb.io.machine.LocalMachine`) or a remote host (the
:class:`~madohub_nb.io.remote.SshMachine` of its :class:`HostLink`, made on first
use); panes are known by :class:`~madohub_nb.io.machine.PaneRef` (machine, pane id).
When a host goes or comes back, a ``host_state`` event says so (the route registry
holds and releases routes on it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .agents.detect import kind_from_command
from .agents.profiles import known_kinds
from .engine import Engine, EventBus
from .errors import MadohubError, MadohubValueError, TileError, TmuxError
from .io.machine import LocalMachine, Machine, PaneRef
from .io.remote import check_host
from .io.tmux import Tmux
from .io.watch import OutputWatcher, PaneStream
from .model import HostState, HubEvent
from .pipeline.hosts import HostLink
from .pipeline.tile import Tile, watch_start


class TileRegistry:
    """Every tile of one hub, and the machines (this one, remote hosts) they live on."""

    def __init__(
        self,
        *,
        tmux: Tmux,
        session_name: str,
        engine: Engine,
        events: EventBus,
        emit: Callable[[HubEvent], None],
        tile_options: Callable[[], dict[str, Any]],
        ssh_command: Callable[[], Sequence[str]],
        remote_socket_name: str | None,
        closed: Callable[[], bool],
        on_first_pane: Callable[[], None],
    ) -> None:
        self.tmux = tmux
        self.session_name = session_name
        self._engine = engine
        self._events = events
        self._emit = emit
        self._tile_options = tile_options
        self._ssh_command = ssh_command
        self.remote_socket_name = remote_socket_name
        """The tmux socket (``tmux -L``) used on remote hosts; None: their default server."""
        self._closed = closed
        self._on_first_pane = on_first_pane
        self.watcher = OutputWatcher(tmux, on_output=self._on_output)
        self.machine = LocalMachine(tmux, self.watcher)
        """This machine (its tmux server and output watcher)."""
        self.hosts: dict[str, HostLink] = {}
        """Remote hosts in use, by name (one ssh control connection each)."""
        self._hosts_lock = threading.Lock()
        self.spawn_lock = threading.Lock()
        """Held while a pane is made (the first one makes the session) and while closing."""
        self._lock = threading.Lock()
        self.tiles: dict[str, Tile] = {}
        self._names_by_pane: dict[PaneRef, str] = {}

    # machines ------------------------------------------------------------------------
    def host_link(self, host: str) -> HostLink:
        """The link to ``host``, made (and the host checked: ssh, tmux) on first use."""
        check_host(host)
        with self._hosts_lock:
            link = self.hosts.get(host)
            if link is None:
                link = HostLink(
                    host, self._ssh_command(), self.remote_socket_name,
                    self._on_remote_output, self._host_state,
                )  # fmt: skip
                link.probe()  # a one-line error within about 10 s for a bad or dead host
                self.hosts = {**self.hosts, host: link}
        if not link.reachable:
            raise TmuxError(link.last_error or f"host {host!r} is unreachable")
        return link

    def _machine(self, host: str | None) -> Machine:
        """This machine, or ``host`` (its link made and checked on first use)."""
        return self.host_link(host).machine if host is not None else self.machine

    def _host_state(self, host: str, state: HostState, why: str | None) -> None:
        self._events.emit(HubEvent("host_state", host, state, why))  # (engine thread)

    # making and adopting ------------------------------------------------------------
    def create(
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
        with self.spawn_lock:  # the first pane also makes the session: one at a time
            if self._closed():  # (close() raced this call; make no pane it would not kill)
                raise MadohubError("this hub is closed; make a new one with madohub_nb.Hub()")
            pane_id, pid = tmux.new_pane(
                self.session_name, command, cwd=workdir, env=env, window_name=name
            )
            self._on_first_pane()
        tile = self._add(name, pane_id, guessed or "shell", self.session_name, True, pid, host)
        started = self._engine.submit(watch_start(tile, command, detect=guessed is None), tile)
        started.add_done_callback(lambda f: self._started(f, tile))
        return self._watched(tile)

    def _started(self, started: concurrent.futures.Future[Tile], tile: Tile) -> None:
        _copy_outcome(started, tile)
        if tile.error is not None:  # its pane is gone: stop streaming it
            self._engine.call_soon(tile.machine.watcher.forget, tile.pane_id)

    def adopt(self, name: str, pane: str, agent: str | None, host: str | None = None) -> Tile:
        """An existing pane; its agent is detected from its process tree unless given."""
        info = self._machine(host).tmux.resolve_pane(pane)
        if info.dead:
            raise TileError(f"pane {pane!r} is dead (its program exited); pick a live pane")
        probe = self._make(name, info.pane_id, agent or "shell", info.session, False, None, host)
        kind = agent or probe.detect_kind(info)
        if kind not in known_kinds():
            raise TileError(
                f"could not tell which agent runs in pane {info.pane_id} (it runs "
                f"{info.current_command!r}); pass agent= one of {', '.join(known_kinds())}"
            )
        tile = self._add(name, info.pane_id, kind, info.session, False, info.pid, host)
        tile.ready.set_result(tile)
        return self._watched(tile)

    def _make(
        self, name: str, pane_id: str, kind: str, session: str, created: bool, pid: int | None,
        host: str | None,
    ) -> Tile:  # fmt: skip
        machine: Machine = self.hosts[host].machine if host is not None else self.machine
        watcher = machine.watcher
        return Tile(
            name, pane_id, kind, machine, session=session, created=created, pane_pid=pid,
            last_output_mono=lambda: watcher.last_output_mono(pane_id), **self._tile_options(),
        )  # fmt: skip

    def _add(
        self, name: str, pane_id: str, kind: str, session: str, created: bool, pid: int | None,
        host: str | None = None,
    ) -> Tile:  # fmt: skip
        tile = self._make(name, pane_id, kind, session, created, pid, host)
        key = tile.ref
        with self._lock:
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
        self._engine.submit(self.watch(tile), owner=tile)
        self._emit(HubEvent("tile_added", tile.name, tile.last_state, tile))
        return tile

    # finding -------------------------------------------------------------------------
    def named(self, name: str | Tile, role: str) -> Tile:
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

    # output --------------------------------------------------------------------------
    async def watch(self, tile: Tile) -> PaneStream:
        """The pushed output of ``tile``'s pane, from its own machine (engine thread)."""
        return await tile.machine.watch(tile.pane_id, tile.session, tile.pane_pid)

    def _on_remote_output(self, host: str, pane_id: str, nbytes: int) -> None:
        self._output_of(PaneRef(host, pane_id), nbytes)

    def _on_output(self, pane_id: str, nbytes: int) -> None:
        self._output_of(PaneRef(None, pane_id), nbytes)

    def _output_of(self, pane: PaneRef, nbytes: int) -> None:
        name = self._names_by_pane.get(pane)
        if name is not None:
            self._events.emit(HubEvent("tile_output", name, data=nbytes))  # (engine thread)

    # life cycle ----------------------------------------------------------------------
    @property
    def made_here(self) -> bool:
        """Whether this hub made panes on this machine's tmux."""
        return any(t.created and t.machine.name is None for t in self.tiles.values())

    async def close(self) -> None:
        """Stop watching; end the session of the panes this hub made, here and on hosts."""
        await self.watcher.close()
        made = {t.machine.name for t in self.tiles.values() if t.created}
        await asyncio.gather(
            *(link.close(self.session_name if name in made else None)
              for name, link in self.hosts.items()),
            return_exceptions=True,
        )  # fmt: skip
        if None in made:
            await asyncio.to_thread(self.tmux.kill_session, self.session_name)


def _copy_outcome(started: concurrent.futures.Future[Tile], tile: Tile) -> None:
    """``tile.ready`` takes the outcome of its start-up check."""
    if started.cancelled():
        tile.ready.cancel()
    elif (exc := started.exception()) is not None:
        tile.ready.set_exception(exc)
    else:
        tile.ready.set_result(tile)
