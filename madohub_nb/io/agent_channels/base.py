"""What every native channel shares: the events it reports and the calls it takes.

A channel is one agent's own protocol, opened beside its TUI (which stays live in the pane,
for the person to watch and type into). Through it the hub hands a prompt in as a protocol
message (never typed), hears every turn the agent runs (ours and the person's) end with its
whole answer and usage, and sees and answers the agent's approval requests.

Events arrive on the engine loop, in the order the agent sent them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ...errors import MadohubError

log = logging.getLogger(__name__)


class ChannelError(MadohubError):
    """The channel could not do what was asked (server gone, protocol error, refused)."""


class ChannelUnsure(ChannelError):
    """A prompt was handed in but its turn was not seen to start: the agent may still run
    it, so it is never typed as well (a row says so)."""


@dataclass(frozen=True)
class ChannelTurnStarted:
    """The agent started a turn. ``prompt_id``: ours when the turn runs a prompt the hub
    sent (:meth:`Channel.submit`), None for a turn the person typed in the pane."""

    turn_id: str
    prompt: str | None = None
    prompt_id: str | None = None
    at: float = 0.0
    """``time.time()`` when the channel heard it."""


@dataclass(frozen=True)
class ChannelTurn:
    """A turn that ended: its whole final answer and what it cost, as the agent reported."""

    turn_id: str
    answer: str
    status: str = "completed"
    """``completed``, ``interrupted`` or ``failed``."""
    prompt: str | None = None
    prompt_id: str | None = None
    input_tokens: int | None = None
    """Input tokens, cached input left out (it is in ``cache_read_tokens``)."""
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cost_usd: float | None = None
    at: float = 0.0
    model: str | None = None
    """The model that answered, where the agent says."""
    turn_ms: float | None = None
    """From the turn's start to its end, as the channel heard them (None: not known)."""


@dataclass(frozen=True)
class ChannelAsk:
    """The agent asks for approval (to run a command, edit a file...) and waits."""

    ask_id: str
    tool: str
    """What it wants to use (``shell``, ``bash``, ``edit``...)."""
    command: str
    reason: str = ""
    choices: tuple[str, ...] = ()
    """The agent's own answers, as :meth:`Channel.answer` takes them (``accept``, ``decline``;
    ``once``, ``always``, ``reject``...). The first rejects nothing: order as the agent gave."""
    rejects: tuple[str, ...] = ()
    """Which of ``choices`` say no (what ``reject`` in the inbox sends)."""
    at: float = 0.0


@dataclass(frozen=True)
class ChannelAskResolved:
    """An ask is over: answered through the channel, in the pane, or withdrawn."""

    ask_id: str
    by: str = "agent"
    """``hub`` (answered through the channel) or ``agent`` (the pane, or withdrawn)."""


@dataclass(frozen=True)
class ChannelBroken:
    """The channel stopped working (its server exited, a protocol error): no more events."""

    reason: str


ChannelEvent = ChannelTurnStarted | ChannelTurn | ChannelAsk | ChannelAskResolved | ChannelBroken


class ChannelListeners:
    """Who hears a channel's events: each listener is called in turn, and one that raises is
    logged and passed over (the channel's reader and the other listeners go on)."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[ChannelEvent], None]] = []

    def subscribe(self, listener: Callable[[ChannelEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with each event; returns the unsubscribe call."""
        self._listeners = [*self._listeners, listener]

        def unsubscribe() -> None:
            self._listeners = [x for x in self._listeners if x is not listener]

        return unsubscribe

    def emit(self, event: ChannelEvent) -> None:
        for listener in self._listeners:  # (a copy: a listener may unsubscribe meanwhile)
            try:
                listener(event)
            except Exception:
                log.exception("a channel listener failed on %r", event)

    def clear(self) -> None:
        self._listeners = []

    def __len__(self) -> int:
        return len(self._listeners)


@dataclass(frozen=True)
class ChannelAck:
    """The agent took a prompt: ``turn_id`` once its turn started with it, or ``queued``
    when it runs as a turn of its own after the current one."""

    prompt_id: str
    turn_id: str | None
    queued: bool
    at: float
    """``time.time()`` when the agent acknowledged it."""


class Channel(Protocol):
    """One agent's native channel, opened by the hub for one tile."""

    name: str
    """What it is, for rows and messages: ``codex app-server``, ``opencode server``,
    ``qwen input-file``."""

    @property
    def alive(self) -> bool:
        """Connected, and no :class:`ChannelBroken` reported."""
        ...

    async def attach(self, timeout_s: float) -> None:
        """Open the channel once the agent is up; raise :class:`ChannelError` when it cannot."""
        ...

    async def submit(self, text: str, prompt_id: str) -> ChannelAck:
        """Hand ``text`` in as a prompt of its own: queued as its own turn when the agent is
        busy (never steering or cutting the running turn), the composer's draft untouched.
        Returns once the agent acknowledged it; raises :class:`ChannelError` when it did not
        (then the prompt was not taken: never both)."""
        ...

    async def answer(self, ask_id: str, choice: str) -> None:
        """Answer the approval ``ask_id`` with one of its ``choices``."""
        ...

    def subscribe(self, listener: Callable[[ChannelEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with each event (engine loop); returns the unsubscribe call."""
        ...

    async def close(self) -> None:
        """Stop listening and end what the hub started for this channel (servers, by pid)."""
        ...


@dataclass(frozen=True)
class ChannelEndpoint:
    """Where a channel's server listens, private to the hub: a unix socket in a 0700 folder,
    or a port on 127.0.0.1 with a password. Secrets travel in the pane's environment and in
    files of mode 0600, never on a command line."""

    folder: str
    """The hub's private 0700 folder for this tile's channel."""
    socket_path: str | None = None
    port: int | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ChannelServer:
    """A server the hub starts before the pane (Codex's app-server), with the pane's own
    environment; ended by pid with its tile."""

    argv: Sequence[str]
    takes_layer_args: bool = False
    """The server runs the agent's core (its MCP servers, its notify program), so the words
    the tile's other launch layers add (MCP, hooks) go after ``argv`` too (Codex: the
    ``-c`` overrides; its ``--remote`` TUI only shows what the server does)."""
