"""The hub's remote hosts: one :class:`~madohub_nb.pipeline.hosts.HostLink` each, made on
first use, and a ``host_state`` event when one goes or comes back.

The links are kept in a dict that is copied on write, so the engine thread reads it while
another thread adds a host. The route registry holds and releases routes on the events.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Collection, Sequence

from .engine import EventBus, side_by_side
from .errors import TmuxError
from .io.remote import check_host
from .model import HostState
from .pipeline.events import HostStateChanged, HubEvent
from .pipeline.hosts import HostLink


class HostLinks:
    """The remote hosts in use, by name (one ssh control connection each)."""

    def __init__(
        self,
        *,
        events: EventBus[HubEvent],
        ssh_command: Callable[[], Sequence[str]],
        remote_socket_name: str | None,
        on_output: Callable[[str, str, int], None],
    ) -> None:
        self._events = events
        self._ssh_command = ssh_command
        self.remote_socket_name = remote_socket_name
        """The tmux socket (``tmux -L``) used on remote hosts; None: their default server."""
        self._on_output = on_output
        """Told each host pane's output: (host, pane id, bytes)."""
        self.links: dict[str, HostLink] = {}
        """Remote hosts in use, by name."""
        self._lock = threading.Lock()

    def link(self, host: str) -> HostLink:
        """The link to ``host``, made (and the host checked: ssh, tmux) on first use."""
        check_host(host)
        with self._lock:
            link = self.links.get(host)
            if link is None:
                link = HostLink(
                    host, self._ssh_command(), self.remote_socket_name,
                    self._on_output, self._host_state,
                )  # fmt: skip
                link.probe()  # a one-line error within about 10 s for a bad or dead host
                self.links = {**self.links, host: link}
        if not link.reachable:
            raise TmuxError(link.last_error or f"host {host!r} is unreachable")
        return link

    def _host_state(self, host: str, state: HostState, why: str | None) -> None:
        self._events.emit(HostStateChanged(host, state, why))  # (engine thread)

    async def close(self, session_name: str, made_on: Collection[str | None]) -> None:
        """End each link, and the session this hub made on its host (``made_on``: the
        machines this hub made panes on)."""
        await asyncio.gather(
            *(link.close(session) for link, session in self._sessions(session_name, made_on)),
            return_exceptions=True,
        )

    def close_now(self, session_name: str, made_on: Collection[str | None]) -> None:
        """The shutdown ran out of time (any thread): each host's session this hub made
        ends if the host answers at once, and every host's ssh master ends by pid before
        close() returns (else it outlived the hub, its forwards and folder with it)."""
        # Side by side, as close() does: each waits on its host.
        side_by_side(
            (
                (link.close_now, (session,))
                for link, session in self._sessions(session_name, made_on)
            ),
            name="madohub close host",
        )

    def _sessions(
        self, session_name: str, made_on: Collection[str | None]
    ) -> list[tuple[HostLink, str | None]]:
        """Each host's link, and the session this hub made on it (None: it made none)."""
        return [
            (link, session_name if name in made_on else None)
            for name, link in list(self.links.items())
        ]
