"""The tile registry: the hub's tiles and the machines they live on, composed of parts.

A tile lives on a machine: this one (:class:`~madohub_nb.io.machine.LocalMachine`) or a
remote host (the :class:`~madohub_nb.io.remote.SshMachine` of its
:class:`~madohub_nb.pipeline.hosts.HostLink`, made on first use). The parts, each its own
module: the tiles by name and pane (:class:`~madohub_nb.tile_table.TileTable`), making
and adopting them (:class:`~madohub_nb.tile_factory.TileFactory`), the hook channel and
tokens (:class:`~madohub_nb.hook_plumbing.HookPlumbing`), their git worktrees
(:class:`~madohub_nb.tile_worktrees.TileWorktrees`) and the remote hosts
(:class:`~madohub_nb.host_links.HostLinks`). This class builds them and orders their close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from .channel_plumbing import ChannelPlumbing
from .engine import Engine, EventBus
from .hook_plumbing import HookPlumbing
from .host_links import HostLinks
from .io.git import WorktreeEnd
from .io.machine import LocalMachine
from .io.tmux import Tmux
from .io.watch import OutputWatcher
from .pipeline.events import HubEvent
from .pipeline.hosts import HostLink
from .pipeline.tile import Tile
from .tile_factory import TileFactory
from .tile_table import TileTable
from .tile_worktrees import TileWorktrees

ADOPTED_HOOKS = (
    "hooks=True is for panes the hub starts; an adopted pane keeps the weaker signals "
    "(run %madohub hooks AGENT for what to add to the agent's own settings)"
)


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
        channels: Callable[[], bool] = lambda: True,
    ) -> None:
        self.tmux = tmux
        self.session_name = session_name
        self.table = TileTable(events)
        self.watcher = OutputWatcher(tmux, on_output=self.table.on_output)
        self.machine = LocalMachine(tmux, self.watcher)
        """This machine (its tmux server and output watcher)."""
        self.host_links = HostLinks(
            events=events, ssh_command=ssh_command, remote_socket_name=remote_socket_name,
            on_output=self.table.on_remote_output,
        )  # fmt: skip
        self.hooks = HookPlumbing(
            engine=engine, hosts=self.host_links, session_name=session_name, on_secret=on_secret
        )
        self.channels = ChannelPlumbing(
            session_name=session_name, enabled=channels, on_secret=on_secret, emit=emit
        )
        events.subscribe(self.channels.on_event)  # (a tile's exit breaks its channel)
        self.worktrees = TileWorktrees()
        self.factory = TileFactory(
            table=self.table, machine=self.machine, hosts=self.host_links, hooks=self.hooks,
            channels=self.channels, worktrees=self.worktrees, session_name=session_name, engine=engine, emit=emit,
            tile_options=tile_options, closed=closed, on_first_pane=on_first_pane,
        )  # fmt: skip
        # The public surface, each from its part:
        self.spawn_lock = self.factory.spawn_lock
        """Held while a pane is made (the first one makes the session) and while closing."""
        self.create = self.factory.create
        self.adopt = self.factory.adopt
        self.watch = self.factory.watch
        self.named = self.table.named
        self.check_name_free = self.table.check_name_free
        self.host_link = self.host_links.link
        self.hook_channel = self.hooks.channel

    @property
    def tiles(self) -> dict[str, Tile]:
        """The tiles by name (a dict copied on write: read it from any thread)."""
        return self.table.tiles

    @property
    def hosts(self) -> dict[str, HostLink]:
        """Remote hosts in use, by name (one ssh control connection each)."""
        return self.host_links.links

    @property
    def worktree_ends(self) -> list[WorktreeEnd]:
        """What close() did with each tile's worktree (removed, or kept with its changes)."""
        return self.worktrees.ends

    @property
    def made_here(self) -> bool:
        """Whether this hub made panes on this machine's tmux."""
        return None in self.table.made_on()

    async def close(self) -> None:
        """Stop watching; end the session of the panes this hub made, here and on hosts."""
        await self.channels.close()  # (first: no prompt goes in through one while panes end)
        await self.watcher.close()
        await self.worktrees.end_all(self.tiles.values())
        await self.hooks.close_host_places()  # (before the links close: over their masters)
        await self.host_links.close(self.session_name, self.table.made_on())
        if self.made_here:
            await asyncio.to_thread(self.tmux.kill_session, self.session_name)
        await self.hooks.close()

    def close_hosts_now(self) -> None:
        """The shutdown ran out of time (any thread): see :meth:`HostLinks.close_now`."""
        self.host_links.close_now(self.session_name, self.table.made_on())
