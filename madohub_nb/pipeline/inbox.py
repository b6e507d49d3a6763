"""The person in the loop: what waits for a person (``hub.inbox``), and their answers.

An :class:`Ask` is one thing that waits: an agent's **permission** prompt (the
question and choices its screen shows, noticed the moment its own hook says it
waits, else when its output goes quiet on a waiting screen), or an **approval**
route's prompt, held before typing. Each is answered exactly once: the first
``approve`` / ``reject`` / ``choose`` wins under the ask's lock, every later or
concurrent one gets a :class:`~madohub_nb.errors.MadohubError` saying what
happened; nothing is ever typed twice. Keys for a choice go through the same
per-pane lock and foreground checks as any typing, and only after the screen was
read again and still shows the same prompt.

An ask the agent no longer shows (someone answered in the pane) closes itself
as ``answered``; an approval closes as ``expired`` when its timeout passes, its
route stops or its target exits.

A tile with a native channel (:meth:`Inbox.watch_channel`) reports its approval requests
through it: each becomes a :class:`ChannelPermissionAsk` (the command, the agent's reason,
its own choices), answered by the protocol, never by keys. While the channel is watched,
that tile's screen is not read for dialogs (the channel's ask is the one ask of a dialog);
once it breaks, its asks close saying so and the screen is read again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, ClassVar, Final

from ..agents.foreground import Reader
from ..agents.permission import (
    PermissionPrompt,
    ToolRequest,
    chars_cut,
    says_no,
    tool_request,
    with_tool_line,
)
from ..engine import spawn
from ..errors import MadohubError, MadohubValueError
from ..io.agent_channels.base import (
    Channel,
    ChannelAsk,
    ChannelAskResolved,
    ChannelBroken,
    ChannelError,
    ChannelEvent,
)
from ..io.hooks.channel import HookEvent
from ..io.log import RoundRecord
from ..io.tmux import key_command
from ..io.watch import PaneStream
from ..model import AskKind, AskState, Decision
from .deliver import send_checked
from .events import AskChanged, ChannelChanged, HubEvent, TileAdded, TileStateChanged
from .round import RoundServices
from .tile import Tile

INBOX_ROUTE_ID: Final = "inbox"
"""``route_id`` of the rounds that record a permission answered from the inbox."""
QUIET_CHECK_S: Final = 0.3
"""A tile's screen is read for a permission prompt once its output paused this long."""
APPROVE_TIMEOUT_MAX_S: Final = 7 * 24 * 3600
PRESSED_HOLD_S: Final = 2.0
"""After a key answered a prompt, the same prompt still on screen is the agent not having
redrawn yet, not a new ask: for this long; a prompt still shown after it is asked again."""
REWATCH_S: Final = 2.0
"""How soon the inbox opens a host's tile's output again after its stream ended."""
REPR_TEXT_CHARS: Final = 60
"""An ask's repr shows this much of its text's last line (``ask.text`` has it all)."""
CHANNEL_ANSWER_TIMEOUT_S: Final = 10.0
"""How long an answer sent through a channel may take before its round is an error."""


@dataclass(frozen=True)
class Verdict:
    """A person's answer to an approval: ``decision`` and the text to type (or the reason)."""

    decision: Decision
    text: str = ""


def check_approve_timeout(timeout_s: object) -> float | None:
    """``approve_timeout_s``: None (wait for a person however long) or seconds > 0."""
    if timeout_s is None:
        return None
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not 0 < timeout_s <= APPROVE_TIMEOUT_MAX_S
    ):
        raise MadohubValueError(
            f"approve_timeout_s must be None (no timeout) or seconds in (0, "
            f"{APPROVE_TIMEOUT_MAX_S}], got {timeout_s!r}"
        )
    return float(timeout_s)


class Ask:
    """One thing waiting for a person. Listed by ``hub.inbox`` while ``state == "open"``.

    Two kinds, two types: :class:`PermissionAsk` (an agent's permission prompt: choose one
    of its choices) and :class:`ApprovalAsk` (an approval route's prompt: approve, edit or
    reject it). ``kind`` still says which, as a string."""

    kind: ClassVar[AskKind]

    def __init__(
        self,
        tile: str,
        text: str,
        *,
        on_answer: Callable[[Ask, str, int | Verdict], concurrent.futures.Future[RoundRecord]],
        signal: str,
        route: str | None = None,
    ) -> None:
        import uuid

        self.id = uuid.uuid4().hex[:8]
        self.tile = tile
        """The tile that asks (permission) or will receive the prompt (approval)."""
        self.route = route
        """The route whose prompt this is (approval), else None."""
        self.text = text
        """The agent's question, or the prompt about to be delivered."""
        self.choices: tuple[str, ...] = ()
        """A permission prompt's choices as the agent shows them (labels); none for an approval."""
        self.signal = signal
        """How the ask was noticed: ``hook`` (the agent's own notification), ``screen`` or
        ``route`` (an approval route's prompt)."""
        self.opened_at = datetime.now(timezone.utc)
        self._opened_mono = time.monotonic()
        self.state: AskState = "open"
        self.reason: str | None = None
        """Why it closed when nobody here answered it (``answered``, ``expired``), or a
        rejection's reason."""
        self.choice: str | None = None
        """The label chosen (permission)."""
        self._lock = threading.Lock()
        self._on_answer = on_answer

    @property
    def age_s(self) -> float:
        """Seconds since it opened."""
        return time.monotonic() - self._opened_mono

    @property
    def open(self) -> bool:
        return self.state == "open"

    # answers (each kind says what they mean for it) ------------------------------------
    def approve(self, text: str | None = None) -> concurrent.futures.Future[RoundRecord]:
        """Say yes; a future of the logged round."""
        raise NotImplementedError

    def reject(self, reason: str = "") -> concurrent.futures.Future[RoundRecord]:
        """Say no; a future of the logged round."""
        raise NotImplementedError

    def choose(self, choice: int | str) -> concurrent.futures.Future[RoundRecord]:
        """Press one of a permission prompt's choices; a future of the logged round."""
        raise NotImplementedError

    def _answer(
        self, state: AskState, how: int | Verdict
    ) -> concurrent.futures.Future[RoundRecord]:
        with self._lock:
            if self.state != "open":
                raise MadohubError(self._closed_why())
            self.state = state
        if isinstance(how, Verdict) and how.decision == "rejected":
            self.reason = how.text or None
        if isinstance(how, int) and how >= 0:
            self.choice = self.choices[how]
        return self._on_answer(self, state, how)

    def close(self, state: AskState, reason: str) -> bool:
        """Close it unanswered (``answered`` elsewhere, ``expired``); False if already closed."""
        with self._lock:
            if self.state != "open":
                return False
            self.state, self.reason = state, reason
        return True

    def _closed_why(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        what = f"choice {self.choice!r}" if self.choice else self.state
        return (
            f"this {self.kind} ask of {self.tile!r} is no longer open: it was {what}{why}; "
            "nothing more is typed (hub.inbox lists what still waits)"
        )

    def __repr__(self) -> str:
        last = self.text.strip().splitlines()[-1] if self.text.strip() else ""
        choices = f" choices={list(self.choices)}" if self.choices else ""
        shown = chars_cut(last, REPR_TEXT_CHARS)
        return f"<Ask {self.kind} {self.tile} {self.state} {shown!r}{choices}>"


class PermissionAsk(Ask):
    """An agent's permission prompt: the person presses one of its choices."""

    kind: ClassVar[AskKind] = "permission"

    def __init__(
        self,
        tile: str,
        text: str,
        *,
        prompt: PermissionPrompt,
        on_answer: Callable[[Ask, str, int | Verdict], concurrent.futures.Future[RoundRecord]],
        signal: str = "screen",
    ) -> None:
        super().__init__(tile, text, on_answer=on_answer, signal=signal)
        self.prompt = prompt
        self.choices = prompt.choices
        self.tool: str | None = None
        """The tool it asks to run (``Bash``), from the agent's ``PermissionRequest`` hook."""
        self.tool_input: Mapping[str, Any] | None = None
        """That tool's input (``{"command": "touch made", ...}``), from the same hook."""

    def approve(self, text: str | None = None) -> concurrent.futures.Future[RoundRecord]:
        """The first choice (``Yes``); a permission prompt takes no text."""
        if text is not None:
            raise MadohubValueError("a permission prompt takes no text; use choose(choice)")
        return self.choose(0)

    def reject(self, reason: str = "") -> concurrent.futures.Future[RoundRecord]:
        """The choice that says No (or Escape when none does)."""
        if not isinstance(reason, str):
            raise MadohubValueError(f"reason must be a string, got {reason!r}")
        no = [i for i, c in enumerate(self.choices) if says_no(c)]
        return self.choose(no[-1]) if no else self._answer("rejected", -1)

    def choose(self, choice: int | str) -> concurrent.futures.Future[RoundRecord]:
        """Press the keys of one choice, by index into ``choices`` (0 is the first) or by its
        label (or the number the agent shows, ``"1"``). A future of the logged round."""
        index = self.choice_index(choice)
        label = self.choices[index]
        return self._answer("rejected" if says_no(label) else "approved", index)

    def choice_index(self, choice: object) -> int:
        """The index of ``choice`` (an index, a label, or a shown number), or an error naming
        the choices."""
        shown = ", ".join(f"{i}: {c!r}" for i, c in enumerate(self.choices))
        keys = self.prompt.keys
        if isinstance(choice, int) and not isinstance(choice, bool):
            if 0 <= choice < len(self.choices):
                return choice
            raise MadohubValueError(
                f"choice {choice} is out of range: this prompt shows {len(self.choices)} "
                f"choices ({shown}); pass an index 0-{len(self.choices) - 1} or a label"
            )
        if isinstance(choice, str):
            wanted = choice.strip().lower()
            for i, label in enumerate(self.choices):
                if label.lower() == wanted or (i < len(keys) and keys[i].split()[0] == wanted):
                    return i
        raise MadohubValueError(f"{choice!r} is not a choice this prompt shows; choices: {shown}")


def channel_ask_text(request: ChannelAsk) -> str:
    """What a channel's ask shows: the agent's reason, then the tool and its whole command
    (last, so that a repr's one line is the command)."""
    command = f"{request.tool}: {request.command}" if request.tool else request.command
    return f"{request.reason}\n{command}" if request.reason.strip() else command


class ChannelPermissionAsk(PermissionAsk):
    """An agent's approval request heard on its native channel (:class:`ChannelAsk`): the
    command, the agent's reason and its own choices (``accept``, ``decline``; ``once``,
    ``always``, ``reject``...), answered through the channel (``channel.answer``), never by
    keys. ``kind`` is ``permission``, ``signal`` is ``channel``."""

    def __init__(
        self,
        tile: str,
        request: ChannelAsk,
        *,
        channel: str,
        on_answer: Callable[[Ask, str, int | Verdict], concurrent.futures.Future[RoundRecord]],
        via: Channel | None = None,
    ) -> None:
        text = channel_ask_text(request)
        prompt = PermissionPrompt(text, request.choices, request.choices)
        super().__init__(tile, text, prompt=prompt, on_answer=on_answer, signal="channel")
        self.request = request
        """The channel's event: ``ask_id``, ``tool``, ``command``, ``reason``, ``choices``,
        ``rejects``."""
        self.channel = channel
        """The channel's name (``codex app-server``...)."""
        self.command = request.command
        """The command it asks to run, whole."""
        self.rejects = request.rejects
        """The choices that say no (``reject`` sends the first)."""
        self.tool = request.tool
        self.tool_input = {"command": request.command}
        self._via = via

    def reject(self, reason: str = "") -> concurrent.futures.Future[RoundRecord]:
        """Send the first choice the agent says declines (``rejects``)."""
        if not isinstance(reason, str):
            raise MadohubValueError(f"reason must be a string, got {reason!r}")
        no = next((c for c in self.rejects if c in self.choices), None) or next(
            (c for c in self.choices if says_no(c)), None
        )
        if no is None:
            raise MadohubValueError(
                f"the agent offers no choice that says no ({list(self.choices)}); "
                "choose(choice) one of them"
            )
        return self.choose(no)

    def choose(self, choice: int | str) -> concurrent.futures.Future[RoundRecord]:
        """Send one choice through the channel, by index into ``choices`` (0 is the first),
        by its name (``"decline"``) or by the number the inbox shows (``"1"`` is the first)."""
        index = self.choice_index(choice)
        label = self.choices[index]
        no = label in self.rejects or (not self.rejects and says_no(label))
        return self._answer("rejected" if no else "approved", index)

    def choice_index(self, choice: object) -> int:
        """The index of ``choice``; a shown number (``"2"``) counts from 1, as the widget's
        buttons do."""
        if isinstance(choice, str) and choice.strip().isdigit():
            number = int(choice.strip())
            if 1 <= number <= len(self.choices) and choice.strip() not in self.choices:
                return number - 1
        return super().choice_index(choice)


@dataclass
class _Watched:
    """A tile's channel the inbox listens to, and how to stop."""

    channel: Channel
    unsubscribe: Callable[[], None]


class ApprovalAsk(Ask):
    """An approval route's prompt: the person delivers it (as it is, or edited) or rejects it."""

    kind: ClassVar[AskKind] = "approval"

    def __init__(
        self,
        tile: str,
        text: str,
        *,
        route: str,
        on_answer: Callable[[Ask, str, int | Verdict], concurrent.futures.Future[RoundRecord]],
    ) -> None:
        super().__init__(tile, text, route=route, on_answer=on_answer, signal="route")

    def approve(self, text: str | None = None) -> concurrent.futures.Future[RoundRecord]:
        """Deliver the prompt (``text``: the person's edited version)."""
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise MadohubValueError(
                f"approve(text=...) takes the edited prompt, a non-empty string; got {text!r} "
                "(reject(reason) to send nothing)"
            )
        chosen = self.text if text is None else text
        verdict = Verdict("edited" if chosen != self.text else "approved", chosen)
        return self._answer("approved", verdict)

    def reject(self, reason: str = "") -> concurrent.futures.Future[RoundRecord]:
        """Nothing is typed; the round is logged ``rejected`` (with ``reason``)."""
        if not isinstance(reason, str):
            raise MadohubValueError(f"reason must be a string, got {reason!r}")
        return self._answer("rejected", Verdict("rejected", reason))

    def choose(self, choice: int | str) -> concurrent.futures.Future[RoundRecord]:
        raise MadohubValueError(
            "choose() answers a permission prompt; an approval takes approve(text) or reject()"
        )


class Approval:
    """An approval route's prompt waiting in the inbox: the ask and the round that waits on it."""

    def __init__(self, ask: ApprovalAsk, decided: asyncio.Future[Verdict]) -> None:
        self.ask = ask
        self._decided = decided
        self.logged: concurrent.futures.Future[RoundRecord] = concurrent.futures.Future()
        """The round once it is logged (what ``approve``/``reject`` return)."""

    async def verdict(self, timeout_s: float | None) -> Verdict:
        """Wait for the person (engine loop); ``expired`` after ``timeout_s``."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._decided), timeout_s)
        except asyncio.TimeoutError:
            if self.ask.close("expired", f"nobody answered within {timeout_s:g}s"):
                return Verdict("expired", f"nobody answered within {timeout_s:g}s")
            return await self._decided  # a person answered just as it expired

    def expire(self, reason: str) -> None:
        """Close it unanswered (its route stopped, its target exited), from the engine loop."""
        if self.ask.close("expired", reason) and not self._decided.done():
            self._decided.set_result(Verdict("expired", reason))

    def abandon(self, reason: str) -> None:
        """Its round was cancelled: close it, and its answer's future fails saying why."""
        self.expire(reason)
        if not self.logged.done():
            self.logged.set_exception(MadohubError(f"nothing was typed: {reason}"))

    def finish(self, rec: RoundRecord) -> None:
        if not self.logged.done():
            self.logged.set_result(rec)


class Inbox:
    """Every open :class:`Ask` of one hub, from every tile and host, oldest first.

    Fed by the hub's events on the engine loop: a tile's output that goes quiet, its
    state changing, its agent's ``notification`` hook. Reading a screen runs in a thread.
    """

    def __init__(
        self,
        services: RoundServices,
        *,
        tiles: Callable[[], Mapping[str, Tile]],
        watch: Callable[[Tile], Awaitable[PaneStream]],
        submit: Callable[
            [Coroutine[Any, Any, RoundRecord]], concurrent.futures.Future[RoundRecord]
        ],
        call_soon: Callable[..., None],
        emit: Callable[[HubEvent], None],
    ) -> None:
        self._services = services
        self._tiles = tiles
        self._watch = watch
        self._submit = submit
        self._call_soon = call_soon
        self._emit = emit
        self._asks: list[Ask] = []
        self._approvals: dict[str, Approval] = {}
        self._checks: dict[str, asyncio.TimerHandle] = {}
        self._reading: set[str] = set()
        self._again: set[str] = set()
        self._hooked: set[str] = set()
        self._hook_messages: dict[str, str] = {}
        """A tile's last ``notification`` hook message, until its prompt is read."""
        self._hook_requests: dict[str, ToolRequest] = {}
        """A tile's last ``permission_request`` hook (the tool asked for), until its prompt is read."""
        self._pressed: dict[str, tuple[PermissionPrompt, float]] = {}
        """A tile's prompt a key just answered, and until when (monotonic) it is not asked again."""
        self._channels: dict[str, _Watched] = {}
        """The tiles whose asks come through their native channel (their screen is not read)."""

    @property
    def asks(self) -> list[Ask]:
        """The open asks, oldest first (a copy; any thread)."""
        return sorted((a for a in self._asks if a.open), key=lambda a: a._opened_mono)

    def _add(self, ask: Ask) -> None:
        self._asks = [*(a for a in self._asks if a.open), ask]
        self._emit(AskChanged(ask.id, ask.state, ask))

    def _closed(self, ask: Ask) -> None:
        self._asks = [a for a in self._asks if a.open]
        self._emit(AskChanged(ask.id, ask.state, ask))

    # events (engine loop) ----------------------------------------------------------------
    def on_event(self, event: HubEvent) -> None:
        """Look at a tile again when its output pauses, its state changes or it is added."""
        if isinstance(event, TileAdded) and (tile := self._tiles().get(event.name)) is not None:
            spawn(self._follow(tile), name=f"inbox {tile.name}")
        elif isinstance(event, ChannelChanged) and event.state == "attached":
            # (a channel opens once its agent is up, after the tile's start: watch it now)
            tile = self._tiles().get(event.tile)
            if tile is not None and tile.channel is not None:
                self.watch_channel(tile, tile.channel)
        elif isinstance(event, TileStateChanged):
            if event.state == "exited":
                for approval in list(self._approvals.values()):
                    if approval.ask.tile == event.name:
                        approval.expire(f"target {event.name!r} exited")
                        self._closed(approval.ask)
                self._drop_channel_asks(event.name, "expired", f"{event.name!r} exited")
            self._check_soon(event.name, 0.0)

    async def _follow(self, tile: Tile) -> None:
        """Look at ``tile`` each time its output pauses (pushed by tmux; no bytes kept)."""
        try:
            await asyncio.wrap_future(tile.ready)  # (started: its pane and agent are known)
        except Exception:  # it did not start (or exited at once): nothing more to ask
            self._drop_channel_asks(tile.name, "expired", f"{tile.name!r} exited")
            return
        if tile.channel is not None:
            self.watch_channel(tile, tile.channel)
        if tile.kind.permission is None:
            return
        self._watch_hooks(tile)
        while self._tiles().get(tile.name) is tile:
            try:
                stream = await self._watch(tile)
            except Exception:  # (a host that does not answer now: look again later)
                await asyncio.sleep(REWATCH_S)
                continue
            if not await self._follow_stream(tile, stream):
                return
            if stream.pane_exited:  # (a channel tile's screen is not read: say it here)
                self._drop_channel_asks(tile.name, "expired", f"{tile.name!r} exited")
                return
            await asyncio.sleep(REWATCH_S)  # a host's stream ended: open it again once back

    async def _follow_stream(self, tile: Tile, stream: PaneStream) -> bool:
        """Follow one stream until it ends (True) or the tile leaves the hub (False)."""
        listener = stream.listen(wants_bytes=False, pollable=True)
        try:
            self._check_soon(tile.name, 0.0)
            while self._tiles().get(tile.name) is tile:
                await listener.wait(None)
                listener.take()  # (clears the wake-up; it keeps no bytes)
                listener.take_activity()
                self._check_soon(tile.name, QUIET_CHECK_S)
                if stream.pane_exited or stream.ended:
                    return True
            return False
        finally:
            listener.close()

    def _watch_hooks(self, tile: Tile) -> None:
        hooks = tile.hooks
        wanted = {"notification", "permission_request"}
        if hooks is None or tile.name in self._hooked or not wanted & set(hooks.kinds):
            return
        self._hooked.add(tile.name)

        def on_hook(event: HookEvent, name: str = tile.name) -> None:
            if name in self._channels:
                return  # (its asks come through its channel; its dialog is not read)
            if event.kind == "notification":
                self._hook_messages[name] = event.message or ""
            elif event.kind == "permission_request":
                request = tool_request(event.payload)
                if request is None:
                    return
                self._hook_messages.setdefault(name, "")
                if not self._fill(name, request):
                    self._hook_requests[name] = request
            else:
                return
            self._check_soon(name, 0.0)

        hooks.subscribe(on_hook)

    def _fill(self, name: str, request: ToolRequest) -> bool:
        """Give ``name``'s open permission ask the tool its hook names, if it has none yet."""
        ask = next((a for a in self._asks if a.open and _screen_ask(a) and a.tile == name), None)
        if not isinstance(ask, PermissionAsk) or ask.tool is not None:
            return False
        ask.tool, ask.tool_input = request.tool, request.input
        ask.text, ask.signal = with_tool_line(ask.text, request), "hook"
        self._emit(AskChanged(ask.id, ask.state, ask))
        return True

    def _check_soon(self, name: str, delay_s: float) -> None:
        handle = self._checks.pop(name, None)
        if handle is not None:
            handle.cancel()
        loop = asyncio.get_running_loop()
        self._checks[name] = loop.call_later(delay_s, self._start_check, name)

    def _start_check(self, name: str) -> None:
        self._checks.pop(name, None)
        if name in self._reading:
            self._again.add(name)
            return
        tile = self._tiles().get(name)
        if tile is None or tile.kind.permission is None:
            return
        self._reading.add(name)
        spawn(self._check(tile), name=f"inbox {name}")

    async def _check(self, tile: Tile) -> None:
        try:
            if tile.name in self._channels:  # its asks come through its channel: its state
                await asyncio.to_thread(lambda: tile.state)  # alone (an exit closes them)
                return
            _, prompt = await asyncio.to_thread(_read, tile)
            self._update(tile, prompt)
        finally:
            self._reading.discard(tile.name)
            if tile.name in self._again:
                self._again.discard(tile.name)
                self._check_soon(tile.name, 0.0)

    def _update(self, tile: Tile, prompt: PermissionPrompt | None) -> None:
        """Open an ask for a prompt now shown; close the one the agent no longer shows.

        An ask being answered (its key on the way) is still the tile's ask; and the prompt
        its key answered, still on screen, is the agent not having redrawn yet."""
        if tile.name in self._channels:
            return  # (its channel was watched while the screen was read)
        current = next((a for a in self._asks if _screen_ask(a) and a.tile == tile.name), None)
        assert current is None or isinstance(current, PermissionAsk)
        if current is not None and current.prompt == prompt:
            return
        if current is not None and current.close(
            "answered", "the agent no longer shows it (answered in the pane, or it moved on)"
        ):
            self._closed(current)
        if prompt is not None and not self._just_pressed(tile.name, prompt):
            message = self._hook_messages.pop(tile.name, None)
            ask = PermissionAsk(
                tile.name, prompt.question, prompt=prompt,
                on_answer=self._press, signal="hook" if message is not None else "screen",
            )  # fmt: skip
            if (request := self._hook_requests.pop(tile.name, None)) is not None:
                ask.tool, ask.tool_input = request.tool, request.input
                ask.text = with_tool_line(ask.text, request)
            self._add(ask)

    def _just_pressed(self, name: str, prompt: PermissionPrompt) -> bool:
        """``prompt`` is the one a key answered a moment ago (then look again once the hold
        ends: an agent that still shows it then is asked again)."""
        held = self._pressed.get(name)
        if held is None:
            return False
        pressed, until = held
        left = until - time.monotonic()
        if pressed != prompt or left <= 0:
            del self._pressed[name]
            return False
        self._check_soon(name, left)
        return True

    # answering a permission ----------------------------------------------------------------
    def _press(
        self, ask: Ask, state: str, how: int | Verdict
    ) -> concurrent.futures.Future[RoundRecord]:
        tile = self._tiles().get(ask.tile)
        assert isinstance(how, int) and isinstance(ask, PermissionAsk)
        return self._submit(self._press_keys(ask, tile, how, state))

    async def _press_keys(
        self, ask: PermissionAsk, tile: Tile | None, index: int, state: str
    ) -> RoundRecord:
        """Press the keys of choice ``index`` (Escape for -1) if the agent still shows the ask's
        prompt (under the pane's lock); a button row's keys count from its selection now."""
        svc = self._services
        started = time.monotonic()
        key = ask.prompt.keys[index] if index >= 0 else "Escape"
        rec = RoundRecord(
            route_id=INBOX_ROUTE_ID, source="", target=ask.tile, round=0, trigger="manual",
            transform="keys", dispatch="madoagent", prompt=key, status="error",
            decision=state, session_id=svc.session_id,
            meta={"ask": ask.kind, "question": ask.text, "choice": ask.choice or key},
        )  # fmt: skip
        problem: str | None
        if tile is None:
            problem = f"tile {ask.tile!r} is no longer a tile of this hub"
        else:
            async with svc.deliverer.pane_lock(tile.pane_id):
                state_now, shown = await asyncio.to_thread(_read, tile)
                if shown is None or shown != ask.prompt:
                    problem = (
                        f"the agent left its prompt (it reads {state_now} now); "
                        "it was answered elsewhere or moved on"
                    )
                else:
                    rec.prompt = key = shown.keys_for(index) if index >= 0 else key
                    reader = await asyncio.to_thread(tile.reader)
                    problem = (
                        await send_checked(
                            tile, reader, [key_command(tile.pane_id, k) for k in key.split()]
                        )
                        if isinstance(reader, Reader)
                        else reader
                    )
        if problem is None:
            rec.status, rec.delivered_at = "delivered", datetime.now(timezone.utc)
            self._pressed[ask.tile] = (ask.prompt, time.monotonic() + PRESSED_HOLD_S)
        else:
            rec.error = f"{ask.kind} of {ask.tile!r} not answered: {problem}; no key was pressed"
        rec.deliver_ms = rec.latency_ms = round((time.monotonic() - started) * 1000, 3)
        self._closed(ask)
        if tile is not None:
            self._check_soon(tile.name, QUIET_CHECK_S)
        return await svc.record(rec)

    # a tile's native channel -----------------------------------------------------------------
    def watch_channel(self, tile: Tile, channel: Channel) -> Callable[[], None]:
        """Take ``tile``'s approval requests from its native channel (engine loop), until the
        returned call (or the channel breaking). Its asks take precedence: the tile's screen
        is no longer read for dialogs, and a screen ask it had is closed. Watching the same
        channel again returns the same call."""
        watched = self._channels.get(tile.name)
        if watched is not None and watched.channel is channel:
            return watched.unsubscribe
        if watched is not None:
            watched.unsubscribe()
        name = tile.name
        for ask in [a for a in self._asks if a.open and a.tile == name and _screen_ask(a)]:
            if ask.close("answered", f"its agent's asks now come through {channel.name}"):
                self._closed(ask)

        def on_event(event: ChannelEvent) -> None:
            self._on_channel(name, channel, event)

        unsubscribe = channel.subscribe(on_event)

        def unwatch() -> None:
            """Stop (engine loop): its open asks close, its screen is read again."""
            unsubscribe()
            if (now := self._channels.get(name)) is not None and now.channel is channel:
                del self._channels[name]
                self._drop_channel_asks(name, "expired", f"{channel.name} is no longer watched")
                if name in self._tiles():
                    self._check_soon(name, 0.0)

        self._channels[name] = _Watched(channel, unwatch)
        return unwatch

    def _on_channel(self, name: str, channel: Channel, event: ChannelEvent) -> None:
        watched = self._channels.get(name)
        if watched is None or watched.channel is not channel:
            return
        if isinstance(event, ChannelAsk):
            if self._channel_ask(name, event.ask_id) is None:
                self._add(
                    ChannelPermissionAsk(
                        name, event, channel=channel.name, on_answer=self._send_choice, via=channel
                    )
                )
        elif isinstance(event, ChannelAskResolved):
            ask = self._channel_ask(name, event.ask_id)
            where = "in the pane" if event.by == "agent" else f"through {channel.name}"
            if ask is not None and ask.close("answered", f"answered {where}"):
                self._closed(ask)
        elif isinstance(event, ChannelBroken):
            self._drop_channel_asks(
                name, "expired", f"{channel.name} of {name!r} broke ({event.reason})"
            )
            watched.unsubscribe()  # (its screen is read for dialogs again)

    def _channel_ask(self, name: str, ask_id: str) -> ChannelPermissionAsk | None:
        return next(
            (
                a
                for a in self._asks
                if a.open
                and isinstance(a, ChannelPermissionAsk)
                and a.tile == name
                and a.request.ask_id == ask_id
            ),
            None,
        )

    def _drop_channel_asks(self, name: str, state: AskState, why: str) -> None:
        """Close ``name``'s open channel asks unanswered: nothing can answer them now."""
        for ask in [a for a in self._asks if isinstance(a, ChannelPermissionAsk)]:
            if ask.tile == name and ask.close(state, f"{why}; nothing was sent"):
                self._closed(ask)

    def _send_choice(
        self, ask: Ask, state: str, how: int | Verdict
    ) -> concurrent.futures.Future[RoundRecord]:
        assert isinstance(ask, ChannelPermissionAsk) and isinstance(how, int)
        return self._submit(self._answer_through_channel(ask, state))

    async def _answer_through_channel(self, ask: ChannelPermissionAsk, state: str) -> RoundRecord:
        """Send the ask's choice through its tile's channel; the round says how it went."""
        svc = self._services
        started = time.monotonic()
        choice = ask.choice or ""
        rec = RoundRecord(
            route_id=INBOX_ROUTE_ID, source="", target=ask.tile, round=0, trigger="manual",
            transform="channel", dispatch="madoagent", prompt=choice, status="error",
            decision=state, session_id=svc.session_id,
            meta={"ask": ask.kind, "question": ask.text, "choice": choice,
                  "channel": ask.channel, "ask_id": ask.request.ask_id},
        )  # fmt: skip
        watched = self._channels.get(ask.tile)
        problem: str | None = None
        if watched is None or watched.channel is not ask._via:
            problem = f"{ask.channel} of {ask.tile!r} is no longer watched"
        else:
            try:
                await asyncio.wait_for(
                    watched.channel.answer(ask.request.ask_id, choice), CHANNEL_ANSWER_TIMEOUT_S
                )
            except (ChannelError, asyncio.TimeoutError) as exc:
                problem = str(exc) or f"no reply within {CHANNEL_ANSWER_TIMEOUT_S:g}s"
        if problem is None:
            rec.status, rec.delivered_at = "delivered", datetime.now(timezone.utc)
        else:
            rec.error = f"{ask.kind} of {ask.tile!r} not answered: {problem}; nothing was sent"
        rec.deliver_ms = rec.latency_ms = round((time.monotonic() - started) * 1000, 3)
        self._closed(ask)
        return await svc.record(rec)

    # approvals -------------------------------------------------------------------------------
    def open_approval(self, route_id: str, target: str, prompt: str) -> Approval:
        """A route's prompt waits for a person (engine loop)."""
        decided: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        holder: list[Approval] = []

        def answered(
            ask: Ask, state: str, how: int | Verdict
        ) -> concurrent.futures.Future[RoundRecord]:
            assert isinstance(how, Verdict)
            self._call_soon(_settle, decided, how)
            self._call_soon(self._closed, ask)
            return holder[0].logged

        ask = ApprovalAsk(target, prompt, route=route_id, on_answer=answered)
        approval = Approval(ask, decided)
        holder.append(approval)
        self._approvals[ask.id] = approval
        self._add(ask)
        return approval

    def approval_done(self, approval: Approval, rec: RoundRecord) -> None:
        """The round of ``approval`` is logged (engine loop)."""
        self._approvals.pop(approval.ask.id, None)
        if approval.ask.open:
            approval.ask.close("expired", rec.error or "its round ended")
        self._closed(approval.ask)
        approval.finish(rec)


def _screen_ask(ask: Ask) -> bool:
    """A permission ask read off the tile's screen (not one its channel reported)."""
    return isinstance(ask, PermissionAsk) and not isinstance(ask, ChannelPermissionAsk)


def _settle(fut: asyncio.Future[Verdict], verdict: Verdict) -> None:
    if not fut.done():
        fut.set_result(verdict)


def _read(tile: Tile) -> tuple[str, PermissionPrompt | None]:
    """A tile's state now and the permission prompt it shows (a thread: tmux and file reads).

    The text is read from the plain (redacted) screen; the coloured one only where a
    dialog's selection is shown by colour alone."""
    state, dialogs = tile.state, tile.kind.permission
    if state != "waiting" or dialogs is None:
        return state, None
    screen = tile.screen()
    coloured = tile.screen(ansi=True) if dialogs.needs_colours(screen) else None
    return state, dialogs.read(tile.profile, screen, coloured)
