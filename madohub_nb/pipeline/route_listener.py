"""A route's ear on its source: the loop that waits for the source's next finished turn.

It listens to the source's pushed output and its agent's end-of-turn hooks, and after
each output or silence asks the route's trigger (a
:class:`~madohub_nb.pipeline.triggers.TurnDetector`) for a finished turn; each one goes to
the route (which decides whether it makes a round), each turn the trigger lets go is told
(:class:`~.events.TurnSkipped`). A source that exits stops the route, saying why.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
from collections.abc import Awaitable, Callable

from ..agents.screen import strip_ansi
from ..io.agent_channels.base import ChannelEvent, ChannelTurn
from ..io.agent_records.base import Extraction
from ..io.hooks.channel import HookEvent
from .deliver import CHANNEL_WAIT_S
from .events import RouteLike, TurnSkipped
from .protection import LoopGuard
from .route_context import OutputListener, OutputStream, RouteContext
from .route_state import RouteStates
from .tile import Tile
from .triggers import Heard, Turn, TurnDetector


class SourceListener:
    """Listens to one source for one route (engine loop)."""

    def __init__(
        self,
        context: RouteContext,
        route: RouteLike,
        source: Tile,
        detector: TurnDetector,
        states: RouteStates,
        guard: LoopGuard,
        *,
        transcript: bool,
    ) -> None:
        self._context = context
        self._route = route
        self.source = source
        self.detector = detector
        self._states = states
        self._guard = guard
        self.transcript = transcript
        """The answer is read from the agent's own record (else from its screen)."""
        # Output arrives in arbitrary chunks: keep a UTF-8 character split across two whole.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._listener: OutputListener | None = None
        self._hook_events: collections.deque[HookEvent] = collections.deque(maxlen=64)
        """The source's end-of-turn hooks not yet handed to the trigger (engine loop)."""
        self._channel_turns: collections.deque[ChannelTurn] = collections.deque(maxlen=64)
        """The turns the source's native channel reported, not yet handed to the trigger."""

    def now_ms(self) -> float:
        """The route's clock (its context's: monotonic ms, or a test's own)."""
        return self._context.now_ms()

    def skipped(self, reason: str) -> None:
        """Tell listeners the trigger saw a finished turn and let it go (tests wait on this)."""
        self._context.emit(TurnSkipped(self._route.id, reason, self._route))

    def keep_newest_turn(self) -> None:
        """Of the turns that ended meanwhile (a person deciding), only the newest is routed."""
        while len(self._hook_events) > 1:
            self._hook_events.popleft()
        while len(self._channel_turns) > 1:
            self._channel_turns.popleft()

    async def run(self, ready: asyncio.Event, fire: Callable[[Turn], Awaitable[None]]) -> None:
        """Listen to the source and ask the trigger, after each output or silence, for a
        turn; ``ready`` is set once listening, each finished turn goes to ``fire``."""
        stream = await self._listen()
        seen = _SeenSource(self)
        await self.detector.start(seen)
        hooks = self.source.hooks
        unsubscribe = hooks.subscribe(self._on_hook) if hooks is not None else None
        await self._channel_attached()
        channel = self.source.channel
        unsubscribe_channel = channel.subscribe(self._on_channel) if channel is not None else None
        route_id = self._route.id
        await asyncio.to_thread(self.source.changes.start, route_id)  # (git: what turns change)
        ready.set()
        try:
            while self._states.live:
                heard = await self._hear(self.detector.wait_s(self.now_ms()))
                if heard.quiet and (stream.pane_exited or stream.ended):
                    if await self._source_gone(stream):
                        return
                    if stream.ended:  # (a remote host: once it is back)
                        stream = await self._listen()  # a turn may have ended unseen: look again
                        heard = Heard(self.now_ms(), spoke_ms=self.now_ms())
                turn = await self.detector.next_turn(heard, seen)
                if turn is not None and turn.skipped:
                    self.skipped(turn.skipped)
                elif turn is not None:
                    await fire(turn)
        finally:
            if unsubscribe is not None:
                unsubscribe()
            if unsubscribe_channel is not None:
                unsubscribe_channel()
            if self._listener is not None:
                self._listener.close()

    def _on_hook(self, event: HookEvent) -> None:
        """The source's agent ended a turn (its hook, from the channel): wake the route."""
        if event.kind != "stop":
            return
        self._hook_events.append(event)
        if self._listener is not None:
            self._listener.wake()  # (the route's one wake-up: output or its hook)

    async def _channel_attached(self) -> None:
        """A just-made source's channel: wait until it attached (or failed), so its turns
        are heard from the first."""
        ready = self.source.channel_ready
        if ready is not None and not ready.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(ready)), CHANNEL_WAIT_S)

    def _on_channel(self, event: ChannelEvent) -> None:
        """The source's channel reported a finished turn (ours or the person's): wake the route."""
        if not isinstance(event, ChannelTurn):
            return
        self._channel_turns.append(event)
        if self._listener is not None:
            self._listener.wake()

    async def _listen(self) -> OutputStream:
        """(Re)open the source's output and listen to it until it has settled."""
        stream = await self._context.watch(self.source)
        if self._listener is not None:
            self._listener.close()
        self._listener = stream.listen(pollable=self.detector.pollable)
        await stream.settled()
        return stream

    async def _hear(self, timeout_s: float | None) -> Heard:
        """What the source said within ``timeout_s`` (``quiet`` when nothing came)."""
        assert self._listener is not None
        got = await self._wait(self._listener, timeout_s)
        data = self._listener.take() if got else b""
        spoke = self._listener.take_activity() if got else None
        hook = self._hook_events.popleft() if self._hook_events else None
        turn = self._channel_turns.popleft() if self._channel_turns else None
        # (An on-idle listener of a polled source gets the times it spoke, not bytes.)
        return Heard(
            self.now_ms(), self._decode(data), spoke * 1000 if spoke is not None else None, hook,
            turn,
        )  # fmt: skip

    async def _wait(self, listener: OutputListener, timeout_s: float | None) -> bool:
        """Wait for output, or for the source's hook (which wakes the listener); False: no
        output came (a hook's event is in ``_hook_events``), or one waits already."""
        if self._hook_events or self._channel_turns:
            return False
        return await listener.wait(timeout_s)

    async def output_after(self, delay_s: float) -> str:
        """Wait ``delay_s``, then the output that arrived meanwhile (an ``always`` batch)."""
        await self._context.sleep(delay_s)
        return self._decode(self._listener.take()) if self._listener is not None else ""

    def _decode(self, data: bytes) -> str:
        """The one place output bytes become text: UTF-8 across chunks, ANSI stripped."""
        return strip_ansi(self._decoder.decode(data)) if data else ""

    async def _source_gone(self, stream: OutputStream) -> bool:
        """Did the source go for good? Then the route stops, saying why."""
        source = self.source
        if stream.pane_exited and await self._context.pane_gone(source):
            # Pushed by the pane process's pidfd (io/watch.py): no polling needed.
            self._states.stopped_because(f"source {source.name!r} exited (its pane is gone)")
        elif stream.ended and await self._context.state(source) == "exited":
            self._states.stopped_because(f"source {source.name!r} exited")
        else:
            return False
        return True


class _SeenSource:
    """The source as the route's trigger sees it (:class:`~.triggers.TurnSource`)."""

    def __init__(self, listener: SourceListener) -> None:
        self._listener = listener

    def now_ms(self) -> float:
        return self._listener.now_ms()

    async def answer(self) -> Extraction | None:
        listener = self._listener
        return await listener._context.answer(listener.source, transcript=listener.transcript)

    async def state(self) -> str:
        return await self._listener._context.state(self._listener.source)

    def cooldown_left_ms(self) -> float:
        """How long loop protection still holds the next round back (0: it may fire)."""
        states, guard = self._listener._states, self._listener._guard
        if states.state != "active" or guard.exhausted:
            return 0.0
        return guard.cooldown_left_ms(self.now_ms())

    async def output_after(self, delay_s: float) -> str:
        return await self._listener.output_after(delay_s)

    @property
    def reads_records(self) -> bool:
        return self._listener.transcript

    @property
    def keeps_record(self) -> bool:
        return self._listener.source.profile.has_transcript

    @property
    def records_turn_ms(self) -> bool:
        return self._listener.source.profile.records_turn_ms

    @property
    def channel_ends_turns(self) -> bool:
        channel = self._listener.source.channel
        return channel is not None and channel.alive

    def signal(self) -> str:
        tile = self._listener.source
        return tile.last_signal or ("quiet" if tile.profile.ready_quiet_ms else "screen")
