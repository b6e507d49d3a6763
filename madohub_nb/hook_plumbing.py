"""The hub's hook plumbing: its hook channel, a token per hooked tile, the agent's hook
files in a private folder, and on a host a folder with the hook command and the socket
forwarded to the channel.

A new pane gets a :class:`HookPlan` (its hooks launch layer) before it starts; once it
runs, :meth:`HookPlumbing.attach` binds the token to its pane, and each event the channel
accepts goes to its tile (:meth:`HookPlumbing.on_hook`).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .agents.hooks import HOOK_AGENTS, HookSetup, hook_setup
from .agents.launch import LaunchLayer
from .engine import Engine
from .errors import MadohubValueError, TmuxError
from .host_links import HostLinks
from .io.hooks import command as hook_command
from .io.hooks.channel import HookChannel, HookEvent
from .io.hooks.command import ENV_SOCKET, ENV_TOKEN, command_argv
from .io.remote import SshMachine
from .pipeline.tile import Tile, TileHooks

HOOKS_CACHE_DIR = os.path.join("~", ".cache", "madohub_nb", "hooks")
"""Where per-tile hook folders go when ``$XDG_RUNTIME_DIR`` is not there (or not secure
enough for the agent: Gemini CLI refuses files under a group- or world-writable folder)."""
HOOK_START_TIMEOUT_S = 10.0
"""How long the hook channel may take to make its folder and socket."""


@dataclass
class HookPlan:
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

    def drop(self) -> None:
        """The pane did not start: forget its token and remove its private hook folder."""
        _drop_hooks(self.channel, self.token, self.folder)


@dataclass
class _HostHooks:
    """A host's place for this hub's hooks: a 0700 folder holding the hook command and the
    socket forwarded over the host's ssh master to the hub's hook channel."""

    machine: SshMachine
    folders: tuple[str, str]
    """The hook files' folder (under ``~/.cache``) and the socket's (under ``/tmp``)."""
    socket_path: str
    command: list[str]


class HookPlumbing:
    """One hub's hook channel (started on first use), its hooked tiles by token, and each
    host's place for hooks."""

    def __init__(
        self,
        *,
        engine: Engine,
        hosts: HostLinks,
        session_name: str,
        on_secret: Callable[[str], None],
    ) -> None:
        self._engine = engine
        self._hosts = hosts
        self._session_name = session_name
        self._on_secret = on_secret
        """Told each hook token made here (the round log redacts it from then on)."""
        self._lock = threading.Lock()
        """Held while the channel starts and while a host's place is looked up or added."""
        self._channel: HookChannel | None = None
        """The hub's hook channel, started on first use (None: not yet)."""
        self._hooked: dict[str, Tile] = {}
        """Tiles whose panes were started with hooks, by channel token."""
        self._host_hooks: dict[str, _HostHooks] = {}
        """Each host's place for hooks (made on a first hooked tile there)."""

    def channel(self) -> HookChannel | None:
        """The hub's hook channel, started on the engine loop on first use (any thread but
        the engine's own: None there). It ends with :meth:`close`."""
        if self._engine.in_loop_thread:
            return self._channel if self._channel is not None and self._channel.serving else None
        with self._lock:
            if self._channel is None:
                channel = HookChannel(self.on_hook)
                self._engine.run_sync(channel.start(), HOOK_START_TIMEOUT_S)
                self._channel = channel
            return self._channel

    def plan(
        self, name: str, agent: str | None, command: str | None, hooks: bool | None,
        host: str | None, env: Mapping[str, str] | None = None,
    ) -> HookPlan | None:  # fmt: skip
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
        channel = self.channel() if why is None else None
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
    ) -> HookPlan | None:
        """The hooks of a new pane here: the agent's files in a private folder of the tile's."""
        import shutil

        setup = hook_setup(agent, command_argv(), "/")
        assert setup is not None  # (checked by _hooks_refused)
        folder = None
        if setup.files:
            folder = private_folder(f"{self._session_name}-{name}-", secure=setup.secure_dir)
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
        return HookPlan(channel, token, setup, folder)

    def _host_hook_place(
        self, host: str, channel: HookChannel
    ) -> tuple[_HostHooks | None, str | None]:
        """The host's folder for this hub's hooks (the hook command, the forwarded socket),
        made on first use; else None and why not."""
        with self._lock:
            place = self._host_hooks.get(host)
        if place is not None:
            return place, None
        machine = self._hosts.link(host).machine
        python = machine.which("python3")
        if python is None:
            return None, f"host {host!r} has no python3 to run the hook command"
        try:
            folder = machine.make_private_folder(HOOKS_CACHE_DIR, f"{self._session_name}-")
            script = os.path.join(folder, "hookcall.py")
            machine.write_private({script: Path(hook_command.__file__).read_text(encoding="utf-8")})
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
        with self._lock:
            self._host_hooks = {**self._host_hooks, host: place}
        return place, None

    def _remote_hook_plan(
        self, name: str, agent: str, hooks: bool | None, channel: HookChannel, place: _HostHooks
    ) -> HookPlan | None:
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
        return HookPlan(channel, token, setup, None, place.socket_path)

    def attach(self, plan: HookPlan, tile: Tile) -> None:
        """``tile``'s pane runs with ``plan``'s hooks: their events go to it from now on."""
        tile.hooks = TileHooks(plan.token, plan.setup.kinds, plan.folder)
        self._hooked = {**self._hooked, plan.token: tile}

    def on_hook(self, event: HookEvent) -> None:
        """An event the hub's hook channel accepted (engine loop): to its tile, if it is ours."""
        tile = self._hooked.get(event.token)
        if tile is not None and tile.hooks is not None and tile.pane_id == event.pane:
            tile.hooks.deliver(event)

    async def close_host_places(self) -> None:
        """Remove each host's hook folders: before the host links close (over their
        masters; the socket forwards end with the masters)."""
        places, self._host_hooks = self._host_hooks, {}
        await asyncio.gather(
            *(asyncio.to_thread(p.machine.remove_trees, p.folders)
              for p in places.values() if p.machine.reachable),
            return_exceptions=True,
        )  # fmt: skip

    async def close(self) -> None:
        """Forget every hooked tile's token, remove its private folder, end the channel."""
        hooked, self._hooked = self._hooked, {}
        for token, tile in hooked.items():
            if tile.hooks is not None:
                tile.hooks.live = False
                await asyncio.to_thread(_drop_hooks, self._channel, token, tile.hooks.folder)
        if self._channel is not None:
            await self._channel.close()


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


ends_in_one_program = _ends_in_one_program
"""(Public: the channel plumbing appends its options to the command the same way.)"""
write_private = _write_private
