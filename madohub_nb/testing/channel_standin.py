"""A stand-in agent's native channel, in process: the :class:`~madohub_nb.io.agent_channels.
base.Channel` protocol spoken for real (asyncio, events on the loop it was made for), with a
driving side a test or notebook uses to play the agent: ask for approval, answer in the pane,
break. It records every answer and prompt the hub sent, so a test sees what went through.

Made on (or for) the hub's engine loop; its driving calls may come from any thread.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

from ..io.agent_channels.base import (
    ChannelAck,
    ChannelAsk,
    ChannelAskResolved,
    ChannelBroken,
    ChannelError,
    ChannelEvent,
    ChannelListeners,
    ChannelTurn,
    ChannelTurnStarted,
)

STANDIN_CHANNEL_NAME = "stand-in channel"


class StandinChannel:
    """One stand-in agent's channel: asks the hub for approvals, takes answers and prompts.

    ``loop`` is the loop events are reported on (the hub's engine loop)."""

    name: str = STANDIN_CHANNEL_NAME
    """What it is, for rows and messages."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._listeners = ChannelListeners()
        self._pending: dict[str, ChannelAsk] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._broken: str | None = None
        self._closed = False
        self.answers: list[tuple[str, str]] = []
        """``(ask_id, choice)`` for each answer the hub sent, in order."""
        self.prompts: list[tuple[str, str]] = []
        """``(prompt_id, text)`` for each prompt the hub submitted, in order."""

    # the protocol (engine loop) -----------------------------------------------------------
    @property
    def alive(self) -> bool:
        """Neither broken (:meth:`break_`) nor closed."""
        return self._broken is None and not self._closed

    async def attach(self, timeout_s: float) -> None:
        """Nothing to open in process; refused once broken or closed."""
        self._check_alive()

    async def submit(self, text: str, prompt_id: str) -> ChannelAck:
        """Take the prompt as a turn of its own, which ends at once with an echo of it."""
        self._check_alive()
        turn_id = f"turn-{next(self._ids)}"
        self.prompts.append((prompt_id, text))
        now = time.time()
        self._report(ChannelTurnStarted(turn_id, text, prompt_id, at=now))
        self._report(ChannelTurn(turn_id, f"echo: {text}", prompt=text, prompt_id=prompt_id))
        return ChannelAck(prompt_id, turn_id, queued=False, at=now)

    async def answer(self, ask_id: str, choice: str) -> None:
        """Answer a waiting ask with one of its choices, as the agent checks it."""
        self._check_alive()
        with self._lock:
            ask = self._pending.get(ask_id)
            if ask is None:
                raise ChannelError(f"no ask {ask_id!r} waits (answered in the pane, or never)")
            if choice not in ask.choices:
                raise ChannelError(f"{choice!r} is not one of ask {ask_id!r}'s {ask.choices}")
            del self._pending[ask_id]
            self.answers.append((ask_id, choice))
        self._report(ChannelAskResolved(ask_id, by="hub"))

    def subscribe(self, listener: Callable[[ChannelEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with each event, on the loop; returns the unsubscribe call."""
        return self._listeners.subscribe(listener)

    async def close(self) -> None:
        """No more events; later calls are refused."""
        self._closed = True
        self._listeners.clear()

    # the agent's side (any thread) ---------------------------------------------------------
    def ask(
        self,
        command: str,
        *,
        tool: str = "shell",
        reason: str = "",
        choices: tuple[str, ...] = ("accept", "decline"),
        rejects: tuple[str, ...] = ("decline",),
    ) -> ChannelAsk:
        """The agent asks for approval to run ``command`` and waits for an answer."""
        ask = ChannelAsk(
            f"ask-{next(self._ids)}", tool, command, reason, choices, rejects, at=time.time()
        )
        with self._lock:
            self._pending[ask.ask_id] = ask
        self._loop.call_soon_threadsafe(self._report, ask)
        return ask

    def answer_in_pane(self, ask_id: str) -> None:
        """The person answered in the agent's own TUI: the ask is over, not through the hub."""
        with self._lock:
            self._pending.pop(ask_id, None)
        self._loop.call_soon_threadsafe(self._report, ChannelAskResolved(ask_id, by="agent"))

    def break_(self, reason: str = "its server exited") -> None:
        """The channel stops working (its server died): reported once, then nothing."""
        self._broken = reason
        self._loop.call_soon_threadsafe(self._report, ChannelBroken(reason))

    @property
    def listeners(self) -> int:
        """How many listen to its events (the hub's inbox, once it watches it)."""
        return len(self._listeners)

    @property
    def waiting(self) -> list[str]:
        """The ids of the asks not answered yet."""
        with self._lock:
            return list(self._pending)

    def _check_alive(self) -> None:
        if self._closed:
            raise ChannelError(f"the {self.name} is closed")
        if self._broken is not None:
            raise ChannelError(f"the {self.name} broke: {self._broken}")

    def _report(self, event: ChannelEvent) -> None:
        self._listeners.emit(event)
