"""Output watching: tmux pushes every pane's bytes to us; nothing is polled.

One control-mode client per tmux session (see :class:`~madohub_nb.io.tmux.ControlClient`)
feeds :class:`PaneStream` objects; each route listening to a tile gets a
:class:`Listener` with its own wake-up event and a bounded buffer of new output.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable

from .tmux import ControlClient, Tmux, decode_control_output

LISTENER_BUFFER_BYTES = 256 * 1024
"""New output a listener keeps between two reads (the oldest bytes are dropped)."""


class Listener:
    """One consumer's view of a pane's output: a wake-up event and the bytes since its last read."""

    def __init__(self, stream: PaneStream) -> None:
        self.stream = stream
        self.event = asyncio.Event()
        self._buffer = bytearray()
        self.closed = False

    def push(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > LISTENER_BUFFER_BYTES:
            del self._buffer[: len(self._buffer) - LISTENER_BUFFER_BYTES]
        self.event.set()

    def take(self) -> bytes:
        """The output that arrived since the last call (and clear the wake-up)."""
        data, self._buffer = bytes(self._buffer), bytearray()
        self.event.clear()
        return data

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait for new output (or the stream ending); False on timeout."""
        if self.event.is_set():
            return True
        try:
            await asyncio.wait_for(self.event.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.closed = True
        self.stream.listeners.discard(self)


class PaneStream:
    """The live output of one pane: when it last spoke, how much, and who listens."""

    def __init__(self, pane_id: str, session: str) -> None:
        self.pane_id = pane_id
        self.session = session
        self.last_output_mono: float | None = None
        self.bytes_total = 0
        self.ended = False
        self.pane_exited = False
        """The pane's own process ended (or the pane was killed): the tile is gone."""
        self.listeners: set[Listener] = set()
        self._pidfd: int | None = None

    def listen(self) -> Listener:
        listener = Listener(self)
        self.listeners.add(listener)
        return listener

    def feed(self, escaped: bytes, now_mono: float) -> None:
        """Output as control mode sent it (octal-escaped); decoded only when someone listens."""
        self.last_output_mono = now_mono
        self.bytes_total += len(escaped)
        if self.listeners:
            data = decode_control_output(escaped)
            for listener in self.listeners:
                listener.push(data)

    def end(self) -> None:
        """The server or session went away: wake everyone so they can notice."""
        self.ended = True
        self._wake()

    def process_exited(self) -> None:
        """The pane's process ended: wake listeners so routes notice at once, without polling."""
        self.pane_exited = True
        self.unwatch_process()
        self._wake()

    def _wake(self) -> None:
        for listener in self.listeners:
            listener.event.set()

    def watch_process(self, pid: int) -> None:
        """Be told when the pane's process exits: a pidfd read by the loop (Linux ≥ 5.3).

        tmux sends control clients no event when a pane's program dies, and a killed
        pane's window may be in another session, so the process itself is watched.
        """
        if self._pidfd is not None or not hasattr(os, "pidfd_open"):
            return
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError:  # already gone, or no pidfd support
            self.pane_exited = True
            return
        asyncio.get_running_loop().add_reader(self._pidfd, self.process_exited)

    def unwatch_process(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)


class OutputWatcher:
    """Streams output of watched panes; starts one control client per tmux session."""

    def __init__(
        self,
        tmux: Tmux,
        on_output: Callable[[str, int], None] | None = None,
        on_client_exit: Callable[[str], None] | None = None,
    ) -> None:
        self.tmux = tmux
        self.on_client_exit = on_client_exit
        """Told the session whose control client ended (a remote host's link dropped)."""
        self.streams: dict[str, PaneStream] = {}
        self._clients: dict[str, ControlClient] = {}
        self._on_output = on_output
        self._lock = asyncio.Lock()
        self.closed = False

    async def watch(self, pane_id: str, session: str, pane_pid: int | None = None) -> PaneStream:
        """Make sure ``pane_id`` (in ``session``) is streamed; must run on the engine loop."""
        stream = self.streams.get(pane_id)
        if stream is None:
            stream = self.streams[pane_id] = PaneStream(pane_id, session)
        if pane_pid is not None:
            stream.watch_process(pane_pid)
        async with self._lock:
            if self.closed:
                return stream
            if session not in self._clients:
                client = ControlClient(
                    self.tmux, session, self._feed, functools.partial(self._client_exited, session)
                )
                await client.start()
                self._clients[session] = client
                self.tmux.use_channel(client)
        return stream

    def client_pids(self) -> list[int]:
        return [pid for c in self._clients.values() if (pid := c.pid) is not None]

    def _feed(self, pane_id: str, data: bytes) -> None:
        stream = self.streams.get(pane_id)
        if stream is None:
            return
        stream.feed(data, time.monotonic())
        if self._on_output is not None:
            self._on_output(pane_id, len(data))

    def _client_exited(self, session: str) -> None:
        gone = self._clients.pop(session, None)
        if gone is not None:
            self.tmux.drop_channel(gone)
        for client in self._clients.values():  # commands go on over another connection
            self.tmux.use_channel(client)
        for stream in self.streams.values():
            if stream.session == session:
                stream.end()
        if self.on_client_exit is not None:
            self.on_client_exit(session)

    def forget(self, pane_id: str) -> None:
        stream = self.streams.pop(pane_id, None)
        if stream is not None:
            stream.unwatch_process()
            stream.end()

    async def close(self) -> None:
        async with self._lock:  # let a watch() under way finish registering its client
            self.closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.stop()
        for stream in self.streams.values():
            stream.unwatch_process()
            stream.end()
