"""Links to remote hosts: one ssh control connection per host, dropped and re-made.

A :class:`HostLink` owns a host's :class:`~madohub_nb.io.remote.SshMachine` (its
tmux over ``ssh host tmux …``, its output watcher: one ``ssh host tmux -C
attach`` per session) and keeps whether it can be reached. When the control
connection ends without the hub asking, the host reads unreachable (its tiles
say ``unreachable``) and the link says so (``on_state(host, "unreachable",
why)``), then tries again with backoff (0.5 s doubling to 10 s), saying why each
try failed, and ``on_state(host, "reachable", None)`` once the host answers and
the control connection is back. What happens to routes meanwhile is the route
side's business (the route registry, on the ``host_state`` events: they are held,
then resume and look at their sources again, so a turn is routed once: neither
lost nor typed twice). A session that ended on the host is not the host going
away: its tiles read ``exited`` and the host stays reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ..engine import aside, spawn
from ..errors import MadohubError
from ..io.remote import SshMachine
from ..model import HostState

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 10.0)
"""Waits between reconnection attempts (the last one repeats)."""
CLOSE_WAIT_S = 1.0
"""How long close() waits for a host to end the panes the hub made there."""

HostStateCallback = Callable[[str, HostState, "str | None"], None]
"""``(host, state, why)``: told on the engine loop when a host goes or comes back."""


class HostLink:
    """One remote host as the hub uses it."""

    def __init__(
        self,
        host: str,
        ssh_command: Sequence[str],
        socket_name: str | None,
        on_output: Callable[[str, str, int], None],
        on_state: HostStateCallback,
    ) -> None:
        self.ssh = SshMachine(
            host, ssh_command, socket_name,
            on_output=lambda pane, n: on_output(self.name, pane, n),
            on_client_exit=self._client_exited,
        )  # fmt: skip
        """The host as a machine (its tmux, watcher and bounded reads)."""
        self.name = self.ssh.host
        self.socket_name = socket_name
        self.tmux = self.ssh.tmux
        self.watcher = self.ssh.watcher
        self._on_state = on_state
        self.last_error: str | None = None
        self.reconnects = 0
        """Times the control connection was made again after a drop."""
        self._task: asyncio.Task[None] | None = None
        self._checks: set[asyncio.Task[None]] = set()

    @property
    def machine(self) -> SshMachine:
        """The host's machine, which its tiles ask (the same object as ``ssh``)."""
        return self.ssh

    @property
    def reachable(self) -> bool:
        """False from a dropped link until the host answers again."""
        return self.ssh.reachable

    @property
    def closing(self) -> bool:
        """Set by :meth:`close`."""
        return self.ssh.closing

    def probe(self) -> None:
        """Reach the host and its tmux now (a one-line error within about 10 s otherwise),
        then open the ssh connection later commands share."""
        self.ssh.probe(self.socket_name)
        if not self.closing:
            self.ssh.start_master()

    def _client_exited(self, session: str) -> None:
        """A control client ended without the hub asking (engine loop): the host went, or
        only that session did. The ssh master gone too says the host went; else one bounded
        read tells (a session that ended is forgotten: its tiles read ``exited``)."""
        if self.closing or self.watcher.closed:
            return
        if not self.reachable or self.ssh.control_path is None:
            self._down(session, "its ssh connection closed")
            return
        self.ssh.checking()
        self._spawn(self._after_exit(session), f"check {self.name} {session}")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = spawn(coro, name=name)
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _after_exit(self, session: str) -> None:
        try:
            alive = await asyncio.to_thread(self.ssh.has_session, session)
            if not alive:
                self.ssh.forget_session(session)
            else:
                # The session is there but its client ended (killed by someone): watch it again.
                await self._watch_session(session)
        except (MadohubError, OSError) as exc:
            self._down(session, f"{exc}")
            return
        # The host answered, perhaps over the master just before it ended too (a dropped
        # link): without our master its forwards (the hook channel, MCP) are gone, so the
        # host is back only once a master runs again.
        if self.ssh.control_path is None and not await asyncio.to_thread(self.ssh.start_master):
            self._down(session, "its ssh connection closed")
            return
        self.ssh.came_back()

    async def _watch_session(self, session: str) -> None:
        for stream in [s for s in self.watcher.streams.values() if s.session == session]:
            stream.ended = False
            await self.watcher.watch(stream.pane_id, session)

    def _down(self, session: str, why: str) -> None:
        self.ssh.went_down()
        self.last_error = f"host {self.name!r} is unreachable ({why}); retrying"
        self._on_state(self.name, "unreachable", self.last_error)
        if self._task is None:
            self._task = spawn(self._reconnect(session), name=f"reconnect {self.name}")

    async def _reconnect(self, session: str) -> None:
        attempt = 0
        try:
            while not self.closing:
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                try:
                    await asyncio.to_thread(self.probe)
                    alive = await asyncio.to_thread(self.ssh.has_session, session)
                    if alive:
                        await self._watch_session(session)
                    else:  # the host is back, that session is not: forget it
                        self.ssh.forget_session(session)
                except (MadohubError, OSError) as exc:
                    self.last_error = f"host {self.name!r} is unreachable ({exc}); retrying"
                    self._on_state(self.name, "unreachable", self.last_error)
                    continue
                if alive and not self.watcher.client_pids():
                    continue  # its client did not stay: not back yet
                self.last_error = None
                self.reconnects += 1
                self.ssh.came_back()
                self._on_state(self.name, "reachable", None)
                return
        finally:
            self._task = None

    # closing ----------------------------------------------------------------------------
    async def close(self, session: str | None) -> None:
        """Stop watching; end ``session`` (the panes the hub made) without waiting on a dead host."""
        self.ssh.stop_waiting()
        for check in list(self._checks):
            check.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.watcher.close()
        await asyncio.to_thread(self.close_now, session)

    def close_now(self, session: str | None) -> None:
        """The end of :meth:`close`, from any thread (also when the hub's shutdown ran out of
        time before close got here): no master is made again, ``session`` ends if the host
        answers within ``CLOSE_WAIT_S``, and our ssh master ends by pid (its folder removed)
        before this returns. (A cancelled engine loop ends the watches with it.)"""
        self.ssh.closing = True  # not stop_waiting(): its asyncio event is the loop's alone
        if session is not None and self.reachable:
            # A slow or silent host: our ssh child ends now all the same (by pid), which
            # also ends a kill still waiting on its shared connection.
            self._end_session(session).wait(CLOSE_WAIT_S)
        self.ssh.close()

    def _end_session(self, session: str) -> threading.Event:
        """Kill ``session`` on the host, then end our ssh master, on a thread of its own (a
        host that stopped answering must not hold close() up); set once both are done."""

        def kill() -> None:
            with contextlib.suppress(MadohubError, OSError):
                self.tmux.kill_session(session)
            self.ssh.close()

        return aside(kill, name=f"close {self.name}")
