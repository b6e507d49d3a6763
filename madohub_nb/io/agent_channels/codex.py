"""Codex's native channel: a client of ``codex app-server --listen unix://PATH``.

The hub starts the app-server; the pane runs ``codex --remote unix://PATH`` (the TUI, live
for the person); this channel is a second client of the same server: WebSocket over the unix
socket (:mod:`.websocket`), one JSON-RPC message per WebSocket message. Observed with Codex
0.171.0 (REAL-AGENTS.md, "Native channels"; ``tests/fixtures/codex_app_server/``):

- ``initialize`` {clientInfo, capabilities.experimentalApi} then ``initialized``;
  ``thread/loaded/list`` names the TUI's thread (``thread/started`` about 1 s after the TUI
  starts); ``thread/resume`` {threadId} subscribes this client to its turns and items.
- ``thread/resume`` before the thread's first turn fails (-32600 "no rollout found"). The
  channel then waits: ``thread/status/changed`` reaches every client, subscribed or not,
  and at the first ``active`` it resumes again; the resume answer lists the turns so far
  (with their ``userMessage`` ``clientId``), so the first turn is still acknowledged and
  reported (its answer from the turn's items, its usage from the ``thread/tokenUsage/updated``
  Codex replays on resume).
- Every prompt goes in with ``thread/queue/add`` {clientUserMessageId}: on an idle thread
  it starts a turn at once, on a busy one it waits as a turn of its own. ``turn/start``
  on a busy thread would steer the running turn, and an idle thread can turn busy between
  our look and our call (the person presses Enter), so ``turn/start`` is never used.
  The turn runs the prompt when its ``userMessage`` item carries our ``clientId``.
- ``turn/completed`` {turn.status, turn.items (the agent messages)} ends a turn, after the
  ``thread/tokenUsage/updated`` {turnId, tokenUsage.last} of its last model call.
- ``item/commandExecution/requestApproval`` (and ``item/fileChange/requestApproval``) is
  a JSON-RPC request to every subscribed client: answered with {decision}; a ``y`` in the
  pane answers it too; either way ``serverRequest/resolved`` {requestId} follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import psutil

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
)
from .websocket import UnixWebSocket, WebSocketClosed

log = logging.getLogger(__name__)

CLIENT_NAME: Final = "madohub_nb"
NO_ROLLOUT_CODE: Final = -32600
NO_ROLLOUT_TEXT: Final = "no rollout found"
"""``thread/resume`` before the thread's first turn (Codex 0.171.0)."""
CONNECT_RETRY_S: Final = 0.05
THREAD_POLL_S: Final = 0.2
"""How often ``attach`` asks ``thread/loaded/list`` while the TUI has no thread yet."""
ACK_TIMEOUT_S: Final = 30.0
"""How long ``submit`` waits for an idle thread's turn to start with the prompt."""
REQUEST_TIMEOUT_S: Final = 30.0
SERVER_TERM_TIMEOUT_S: Final = 1.0
"""The app-server often ignores SIGTERM for seconds (REAL-AGENTS.md): then SIGKILL."""
APPROVAL_TOOLS: Final[Mapping[str, str]] = {
    "item/commandExecution/requestApproval": "shell",
    "item/fileChange/requestApproval": "edit",
}
REJECTS: Final = ("decline", "cancel")
"""Codex's decisions that say no: ``decline`` (the turn goes on), ``cancel`` (it stops)."""


@dataclass
class _Turn:
    """What the channel knows of one turn while it runs."""

    turn_id: str
    prompt: str | None = None
    prompt_id: str | None = None
    started: bool = False
    """ChannelTurnStarted was reported."""
    messages: list[str] = field(default_factory=list)
    usage: Mapping[str, Any] | None = None


@dataclass
class _Ask:
    request_id: int | str
    decisions: dict[str, Any]
    """Each choice (as :class:`ChannelAsk` names it) and the decision Codex takes for it."""
    answered: bool = False


@dataclass
class _Waiter:
    """A ``submit`` waiting for its turn to start (or to learn it is queued)."""

    prompt_id: str
    future: asyncio.Future[ChannelAck]
    queued_id: str | None = None


def decision_name(decision: Any) -> str:
    """A decision as a choice: ``accept``, or an object's one key
    (``acceptWithExecpolicyAmendment``)."""
    if isinstance(decision, str):
        return decision
    if isinstance(decision, dict) and len(decision) == 1:
        return str(next(iter(decision)))
    return json.dumps(decision, sort_keys=True)


def turn_answer(turn: Mapping[str, Any], seen: list[str]) -> str:
    """The turn's final answer: its last agent message (``turn/completed`` lists them;
    else the ones the channel saw completed)."""
    items = turn.get("items") or []
    texts = [str(i.get("text", "")) for i in items if i.get("type") == "agentMessage"]
    finals = [
        str(i.get("text", ""))
        for i in items
        if i.get("type") == "agentMessage" and i.get("phase") == "final_answer"
    ]
    chosen = finals or texts or seen
    return chosen[-1] if chosen else ""


def user_message(items: list[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    """``(text, clientId)`` of the first ``userMessage`` among ``items``."""
    for item in items:
        if item.get("type") == "userMessage":
            text = "".join(
                str(c.get("text", "")) for c in item.get("content") or [] if c.get("type") == "text"
            )
            client = item.get("clientId")
            return text, str(client) if client is not None else None
    return None, None


class CodexChannel:
    """One tile's Codex channel: a second client of its ``codex app-server``.

    ``server_pid``: the app-server the hub started (ended by pid, with its children, at
    :meth:`close`); None when someone else owns it.
    """

    name = "codex app-server"

    def __init__(
        self,
        socket_path: str,
        *,
        server_pid: int | None = None,
        ack_timeout_s: float = ACK_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.socket_path = socket_path
        self.server_pid = server_pid
        self.ack_timeout_s = ack_timeout_s
        self.request_timeout_s = request_timeout_s
        self.thread_id: str | None = None
        self.subscribed = False
        self.busy = False
        """The thread runs a turn (``thread/status/changed``: ``active``)."""
        self._ws: UnixWebSocket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._resuming: asyncio.Task[None] | None = None
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._listeners = ChannelListeners()
        self._turns: dict[str, _Turn] = {}
        self._usage: dict[str, Mapping[str, Any]] = {}
        self._done: set[str] = set()
        self._asks: dict[str, _Ask] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._expected: dict[str, str] = {}
        """Prompts Codex took (queued) whose turn has not started yet: id -> text, in order."""
        self._ephemeral: set[str] = set()
        self._thread_seen = asyncio.Event()
        self._broken: str | None = None
        self._closing = False

    # --- the Channel calls ---------------------------------------------------------------
    @property
    def alive(self) -> bool:
        """Connected, and no :class:`ChannelBroken` reported."""
        return self._ws is not None and self._broken is None and not self._closing

    def subscribe(self, listener: Callable[[ChannelEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with each event; returns the unsubscribe call."""
        return self._listeners.subscribe(listener)

    async def attach(self, timeout_s: float) -> None:
        """Connect (the server may still be starting), introduce ourselves, find the TUI's
        thread (waiting for it: the TUI starts it about 1 s after its own start) and
        subscribe to it (or wait for its first turn to, see the module's docstring)."""
        deadline = time.monotonic() + timeout_s
        self._ws = await self._connect(deadline)
        self._reader = spawn(self._read_loop(), name=f"codex channel {self.socket_path}")
        await self._call(
            "initialize",
            {
                "clientInfo": {"name": CLIENT_NAME, "title": "madohub_nb hub", "version": "1"},
                "capabilities": {"experimentalApi": True},
            },
        )
        await self._notify("initialized")
        self.thread_id = await self._find_thread(deadline)
        await self._resume()

    async def submit(self, text: str, prompt_id: str) -> ChannelAck:
        """``thread/queue/add`` ``text`` as its own turn; the ack once its turn started
        (``queued`` when a turn was running). :class:`ChannelError` when Codex refused it
        or it did not start in ``ack_timeout_s`` (then it is taken off the queue)."""
        thread = self._require_thread()
        if prompt_id in self._waiters:
            raise ChannelError(f"prompt id {prompt_id!r} is already being submitted: use a new id")
        waiter = _Waiter(prompt_id, asyncio.get_running_loop().create_future())
        self._waiters[prompt_id] = waiter
        try:
            busy_before = self.busy
            result = await self._call(
                "thread/queue/add",
                {
                    "threadId": thread,
                    "clientUserMessageId": prompt_id,
                    "input": [{"type": "text", "text": text, "text_elements": []}],
                },
            )
            waiter.queued_id = str((result.get("queuedSubmission") or {}).get("id") or "") or None
            if not waiter.future.done():
                self._expected[prompt_id] = text
            if busy_before and not waiter.future.done():
                waiter.future.set_result(ChannelAck(prompt_id, None, True, time.time()))
            try:
                return await asyncio.wait_for(asyncio.shield(waiter.future), self.ack_timeout_s)
            except asyncio.TimeoutError:
                return await self._unqueue(waiter)
        finally:
            self._waiters.pop(prompt_id, None)

    async def answer(self, ask_id: str, choice: str) -> None:
        """Answer the approval ``ask_id`` with one of its choices (the JSON-RPC response)."""
        ask = self._asks.get(ask_id)
        if ask is None or ask.answered:
            raise ChannelError(
                f"no open Codex approval {ask_id!r} (open: {sorted(self._open_asks())}): "
                "it was answered (maybe in the pane) or withdrawn"
            )
        if choice not in ask.decisions:
            raise ChannelError(
                f"{choice!r} is not one of Codex's answers to approval {ask_id!r}: "
                f"choose one of {list(ask.decisions)}"
            )
        ask.answered = True
        await self._send({"id": ask.request_id, "result": {"decision": ask.decisions[choice]}})

    async def close(self) -> None:
        """Stop listening, close the connection and end the app-server (by pid, with its
        children: ``codex`` is a node wrapper over the native binary)."""
        self._closing = True
        for task in (self._resuming, self._reader):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._ws.close(), 2.0)
        self._fail_pending("the Codex channel was closed")
        if self.server_pid is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, end_process_tree, self.server_pid
            )

    # --- connecting ----------------------------------------------------------------------
    async def _connect(self, deadline: float) -> UnixWebSocket:
        last: Exception | None = None
        while True:
            try:
                return await UnixWebSocket.connect(self.socket_path)
            except ChannelError as exc:
                last = exc
            if self.server_pid is not None and _exited(self.server_pid):
                raise ChannelError(
                    f"the codex app-server (pid {self.server_pid}) exited before it listened "
                    f"on {self.socket_path!r}: see its output in the tile's log"
                )
            if time.monotonic() >= deadline:
                raise ChannelError(
                    f"no codex app-server answered on {self.socket_path!r} in time ({last}): "
                    "is it running (`codex app-server --listen unix://...`)?"
                )
            await asyncio.sleep(CONNECT_RETRY_S)

    async def _find_thread(self, deadline: float) -> str:
        """The TUI's thread: the first loaded one that is not ephemeral (Codex starts an
        ephemeral thread of its own to name a conversation)."""
        while True:
            self._thread_seen.clear()
            listed = await self._call("thread/loaded/list", {})
            ids = [str(i) for i in listed.get("data") or [] if str(i) not in self._ephemeral]
            if ids:
                return ids[0]
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise ChannelError(
                    f"the codex app-server on {self.socket_path!r} has no thread: is "
                    "`codex --remote unix://...` running in the pane? (its TUI starts one)"
                )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._thread_seen.wait(), min(THREAD_POLL_S, left_s))

    async def _resume(self) -> None:
        """``thread/resume``: subscribed from now on; the turns so far say whether one runs
        and which of our prompts started. Before the first turn: not yet (see above)."""
        try:
            result = await self._call("thread/resume", {"threadId": self.thread_id})
        except _RpcError as exc:
            if exc.code == NO_ROLLOUT_CODE and NO_ROLLOUT_TEXT in exc.message:
                return
            raise
        self.subscribed = True
        thread = result.get("thread") or {}
        self.busy = (thread.get("status") or {}).get("type") == "active"
        for turn in thread.get("turns") or []:
            await self._catch_up(turn)

    async def _catch_up(self, turn: Mapping[str, Any]) -> None:
        """A turn the resume answer lists: report its start, and its end if it ended, for
        the turns that began while the channel was not subscribed yet (only those: a
        channel reports turns from its attach on)."""
        turn_id = str(turn.get("id"))
        if turn_id in self._done or turn_id in self._turns:
            return
        running = turn.get("status") == "inProgress"
        items = list(turn.get("items") or [])
        prompt, client = user_message(items)
        if running and client is None:
            prompt, client = await self._started_from_queue()
        if not running and (client is None or client not in self._expected):
            self._done.add(turn_id)  # history from before the attach
            return
        state = self._start_turn(turn_id, prompt, client)
        if not running:
            self._end_turn(turn, state)

    async def _started_from_queue(self) -> tuple[str | None, str | None]:
        """``(text, id)`` of the prompt a running turn the channel did not see start runs:
        the first of ours that left Codex's queue. Codex lists a running turn without its
        items (``thread/items/list`` too, 0.171.0), so its user message cannot be read."""
        if not self._expected:
            return None, None
        listed = await self._call("thread/queue/list", {"threadId": self.thread_id})
        waiting = {str(q.get("clientUserMessageId")) for q in listed.get("data") or []}
        for prompt_id, text in self._expected.items():
            if prompt_id not in waiting:
                return text, prompt_id
        return None, None

    def _maybe_resume(self) -> None:
        if self.subscribed or self._closing or self._broken:
            return
        if self._resuming is None or self._resuming.done():
            self._resuming = spawn(self._resume_quietly(), name="codex channel resume")

    async def _resume_quietly(self) -> None:
        try:
            await self._resume()
        except ChannelError as exc:
            self._break(f"thread/resume failed: {exc}")

    # --- JSON-RPC ------------------------------------------------------------------------
    async def _send(self, message: Mapping[str, Any]) -> None:
        if self._ws is None or not self.alive:
            raise ChannelError(
                f"the Codex channel on {self.socket_path!r} is not open"
                + (f" ({self._broken})" if self._broken else "")
                + ": the prompt was not sent"
            )
        try:
            await self._ws.send(json.dumps(message))
        except WebSocketClosed as exc:
            self._break(str(exc))
            raise ChannelError(f"the Codex channel broke: {exc}") from exc

    async def _notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        await self._send({"method": method, **({"params": params} if params else {})})

    async def _call(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send({"id": request_id, "method": method, "params": params})
            result = await asyncio.wait_for(future, self.request_timeout_s)
        except asyncio.TimeoutError:
            raise ChannelError(
                f"the codex app-server did not answer {method} in {self.request_timeout_s:g} s"
            ) from None
        finally:
            self._pending.pop(request_id, None)
        return result if isinstance(result, dict) else {}

    async def _read_loop(self) -> None:
        assert self._ws is not None
        try:
            while True:
                text = await self._ws.recv()
                try:
                    message = json.loads(text)
                except json.JSONDecodeError:
                    self._break(
                        f"the codex app-server sent a message that is not JSON: {text[:80]!r}"
                    )
                    return
                if not isinstance(message, dict):
                    self._break(f"the codex app-server sent a non-object message: {text[:80]!r}")
                    return
                self._dispatch(message)
        except WebSocketClosed as exc:
            self._break(f"the codex app-server connection ended ({exc})")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave a silent channel behind
            log.exception("codex channel: reading failed")
            self._break(f"the Codex channel failed reading: {exc!r}")

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if future is None or future.done():
                return
            if "error" in message:
                error = message["error"] or {}
                future.set_exception(
                    _RpcError(int(error.get("code", 0)), str(error.get("message", "")))
                )
            else:
                future.set_result(message.get("result"))
        elif "id" in message:
            self._on_request(str(method), message["id"], message.get("params") or {})
        else:
            self._on_notification(str(method), message.get("params") or {})

    # --- what Codex tells -----------------------------------------------------------------
    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "thread/started":
            thread = params.get("thread") or {}
            if thread.get("ephemeral"):
                self._ephemeral.add(str(thread.get("id")))
            self._thread_seen.set()
            return
        if params.get("threadId") != self.thread_id or self.thread_id is None:
            return
        if method == "thread/status/changed":
            self.busy = (params.get("status") or {}).get("type") == "active"
            if self.busy:
                self._maybe_resume()
        elif method == "turn/started":
            turn_id = str((params.get("turn") or {}).get("id"))
            self._turns.setdefault(turn_id, _Turn(turn_id))
        elif method in ("item/started", "item/completed"):
            self._on_item(str(params.get("turnId")), params.get("item") or {}, method)
        elif method == "thread/tokenUsage/updated":
            usage = (params.get("tokenUsage") or {}).get("last")
            if isinstance(usage, dict):
                self._usage[str(params.get("turnId"))] = usage
        elif method == "turn/completed":
            turn = params.get("turn") or {}
            turn_id = str(turn.get("id"))
            if turn_id in self._done:
                return
            state = self._turns.get(turn_id) or self._start_turn(turn_id, None, None)
            self._end_turn(turn, state)
        elif method == "serverRequest/resolved":
            ask_id = str(params.get("requestId"))
            ask = self._asks.pop(ask_id, None)
            if ask is not None:
                self._emit(ChannelAskResolved(ask_id, "hub" if ask.answered else "agent"))

    def _on_item(self, turn_id: str, item: Mapping[str, Any], method: str) -> None:
        kind = item.get("type")
        if kind == "userMessage" and method == "item/started":
            prompt, client = user_message([item])
            state = self._turns.get(turn_id)
            if state is None or not state.started:
                self._start_turn(turn_id, prompt, client)
        elif kind == "agentMessage" and method == "item/completed":
            state = self._turns.get(turn_id) or self._start_turn(turn_id, None, None)
            state.messages.append(str(item.get("text", "")))

    def _start_turn(self, turn_id: str, prompt: str | None, client: str | None) -> _Turn:
        state = self._turns.setdefault(turn_id, _Turn(turn_id))
        if state.started:
            return state
        state.started, state.prompt = True, prompt
        if client is not None and client in self._expected:
            del self._expected[client]
            state.prompt_id = client
        waiter = self._waiters.get(client) if client is not None else None
        if waiter is not None and not waiter.future.done():
            waiter.future.set_result(ChannelAck(waiter.prompt_id, turn_id, False, time.time()))
        for other in self._waiters.values():  # a turn not theirs started first: they wait
            if other is not waiter and not other.future.done() and other.queued_id is not None:
                other.future.set_result(ChannelAck(other.prompt_id, None, True, time.time()))
        self._emit(ChannelTurnStarted(turn_id, prompt, state.prompt_id, time.time()))
        return state

    def _end_turn(self, turn: Mapping[str, Any], state: _Turn) -> None:
        turn_id = state.turn_id
        self._turns.pop(turn_id, None)
        self._done.add(turn_id)
        usage = self._usage.pop(turn_id, None) or {}
        cached = _int(usage.get("cachedInputTokens"))
        inputs = _int(usage.get("inputTokens"))
        status = str(turn.get("status") or "completed")
        self._emit(
            ChannelTurn(
                turn_id,
                turn_answer(turn, state.messages),
                status=status if status in ("completed", "interrupted", "failed") else "failed",
                prompt=state.prompt,
                prompt_id=state.prompt_id,
                input_tokens=None if inputs is None else inputs - (cached or 0),
                output_tokens=_int(usage.get("outputTokens")),
                cache_read_tokens=cached,
                at=time.time(),
            )
        )

    def _on_request(self, method: str, request_id: Any, params: dict[str, Any]) -> None:
        tool = APPROVAL_TOOLS.get(method)
        if tool is None or params.get("threadId") != self.thread_id:
            return  # not ours to answer: the TUI does (user input, other threads...)
        offered = params.get("availableDecisions") or ["accept", "decline"]
        decisions = {decision_name(d): d for d in offered}
        ask_id = str(request_id)
        self._asks[ask_id] = _Ask(request_id, decisions)
        command = str(params.get("command") or "")
        if tool == "edit" and not command:
            command = f"edit files ({params.get('itemId')})"
        self._emit(
            ChannelAsk(
                ask_id,
                tool,
                command,
                reason=str(params.get("reason") or ""),
                choices=tuple(decisions),
                rejects=tuple(c for c in decisions if c in REJECTS),
                at=time.time(),
            )
        )

    # --- breaking, emitting ---------------------------------------------------------------
    def _emit(self, event: ChannelEvent) -> None:
        self._listeners.emit(event)

    def _break(self, reason: str) -> None:
        if self._broken is not None or self._closing:
            return
        self._broken = reason
        self._fail_pending(reason)
        self._emit(ChannelBroken(reason))

    def _fail_pending(self, reason: str) -> None:
        for future in list(self._pending.values()):
            if not future.done():
                future.set_exception(ChannelError(reason))
        for waiter in list(self._waiters.values()):
            if not waiter.future.done():
                waiter.future.set_exception(ChannelError(reason))

    def _require_thread(self) -> str:
        if not self.alive:
            raise ChannelError(
                f"the Codex channel on {self.socket_path!r} is not open"
                + (f" ({self._broken})" if self._broken else " (attach it first)")
                + ": the prompt was not sent"
            )
        if self.thread_id is None:
            raise ChannelError("the Codex channel has no thread yet: attach it first")
        return self.thread_id

    def _open_asks(self) -> list[str]:
        return [k for k, a in self._asks.items() if not a.answered]

    async def _unqueue(self, waiter: _Waiter) -> ChannelAck:
        """The prompt did not start in time: take it off Codex's queue so it is not taken
        (never both); if that fails because it has started, it was taken after all."""
        if waiter.future.done():
            return waiter.future.result()
        if waiter.queued_id is not None:
            try:
                await self._call(
                    "thread/queue/delete",
                    {"threadId": self.thread_id, "queuedSubmissionId": waiter.queued_id},
                )
            except ChannelError:
                pass  # no longer queued: it started (the ack follows) or the channel broke
            else:
                self._expected.pop(waiter.prompt_id, None)
                raise ChannelError(
                    f"Codex did not start prompt {waiter.prompt_id!r} in "
                    f"{self.ack_timeout_s:g} s: it was taken off its queue, not delivered"
                )
        if waiter.future.done():
            return waiter.future.result()
        return ChannelAck(waiter.prompt_id, None, True, time.time())


class _RpcError(ChannelError):
    """A JSON-RPC error answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"codex app-server error {code}: {message}")
        self.code, self.message = code, message


def _exited(pid: int) -> bool:
    """``pid`` has ended: gone, or a zombie (the hub started it and has not reaped it yet,
    so the pid still exists: a server that died at start-up is told at once, not after
    the attach's whole timeout)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


def end_process_tree(pid: int, timeout_s: float = SERVER_TERM_TIMEOUT_S) -> list[int]:
    """End ``pid`` and its descendants: SIGTERM, then SIGKILL after ``timeout_s``; the pids
    ended. The app-server's native child goes with its node wrapper only if signalled too."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=timeout_s)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
    return [p.pid for p in procs]
