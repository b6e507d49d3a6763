"""OpenCode's native channel: its own HTTP server, while its TUI stays live in the pane.

Observed with OpenCode 1.18.33, offline (REAL-AGENTS.md, "Native channels"; the events as
the real one sent them: tests/fixtures/opencode_channel/). The TUI serves the API itself
(``opencode --port N``, with ``OPENCODE_SERVER_PASSWORD`` in its environment: HTTP basic
auth, user ``opencode``). Every request names the TUI's folder (``?directory=``).

- attach: ``GET /path`` (the server is up, the password taken, the TUI's folder), the event
  stream ``GET /event`` (``server.connected`` first), then the session: the newest one the
  TUI started after the hub started it, else ``POST /session`` and ``POST
  /tui/select-session`` so the pane shows it.
- submit: ``POST /session/{id}/prompt_async`` {messageID, parts}; the message id is ours, so
  the prompt is known by its user ``message.updated``. While a turn runs, OpenCode shows it
  ``QUEUED`` and runs it after, as a turn of its own.
- A turn's id is its user message's id: it starts with the first assistant ``message.updated``
  whose ``parentID`` is it (``session.status`` busy names no prompt), and ends with an
  assistant ``message.updated`` that is completed and did not stop for tool calls (one
  ``session.idle`` came for two prompts). Its steps' tokens and cost add up.
- ``permission.asked`` / ``POST /permission/{id}/reply`` {reply} / ``permission.replied``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import httpx2

from ...engine import spawn
from ...errors import MadohubValueError
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

NAME: Final = "opencode server"
PASSWORD_ENV: Final = "OPENCODE_SERVER_PASSWORD"
"""Where OpenCode's server takes its password from (its TUI's environment)."""
USERNAME: Final = "opencode"
"""The basic-auth user OpenCode expects unless ``OPENCODE_SERVER_USERNAME`` says otherwise."""
REPLIES: Final = ("once", "always", "reject")
"""OpenCode's own answers to a permission request, in the order its dialog shows them."""
REJECTS: Final = ("reject",)
TOOL_STEP_FINISH: Final = "tool-calls"
"""An assistant message that ended to run tools: the turn goes on in the next one."""
ABORTED_ERROR: Final = "MessageAbortedError"

ATTACH_POLL_S: Final = 0.1
STREAM_CONNECT_S: Final = 3.0
"""How long a new event stream may take to say ``server.connected`` before it is reopened."""
ACK_TIMEOUT_S: Final = 15.0
"""How long submit waits for OpenCode to record the prompt (its user message) and start it."""
REQUEST_TIMEOUT_S: Final = 10.0

_ID_TIME_MASK: Final = (1 << 48) - 1
_ID_RANDOM_CHARS: Final = 14
_BASE62: Final = string.digits + string.ascii_uppercase + string.ascii_lowercase


class _MessageIds:
    """Message ids as OpenCode makes them (``msg_`` + 12 hex digits of ms*4096+counter, + 14
    random base-62 characters), so ours sort among its own in the conversation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = 0
        self._counter = 0

    def new(self) -> str:
        with self._lock:
            now_ms = int(time.time() * 1000)
            if now_ms != self._last_ms:
                self._last_ms, self._counter = now_ms, 0
            self._counter += 1
            stamp = (now_ms * 0x1000 + self._counter) & _ID_TIME_MASK
        tail = "".join(secrets.choice(_BASE62) for _ in range(_ID_RANDOM_CHARS))
        return f"msg_{stamp.to_bytes(6, 'big').hex()}{tail}"


MESSAGE_IDS: Final = _MessageIds()


@dataclass
class _Turn:
    """One prompt's turn as it runs: its assistant messages (steps) and what they cost."""

    turn_id: str
    prompt: str | None
    prompt_id: str | None
    steps: list[str] = field(default_factory=list)
    counted: set[str] = field(default_factory=set)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    model: str | None = None
    first_ms: int | None = None
    """When its first step began (``time.created``, OpenCode's clock, ms)."""
    last_ms: int | None = None
    """When its latest step completed."""
    ended: bool = False


@dataclass
class _Pending:
    """A prompt submitted and not yet acknowledged."""

    prompt_id: str
    text: str
    done: asyncio.Future[ChannelAck]


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class OpenCodeChannel:
    """A client of one OpenCode TUI's server on ``127.0.0.1:port`` (see the module's text).

    ``since``: ``time.time()`` before the TUI started; a session it made after that is its
    own (the person typed first), an older one in the folder is not taken over.
    """

    name = NAME

    def __init__(
        self,
        port: int,
        password: str,
        *,
        directory: str | None = None,
        since: float | None = None,
        host: str = "127.0.0.1",
        username: str = USERNAME,
    ) -> None:
        self.port = port
        self.directory = directory
        self.session_id: str | None = None
        self._since_ms = int((since if since is not None else time.time()) * 1000)
        self._base = f"http://{host}:{port}"
        self._auth = httpx2.BasicAuth(username, password)
        self._client: httpx2.AsyncClient | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._connected: asyncio.Future[None] | None = None
        self._listeners = ChannelListeners()
        self._alive = False
        self._closing = False
        self._broken: str | None = None
        self._children: set[str] = set()
        self._prompts: dict[str, str] = {}
        """Our message id -> our prompt id."""
        self._pending: dict[str, _Pending] = {}
        self._user_text: dict[str, str] = {}
        self._parts: dict[str, dict[str, str]] = {}
        """Message id -> part id -> text, in order of arrival."""
        self._tool_inputs: dict[str, dict[str, Any]] = {}
        """A tool call's id -> its input (a permission request's description)."""
        self._turns: dict[str, _Turn] = {}
        self._running: str | None = None
        self._answered: set[str] = set()
        self._show_again = False
        """Select our session in the TUI once more at the first submit: a TUI still starting
        up when attach selected it may have missed that (its home screen stays)."""

    def __repr__(self) -> str:
        return f"OpenCodeChannel(port={self.port}, directory={self.directory!r})"

    # ------------------------------------------------------------------ the Channel protocol

    @property
    def alive(self) -> bool:
        return self._alive and self._broken is None

    async def attach(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self._client = httpx2.AsyncClient(
            base_url=self._base, auth=self._auth, timeout=REQUEST_TIMEOUT_S, trust_env=False
        )
        path = await self._wait_for_server(deadline)
        if self.directory is None:
            directory = path.get("directory")
            if not isinstance(directory, str) or not directory:
                await self.close()
                raise ChannelError(f"OpenCode's server at {self._base} named no folder: {path!r}")
            self.directory = directory
        await self._open_stream(deadline, timeout_s)
        self._alive = True
        try:
            self.session_id = await self._find_session()
        except (ChannelError, KeyError, ValueError) as exc:
            await self.close()
            raise ChannelError(f"OpenCode's channel found no session to use: {exc}") from None

    async def _open_stream(self, deadline: float, timeout_s: float) -> None:
        """The event stream, once it said ``server.connected``. Opened while the TUI still
        starts, OpenCode's stream can stay silent for good (seen once): it is opened again."""
        loop = asyncio.get_running_loop()
        while True:
            self._connected = loop.create_future()
            self._stream_task = spawn(self._read_events(), name="opencode channel events")
            wait_s = min(STREAM_CONNECT_S, deadline - time.monotonic())
            try:
                await asyncio.wait_for(asyncio.shield(self._connected), max(0.1, wait_s))
            except TimeoutError:
                await self._stop_stream()
                if time.monotonic() < deadline:
                    continue
                await self.close()
                raise ChannelError(
                    f"OpenCode's event stream at {self._base} sent nothing in {timeout_s:g} s"
                ) from None
            if self._stream_task is not None and self._stream_task.done():
                continue  # (it ended at once: open it again)
            return

    async def submit(self, text: str, prompt_id: str) -> ChannelAck:
        if not self.alive or self.session_id is None:
            raise ChannelError(
                f"OpenCode's channel is {self._broken or 'not attached'}: prompt {prompt_id} "
                "was not handed in (deliver it another way)"
            )
        message_id = MESSAGE_IDS.new()
        pending = _Pending(prompt_id, text, asyncio.get_running_loop().create_future())
        self._pending[message_id] = pending
        self._prompts[message_id] = prompt_id
        body = {"messageID": message_id, "parts": [{"type": "text", "text": text}]}
        posted = False
        try:
            if self._show_again:
                self._show_again = False
                await self._post("/tui/select-session", {"sessionID": self.session_id})
            # From here OpenCode may hold the prompt: a failure is ChannelUnsure (never typed
            # as well), except a connection never made or a request it refused.
            await self._request(
                "POST", f"/session/{self.session_id}/prompt_async", body, handed_in=True
            )
            posted = True
            return await asyncio.wait_for(asyncio.shield(pending.done), ACK_TIMEOUT_S)
        except TimeoutError:
            raise ChannelUnsure(
                f"OpenCode did not start prompt {prompt_id} within {ACK_TIMEOUT_S:g} s "
                f"(message {message_id} was handed to session {self.session_id}; it may "
                "still run it)"
            ) from None
        except ChannelUnsure:
            raise
        except ChannelError as exc:
            if posted:  # (it broke after OpenCode took the request)
                raise ChannelUnsure(f"{exc}; the prompt was handed in, it may still run") from None
            raise
        finally:
            self._pending.pop(message_id, None)

    async def answer(self, ask_id: str, choice: str) -> None:
        if choice not in REPLIES:
            raise MadohubValueError(
                f"OpenCode answers a permission request with one of {', '.join(REPLIES)}, "
                f"not {choice!r}: pick one of those"
            )
        self._answered.add(ask_id)
        try:
            await self._post(f"/permission/{ask_id}/reply", {"reply": choice})
        except ChannelError:
            self._answered.discard(ask_id)
            raise

    def subscribe(self, listener: Callable[[ChannelEvent], None]) -> Callable[[], None]:
        return self._listeners.subscribe(listener)

    async def close(self) -> None:
        """Stop listening. The server is the TUI's own: it ends with the pane."""
        self._closing = True
        self._alive = False
        await self._stop_stream()
        self._fail_pending("closed")
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _stop_stream(self) -> None:
        task, self._stream_task = self._stream_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 (stopping: nothing to tell)
                pass

    # ------------------------------------------------------------------ requests

    def _params(self) -> dict[str, str]:
        return {"directory": self.directory} if self.directory else {}

    async def _wait_for_server(self, deadline: float) -> dict[str, Any]:
        """``GET /path`` until the server answers; a refused password fails at once."""
        assert self._client is not None
        last = "no answer"
        while True:
            try:
                response = await self._client.get("/path")
            except httpx2.TransportError as exc:
                last = type(exc).__name__
            else:
                if response.status_code == 401:
                    await self.close()
                    raise ChannelError(
                        f"OpenCode's server at {self._base} refused the hub's password (401): "
                        f"the TUI was started without this tile's {PASSWORD_ENV}"
                    )
                if response.is_success:
                    data = response.json()
                    return data if isinstance(data, dict) else {}
                last = f"HTTP {response.status_code}"
            if time.monotonic() >= deadline:
                await self.close()
                raise ChannelError(
                    f"OpenCode's server at {self._base} did not come up ({last}): is the TUI "
                    f"running with --port {self.port}?"
                )
            await asyncio.sleep(ATTACH_POLL_S)

    async def _request(
        self, method: str, path: str, body: object = None, *, handed_in: bool = False
    ) -> httpx2.Response:
        """One request; ``handed_in``: a failure once the request may have reached the
        server (not a refused connection) is :class:`ChannelUnsure`."""
        client = self._client
        if client is None:
            raise ChannelError(f"OpenCode's channel is closed ({method} {path} not sent)")
        try:
            response = await client.request(
                method, path, params=self._params(), json=body if body is not None else None
            )
        except httpx2.HTTPError as exc:
            unsure = handed_in and not isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout)
            raise (ChannelUnsure if unsure else ChannelError)(
                f"OpenCode's server at {self._base} did not answer {method} {path}: "
                f"{type(exc).__name__}"
            ) from None
        if not response.is_success:
            raise ChannelError(
                f"OpenCode's server answered {method} {path} with HTTP {response.status_code}: "
                f"{response.text[:200]}"
            )
        return response

    async def _post(self, path: str, body: object) -> httpx2.Response:
        return await self._request("POST", path, body)

    async def _find_session(self) -> str:
        """The TUI's session: the newest root session it made since ``since``, else a new
        one, shown in the pane (``/tui/select-session``)."""
        listed = (await self._request("GET", "/session")).json()
        own = [
            s
            for s in (listed if isinstance(listed, list) else [])
            if isinstance(s, dict)
            and not s.get("parentID")
            and _int((s.get("time") or {}).get("created")) >= self._since_ms
        ]
        if own:
            newest = max(own, key=lambda s: _int((s.get("time") or {}).get("updated")))
            return str(newest["id"])
        created = (await self._post("/session", {})).json()
        session_id = str(created["id"])
        await self._post("/tui/select-session", {"sessionID": session_id})
        self._show_again = True
        return session_id

    # ------------------------------------------------------------------ events

    async def _read_events(self) -> None:
        assert self._client is not None
        reason = "OpenCode's event stream ended (its server exited)"
        try:
            async with self._client.stream(
                "GET", "/event", params=self._params(), timeout=httpx2.Timeout(5.0, read=None)
            ) as response:
                if not response.is_success:
                    reason = f"OpenCode's event stream answered HTTP {response.status_code}"
                    return
                data: list[str] = []
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip(" "))
                    elif not line and data:
                        self._on_data("\n".join(data))
                        data = []
                    if self._broken is not None:
                        return
        except httpx2.HTTPError as exc:
            reason = f"OpenCode's event stream failed: {type(exc).__name__}"
        finally:
            if self._alive and not self._closing:  # (before attach is done, attach retries)
                self._break(reason)

    def _on_data(self, text: str) -> None:
        try:
            event = json.loads(text)
        except json.JSONDecodeError:
            self._break(f"OpenCode sent an event that is not JSON: {text[:120]!r}")
            return
        if isinstance(event, dict):
            props = event.get("properties")
            self.handle_event(str(event.get("type")), props if isinstance(props, dict) else {})

    def handle_event(self, kind: str, props: dict[str, Any]) -> None:
        """One event of OpenCode's stream (``type``, ``properties``)."""
        if kind == "server.connected":
            if self._connected is not None and not self._connected.done():
                self._connected.set_result(None)
        elif kind == "server.instance.disposed":
            self._break("OpenCode's server closed this folder's instance (the TUI exited)")
        elif kind in ("session.created", "session.updated"):
            info = props.get("info") or {}
            if info.get("parentID"):
                self._children.add(str(info.get("id")))
        elif kind == "tui.session.select":
            self.session_id = str(props.get("sessionID") or self.session_id)
        elif kind == "message.updated":
            self._on_message(props.get("info") or {})
        elif kind == "message.part.updated":
            self._on_part(props.get("part") or {})
        elif kind == "message.part.delta":
            if props.get("field") == "text":
                parts = self._parts.setdefault(str(props.get("messageID")), {})
                key = str(props.get("partID"))
                parts[key] = parts.get(key, "") + str(props.get("delta") or "")
        elif kind == "permission.asked":
            self._on_ask(props)
        elif kind == "permission.replied":
            ask_id = str(props.get("requestID"))
            by = "hub" if ask_id in self._answered else "agent"
            self._answered.discard(ask_id)
            self._emit(ChannelAskResolved(ask_id, by=by))

    def _on_part(self, part: dict[str, Any]) -> None:
        if part.get("type") == "text" and not part.get("synthetic"):
            message_id = str(part.get("messageID"))
            self._parts.setdefault(message_id, {})[str(part.get("id"))] = str(
                part.get("text") or ""
            )
        elif part.get("type") == "tool":
            state = part.get("state") or {}
            if isinstance(state.get("input"), dict):
                self._tool_inputs[str(part.get("callID"))] = state["input"]

    def _text(self, message_id: str) -> str:
        return "".join(self._parts.get(message_id, {}).values())

    def _on_message(self, info: dict[str, Any]) -> None:
        if str(info.get("sessionID")) in self._children:
            return
        message_id = str(info.get("id"))
        if info.get("role") == "user":
            pending = self._pending.get(message_id)
            if pending is not None and self._running not in (None, message_id):
                self._ack(message_id, queued=True)
            return
        if info.get("role") != "assistant" or not info.get("parentID"):
            return
        turn = self._turn_for(str(info["parentID"]))
        if turn.ended:
            return
        if message_id not in turn.steps:
            turn.steps.append(message_id)
        times = info.get("time") or {}
        created = _int(times.get("created"))
        if created and (turn.first_ms is None or created < turn.first_ms):
            turn.first_ms = created
        if not times.get("completed") or message_id in turn.counted:
            return
        turn.counted.add(message_id)
        turn.last_ms = max(turn.last_ms or 0, _int(times.get("completed"))) or None
        if isinstance(info.get("modelID"), str):
            turn.model = info["modelID"]
        tokens = info.get("tokens") or {}
        turn.input_tokens += _int(tokens.get("input"))
        turn.output_tokens += _int(tokens.get("output")) + _int(tokens.get("reasoning"))
        turn.cache_read_tokens += _int((tokens.get("cache") or {}).get("read"))
        cost = info.get("cost")
        turn.cost_usd += float(cost) if isinstance(cost, int | float) else 0.0
        error = info.get("error")
        if info.get("finish") == TOOL_STEP_FINISH and not error:
            return
        self._end(turn, message_id, error)

    def _turn_for(self, turn_id: str) -> _Turn:
        """The turn of user message ``turn_id``, started (and reported) on first sight."""
        turn = self._turns.get(turn_id)
        if turn is None:
            pending = self._pending.get(turn_id)
            prompt = pending.text if pending is not None else self._text(turn_id) or None
            turn = _Turn(turn_id, prompt, self._prompts.get(turn_id))
            self._turns[turn_id] = turn
            self._running = turn_id
            self._emit(
                ChannelTurnStarted(turn_id, prompt=prompt, prompt_id=turn.prompt_id, at=time.time())
            )
            if pending is not None:
                self._ack(turn_id, queued=False)
        return turn

    def _end(self, turn: _Turn, last_step: str, error: object) -> None:
        turn.ended = True
        if self._running == turn.turn_id:
            self._running = None
        answer = self._text(last_step) or "\n\n".join(
            t for t in (self._text(step) for step in turn.steps) if t
        )
        status = "completed"
        if isinstance(error, dict):
            status = "interrupted" if error.get("name") == ABORTED_ERROR else "failed"
        self._prompts.pop(turn.turn_id, None)
        self._emit(
            ChannelTurn(
                turn.turn_id,
                answer,
                status=status,
                prompt=turn.prompt,
                prompt_id=turn.prompt_id,
                input_tokens=turn.input_tokens,
                output_tokens=turn.output_tokens,
                cache_read_tokens=turn.cache_read_tokens,
                cost_usd=turn.cost_usd,
                at=time.time(),
                model=turn.model,
                turn_ms=(
                    float(turn.last_ms - turn.first_ms)
                    if turn.first_ms is not None and turn.last_ms is not None
                    else None
                ),
            )
        )
        for step in turn.steps:
            self._parts.pop(step, None)

    def _on_ask(self, props: dict[str, Any]) -> None:
        metadata = props.get("metadata") or {}
        patterns = props.get("patterns") or []
        command = metadata.get("command") or " ".join(str(p) for p in patterns)
        call = (props.get("tool") or {}).get("callID")
        tool_input = self._tool_inputs.get(str(call), {})
        reason = metadata.get("description") or tool_input.get("description") or ""
        self._emit(
            ChannelAsk(
                str(props.get("id")),
                tool=str(props.get("permission") or ""),
                command=str(command),
                reason=str(reason),
                choices=REPLIES,
                rejects=REJECTS,
                at=time.time(),
            )
        )

    def _ack(self, message_id: str, *, queued: bool) -> None:
        pending = self._pending.get(message_id)
        if pending is None or pending.done.done():
            return
        turn_id = None if queued else message_id
        pending.done.set_result(ChannelAck(pending.prompt_id, turn_id, queued, time.time()))

    def _fail_pending(self, reason: str) -> None:
        for message_id, pending in list(self._pending.items()):
            if not pending.done.done():
                pending.done.set_exception(
                    ChannelError(f"OpenCode's channel {reason} before it took {message_id}")
                )

    def _break(self, reason: str) -> None:
        if self._broken is not None or self._closing:
            return
        self._broken = reason
        self._alive = False
        self._fail_pending("broke")
        self._emit(ChannelBroken(reason))

    def _emit(self, event: ChannelEvent) -> None:
        self._listeners.emit(event)
