"""The hub's native-channel plumbing: for a new pane of a kind with a channel, its private
folder and endpoint, the agent's channel layer, the server the kind needs (started first,
ended by pid), and the channel opened once the agent is up.

Decided (issue 39): ``channel=None`` (the default) takes the hub's ``channels`` setting and
quietly types when the tile cannot have one (a kind without a channel, a command that is
not one program, a remote host); ``channel=True`` there is a :class:`MadohubValueError`
saying why. An adopted pane keeps typing: there is no safe way to find the channel of an
agent the hub did not start (it was not started with the arguments that open one).
A channel that fails to attach or breaks is a :class:`~.pipeline.events.ChannelChanged`
event, and the tile's prompts are typed from then on. An agent that dies without saying so
on its channel (killed: Qwen Code writes no ``session_end`` then, and its file channel has
no server to lose) breaks its channel when its tile is seen ``exited``: one ``broken``
event, and a prompt waiting for the channel fails at once instead of waiting its time out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import posixpath
import re
import secrets
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import psutil

from .agents.kinds import KINDS
from .agents.kinds.base import ChannelPlan
from .engine import spawn
from .errors import MadohubValueError
from .hook_plumbing import ends_in_one_program, private_folder, write_private
from .io.agent_channels.base import (
    Channel,
    ChannelBroken,
    ChannelEndpoint,
    ChannelError,
    ChannelEvent,
    ChannelServer,
)
from .pipeline.events import ChannelChanged, HubEvent, TileStateChanged
from .pipeline.tile import Tile

ATTACH_TIMEOUT_S = 30.0
"""How long an agent may take from its pane's start to its channel being open."""
SOCKET_NAME = "channel.sock"
SOCKET_PATH_MAX = 107
"""The longest path of a unix socket Linux binds (``sun_path`` holds 108 bytes with its NUL)."""
SERVER_END_S = 3.0
"""How long a channel server gets to exit after SIGTERM before SIGKILL."""


@dataclass
class TileChannel:
    """One new pane's channel: its endpoint, the kind's plan, its server's pid once started."""

    endpoint: ChannelEndpoint
    plan: ChannelPlan
    server_pid: int | None = None
    server_argv: tuple[str, ...] = ()
    """The server's command line as started (its layers' words included)."""
    server_name: str = ""
    """What the kind calls its server (``codex app-server``), for messages."""
    channel: Channel | None = None
    unsubscribe: Callable[[], None] | None = field(default=None, repr=False)
    broken: bool = False
    """Its ``broken`` event was told (once)."""

    def drop(self) -> None:
        """End the server (by pid, once) and remove the folder."""
        pid, self.server_pid = self.server_pid, None
        _end_pid(pid)
        shutil.rmtree(self.endpoint.folder, ignore_errors=True)


def channel_refused(agent: str | None, command: str | None, host: str | None) -> str | None:
    """Why a new pane of ``agent`` cannot have a native channel (None: it can)."""
    kind = KINDS.get(agent or "")
    if kind is None or kind.channel is None:
        have = ", ".join(k for k, v in KINDS.items() if v.channel is not None)
        return f"agent {agent or 'shell'!r} has no native channel madohub_nb speaks (those with one: {have})"
    if host is not None:
        return (
            "channels are for panes on this machine (a remote host's channel would need its "
            "own forwarded socket; not done yet)"
        )
    if command is None:
        return f"a channel needs the agent's command (command='{agent} …')"
    if not ends_in_one_program(command):
        return f"the channel's options go at the end of the command, and {command!r} is not one program's"
    return None


class ChannelPlumbing:
    """Each hub-started tile's native channel: planned before its pane, opened after."""

    def __init__(
        self,
        *,
        session_name: str,
        enabled: Callable[[], bool],
        on_secret: Callable[[str], None],
        emit: Callable[[HubEvent], None],
    ) -> None:
        self._session_name = session_name
        self._enabled = enabled
        """The hub's ``channels`` setting (read at each new tile)."""
        self._on_secret = on_secret
        self._emit = emit
        self._open: dict[str, TileChannel] = {}
        """The tiles' channels, by tile name."""

    def plan(
        self, name: str, agent: str | None, command: str | None, channel: bool | None,
        host: str | None,
    ) -> TileChannel | None:  # fmt: skip
        """The channel a new pane gets, or None (typed); ``channel=True`` without one is an error."""
        if channel is not None and not isinstance(channel, bool):
            raise MadohubValueError(f"channel must be None, True or False, got {channel!r}")
        if channel is False or (channel is None and not self._enabled()):
            return None
        why = channel_refused(agent, command, host)
        if why is not None:
            if channel is True:
                raise MadohubValueError(
                    f"tile {name!r}: channel=True, but {why}; pass channel=None or False"
                )
            return None
        folder = private_folder(f"{self._session_name}-{name}-channel-", secure=False)
        if (
            folder is not None
            and len(os.fsencode(os.path.join(folder, SOCKET_NAME))) > SOCKET_PATH_MAX
        ):
            shutil.rmtree(folder, ignore_errors=True)  # (a socket's path is short; a long HOME)
            folder = short_private_folder()
        if folder is None:
            if channel is True:
                raise MadohubValueError(
                    f"tile {name!r}: channel=True, but no private folder was found for its "
                    "channel; set $XDG_RUNTIME_DIR to a 0700 folder, or pass channel=False"
                )
            return None
        kind = KINDS[agent or ""]
        assert kind.channel is not None
        password = secrets.token_urlsafe(24)
        self._on_secret(password)  # (the round log redacts it from now on)
        endpoint = ChannelEndpoint(
            folder, os.path.join(folder, SOCKET_NAME), _free_port(), password
        )
        try:
            plan = kind.channel(endpoint)
            server_name = ""
            if plan.server is not None:
                server_name = " ".join(plan.server.argv[:2])
                plan = dataclasses.replace(plan, server=server_of(plan.server, command or ""))
            write_private(plan.layer.files)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return TileChannel(endpoint, plan, server_name=server_name)

    def start(
        self, name: str, tc: TileChannel, env: Mapping[str, str], cwd: str | None,
        layer_args: Sequence[str] = (),
    ) -> None:  # fmt: skip
        """Tile ``name``'s channel from now on (ended by :meth:`close`): start the kind's
        server, if it has one, with the pane's environment, before the pane (with the
        words of the tile's other launch layers, ``layer_args``, when the server takes them)."""
        self._open = {**self._open, name: tc}
        server = tc.plan.server
        if server is None:
            return
        tc.server_argv = (*server.argv, *(layer_args if server.takes_layer_args else ()))
        proc = subprocess.Popen(  # its own session: ended by pid with its tile, not by a signal to ours
            tc.server_argv, env={**os.environ, **env}, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        tc.server_pid = proc.pid

    def forget(self, name: str) -> None:
        """Tile ``name``'s pane did not start: its channel ends now (server, folder)."""
        tc = self._open.get(name)
        self._open = {k: v for k, v in self._open.items() if k != name}
        if tc is not None:
            tc.drop()

    async def attach(self, tile: Tile, tc: TileChannel) -> None:
        """Once ``tile``'s agent is up, open its channel (engine loop); a failure is an event
        and the tile types."""
        try:
            await self._attach(tile, tc)
        finally:
            if tile.channel_ready is not None and not tile.channel_ready.done():
                tile.channel_ready.set_result(None)

    async def _attach(self, tile: Tile, tc: TileChannel) -> None:
        if tc.plan.server is not None:
            tile.channel_only = (
                f"its TUI is a client of the server the hub started ({tc.server_name})"
            )
        try:
            await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(tile.ready)), ATTACH_TIMEOUT_S
            )
            channel = tc.plan.open(tc.server_pid)
            await channel.attach(ATTACH_TIMEOUT_S)
        except (ChannelError, Exception) as exc:  # noqa: BLE001 (any failure: typed, said once)
            why = str(exc) or type(exc).__name__
            tile.channel_down = why
            # (SIGTERM, then up to twice SERVER_END_S of waiting: never on the engine loop)
            await asyncio.to_thread(_end_pid, tc.server_pid)
            self._emit(ChannelChanged(tile.name, "failed", why))
            return
        tc.channel = channel

        def on_event(event: ChannelEvent) -> None:
            if isinstance(event, ChannelBroken):
                tile.channel_down = event.reason
                self._broke(tile.name, tc, event.reason)

        tc.unsubscribe = channel.subscribe(on_event)
        tile.channel = channel
        self._emit(ChannelChanged(tile.name, "attached"))

    def _broke(self, name: str, tc: TileChannel, why: str) -> None:
        if not tc.broken:
            tc.broken = True
            self._emit(ChannelChanged(name, "broken", why))

    def on_event(self, event: HubEvent) -> None:
        """A hub event (engine loop): a tile seen ``exited`` breaks its channel, if still up."""
        if not (isinstance(event, TileStateChanged) and event.state == "exited"):
            return
        tc = self._open.get(event.name)
        if tc is None or tc.channel is None or tc.broken or not tc.channel.alive:
            return
        self._broke(event.name, tc, "its agent exited (the pane's program ended)")
        spawn(self._end_channel(tc.channel), name=f"channel {event.name} end")

    @staticmethod
    async def _end_channel(channel: Channel) -> None:
        try:
            await channel.close()  # (a prompt waiting on it fails now; its server ends at close())
        except Exception:  # noqa: BLE001 (the break was told; closing is best effort)
            pass

    async def close(self) -> None:
        """Close every tile's channel, end its server by pid, remove its folder."""
        opened, self._open = self._open, {}
        for tc in opened.values():
            if tc.channel is not None:
                try:
                    await tc.channel.close()
                except Exception:  # noqa: BLE001 (closing: the rest still ends)
                    pass
            await asyncio.to_thread(tc.drop)

    def server_pids(self) -> list[int]:
        """The pids of the channel servers this hub started (for tests and ``close()``)."""
        return [tc.server_pid for tc in self._open.values() if tc.server_pid is not None]


_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def server_of(server: ChannelServer, command: str) -> ChannelServer:
    """``server`` started by the tile's own program: the command's words up to the one
    named like the server's ``argv[0]`` (``/opt/bin/codex``, ``env X=1 codex``, a wrapper's
    ``… /bin/codex``), else its first program, instead of a bare ``codex`` looked up on the
    hub's PATH. Shell assignments before it (``X=1 codex``) go before it as ``env X=1``.

    The agent's own options after it stay off: they are the TUI's."""
    words = shlex.split(command)
    name = server.argv[0]
    named = [
        i
        for i, w in enumerate(words)
        if posixpath.basename(w) == name and ("/" not in w or shutil.which(w) is not None)
    ]  # fmt: skip  (a folder named like it, e.g. a config dir, is not the program)
    if named:
        program = words[: named[0] + 1]
    else:
        lead = next((i for i, w in enumerate(words) if not _ASSIGNMENT.match(w)), None)
        program = [] if lead is None else words[: lead + 1]
    if not program:
        return server
    if _ASSIGNMENT.match(program[0]):
        program = ["env", *program]
    return dataclasses.replace(server, argv=(*program, *server.argv[1:]))


def short_private_folder() -> str | None:
    """A fresh 0700 folder under the system's temporary folder, for a socket whose path in
    the usual place (a long ``$HOME``) would be too long to bind; None if that is too."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="mh-ch-")  # (mode 0700, a random name)
    if len(os.fsencode(os.path.join(folder, SOCKET_NAME))) <= SOCKET_PATH_MAX:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    return None


def _free_port() -> int:
    """A port on 127.0.0.1 free now (for a kind whose server listens on one, not a socket)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _end_pid(pid: int | None) -> None:
    """End the server ``pid`` and its children: SIGTERM, then SIGKILL after a grace."""
    if pid is None:
        return
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=SERVER_END_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=SERVER_END_S)
