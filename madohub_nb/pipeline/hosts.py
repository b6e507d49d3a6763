"""Links to remote hosts: one ssh control connection per host, dropped and re-made.

A :class:`HostLink` owns a host's tmux (commands over ``ssh host tmux …``), its
output watcher (one ``ssh host tmux -C attach`` per session) and whether it can
be reached. When the control connection ends without the hub asking, the host
reads unreachable: its tiles say ``unreachable``, the routes touching them are
held (paused with ``last_error``; a turn that finishes meanwhile waits), and a
task tries again with backoff (0.5 s doubling to 10 s). Once the host answers
and the control connection is back, held routes resume and look at their
sources again, so a turn is routed once: neither lost nor typed twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence

from ..errors import MadohubError
from ..io.remote import SshHost
from ..io.tmux import Tmux
from ..io.watch import OutputWatcher, PaneStream
from .route import Route

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 10.0)
"""Waits between reconnection attempts (the last one repeats)."""
CLOSE_WAIT_S = 1.0
"""How long close() waits for a host to end the panes the hub made there."""


class HostLink:
    """One remote host as the hub uses it."""

    def __init__(
        self,
        host: str,
        ssh_command: Sequence[str],
        socket_name: str | None,
        on_output: Callable[[str, str, int], None],
        routes: Callable[[], Iterable[Route]],
    ) -> None:
        self.ssh = SshHost(host, ssh_command)
        self.name = self.ssh.host
        self.socket_name = socket_name
        self.tmux = Tmux(socket_name, remote=self.ssh)
        self.watcher = OutputWatcher(
            self.tmux, on_output=lambda pane, n: on_output(self.name, pane, n),
            on_client_exit=self._client_exited,
        )  # fmt: skip
        self._routes = routes
        self.reachable = True
        self.last_error: str | None = None
        self.reconnects = 0
        """Times the control connection was made again after a drop."""
        self.closing = False
        self._back: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._held: list[Route] = []

    def probe(self) -> None:
        """Reach the host and its tmux now (a one-line error within about 10 s otherwise),
        then open the ssh connection later commands share."""
        self.ssh.probe(self.socket_name)
        if not self.closing:
            self.ssh.start_master()

    # watching ---------------------------------------------------------------------------
    async def watch(self, pane_id: str, session: str) -> PaneStream:
        """Stream a pane of this host, waiting for the host while it is unreachable."""
        while not self.reachable and not self.closing:
            back = self._back
            if back is None:
                break
            await back.wait()
        return await self.watcher.watch(pane_id, session)

    def holds(self, route: Route) -> bool:
        return any(
            getattr(t, "host_name", None) == self.name
            for t in (route.source_tile, route.target_tile)
        )

    def _client_exited(self, session: str) -> None:
        if self.closing or self.watcher.closed:
            return
        self.reachable = False
        self.last_error = f"host {self.name!r} is unreachable (its ssh connection closed); retrying"
        if self._back is None or self._back.is_set():
            self._back = asyncio.Event()
        for route in self._routes():
            if self.holds(route) and route.state == "active":
                route.hold(f"paused: {self.last_error}")
                self._held.append(route)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._reconnect(session), name=f"reconnect {self.name}"
            )

    async def _reconnect(self, session: str) -> None:
        attempt = 0
        try:
            while not self.closing:
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                try:
                    await asyncio.to_thread(self.probe)
                    panes = [s for s in self.watcher.streams.values() if s.session == session]
                    for stream in panes:
                        stream.ended = False
                        await self.watcher.watch(stream.pane_id, session)
                except (MadohubError, OSError) as exc:
                    self.last_error = f"host {self.name!r} is unreachable ({exc}); retrying"
                    for route in self._held:
                        if route.held:
                            route.last_error = f"paused: {self.last_error}"
                    continue
                if not self.watcher.client_pids():
                    continue
                self.reachable, self.last_error = True, None
                self.reconnects += 1
                held, self._held = self._held, []
                for route in held:
                    route.release()
                if self._back is not None:
                    self._back.set()
                return
        finally:
            self._task = None

    # closing ----------------------------------------------------------------------------
    async def close(self, session: str | None) -> None:
        """Stop watching; end ``session`` (the panes the hub made) without waiting on a dead host."""
        self.closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._back is not None:
            self._back.set()
        await self.watcher.close()
        if session is None or not self.reachable:
            self.ssh.stop_master()
        else:
            # A thread of its own: a host that stopped answering must not hold close() up.
            done = threading.Event()

            def kill() -> None:
                with contextlib.suppress(MadohubError, OSError):
                    self.tmux.kill_session(session)
                self.ssh.stop_master()
                done.set()

            threading.Thread(target=kill, daemon=True, name=f"close {self.name}").start()
            if not await asyncio.to_thread(done.wait, CLOSE_WAIT_S):
                # Slow or silent host: our ssh child ends now all the same (by pid), which
                # also ends a kill still waiting on its shared connection.
                await asyncio.to_thread(self.ssh.stop_master)
