"""Output watching: tmux pushes the bytes of the panes someone needs; nothing else is read.

One control-mode client per tmux session (see :class:`~madohub_nb.io.tmux.ControlClient`)
feeds :class:`PaneStream` objects; each route listening to a tile gets a
:class:`Listener` with its own wake-up event and a bounded buffer of new output.

What each consumer needs decides what tmux sends (``refresh-client -A
'%N:pause|continue'``, per pane, for the hub's own control client only):

- a listener that needs the text (on-keyword, always, a completion pattern): the
  pane's output is on;
- a *pollable* listener, which can do with knowing *when* the pane spoke (an on-idle
  route, which still gets the bytes while they flow; a live view, which takes none):
  on while the pane is moderate; a pane flooding more than :data:`FLOOD_BYTES` a
  second is paused and its window's ``#{window_activity}`` (seconds) is polled
  every :data:`POLL_S` instead, until it has been quiet for a whole second;
- nobody: off. A tile's quiet time (terminal programs' ``ready_quiet_ms``) then
  comes from ``#{window_activity}`` when asked (:meth:`OutputWatcher.last_output_mono`).

Polled times are rounded *up* to the end of tmux's second, so silence is never
overstated: an idle trigger can only fire later than exact, never early.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Final, Literal

from ..engine import spawn
from ..errors import TmuxError
from .tmux import ChannelClosed, ControlClient, Tmux, decode_control_output

LISTENER_BUFFER_BYTES = 256 * 1024
"""New output a listener keeps between two reads (the oldest bytes are dropped)."""

FLOOD_BYTES = 64 * 1024
"""Output a second (as tmux sends it) above which a pane nobody reads is polled, not streamed."""

POLL_S = 0.25
"""How often a flooding pane's ``#{window_activity}`` is read while its output is off."""

ACTIVITY_FORMAT = "#{pane_id} #{window_activity}"

log = logging.getLogger("madohub_nb")

OutputMode = Literal["on", "off", "polled"]


def activity_end_mono(activity_s: int, now_wall: float, now_mono: float) -> float:
    """The latest monotonic time output could have happened, given tmux's ``window_activity``.

    tmux keeps the time of a window's last output to the second: it happened before
    the end of that second (and not after now).
    """
    return now_mono - max(0.0, now_wall - (activity_s + 1.0))


SWITCH_RETRY_S: Final = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
"""Waits before a refused output switch is tried again (then once more, and it stays)."""

SwitchOutcome = Literal["done", "refused", "stale"]
"""What came of an output switch: tmux did it; tmux kept refusing (or the pane or its
client went away); or the listeners' need changed while it waited to be tried again."""


def _expire(waiter: asyncio.Future[None]) -> None:
    """A :meth:`Listener.wait` timed out (its waiter ends; nothing woke it)."""
    if not waiter.done():
        waiter.set_result(None)


class Listener:
    """One consumer's view of a pane's output: a wake-up event and the bytes since its last read."""

    def __init__(
        self, stream: PaneStream, wants_bytes: bool = True, pollable: bool = False
    ) -> None:
        self.stream = stream
        self.wants_bytes = wants_bytes
        """False: only *when* the pane spoke matters (:meth:`take_activity`); no bytes kept."""
        self.pollable = pollable or not wants_bytes
        """The bytes help but are not needed: a flooding pane may be polled instead."""
        self._woken = False
        """Set by :meth:`wake` (output, activity, the stream ending), cleared by :meth:`take`."""
        self._waiter: asyncio.Future[None] | None = None
        """The one :meth:`wait` in progress (a listener has one consumer)."""
        self._buffer = bytearray()
        self._activity_mono: float | None = None
        self.closed = False

    def push(self, data: bytes, now_mono: float) -> None:
        self._buffer += data
        if len(self._buffer) > LISTENER_BUFFER_BYTES:
            del self._buffer[: len(self._buffer) - LISTENER_BUFFER_BYTES]
        self.touch(now_mono)

    def touch(self, at_mono: float) -> None:
        """The pane spoke at ``at_mono`` (monotonic seconds)."""
        if self._activity_mono is None or at_mono > self._activity_mono:
            self._activity_mono = at_mono
        self.wake()

    @property
    def woken(self) -> bool:
        """True when something came since the last :meth:`take` (:meth:`wait` returns at once)."""
        return self._woken

    def wake(self) -> None:
        """Wake the consumer: new output or activity, the stream ending, or (its owner's
        own reason) a hook that ended the source's turn. One flag and, while a
        :meth:`wait` runs, one future: no task per wait."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take_activity(self) -> float | None:
        """When the pane last spoke since the last call (monotonic seconds), or None."""
        at, self._activity_mono = self._activity_mono, None
        return at

    def take(self) -> bytes:
        """The output that arrived since the last call (and clear the wake-up)."""
        data, self._buffer = bytes(self._buffer), bytearray()
        self._woken = False
        return data

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait for :meth:`wake` (new output, the stream ending); False on timeout."""
        if self._woken:
            return True
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout_s, _expire, waiter) if timeout_s is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        return self._woken

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.stream.unlisten(self)


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
        self.mode: OutputMode = "on"
        """Whether tmux sends this pane's output to our client now (it starts on); off and
        polled panes are paused (``%N:pause``)."""
        self.flooding = False
        """Spoke more than FLOOD_BYTES in a second with nobody reading: polled, not streamed."""
        self._flood_window_mono = 0.0
        self._flood_bytes = 0
        self._readers = 0  # listeners that want the bytes
        self._needers = 0  # listeners that cannot do without them (no polling instead)
        self.on_demand: Callable[[PaneStream], None] | None = None
        """Called when what the listeners need changed (the watcher switches tmux's output)."""
        self.settle: Callable[[PaneStream], Awaitable[None]] | None = None

    def listen(self, wants_bytes: bool = True, pollable: bool = False) -> Listener:
        """A new listener; ``wants_bytes=False`` when only the times of output matter.

        tmux is told to send the pane's output soon after; ``await`` :meth:`settled`
        to be sure it does before relying on it.
        """
        listener = Listener(self, wants_bytes, pollable)
        self.listeners.add(listener)
        self._readers += wants_bytes
        self._needers += not listener.pollable
        self._demand_changed()
        return listener

    def unlisten(self, listener: Listener) -> None:
        if listener in self.listeners:
            self.listeners.discard(listener)
            self._readers -= listener.wants_bytes
            self._needers -= not listener.pollable
            self._demand_changed()

    async def settled(self) -> None:
        """Wait until tmux sends (or stops sending) this pane's output as the listeners need."""
        if self.settle is not None:
            await self.settle(self)

    def wanted(self) -> OutputMode:
        """What the listeners need of tmux now."""
        if self._needers:
            return "on"
        if self.listeners:
            return "polled" if self.flooding else "on"
        return "off"

    def _demand_changed(self) -> None:
        if self.on_demand is not None and self.wanted() != self.mode:
            self.on_demand(self)

    def feed(self, escaped: bytes, now_mono: float) -> None:
        """Output as control mode sent it (octal-escaped); decoded only when someone reads it."""
        self.last_output_mono = now_mono
        self.bytes_total += len(escaped)
        if self._readers:
            data = decode_control_output(escaped)
            for listener in self.listeners:
                if listener.wants_bytes:
                    listener.push(data, now_mono)
                else:
                    listener.touch(now_mono)
        else:
            for listener in self.listeners:
                listener.touch(now_mono)
        if self._needers:
            return
        if now_mono - self._flood_window_mono > 1.0:
            self._flood_window_mono, self._flood_bytes = now_mono, 0
        self._flood_bytes += len(escaped)
        if self._flood_bytes > FLOOD_BYTES and not self.flooding:
            self.flooding = True
            self._demand_changed()

    def activity(self, at_mono: float) -> None:
        """Output was seen by polling (it may have been at any time up to ``at_mono``)."""
        if self.last_output_mono is None or at_mono > self.last_output_mono:
            self.last_output_mono = at_mono
        for listener in self.listeners:
            listener.touch(at_mono)

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
            listener.wake()

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
    """Streams output of watched panes; starts one control client per tmux session.

    ``output_control=False`` keeps every pane's output on, as before per-pane
    control (a baseline for benchmarks).
    """

    def __init__(
        self,
        tmux: Tmux,
        on_output: Callable[[str, int], None] | None = None,
        on_client_exit: Callable[[str], None] | None = None,
        output_control: bool = True,
    ) -> None:
        self.tmux = tmux
        self.on_client_exit = on_client_exit
        """Told the session whose control client ended (a remote host's link dropped)."""
        self.streams: dict[str, PaneStream] = {}
        self._clients: dict[str, ControlClient] = {}
        self._on_output = on_output
        self._lock = asyncio.Lock()
        self.closed = False
        self.output_control = output_control
        self.output_events = 0
        """``%output`` events the hub read, of any pane (a chatty pane switched off adds none)."""
        self.output_bytes = 0
        self.polls = 0
        """``#{window_activity}`` reads of flooding panes."""
        self._silenced: set[tuple[str, str]] = set()  # (session, pane) of panes nobody watches
        self._mode_locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._switching: dict[PaneStream, asyncio.Task[None]] = {}
        """Each pane's one output switch waiting or under way: it reads the listeners' need
        when it runs and again after each switch, so a newer wish joins it (no second task)."""
        self._poll_task: asyncio.Task[None] | None = None

    def stream(self, pane_id: str, session: str) -> PaneStream:
        """The stream of ``pane_id`` (made if new; engine loop only). Its client starts in :meth:`watch`."""
        stream = self.streams.get(pane_id)
        if stream is None:
            stream = self.streams[pane_id] = PaneStream(pane_id, session)
            if (session, pane_id) in self._silenced:
                self._silenced.discard((session, pane_id))
                stream.mode = "off"
            if self.output_control:
                stream.on_demand = self._schedule
                stream.settle = self._apply
        return stream

    async def watch(self, pane_id: str, session: str, pane_pid: int | None = None) -> PaneStream:
        """Make sure ``pane_id`` (in ``session``) is streamed; must run on the engine loop."""
        stream = self.stream(pane_id, session)
        if pane_pid is not None:
            stream.watch_process(pane_pid)
        async with self._lock:
            if self.closed:
                return stream
            if session not in self._clients:
                client = ControlClient(
                    self.tmux,
                    session,
                    functools.partial(self._feed, session),
                    functools.partial(self._client_exited, session),
                )
                await client.start()
                self._clients[session] = client
                self.tmux.use_channel(client)
                for other in self.streams.values():  # a new client gets every pane's output
                    if other.session == session:
                        other.mode = "on"
                        other.ended = False
                self._silenced = {s for s in self._silenced if s[0] != session}
                to_tell = [other for other in self.streams.values() if other.session == session]
            else:
                to_tell = [stream]
        # Only a new client's panes all need telling (tmux sends it every pane); else the
        # caller's own pane: a route asks about its source, not every pane of the session.
        for other in to_tell:
            self._schedule(other)
        return stream

    def client_pids(self) -> list[int]:
        return [pid for c in self._clients.values() if (pid := c.pid) is not None]

    def _feed(self, session: str, pane_id: str, data: bytes) -> None:
        self.output_events += 1
        self.output_bytes += len(data)
        stream = self.streams.get(pane_id)
        if stream is None:
            self._silence_stranger(session, pane_id)
            return
        stream.feed(data, time.monotonic())
        if self._on_output is not None:
            self._on_output(pane_id, len(data))

    # switching tmux's output per pane ------------------------------------------------
    def _schedule(self, stream: PaneStream) -> None:
        """Have tmux do what ``stream``'s listeners need, soon: one task per pane at most."""
        if not self.output_control or self.closed:
            return
        waiting = self._switching.get(stream)
        if waiting is not None and not waiting.done():
            return  # it reads the need when it runs, and again after each switch
        task = spawn(self._apply(stream), name=f"output control {stream.pane_id}")
        self._switching[stream] = task
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._switch_done, stream))

    def _switch_done(self, stream: PaneStream, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._switching.get(stream) is task:
            del self._switching[stream]

    def switches_waiting(self) -> dict[str, int]:
        """Output switches waiting or under way, by pane (read-only; engine loop)."""
        counts: dict[str, int] = {}
        for stream, task in self._switching.items():
            if not task.done():
                counts[stream.pane_id] = counts.get(stream.pane_id, 0) + 1
        return counts

    async def _set_output(self, session: str, pane_id: str, on: bool) -> bool:
        client = self._clients.get(session)
        if client is None or not client.alive:
            return False
        try:
            # pause/continue, not off/on: tmux 3.3a's "off" keeps the pane's queued output
            # blocks, whose bytes it then frees, and its server crashes writing them later.
            # "pause" discards them; "continue" starts again from the pane's current output.
            await client.command(
                ["refresh-client", "-A", f"{pane_id}:{'continue' if on else 'pause'}"]
            )
        except (ChannelClosed, TmuxError) as exc:  # the pane or the connection is gone
            log.debug("pane %s output %s refused: %s", pane_id, "on" if on else "off", exc)
            return False
        return True

    async def _switch(self, stream: PaneStream, on: bool) -> SwitchOutcome:
        """Switch the pane's output, trying again while tmux refuses it and the pane and its
        client are still there (a control client that has just started is not yet tmux's
        "current client": its first switch can be refused, and would otherwise stay undone).

        A retry is for the listeners' need of now: if it changed while waiting, "stale".
        """
        for wait_s in SWITCH_RETRY_S:
            if await self._set_output(stream.session, stream.pane_id, on):
                return "done"
            client = self._clients.get(stream.session)
            if self.closed or client is None or not client.alive:
                return "refused"
            if self.streams.get(stream.pane_id) is not stream or stream.ended:
                return "refused"
            await asyncio.sleep(wait_s)
            if (stream.wanted() == "on") != on:
                return "stale"
        return "done" if await self._set_output(stream.session, stream.pane_id, on) else "refused"

    async def _apply(self, stream: PaneStream) -> None:
        """Tell tmux to send ``stream``'s output or not, as its listeners need (in order)."""
        if not self.output_control:
            return
        lock = self._mode_locks.setdefault(stream.pane_id, asyncio.Lock())
        async with lock:
            # Listeners may come or go while tmux answers (the mode is not yet the new
            # one, so they schedule nothing): look again until tmux does what they need.
            while not self.closed and (want := stream.wanted()) != stream.mode:
                on = want == "on"
                if (stream.mode == "on") != on:
                    outcome = await self._switch(stream, on)
                    if outcome == "refused" and stream.wanted() == want:
                        return  # tmux kept refusing, or the pane or its client went away
                    if outcome != "done":  # a newer wish replaced this one: read it again
                        continue
                was, stream.mode = stream.mode, want
                log.debug("pane %s output: %s -> %s", stream.pane_id, was, want)
                if want == "polled":
                    self._start_polling()
                elif was == "polled" and on:
                    # Output between the last poll and "on" taking effect: read it once more.
                    await self._poll_once(stream)

    def _silence_stranger(self, session: str, pane_id: str) -> None:
        """A pane of a watched session that is no tile (yet): nobody needs its output.

        A tile made of it later finds it paused (:meth:`stream`) and turns it on if needed.
        """
        key = (session, pane_id)
        if not self.output_control or key in self._silenced:
            return
        self._silenced.add(key)
        log.debug("pane %s of session %s is no tile: its output is paused", pane_id, session)
        task = spawn(self._set_output(session, pane_id, False), name=f"silence {pane_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # flooding panes: polled, not streamed ----------------------------------------------
    def _start_polling(self) -> None:
        if self._poll_task is None or self._poll_task.done():
            self._poll_task = spawn(self._poll(), name="poll flooding panes")

    def _polled(self) -> list[PaneStream]:
        return [s for s in self.streams.values() if s.mode == "polled" and not s.ended]

    async def _poll(self) -> None:
        while not self.closed and self._polled():
            await asyncio.sleep(POLL_S)
            await self._poll_once()

    async def _poll_once(self, also: PaneStream | None = None) -> None:
        """Read every pane's ``#{window_activity}``; a polled pane quiet for a second streams again.

        Only polled panes (and ``also``) take the reading: a streamed pane's own times are exact.
        """
        try:
            out = await self.tmux.arun("list-panes", "-a", "-F", ACTIVITY_FORMAT, check=False)
        except TmuxError:
            return
        self.polls += 1
        now_wall, now_mono = self.tmux.server_wall_time(), time.monotonic()
        for line in out.splitlines():
            pane_id, _, seconds = line.partition(" ")
            stream = self.streams.get(pane_id)
            if stream is None or not seconds.isdigit():
                continue
            if stream.mode != "polled" and stream is not also:
                continue
            end = activity_end_mono(int(seconds), now_wall, now_mono)
            if stream.mode == "polled" or end > (stream.last_output_mono or 0.0):
                stream.activity(end)
                if self._on_output is not None:
                    self._on_output(pane_id, 0)
            if stream.mode == "polled" and end < now_mono:  # quiet since the end of its second
                stream.flooding = False
                self._schedule(stream)

    def last_output_mono(self, pane_id: str) -> float | None:
        """When ``pane_id`` last spoke (monotonic s), also while its output is off; any thread.

        From the stream while tmux sends it; else from ``#{window_activity}``, rounded
        up to the end of its second (so quiet time is never overstated).
        """
        stream = self.streams.get(pane_id)
        if stream is None:
            return None
        if stream.mode == "on":
            return stream.last_output_mono
        with contextlib.suppress(TmuxError):
            out = self.tmux.run(
                "display-message", "-p", "-t", pane_id, "#{window_activity}", check=False
            ).strip()
            if out.isdigit():
                end = activity_end_mono(int(out), self.tmux.server_wall_time(), time.monotonic())
                return max(end, stream.last_output_mono or end)
        return stream.last_output_mono

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
        self._mode_locks.pop(pane_id, None)
        if stream is not None:
            self._switching.pop(stream, None)
            stream.unwatch_process()
            stream.end()

    async def close(self) -> None:
        async with self._lock:  # let a watch() under way finish registering its client
            self.closed = True
            clients, self._clients = list(self._clients.values()), {}
        if self._poll_task is not None:
            self._poll_task.cancel()
        for task in list(self._tasks):
            task.cancel()
        for client in clients:
            await client.stop()
        for stream in self.streams.values():
            stream.unwatch_process()
            stream.end()
