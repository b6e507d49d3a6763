"""Qwen Code's file channel: ``qwen --input-file IN --json-file OUT`` keeps its TUI live.

Observed with the real Qwen Code 0.24.4, offline (tests/fixtures/channels/qwen-0.24.4-out.jsonl):

- a line ``{"type":"submit","text":…}`` appended to IN runs as a prompt the pane shows;
- OUT gets a ``system`` line (``session_start``) at start, then per turn a ``user`` line
  (the prompt, typed in the pane or submitted), ``stream_event`` deltas, an ``assistant``
  line per API message (its text and ``tool_use`` blocks, ``usage``), each followed by a
  ``stream_event`` ``message_stop``; ``control_request`` lines (``can_use_tool``) while
  the TUI shows an approval dialog, answered by ``{"type":"confirmation_response",…}`` in
  IN (then a ``control_response``, and the tool's result as a ``user`` line of
  ``tool_result`` blocks, within the same turn;
  tests/fixtures/channels/qwen-0.24.4-approval-out.jsonl); ``system`` ``session_end``
  when it exits.
- No line marks a whole turn's end, and ``stop_reason`` is null. Decided: a turn ends at
  the ``message_stop`` after an ``assistant`` message with no ``tool_use`` block (a tool
  call's message is followed by the tool's run and another message of the same turn).
- A submit written while a turn runs is queued by Qwen, but its OUT has no ``user`` line
  for it and its answer is glued to the running turn's in one ``assistant`` message
  (observed). So this channel queues on the hub's side: a prompt is written to IN only
  once the running turn ended, and runs as a turn of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ...engine import spawn
from .base import (
    ChannelAck,
    ChannelAsk,
    ChannelAskResolved,
    ChannelBroken,
    ChannelError,
    ChannelEvent,
    ChannelListeners,
    ChannelTurn,
    ChannelTurnStarted,
    ChannelUnsure,
)

NAME: Final = "qwen input-file"
IN_NAME: Final = "in.jsonl"
OUT_NAME: Final = "out.jsonl"
POLL_S: Final = 0.05
"""How often OUT is read for new lines (a file has no push; 50 ms is below a person's notice)."""
ACK_TIMEOUT_S: Final = 30.0
"""How long a written prompt may take to show as the ``user`` line of its turn."""
ASK_CHOICES: Final = ("allow", "deny")
ANSWER_ACK_S: Final = 5.0
"""How long an answer waits for Qwen's ``control_response`` to it (0.24.4 acknowledges each
``confirmation_response``: success, or an error for an ask unknown or already resolved)."""


@dataclass
class QwenReader:
    """What OUT's lines say, line by line (pure: no files): the events they make."""

    turn_id: str | None = None
    prompt: str | None = None
    prompt_id: str | None = None
    answer: str = ""
    tool_use: bool = False
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    started: bool = False
    """The ``system`` ``session_start`` line was seen (the channel is up)."""
    turn_started_at: float = 0.0
    ended: bool = False
    expected: list[tuple[str, str]] = field(default_factory=list)
    """Prompts written to IN and not yet seen as a ``user`` line: (text, prompt_id)."""
    responses: dict[str, str | None] = field(default_factory=dict)
    """``control_response`` lines by request id: None (taken) or why Qwen refused it."""

    @property
    def busy(self) -> bool:
        """A turn runs (its ``user`` line came, its end not yet)."""
        return self.turn_id is not None

    def line(self, raw: str, now: float) -> list[ChannelEvent]:
        """The events one OUT line makes (none for deltas and lines it does not know)."""
        try:
            msg = json.loads(raw)
        except ValueError:
            return []
        if not isinstance(msg, dict):
            return []
        kind = msg.get("type")
        if kind == "system":
            return self._system(msg)
        if kind == "user":
            return self._user(msg, now)
        if kind == "assistant":
            self._assistant(msg.get("message") or {})
            return []
        if kind == "stream_event":
            event = msg.get("event") or {}
            if event.get("type") == "message_stop" and self.busy and not self.tool_use:
                return [self._end(now)]
            return []
        if kind == "control_request":
            return self._ask(msg, now)
        if kind == "control_response":
            return self._response(msg)
        return []

    def _response(self, msg: dict[str, Any]) -> list[ChannelEvent]:
        """Qwen's word on an ask: answered (in the pane, or the hub's answer taken), or an
        answer it refused (``subtype`` ``error``: unknown or already resolved); kept in
        :attr:`responses` for the hub's answer to wait on."""
        response = msg.get("response") or {}
        rid = msg.get("request_id") or response.get("request_id")
        if not rid:
            return []
        if response.get("subtype") == "error":
            self.responses[str(rid)] = str(response.get("error") or "refused")
            return []
        self.responses[str(rid)] = None
        return [ChannelAskResolved(str(rid))]

    def _system(self, msg: dict[str, Any]) -> list[ChannelEvent]:
        if msg.get("subtype") == "session_start":
            self.started = True
        elif msg.get("subtype") == "session_end":
            self.ended = True
            return [ChannelBroken("qwen ended its session (the agent exited)")]
        return []

    def _user(self, msg: dict[str, Any], now: float) -> list[ChannelEvent]:
        message = msg.get("message") or {}
        if self.busy and _tool_results_only(message):
            return []  # a tool's result, handed back within the running turn
        text = _text(message)
        prompt_id = None
        for i, (wrote, pid) in enumerate(self.expected):
            if wrote.strip() == text.strip():
                prompt_id = pid
                del self.expected[i]
                break
        self.turn_id = str(msg.get("uuid") or f"turn-{now}")
        self.turn_started_at = now
        self.prompt, self.prompt_id = text, prompt_id
        self.answer, self.tool_use, self.usage = "", False, {}
        return [ChannelTurnStarted(self.turn_id, text, prompt_id, now)]

    def _assistant(self, message: dict[str, Any]) -> None:
        blocks = message.get("content") or []
        texts = [
            b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"
        ]
        self.tool_use = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks)
        if texts:
            self.answer = "".join(texts)  # the turn's answer: its last message's text
        self.model = message.get("model") or self.model
        usage = message.get("usage") or {}
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
            if isinstance(usage.get(key), int):
                self.usage[key] = self.usage.get(key, 0) + usage[key]

    def _end(self, now: float) -> ChannelTurn:
        u = self.usage
        cached = u.get("cache_read_input_tokens")
        inp = u.get("input_tokens")
        turn = ChannelTurn(
            turn_id=self.turn_id or "",
            answer=self.answer,
            prompt=self.prompt,
            prompt_id=self.prompt_id,
            input_tokens=inp - (cached or 0) if inp is not None else None,
            output_tokens=u.get("output_tokens"),
            cache_read_tokens=cached,
            model=self.model,
            at=now,
            turn_ms=round((now - self.turn_started_at) * 1000, 3),
        )
        self.turn_id = self.prompt = self.prompt_id = None
        return turn

    def _ask(self, msg: dict[str, Any], now: float) -> list[ChannelEvent]:
        req = msg.get("request") or {}
        if req.get("subtype") != "can_use_tool":
            return []
        args = req.get("input") or {}
        command = args.get("command") if isinstance(args, dict) else None
        return [
            ChannelAsk(
                ask_id=str(msg.get("request_id", "")),
                tool=str(req.get("tool_name", "")),
                command=str(command if command is not None else json.dumps(args)),
                reason=str(args.get("description", "")) if isinstance(args, dict) else "",
                choices=ASK_CHOICES,
                rejects=("deny",),
                at=now,
            )
        ]


def _tool_results_only(message: dict[str, Any]) -> bool:
    """A ``user`` line that only hands tool results back (observed: ``tool_result`` blocks)."""
    content = message.get("content")
    return (
        isinstance(content, list) and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )  # fmt: skip


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def qwen_args(folder: str) -> tuple[str, ...]:
    """The words Qwen Code's start gains: its input and JSON files in ``folder``."""
    return (
        "--input-file", os.path.join(folder, IN_NAME), "--json-file", os.path.join(folder, OUT_NAME),
    )  # fmt: skip


def make_files(folder: str) -> None:
    """An empty IN (0600) for Qwen to follow from its start."""
    fd = os.open(os.path.join(folder, IN_NAME), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)


class QwenChannel:
    """One Qwen Code pane's file channel (engine loop)."""

    name = NAME

    def __init__(self, folder: str) -> None:
        self._in = os.path.join(folder, IN_NAME)
        self._out = os.path.join(folder, OUT_NAME)
        self._reader = QwenReader()
        self._listeners = ChannelListeners()
        self._task: asyncio.Task[None] | None = None
        self._offset = 0
        self._partial = b""
        self._broken: str | None = None
        self._changed: asyncio.Event | None = None
        self._asks: set[str] = set()
        self._answering: set[str] = set()
        self._reading = asyncio.Lock()
        """One read of OUT at a time (the follower's and an answer's own)."""
        """Asks the hub's answer is waiting on (their ``control_response`` is its ack)."""

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and self._broken is None

    async def attach(self, timeout_s: float) -> None:
        """Wait for Qwen's ``session_start`` line in OUT, then follow OUT."""
        self._changed = asyncio.Event()
        deadline = time.monotonic() + timeout_s
        while not self._reader.started:
            await self._read()
            if self._reader.started:
                break
            if time.monotonic() > deadline:
                raise ChannelError(
                    f"Qwen Code did not open its JSON file {self._out} within {timeout_s:.0f} s "
                    "(an older qwen without --json-file?); its prompts are typed instead"
                )
            await asyncio.sleep(POLL_S)
        self._task = spawn(self._follow(), name="qwen channel")

    async def submit(self, text: str, prompt_id: str) -> ChannelAck:
        """Write the prompt once no turn runs (see the module's note), then wait for its
        ``user`` line: the turn started with it."""
        self._check()
        waited = False
        while self._reader.busy or self._reader.expected:
            waited = True
            await self._wait_change()
            self._check()
        line = json.dumps({"type": "submit", "text": text}) + "\n"
        self._reader.expected.append((text, prompt_id))
        try:
            await asyncio.to_thread(_append, self._in, line)
        except OSError as exc:
            self._reader.expected.pop()
            raise ChannelError(f"could not write Qwen Code's input file: {exc}") from exc
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while any(pid == prompt_id for _, pid in self._reader.expected):
            if self._broken is not None:
                raise ChannelUnsure(f"{NAME}: {self._broken} (after the prompt was written)")
            if time.monotonic() > deadline:
                raise ChannelUnsure(
                    f"{NAME}: Qwen Code did not start a turn with the prompt within "
                    f"{ACK_TIMEOUT_S:.0f} s"
                )
            await self._wait_change()
        return ChannelAck(prompt_id, self._reader.turn_id, waited, time.time())

    async def answer(self, ask_id: str, choice: str) -> None:
        """Append a ``confirmation_response``, then wait for Qwen's ``control_response`` to
        it: an answer Qwen refuses (the ask was answered in the pane a moment before, or is
        unknown) is a :class:`ChannelError` saying so."""
        if choice not in ASK_CHOICES:
            raise ChannelError(f"{NAME}: choice {choice!r}; allowed: {', '.join(ASK_CHOICES)}")
        self._check()
        await self._read()  # (an answer the pane gave just now is seen before writing)
        if ask_id not in self._asks:
            raise ChannelError(
                f"{NAME}: ask {ask_id} is no longer open (answered in the pane, or unknown); "
                "nothing was sent"
            )
        self._reader.responses.pop(ask_id, None)
        self._answering.add(ask_id)  # (Qwen's word on it is this answer's, not the pane's)
        try:
            await self._answer(ask_id, choice)
        finally:
            self._answering.discard(ask_id)

    async def _answer(self, ask_id: str, choice: str) -> None:
        line = {"type": "confirmation_response", "request_id": ask_id, "allowed": choice == "allow"}
        await asyncio.to_thread(_append, self._in, json.dumps(line) + "\n")
        deadline = time.monotonic() + ANSWER_ACK_S
        while ask_id not in self._reader.responses and time.monotonic() < deadline:
            if self._broken is not None:
                break
            await self._wait_change()
        refused = self._reader.responses.pop(ask_id, None)
        if refused is not None:
            raise ChannelError(f"{NAME}: Qwen Code refused the answer to ask {ask_id}: {refused}")
        if ask_id in self._asks:  # (taken, or no word from Qwen in time: it was written)
            self._asks.discard(ask_id)
            self._emit(ChannelAskResolved(ask_id, by="hub"))

    def subscribe(self, listener: Callable[[ChannelEvent], None]) -> Callable[[], None]:
        return self._listeners.subscribe(listener)

    async def close(self) -> None:
        """Stop following OUT (Qwen itself ends with its pane; it has no server). A prompt
        waiting to be written fails now (the hub closes it when the agent exited)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._broken is None:
            self._broken = "closed (qwen exited, or the hub closed)"
        if self._changed is not None:
            self._changed.set()  # (a waiting submit sees it now, not at its next poll)

    def _check(self) -> None:
        if self._broken is not None:
            raise ChannelError(f"{NAME} is broken: {self._broken}")
        if self._task is None:
            raise ChannelError(f"{NAME} is not attached")

    async def _wait_change(self) -> None:
        assert self._changed is not None
        self._changed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._changed.wait(), 1.0)

    async def _follow(self) -> None:
        while self._broken is None:
            try:
                await self._read()
            except OSError as exc:
                self._break(f"its JSON file cannot be read: {exc}")
                return
            await asyncio.sleep(POLL_S)

    async def _read(self) -> None:
        """New whole lines of OUT, each turned into events (once: one read at a time)."""
        async with self._reading:
            await self._read_new()

    async def _read_new(self) -> None:
        try:
            data, self._offset = await asyncio.to_thread(_read_from, self._out, self._offset)
        except FileNotFoundError:
            return
        if not data:
            return
        *lines, self._partial = (self._partial + data).split(b"\n")
        now = time.time()
        for raw in lines:
            for event in self._reader.line(raw.decode("utf-8", "replace"), now):
                if isinstance(event, ChannelAsk):
                    self._asks.add(event.ask_id)
                elif isinstance(event, ChannelAskResolved):
                    if event.ask_id not in self._asks or event.ask_id in self._answering:
                        continue
                    self._asks.discard(event.ask_id)
                if isinstance(event, ChannelBroken):
                    self._broken = event.reason
                self._emit(event)
        if self._changed is not None:
            self._changed.set()

    def _break(self, reason: str) -> None:
        self._broken = reason
        self._emit(ChannelBroken(reason))

    def _emit(self, event: ChannelEvent) -> None:
        self._listeners.emit(event)


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


def _read_from(path: str, offset: int) -> tuple[bytes, int]:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    return data, offset + len(data)
