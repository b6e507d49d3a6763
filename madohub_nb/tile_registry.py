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
import contextlib
import logging
import os
import shlex
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .agents.detect import kind_from_command
from .agents.hooks import HOOK_AGENTS, HookSetup, hook_setup
from .agents.launch import LaunchLayer, LaunchPlan
from .agents.profiles import known_kinds
from .engine import Engine, EventBus, side_by_side
from .errors import MadohubError, MadohubValueError, TileError, TmuxError
from .io import hookcall
from .io.git import Worktree, WorktreeEnd, drop_worktree, end_worktree, make_worktree, plan_worktree
from .io.hookcall import ENV_SOCKET, ENV_TOKEN, command_argv
from .io.hooks import HookChannel, HookEvent
from .io.machine import LocalMachine, Machine, PaneRef
from .io.remote import SshMachine, check_host
from .io.tmux import Tmux
from .io.watch import OutputWatcher, PaneStream
from .model import HostState
from .pipeline.events import HostStateChanged, HubEvent, TileAdded, TileOutput
from .pipeline.hosts import HostLink
from .pipeline.tile import Tile, TileHooks, watch_start

log = logging.getLogger("madohub_nb")

HOOKS_CACHE_DIR = os.path.join("~", ".cache", "madohub_nb", "hooks")
"""Where per-tile hook folders go when ``$XDG_RUNTIME_DIR`` is not there (or not secure
enough for the agent: Gemini CLI refuses files under a group- or world-writable folder)."""


@dataclass
class _HookPlan:
    """The hooks a new pane gets: its channel token, the agent's setup, its private folder."""

    channel: HookChannel
    token: str
    setup: HookSetup
    folder: str | None
    socket: str | None = None
    """On a host: the hook socket there (forwarded to the channel's), else None."""

    @property
    def layer(self) -> LaunchLayer:
        """The pane's hooks layer: the agent's setup, and the channel's token and socket."""
        env = {**self.setup.env, **self.channel.env(self.token)}
        if self.socket is not None:  # (on a host: the socket forwarded to the channel)
            env[ENV_SOCKET] = self.socket
        return replace(self.setup, env=env)


@dataclass
class _HostHooks:
    """A host's place for this hub's hooks: a 0700 folder holding the hook command and the
    socket forwarded over the host's ssh master to the hub's hook channel."""

    machine: SshMachine
    folders: tuple[str, str]
    """The hook files' folder (under ``~/.cache``) and the socket's (under ``/tmp``)."""
    socket_path: str
    command: list[str]


ADOPTED_HOOKS = (
    "hooks=True is for panes the hub starts; an adopted pane keeps the weaker signals "
    "(run %madohub hooks AGENT for what to add to the agent's own settings)"
)
HOOK_START_TIMEOUT_S = 10.0
"""How long the hook channel may take to make its folder and socket."""


class TileRegistry:
    """Every tile of one hub, and the machines (this one, remote hosts) they live on."""

    def __init__(
        self,
        *,
        tmux: Tmux,
        session_name: str,
        engine: Engine,
        events: EventBus[HubEvent],
        emit: Callable[[HubEvent], None],
        tile_options: Callable[[], dict[str, Any]],
        ssh_command: Callable[[], Sequence[str]],
        remote_socket_name: str | None,
        closed: Callable[[], bool],
        on_first_pane: Callable[[], None],
        on_secret: Callable[[str], None],
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
        self._on_secret = on_secret
        """Told each hook token made here (the round log redacts it from then on)."""
        self._hooks_lock = threading.Lock()
        """The hub's hook channel, started on first use (None: it cannot start here)."""
        self._hooked: dict[str, Tile] = {}
        """Tiles whose panes were started with hooks, by channel token."""
        self._host_hooks: dict[str, _HostHooks] = {}
        """Each host's place for hooks (made on a first hooked tile there)."""
        self._channel: HookChannel | None = None
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
        self._worktree_lock = threading.Lock()
        """Held while a worktree is checked and made: two tiles never race for one branch."""
        self._branches: dict[tuple[str | None, str, str], str] = {}
        """(host, repository, branch) → the tile whose worktree is on it."""
        self.worktree_ends: list[WorktreeEnd] = []
        """What close() did with each tile's worktree (removed, or kept with its changes)."""

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
        self._events.emit(HostStateChanged(host, state, why))  # (engine thread)

    # making and adopting ------------------------------------------------------------
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
    ) -> Tile:
        """A new pane running ``command``; its start-up is checked on the engine thread.

        ``hooks``: None sets up the agent's own hooks when it has them (a pane here),
        True requires them, False leaves them off (see :meth:`_hook_plan`).
        ``branch``: the pane works in a new git worktree of ``workdir``'s repository on
        this new branch (made here, in the caller's thread; gone again if the pane fails).
        ``mcp``: the agent's MCP layer (its files written already), composed first.
        """
        self._check_name_free(name)
        self._end_failed_worktree(name)
        guessed = agent or kind_from_command(command)
        launch = LaunchPlan(command, dict(env or {}), workdir, mcp=mcp)
        plan = self._hook_plan(name, guessed, command, hooks, host, launch.environment())
        worktree = None
        try:
            machine = self._machine(host)
            tmux = machine.tmux
            if branch is not None:
                worktree = self._new_worktree(machine, name, workdir, branch)
                layer = LaunchLayer(guessed or "shell", cwd=worktree.path)
                launch = launch.with_layers(worktree=layer)
        except BaseException:
            if plan is not None:
                _drop_hooks(plan.channel, plan.token, plan.folder)
            raise
        if plan is not None:
            launch = launch.with_layers(hooks=plan.layer)
        command = launch.command_line()
        try:
            with self.spawn_lock:  # the first pane also makes the session: one at a time
                if self._closed():  # (close() raced this call; make no pane it would not kill)
                    raise MadohubError("this hub is closed; make a new one with madohub_nb.Hub()")
                pane_id, pid = tmux.new_pane(
                    self.session_name,
                    command,
                    cwd=launch.workdir,
                    env=launch.environment(),
                    window_name=name,
                )
                self._on_first_pane()
            if plan is not None:
                plan.channel.bind(plan.token, pane_id)
            tile = self._add(name, pane_id, guessed or "shell", self.session_name, True, pid, host)
        except BaseException:
            if plan is not None:
                _drop_hooks(plan.channel, plan.token, plan.folder)
            if worktree is not None:
                self._forget_worktree(machine, worktree, drop=True)
            raise
        tile.git_worktree = worktree
        if plan is not None:
            tile.hooks = TileHooks(plan.token, plan.setup.kinds, plan.folder)
            self._hooked = {**self._hooked, plan.token: tile}
        started = self._engine.submit(watch_start(tile, command, detect=guessed is None), tile)
        started.add_done_callback(lambda f: self._started(f, tile))
        return self._watched(tile)

    def _new_worktree(
        self, machine: Machine, name: str, workdir: str | None, branch: str
    ) -> Worktree:
        """A new git worktree of ``workdir``'s repository on a new ``branch``, every check
        first (see :func:`~madohub_nb.io.git.plan_worktree`); none is made when one fails."""
        folder = workdir or (os.getcwd() if machine.name is None else "~")
        with self._worktree_lock:
            plan = plan_worktree(machine, folder, name, branch)
            key = (machine.name, plan.repository, plan.branch)
            other = self._branches.get(key)
            if other is not None:
                raise MadohubValueError(
                    f"tile {other!r} already works on branch {branch!r} of {plan.repository}; "
                    "each worktree tile needs a branch of its own: name another one"
                )
            make_worktree(machine, plan)
            self._branches = {**self._branches, key: name}
        return plan

    def _end_failed_worktree(self, name: str) -> None:
        """A tile whose command failed at start-up is made again: its worktree goes first
        when nothing changed there (its branch is free again), else it stays, kept."""
        old = self.tiles.get(name)
        if old is None or old.error is None or old.git_worktree is None:
            return
        done = end_worktree(old.machine, name, old.git_worktree)
        if not done.kept:
            self._forget_worktree(old.machine, old.git_worktree, drop=False)
            old.git_worktree = None
        else:
            self.worktree_ends = [*self.worktree_ends, done]

    def _forget_worktree(self, machine: Machine, worktree: Worktree, drop: bool) -> None:
        with self._worktree_lock:
            key = (machine.name, worktree.repository, worktree.branch)
            self._branches = {k: v for k, v in self._branches.items() if k != key}
        if drop:
            drop_worktree(machine, worktree)

    async def _end_worktrees(self) -> None:
        """End the worktree tiles' panes, then remove each worktree without changes and keep
        (and name) each with changes; before the host links close (git runs over them)."""
        ours = [t for t in self.tiles.values() if t.git_worktree is not None and t.created]

        def end(tile: Tile) -> WorktreeEnd:
            assert tile.git_worktree is not None
            with contextlib.suppress(MadohubError):
                tile.tmux.kill_pane(tile.pane_id)  # (its agent writes nothing more)
            done = end_worktree(tile.machine, tile.name, tile.git_worktree)
            if not done.kept:
                self._forget_worktree(tile.machine, tile.git_worktree, drop=False)
            (log.warning if done.kept else log.info)("worktree %s", done)
            return done

        ends = await asyncio.gather(
            *(asyncio.to_thread(end, t) for t in ours if t.machine.reachable),
            return_exceptions=True,
        )
        unreachable = [
            WorktreeEnd(
                t.name, t.git_worktree, True, f"not checked: host {t.machine.name!r} is unreachable"
            )  # fmt: skip
            for t in ours
            if not t.machine.reachable and t.git_worktree is not None
        ]
        made = [e for e in ends if isinstance(e, WorktreeEnd)]
        self.worktree_ends = [*self.worktree_ends, *made, *unreachable]

    def _started(self, started: concurrent.futures.Future[Tile], tile: Tile) -> None:
        _copy_outcome(started, tile)
        if tile.error is not None:  # its pane is gone: stop streaming it
            self._engine.call_soon(tile.machine.watcher.forget, tile.pane_id)

    # hooks ---------------------------------------------------------------------------
    def hook_channel(self) -> HookChannel | None:
        """The hub's hook channel, started on the engine loop on first use (any thread but
        the engine's own: None there). It ends with :meth:`close`."""
        if self._engine.in_loop_thread:
            return self._channel if self._channel is not None and self._channel.serving else None
        with self._hooks_lock:
            if self._channel is None:
                channel = HookChannel(self.on_hook)
                self._engine.run_sync(channel.start(), HOOK_START_TIMEOUT_S)
                self._channel = channel
            return self._channel

    def _hook_plan(
        self, name: str, agent: str | None, command: str | None, hooks: bool | None,
        host: str | None, env: Mapping[str, str] | None = None,
    ) -> _HookPlan | None:  # fmt: skip
        """The hooks a new pane of ``agent`` gets, or None; ``hooks=True`` without any is an error.

        The agent's hook files go in a private folder of this tile (0700), never in the
        user's own settings; the pane's environment gets the channel's token and socket.
        """
        if hooks is not None and not isinstance(hooks, bool):
            raise MadohubValueError(f"hooks must be None, True or False, got {hooks!r}")
        if hooks is False:
            return None
        setup = hook_setup(agent, command_argv(), "/") if agent is not None else None
        why = _hooks_refused(agent, setup, command, hooks, env)
        channel = self.hook_channel() if why is None else None
        if why is None and channel is None:
            why = "the hub's hook channel cannot start here (called on the engine thread)"
        place = None
        if why is None and channel is not None and host is not None:
            place, why = self._host_hook_place(host, channel)
        if why is not None or channel is None or agent is None:
            if hooks is True:
                raise MadohubValueError(f"tile {name!r}: hooks=True, but {why}")
            return None
        if place is not None:
            return self._remote_hook_plan(name, agent, hooks, channel, place)
        return self._local_hook_plan(name, agent, hooks, channel)

    def _local_hook_plan(
        self, name: str, agent: str, hooks: bool | None, channel: HookChannel
    ) -> _HookPlan | None:
        """The hooks of a new pane here: the agent's files in a private folder of the tile's."""
        import shutil

        setup = hook_setup(agent, command_argv(), "/")
        assert setup is not None  # (checked by _hooks_refused)
        folder = None
        if setup.files:
            folder = private_folder(f"{self.session_name}-{name}-", secure=setup.secure_dir)
            if folder is None:
                if hooks is True:
                    raise MadohubValueError(
                        f"tile {name!r}: hooks=True, but no private folder without a group- or "
                        f"world-writable parent was found for {agent}'s hook files; "
                        "set $XDG_RUNTIME_DIR to a 0700 folder, or pass hooks=False"
                    )
                return None
            setup = hook_setup(agent, command_argv(), folder)
            assert setup is not None
            try:
                _write_private(setup.files)
            except OSError:
                shutil.rmtree(folder, ignore_errors=True)
                raise
        self._channel = channel
        token = channel.register(None, setup.agent)
        self._on_secret(token)
        return _HookPlan(channel, token, setup, folder)

    def _host_hook_place(
        self, host: str, channel: HookChannel
    ) -> tuple[_HostHooks | None, str | None]:
        """The host's folder for this hub's hooks (the hook command, the forwarded socket),
        made on first use; else None and why not."""
        with self._hooks_lock:
            place = self._host_hooks.get(host)
        if place is not None:
            return place, None
        machine = self.host_link(host).machine
        python = machine.which("python3")
        if python is None:
            return None, f"host {host!r} has no python3 to run the hook command"
        try:
            folder = machine.make_private_folder(HOOKS_CACHE_DIR, f"{self.session_name}-")
            script = os.path.join(folder, "hookcall.py")
            machine.write_private({script: Path(hookcall.__file__).read_text(encoding="utf-8")})
            # A socket's path must fit in 108 bytes: a short 0700 folder of its own in /tmp.
            sockets = machine.make_private_folder("/tmp", "madohub-hooks-")
        except TmuxError as exc:
            return None, str(exc)
        socket_path = os.path.join(sockets, "hub.sock")
        if not machine.forward_socket(socket_path, channel.socket_path):
            machine.remove_trees((folder, sockets))
            return None, (
                f"host {host!r} did not forward the hook socket (ssh -R): "
                f"{machine.forward_error or 'no reason given'}"
            )
        place = _HostHooks(machine, (folder, sockets), socket_path, [python, "-I", "-S", script])
        with self._hooks_lock:
            self._host_hooks = {**self._host_hooks, host: place}
        return place, None

    def _remote_hook_plan(
        self, name: str, agent: str, hooks: bool | None, channel: HookChannel, place: _HostHooks
    ) -> _HookPlan | None:
        """The hooks of a new pane on a host: files in a folder of the host's hook place,
        the hook command run by the host's python, its socket the forwarded one."""
        tile_folder = os.path.join(place.folders[0], f"tile-{name}")
        setup = hook_setup(agent, place.command, tile_folder)
        assert setup is not None
        if setup.files:
            try:
                place.machine.write_private(setup.files)
            except TmuxError as exc:
                if hooks is True:
                    raise MadohubValueError(f"tile {name!r}: hooks=True, but {exc}") from exc
                return None
        token = channel.register(None, setup.agent)
        self._on_secret(token)
        return _HookPlan(channel, token, setup, None, place.socket_path)

    def on_hook(self, event: HookEvent) -> None:
        """An event the hub's hook channel accepted (engine loop): to its tile, if it is ours."""
        tile = self._hooked.get(event.token)
        if tile is not None and tile.hooks is not None and tile.pane_id == event.pane:
            tile.hooks.deliver(event)

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
        self._emit(TileAdded(tile.name, tile.last_state, tile))
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

    def check_name_free(self, name: str) -> None:
        """Raise a teaching error when a live tile already has ``name``."""
        self._check_name_free(name)

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
            self._events.emit(TileOutput(name, nbytes))  # (engine thread)

    # life cycle ----------------------------------------------------------------------
    @property
    def made_here(self) -> bool:
        """Whether this hub made panes on this machine's tmux."""
        return any(t.created and t.machine.name is None for t in self.tiles.values())

    async def close(self) -> None:
        """Stop watching; end the session of the panes this hub made, here and on hosts."""
        await self.watcher.close()
        await self._end_worktrees()
        places, self._host_hooks = self._host_hooks, {}
        await asyncio.gather(  # (before the links close: over their masters; the forwards
            *(asyncio.to_thread(p.machine.remove_trees, p.folders)  # end with the masters)
              for p in places.values() if p.machine.reachable),
            return_exceptions=True,
        )  # fmt: skip
        await asyncio.gather(
            *(link.close(session) for link, session in self._host_sessions()),
            return_exceptions=True,
        )
        if self.made_here:
            await asyncio.to_thread(self.tmux.kill_session, self.session_name)
        hooked, self._hooked = self._hooked, {}
        for token, tile in hooked.items():
            if tile.hooks is not None:
                tile.hooks.live = False
                await asyncio.to_thread(_drop_hooks, self._channel, token, tile.hooks.folder)
        if self._channel is not None:
            await self._channel.close()

    def close_hosts_now(self) -> None:
        """The shutdown ran out of time (any thread): each host's session this hub made
        ends if the host answers at once, and every host's ssh master ends by pid before
        close() returns (else it outlived the hub, its forwards and folder with it)."""
        # Side by side, as close() does: each waits on its host.
        side_by_side(
            ((link.close_now, (session,)) for link, session in self._host_sessions()),
            name="madohub close host",
        )

    def _host_sessions(self) -> list[tuple[HostLink, str | None]]:
        """Each host's link, and the session this hub made on it (None: it made none)."""
        made = {t.machine.name for t in self.tiles.values() if t.created}
        return [
            (link, self.session_name if name in made else None)
            for name, link in list(self.hosts.items())
        ]


def _drop_hooks(channel: HookChannel | None, token: str, folder: str | None) -> None:
    """Forget a tile's token and remove its private hook folder."""
    import shutil

    if channel is not None:
        channel.unregister(token)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


_SHELL_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ">", "<", ">>", "2>", "2>&1"})


def _hooks_refused(
    agent: str | None, setup: HookSetup | None, command: str | None, hooks: bool | None,
    env: Mapping[str, str] | None,
) -> str | None:  # fmt: skip
    """Why a new pane of ``agent`` gets no hooks layer (None: it can have one)."""
    if agent is None or setup is None:
        return (
            f"agent {agent or 'shell'!r} has no hooks madohub_nb knows (agents with hooks: "
            f"{', '.join(HOOK_AGENTS)}); pass hooks=None or False: its turns are told from "
            "its records or its screen"
        )
    if command is None:
        return f"hooks need the agent's command (command='{agent} …'); pass it or hooks=False"
    if setup.args and not _ends_in_one_program(command):
        return (
            f"the hook options go at the end of the command, and {command!r} is not one "
            f"program's command line (a ';', '&&', '|' or the like); start {agent} alone"
        )
    if clash := sorted({*setup.env, ENV_TOKEN, ENV_SOCKET} & set(env or {})):
        return f"env= sets {', '.join(clash)}, which its hooks need; leave it out"
    if setup.private_home and hooks is None:
        # Its hooks replace the agent's whole config home (and the login kept there):
        # only when asked for.
        return f"{agent}'s hooks need a private config home (hooks=True to use one)"
    return None


def _ends_in_one_program(command: str) -> bool:
    """Options appended to ``command`` reach its one program (no list, pipe or redirect)."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        return False
    raw = command.replace("\\;", "")
    return not any(w in _SHELL_OPERATORS or w.endswith(";") for w in words) and "`" not in raw


def _secure(path: str) -> bool:
    """No folder from ``path`` up to ``/`` is writable by group or others (Gemini's rule)."""
    path = os.path.realpath(path)
    while True:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return False
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def private_folder(prefix: str, *, secure: bool) -> str | None:
    """A fresh 0700 folder for one tile's hook files (or the hub's MCP files): under ``$XDG_RUNTIME_DIR``, else
    ``~/.cache/madohub_nb/hooks``; with ``secure``, only where no parent is group- or
    world-writable. None: no such place."""
    import tempfile

    bases = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        bases.append(runtime)
    bases.append(os.path.expanduser(HOOKS_CACHE_DIR))
    for base in bases:
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
        except OSError:
            continue
        if secure and not _secure(base):
            continue
        folder = tempfile.mkdtemp(prefix=prefix, dir=base)
        os.chmod(folder, 0o700)
        return folder
    return None


def _write_private(files: Mapping[str, str]) -> None:
    """Write a hook setup's files (0600, their folders 0700)."""
    for path, text in files.items():
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)


def _copy_outcome(started: concurrent.futures.Future[Tile], tile: Tile) -> None:
    """``tile.ready`` takes the outcome of its start-up check."""
    if started.cancelled():
        tile.ready.cancel()
    elif (exc := started.exception()) is not None:
        tile.ready.set_exception(exc)
    else:
        tile.ready.set_result(tile)
