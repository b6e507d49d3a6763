"""Making and adopting tiles: a new pane's launch plan (its command, hooks, MCP and
worktree layers), the pane made on the hub's session, its start-up checked and its
output watched; or an existing pane taken as it is.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .agents.detect import kind_from_command
from .agents.launch import LaunchLayer, LaunchPlan
from .agents.profiles import known_kinds
from .channel_plumbing import ChannelPlumbing
from .engine import Engine
from .errors import MadohubError, MadohubValueError, TileError
from .hook_plumbing import HookPlumbing
from .host_links import HostLinks
from .io.machine import LocalMachine, Machine
from .io.watch import PaneStream
from .pipeline.events import HubEvent, TileAdded
from .pipeline.tile import Tile, watch_start
from .tile_table import TileTable
from .tile_worktrees import TileWorktrees


class TileFactory:
    """Makes a hub's tiles (new panes, adopted panes) and puts them in its table."""

    def __init__(
        self,
        *,
        table: TileTable,
        machine: LocalMachine,
        hosts: HostLinks,
        hooks: HookPlumbing,
        channels: ChannelPlumbing,
        worktrees: TileWorktrees,
        session_name: str,
        engine: Engine,
        emit: Callable[[HubEvent], None],
        tile_options: Callable[[], dict[str, Any]],
        closed: Callable[[], bool],
        on_first_pane: Callable[[], None],
    ) -> None:
        self._table = table
        self._machine_here = machine
        self._hosts = hosts
        self._hooks = hooks
        self._channels = channels
        self._worktrees = worktrees
        self._session_name = session_name
        self._engine = engine
        self._emit = emit
        self._tile_options = tile_options
        self._closed = closed
        self._on_first_pane = on_first_pane
        self.spawn_lock = threading.Lock()
        """Held while a pane is made (the first one makes the session) and while closing."""

    def _machine(self, host: str | None) -> Machine:
        """This machine, or ``host`` (its link made and checked on first use)."""
        return self._hosts.link(host).machine if host is not None else self._machine_here

    def create(
        self,
        name: str,
        agent: str | None,
        command: str | None,
        workdir: str | None,
        env: Mapping[str, str] | None,
        host: str | None = None,
        hooks: bool | None = None,
        branch: str | None = None,
        *,
        mcp: LaunchLayer | None = None,
        channel: bool | None = None,
    ) -> Tile:
        """A new pane running ``command``; its start-up is checked on the engine thread.

        ``hooks``: None sets up the agent's own hooks when it has them (a pane here),
        True requires them, False leaves them off (see :meth:`HookPlumbing.plan`).
        ``branch``: the pane works in a new git worktree of ``workdir``'s repository on
        this new branch (made here, in the caller's thread; gone again if the pane fails).
        ``mcp``: the agent's MCP layer (its files written already), composed first.
        ``channel``: the agent's native channel (see :class:`ChannelPlumbing`).
        """
        self._table.check_name_free(name)
        self._worktrees.end_failed(self._table.tiles.get(name))
        guessed = agent or kind_from_command(command)
        launch = LaunchPlan(command, dict(env or {}), workdir, mcp=mcp)
        plan = self._hooks.plan(name, guessed, command, hooks, host, launch.environment())
        worktree = None
        tc = None
        try:
            tc = self._channels.plan(name, guessed, command, channel, host)
            machine = self._machine(host)
            tmux = machine.tmux
            if branch is not None:
                worktree = self._worktrees.make(machine, name, workdir, branch)
                layer = LaunchLayer(guessed or "shell", cwd=worktree.path)
                launch = launch.with_layers(worktree=layer)
        except BaseException:
            if plan is not None:
                plan.drop()
            if tc is not None:
                tc.drop()
            raise
        if plan is not None:
            launch = launch.with_layers(hooks=plan.layer)
        if tc is not None:
            launch = launch.with_layers(channel=tc.plan.layer)
        command = launch.command_line()
        try:
            if tc is not None:
                others = [w for la in launch.layers if la is not tc.plan.layer for w in la.args]
                self._channels.start(name, tc, launch.environment(), launch.workdir, others)
            with self.spawn_lock:  # the first pane also makes the session: one at a time
                if self._closed():  # (close() raced this call; make no pane it would not kill)
                    raise MadohubError("this hub is closed; make a new one with madohub_nb.Hub()")
                pane_id, pid = tmux.new_pane(
                    self._session_name,
                    command,
                    cwd=launch.workdir,
                    env=launch.environment(),
                    window_name=name,
                )
                self._on_first_pane()
            if plan is not None:
                plan.channel.bind(plan.token, pane_id)
            tile = self._add(name, pane_id, guessed or "shell", self._session_name, True, pid, host)
        except BaseException:
            if plan is not None:
                plan.drop()
            if tc is not None:
                self._channels.forget(name)
                tc.drop()
            if worktree is not None:
                self._worktrees.forget(machine, worktree, drop=True)
            raise
        tile.git_worktree = worktree
        if plan is not None:
            self._hooks.attach(plan, tile)
        started = self._engine.submit(watch_start(tile, command, detect=guessed is None), tile)
        started.add_done_callback(lambda f: self._started(f, tile))
        if tc is not None:
            tile.channel_ready = concurrent.futures.Future()
            self._engine.submit(self._channels.attach(tile, tc), tile)
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
        machine: Machine = (
            self._hosts.links[host].machine if host is not None else self._machine_here
        )
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
        try:
            self._table.add(tile)
        except MadohubValueError:
            if created:
                tile.tmux.kill_pane(pane_id)
            raise
        return tile

    def _watched(self, tile: Tile) -> Tile:
        self._engine.submit(self.watch(tile), owner=tile)
        self._emit(TileAdded(tile.name, tile.last_state, tile))
        return tile

    async def watch(self, tile: Tile) -> PaneStream:
        """The pushed output of ``tile``'s pane, from its own machine (engine thread)."""
        return await tile.machine.watch(tile.pane_id, tile.session, tile.pane_pid)


def _copy_outcome(started: concurrent.futures.Future[Tile], tile: Tile) -> None:
    """``tile.ready`` takes the outcome of its start-up check."""
    if started.cancelled():
        tile.ready.cancel()
    elif (exc := started.exception()) is not None:
        tile.ready.set_exception(exc)
    else:
        tile.ready.set_result(tile)
