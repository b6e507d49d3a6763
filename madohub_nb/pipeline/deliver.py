"""Deliver: type a prompt into the target pane the way its agent wants it.

- content is cleaned first: escape sequences and control characters go, only
  newline and tab survive, invisible tag and bidi characters go (counted), and
  huge content is cut with a visible marker;
- ``typed`` (default): line by line with 50–80 ms pauses, line breaks sent as
  the agent's newline key (Claude/Codex: Ctrl-J, which does not submit), tabs as
  the profile's ``typed_tab`` (the Tab key is a command there);
  ``paste``: one bracketed paste through a uniquely named tmux buffer;
- then the agent's submit keys after its pre-delay, and a check that the
  prompt really left the input line (the submit keys are retried if not);
- one delivery at a time per target; a busy target is waited for;
- before every line (or piece of a long line) and every submit key, the pane
  is checked: its reader (the agent, or an opted-in shell) still runs, is not
  stopped, and is the terminal's foreground process group
  (:mod:`madohub_nb.agents.foreground`), and the window does not have
  synchronize-panes on (checked by tmux in the same call that types). When a
  check fails nothing more is typed, submit is never pressed, and the round
  fails with a message naming the check.
- a target with a live native channel (``tile.channel``, issue 39) takes the prompt
  through it instead (:attr:`Delivery.CHANNEL`): never typed, "submitted" is the agent's
  acknowledgement. A channel that fails before it took the prompt is said in the result,
  and the prompt is typed only when the agent's TUI is still there to type into; one that
  fails after (:class:`ChannelUnsure`) types nothing: never delivered twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..agents.foreground import Reader, check_reader
from ..agents.profiles import AgentProfile, submit_keys_for
from ..agents.screen import cap_text, input_text, remove_invisible, sanitize_for_typing
from ..defaults import DELIVERY_MODES, MAX_ROUTED_CHARS, TYPING_DELAY_MS, check_choice
from ..errors import DeliveryError, TileError, TmuxError
from ..io.agent_channels.base import Channel, ChannelAck, ChannelError, ChannelUnsure
from ..io.tmux import hex_keys_command, key_command

if TYPE_CHECKING:
    import random

    from .tile import Tile

READY_TIMEOUT_S = 600.0
"""How long a delivery waits for a busy target to become idle before giving up."""
READY_POLL_S = 0.25
VERIFY_TIMEOUT_S = 3.0
"""How long to look for evidence that the prompt was submitted, per attempt."""
SUBMIT_RETRIES = 2
ECHO_TIMEOUT_S = 3.0
"""How long delivery waits for the typed prompt to show in the agent's input box before it
presses submit all the same."""
ECHO_SETTLED_S = 0.3
"""A box holding other text unchanged this long has read it all (an agent that shows a long
paste its own way, not in its profile's ``paste_labels``)."""
ECHO_POLL_S = 0.05
CHANNEL_WAIT_S = 60.0
"""How long a delivery waits for a just-made target's channel to attach (or fail)."""
START_WAIT_S = 10.0
"""How long a delivery waits for a just-made target's start-up check."""
SEND_KEYS_MAX_BYTES = 4096
"""Most UTF-8 bytes one tmux call types: typed as hex keys (3 characters a byte), and tmux
refuses an invocation over ~16 KB."""

Sleep = Callable[[float], Awaitable[None]]


class Delivery(enum.Enum):
    """How a prompt reaches a target's input, and what is checked on the way."""

    TYPED = "typed"
    """Typed line by line at a person's pace once the target is ready; the submit checked."""
    PASTE = "paste"
    """One bracketed paste once the target is ready; the submit checked."""
    LEGACY = "legacy"
    """The ``legacy`` dispatch: each line sent as keys, then Enter; nothing waited for or
    checked (the old way, for programs the profile table does not know)."""
    CHANNEL = "channel"
    """Through the target's native channel (never typed): what a typed or paste delivery
    becomes when the target has a live channel; never asked for by name."""

    @classmethod
    def of(cls, mode: str, agent_aware: bool) -> Delivery:
        """A route's ``delivery`` option (``typed``/``paste``), or LEGACY for a dispatch that
        is not agent-aware (``legacy``)."""
        return cls(check_choice("delivery", mode, DELIVERY_MODES)) if agent_aware else cls.LEGACY

    @property
    def pastes(self) -> bool:
        """The text goes in as one bracketed paste (the target must take those)."""
        return self is Delivery.PASTE

    @property
    def waits_until_ready(self) -> bool:
        """The target is waited for until it can take input (idle, its box shown)."""
        return self is not Delivery.LEGACY

    @property
    def checks_submit(self) -> bool:
        """The submit key waits for the echo and is checked (pressed again if it was lost)."""
        return self is not Delivery.LEGACY


@dataclass(frozen=True)
class DeliveryResult:
    """What happened when a prompt was typed."""

    started_at: datetime
    delivered_at: datetime
    mode: str
    lines: int
    submit_attempts: int
    verified: bool
    removed_invisible: int = 0
    """Tag characters and bidi controls removed from the prompt before typing."""
    ack: ChannelAck | None = None
    """Delivered through the channel: the agent's acknowledgement (its turn started)."""
    channel_error: str | None = None
    """The channel failed before it took the prompt, which was typed instead."""


class ChannelUnsureError(DeliveryError):
    """The target's channel took the prompt but its turn was not seen to start: it may still
    run, so nothing was typed as well (the round's row says ``channel``, and why)."""


class TypingStopped(DeliveryError):
    """A pane check failed mid-delivery: nothing more was typed and nothing was submitted."""


def prepare_content(text: str, max_chars: int = MAX_ROUTED_CHARS) -> str:
    """Routed content made safe to type: no control input, bounded size, no trailing blank lines."""
    return cap_text(sanitize_for_typing(text), max_chars).strip("\n")


def byte_chunks(line: str, max_bytes: int = SEND_KEYS_MAX_BYTES) -> list[str]:
    """``line`` in pieces of at most ``max_bytes`` bytes of UTF-8, never splitting a character."""
    chunks: list[str] = []
    start, size = 0, 0
    for i, char in enumerate(line):
        n = len(char.encode("utf-8", "replace"))
        if size + n > max_bytes and i > start:
            chunks.append(line[start:i])
            start, size = i, 0
        size += n
    if start < len(line) or not chunks:
        chunks.append(line[start:])
    return chunks


def input_pending(profile: AgentProfile, screen: str, text: str) -> bool:
    """Is (the end of) ``text`` still sitting in the agent's input line?"""
    return _shows(_probe(text), input_text(screen, profile))


def _probe(text: str) -> str:
    """The end of ``text``'s last non-blank line, without whitespace (a box wraps long lines)."""
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
    return "".join(last.split())[-24:]


def _shows(probe: str, typed: str | None) -> bool:
    return bool(probe) and typed is not None and probe in "".join(typed.split())


class Deliverer:
    """Types prompts into panes; one delivery at a time per target pane."""

    def __init__(self, rng: random.Random | None = None, sleep: Sleep = asyncio.sleep) -> None:
        import random

        self._rng = rng or random.Random()
        self._sleep = sleep
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: dict[str, int] = {}

    def lock_for(self, pane_id: str) -> asyncio.Lock:
        lock = self._locks.get(pane_id)
        if lock is None:
            lock = self._locks[pane_id] = asyncio.Lock()
        return lock

    async def _started(self, tile: Tile) -> None:
        """Wait for a new tile's start-up check; a command that exited at once takes nothing."""
        if not tile.ready.done():
            # A failed start sets tile.error (checked below); a slow one is not waited for long.
            with contextlib.suppress(asyncio.TimeoutError, TileError):
                await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(tile.ready)), START_WAIT_S
                )
        if tile.error:
            raise DeliveryError(
                f"target {tile.name!r} cannot take input: {tile.error}; nothing was typed"
            )

    def typing(self, pane_id: str) -> bool:
        """Whether a delivery (or a key press) holds ``pane_id``'s lock now: what the pane
        shows meanwhile is the hub's own typing, never the end of its agent's turn."""
        lock = self._locks.get(pane_id)
        return lock is not None and lock.locked()

    @contextlib.asynccontextmanager
    async def pane_lock(self, pane_id: str) -> AsyncIterator[None]:
        """Hold the pane's lock; the last user drops it, so panes that come and go leave nothing."""
        self._lock_users[pane_id] = self._lock_users.get(pane_id, 0) + 1
        try:
            async with self.lock_for(pane_id):
                yield
        finally:
            self._lock_users[pane_id] -= 1
            if not self._lock_users[pane_id]:
                del self._lock_users[pane_id]
                self._locks.pop(pane_id, None)

    async def wait_ready(self, tile: Tile, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until the target is idle; raise DeliveryError if it exits, stops or stays busy."""
        deadline = time.monotonic() + timeout_s
        state = "unknown"
        while time.monotonic() < deadline:
            state = await tile.astate()
            if state == "idle":
                return
            if state == "exited":
                raise DeliveryError(
                    f"target {tile.name!r} has exited{tile.exit_note()}; nothing was typed"
                )
            if state == "unknown":
                # A suspended or backgrounded agent reads "unknown": say so now, not in 10 min.
                reader = await asyncio.to_thread(tile.reader)
                problem = (  # (a thread: on a remote host this is an ssh read)
                    await asyncio.to_thread(check_reader, reader)
                    if isinstance(reader, Reader)
                    else None
                )
                if problem is not None:
                    raise DeliveryError(f"target {tile.name!r}: {problem}; nothing was typed")
            await self._sleep(READY_POLL_S)
        raise DeliveryError(
            f"target {tile.name!r} was not idle after {timeout_s:.0f} s (state: {state}); nothing was typed"
        )

    async def deliver(
        self,
        tile: Tile,
        text: str,
        *,
        delivery: Delivery = Delivery.TYPED,
        ready_timeout_s: float = READY_TIMEOUT_S,
        before_typing: Callable[[], None] | None = None,
        allow_shell: bool = False,
        when_ready: Callable[[], Awaitable[None]] | None = None,
    ) -> DeliveryResult:
        """Type ``text`` into ``tile`` and submit it. Serialised per target pane.

        ``when_ready``: awaited under the pane's lock once the target is ready, just before
        typing (an ``ask`` starts listening there: the next turn it hears is the one its
        prompt starts, not one in progress or one another delivery started).

        ``allow_shell``: the user's opt-in to typing where the reader is a shell or an
        interpreter at its prompt; without it such a reader takes nothing, whatever the
        tile's profile says (an agent profile may match a shell's name).
        """
        visible, removed = remove_invisible(text)
        content = prepare_content(visible)
        if not content.strip():
            raise DeliveryError("nothing to deliver: the prompt is empty after cleaning")
        profile = tile.profile
        if delivery.pastes and not profile.uses_bracketed_paste:
            if not profile.executes_input:
                raise DeliveryError(
                    f"target {tile.name!r} ({tile.agent}) does not take bracketed pastes: every "
                    "pasted line would be submitted on its own; nothing was typed. "
                    "Use delivery='typed'"
                )
        async with self.pane_lock(tile.pane_id):
            await self._started(tile)
            channel_error = None
            channel = await _live_channel(tile) if delivery is not Delivery.LEGACY else None
            if channel is None and tile.channel_only is not None and tile.channel_ready is not None:
                raise DeliveryError(
                    f"target {tile.name!r}: its channel is not open "
                    f"({tile.channel_down or 'not attached'}), and {tile.channel_only}: "
                    "typed there, the prompt would reach no agent; nothing was delivered. "
                    "Start the tile again (or with channel=False)"
                )
            if channel is not None:
                if before_typing is not None:
                    await asyncio.to_thread(before_typing)
                if when_ready is not None:
                    await when_ready()
                try:
                    return await _through_channel(tile, channel, content, removed)
                except ChannelUnsure as exc:
                    raise ChannelUnsureError(
                        f"target {tile.name!r}: its {channel.name} took the prompt but its turn "
                        f"was not seen to start ({exc}); not typed as well (never twice)"
                    ) from exc
                except ChannelError as exc:
                    channel_error = f"{channel.name}: {exc}"
                    if tile.channel_only is not None:
                        raise DeliveryError(
                            f"target {tile.name!r}: its channel failed ({channel_error}), and "
                            f"{tile.channel_only}: not typed; nothing was delivered"
                        ) from exc
                    # Typed instead, below, only while the agent's TUI holds its pane (the
                    # foreground checks of typed delivery); else the round fails here.
                    info = await asyncio.to_thread(tile.pane_info)
                    reader = await asyncio.to_thread(tile.reader)
                    if info is None or info.dead or not isinstance(reader, Reader):
                        raise DeliveryError(
                            f"target {tile.name!r}: its channel failed ({channel_error}) and "
                            "its TUI is not there to type into; nothing was delivered"
                        ) from exc
            if delivery.waits_until_ready:
                await self.wait_ready(tile, ready_timeout_s)
            if before_typing is not None:  # (it checks the log file: never on the loop)
                await asyncio.to_thread(before_typing)
            if when_ready is not None:
                await when_ready()
            info = await asyncio.to_thread(tile.pane_info)
            if info is None or info.dead:
                raise DeliveryError(
                    f"target {tile.name!r} has exited{tile.exit_note()}; nothing was typed"
                )
            reader = await asyncio.to_thread(tile.reader)
            if not isinstance(reader, Reader):
                raise DeliveryError(f"target {tile.name!r}: {reader}; nothing was typed")
            if reader.runs_commands and not allow_shell:
                raise DeliveryError(
                    f"target {tile.name!r} ({tile.agent}): its reader, {reader.what}, is "
                    f"{reader.comm!r}, a shell or interpreter that runs typed text as commands; "
                    "nothing was typed. Pass allow_shell=True to type there anyway"
                )
            tmux = tile.tmux
            if info.in_mode:
                await asyncio.to_thread(tmux.cancel_copy_mode, tile.pane_id)
            if tile.active_profile.answer_after_input:
                # Its answer will be what follows this input on screen: note where it starts.
                await asyncio.to_thread(tile.note_input, content)
            started = datetime.now(timezone.utc)
            lines = content.split("\n")
            typed = content.replace("\t", profile.typed_tab).split("\n")
            pane = _GuardedPane(tile, reader, len(lines))
            try:
                if not delivery.checks_submit:
                    await self._type_lines(pane, typed, profile.newline_key, pause=False)
                    await self._check_alive(tile)
                    await pane.send([key_command(tile.pane_id, "Enter")], submit=True)
                    return DeliveryResult(
                        started, datetime.now(timezone.utc), delivery.value, len(lines), 1, False,
                        removed,
                    )  # fmt: skip
                if delivery.pastes:
                    await pane.paste(content)
                    sent = content
                else:
                    await self._type_lines(pane, typed, profile.newline_key, pause=True)
                    sent = "\n".join(typed)
                await self._check_alive(tile)
                attempts, verified = await self._submit(pane, profile, sent)
            except DeliveryError:
                raise
            except Exception as exc:  # tmux gone, pane killed mid-way
                raise DeliveryError(f"typing into {tile.name!r} failed: {exc}") from exc
            return DeliveryResult(
                started,
                datetime.now(timezone.utc),
                delivery.value,
                len(lines),
                attempts,
                verified,
                removed,
                channel_error=channel_error,
            )

    async def _check_alive(self, tile: Tile) -> None:
        """Refuse to submit into a pane whose program died while the prompt was typed.

        tmux takes keys for a dead pane (remain-on-exit) without complaint.
        """
        info = await asyncio.to_thread(tile.pane_info)
        if info is None or info.dead:
            raise DeliveryError(
                f"target {tile.name!r} exited while the prompt was typed; nothing was submitted"
            )

    async def _type_lines(
        self, pane: _GuardedPane, lines: list[str], newline_key: str | None, pause: bool
    ) -> None:
        pane_id = pane.tile.pane_id
        low, high = TYPING_DELAY_MS
        for i, line in enumerate(lines):
            pieces = [hex_keys_command(pane_id, chunk) for chunk in byte_chunks(line) if chunk]
            if i:
                # The line break before a line goes with that line, after its check, not at
                # the end of the line before: text the agent had not read yet when it died
                # reaches its shell without the newline that would run it.
                newline = key_command(pane_id, newline_key or "\r")
                sends = (
                    [[newline, pieces[0]], *([p] for p in pieces[1:])] if pieces else [[newline]]
                )
            else:
                sends = [[p] for p in pieces]
            # One send per line (a long line: per piece), each checked first.
            for commands in sends:
                await pane.send(commands)
            pane.lines_typed = i + 1
            if pause:
                await self._sleep(self._rng.uniform(low, high) / 1000)

    async def _press_submit(self, pane: _GuardedPane, profile: AgentProfile, content: str) -> None:
        pane_id = pane.tile.pane_id
        await self._wait_for_echo(pane.tile, profile, content)
        await self._sleep(profile.pre_submit_delay_ms / 1000)
        keys = [key_command(pane_id, k) for k in submit_keys_for(profile, content)]
        if profile.between_submit_keys_ms == 0:
            await pane.send(keys, submit=True)
            return
        for i, key in enumerate(keys):
            if i:
                await self._sleep(profile.between_submit_keys_ms / 1000)
            await pane.send([key], submit=True)

    async def _wait_for_echo(self, tile: Tile, profile: AgentProfile, content: str) -> None:
        """Wait until the agent's input box shows what was typed: it has read it, so the
        submit key comes in a read of its own. A TUI that gets the key in the same read as
        the text may take it as part of a paste and drop it, and its box, not repainted yet,
        looks as if the prompt had left it (seen: the real Copilot CLI on a loaded machine)."""
        if profile.executes_input:
            return  # a shell has no input box: its line runs at the submit key
        probe = _probe(content)
        seen, since = "", 0.0
        deadline = time.monotonic() + ECHO_TIMEOUT_S
        while time.monotonic() < deadline:
            typed = input_text(await asyncio.to_thread(tile.screen), profile)
            if typed is None or _shows(probe, typed):
                return  # no box this profile can read, or the prompt is in it
            if any(label.search(typed) for label in profile.paste_labels):
                return  # the agent shows the paste as a label: it has read it
            now = time.monotonic()
            if typed != seen:
                seen, since = typed, now
            elif typed and now - since >= ECHO_SETTLED_S:
                return  # other text, unchanged: the agent shows the prompt its own way
            await self._sleep(ECHO_POLL_S)

    async def _submit(
        self, pane: _GuardedPane, profile: AgentProfile, content: str
    ) -> tuple[int, bool]:
        """Press submit, then check the prompt left the input line; retry a bounded number of times."""
        tile = pane.tile
        await self._press_submit(pane, profile, content)
        if profile.executes_input:
            return 1, True  # a shell runs the line at once; there is nothing to check
        for attempt in range(1, SUBMIT_RETRIES + 2):
            deadline = time.monotonic() + VERIFY_TIMEOUT_S
            while time.monotonic() < deadline:
                state = await tile.astate()
                if state in ("busy", "waiting", "exited"):
                    return attempt, state != "exited"
                screen = await asyncio.to_thread(tile.screen)
                if not input_pending(profile, screen, content):
                    return attempt, True
                await self._sleep(0.1)
            if attempt <= SUBMIT_RETRIES:
                await pane.send([key_command(tile.pane_id, profile.submit_keys[-1])], submit=True)
        return SUBMIT_RETRIES + 1, False


async def _live_channel(tile: Tile) -> Channel | None:
    """The target's channel when it has a live one (waiting for a just-made one to attach)."""
    if tile.channel_ready is not None and not tile.channel_ready.done():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(tile.channel_ready)), CHANNEL_WAIT_S
            )
    channel = tile.channel
    return channel if channel is not None and channel.alive else None


async def _through_channel(
    tile: Tile, channel: Channel, content: str, removed: int
) -> DeliveryResult:
    """Hand ``content`` in through ``channel``: done once the agent acknowledged it."""
    started = datetime.now(timezone.utc)
    ack = await channel.submit(content, uuid.uuid4().hex)
    return DeliveryResult(
        started, datetime.now(timezone.utc), Delivery.CHANNEL.value, len(content.split("\n")),
        1, True, removed, ack=ack,
    )  # fmt: skip


class _GuardedPane:
    """Sends keys into one pane only while its reader is in the foreground and the window
    is not synchronized; raises :class:`TypingStopped` naming the failed check otherwise."""

    def __init__(self, tile: Tile, reader: Reader, total_lines: int) -> None:
        self.tile = tile
        self.reader = reader
        self.total_lines = total_lines
        self.lines_typed = 0

    def _stopped(self, problem: str, submit: bool) -> TypingStopped:
        done = (
            "after the whole prompt was typed"
            if submit
            else f"after {self.lines_typed} of {self.total_lines} lines"
        )
        return TypingStopped(
            f"stopped typing into {self.tile.name!r} {done}: {problem}; nothing more was "
            "typed and the prompt was not submitted"
        )

    async def send(self, commands: list[str], *, submit: bool = False) -> None:
        """Check the reader, then send ``commands`` unless the window is synchronized."""
        problem = await send_checked(self.tile, self.reader, commands)
        if problem is not None:
            raise self._stopped(problem, submit)

    async def paste(self, content: str) -> None:
        def now() -> str | None:
            problem = check_reader(self.reader)
            if problem is not None:
                return problem
            if not self.tile.tmux.paste(self.tile.pane_id, content, True):
                return SYNCHRONIZED_PROBLEM
            return None

        problem = await asyncio.to_thread(now)
        if problem is not None:
            raise self._stopped(problem, False)


async def send_checked(tile: Tile, reader: Reader, commands: list[str]) -> str | None:
    """Check ``reader`` holds the terminal, then send ``commands`` unless the window is
    synchronized: the failed check, or None when sent. Typed lines and pressed keys
    (:mod:`madohub_nb.pipeline.keys`) both go through here.

    The reader check is two small ``/proc`` reads (microseconds), done on the loop;
    the commands go over the hub's control connection when it has one (a fraction of
    a millisecond, against a ``tmux`` process per line). Where it is a ``ps`` call or,
    on a remote host, an ssh read, it runs in a worker thread, off the loop.
    """
    if reader.quick:
        problem = check_reader(reader)
    else:
        problem = await asyncio.to_thread(_check_off_loop, reader)
    if problem is None and not await tile.tmux.asend_guarded(tile.pane_id, commands):
        problem = SYNCHRONIZED_PROBLEM
    return problem


def _check_off_loop(reader: Reader) -> str | None:
    """:func:`check_reader` through ``ps`` or on a remote host; a host that stopped
    answering, or a ``ps`` that cannot run, is a problem too."""
    try:
        return check_reader(reader)
    except (TmuxError, TileError) as exc:
        return str(exc)


SYNCHRONIZED_PROBLEM = (
    "the window has synchronize-panes on, so every key would also be typed into its other "
    "panes (turn it off with `tmux set-option -w synchronize-panes off`)"
)
