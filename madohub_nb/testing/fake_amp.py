"""A local stand-in for Amp's backend, as the real Amp CLI uses it.

Amp's agent loop runs on its servers: the CLI only shows the thread and runs
tools, so a fake model API is not enough (REAL-AGENTS.md, "Amp"). Amp
``0.0.1790142911-g7618fb`` pointed at this fake (``amp.url`` in
``~/.config/amp/settings.json``, ``AMP_URL``, ``AMP_API_KEY``) finishes a turn
offline. The fake answers:

- ``POST /api/internal?<method>`` ``{"method", "params"}`` with ``{"ok": true,
  "result": …}``: a user for ``getUserInfo``, empty lists for ``listAgentModes``
  and ``notices``, no plugins, no automations, ``{}`` for any other method;
- ``POST /api/user-actor-credentials`` and ``POST /api/thread-actors`` (a new
  thread ``T-<uuid>`` per call);
- the thread actor's WebSocket (``/actors/…/websocket/``, subprotocol
  ``rivet``): RFC 6455 text frames of JSON-RPC 2.0, served by a small
  hand-rolled frame reader here (no WebSocket library). Each request is
  answered ``{}``; ``executor_connect`` gets ``executor_connected`` and
  ``agent_state idle`` pushed; each ``client_append_user_msg`` gets the user
  message back, ``agent_state working``, the assistant's answer as one complete
  ``message_added`` and ``agent_state idle``. A text frame ``ping`` gets ``pong``.

Scripted like the other fakes: the default answer is ``Done: <first 40
characters of the prompt>``, ``reply`` gives a fixed text or a function of the
prompt, ``queue`` lines up answers taken one per turn before ``reply``,
``[[sleep N]]`` in a prompt pauses N seconds between ``working`` and the answer.
``prompts`` records every user message's text, ``rpc`` every JSON-RPC message
the clients sent (``method``, ``params``), ``internal_methods`` every
``/api/internal`` method asked. It binds 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import string
import struct
import threading
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ._http import FakeHandler, FakeServer, sleep_seconds
from .fake_anthropic import default_answer

Reply = str | Callable[[str], "str | None"]
"""A fixed answer text, or ``f(prompt) -> text | None`` (None: the default answer)."""

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SUBPROTOCOL = "rivet"
MAX_FRAME_BYTES = 16 * 1024 * 1024
"""A client frame longer than this closes the connection (1009)."""

_ID_ALPHABET = string.ascii_letters + string.digits

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

USER = {
    "id": "user-fake-amp",
    "email": "fake@127.0.0.1.invalid",
    "emailVerified": True,
    "username": "fake",
    "displayName": "Fake Amp User",
    "features": [],
    "team": None,
}

INTERNAL_RESULTS: dict[str, Any] = {
    "getUserInfo": USER,
    "listAgentModes": [],
    "loadPlugins": {"plugins": []},
    "notices": [],
    "listAutomations": {"automations": []},
    "splashDispatch": None,  # (else its welcome card reads "undefined")
    "newsCard": None,
}
"""What ``/api/internal`` answers per method; any other method gets ``{}``."""


def message_id() -> str:
    """An Amp message id: ``M-`` and 22 letters or digits (Amp drops messages with others)."""
    return "M-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(22))


def content_text(content: object) -> str:
    """The text of a message's ``content``: a string, or its ``text`` parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [
        p["text"]
        for p in content
        if isinstance(p, dict)
        and p.get("type", "text") == "text"
        and isinstance(p.get("text"), str)
    ]
    return "\n".join(texts)


class WebSocketClosed(Exception):
    """The client closed the WebSocket, or sent something no RFC 6455 peer sends."""


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final server frame."""
    head = bytes([0x80 | opcode])
    size = len(payload)
    if size < 126:
        head += bytes([size])
    elif size < 1 << 16:
        head += bytes([126]) + struct.pack("!H", size)
    else:
        head += bytes([127]) + struct.pack("!Q", size)
    return head + payload


class FakeAmp(FakeServer):
    """A scripted Amp backend (HTTP routes and thread WebSocket) on ``127.0.0.1``.

    Point Amp at ``base_url`` (``amp.url`` and ``AMP_URL``). ``threads`` holds
    every thread id handed out, ``answers`` every ``(thread id, text)`` the fake
    sent as the assistant, ``unknown_paths`` every path answered 404.
    """

    thread_name = "fake-amp"
    server_version = "FakeAmp/1"
    request_id_header = "x-request-id"

    def __init__(self, reply: Reply | None = None, *, port: int = 0) -> None:
        super().__init__(port=port)
        self.reply = reply
        self.queued: deque[str] = deque()
        self.rpc: list[dict[str, Any]] = []
        self.internal_methods: list[str] = []
        self.threads: list[str] = []
        self.answers: list[tuple[str, str]] = []
        self.unknown_paths: list[str] = []

    def queue(self, *texts: str) -> None:
        """Answer the next turns with ``texts``, one per user message, before ``reply``."""
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"queue takes answer texts (str), got {type(text).__name__}")
        with self._lock:
            self.queued.extend(texts)

    # HTTP --------------------------------------------------------------------
    def handle_post(self, http: FakeHandler, path: str, headers: dict[str, str], body: Any) -> None:
        if path == "/api/internal":
            method = body.get("method") if isinstance(body, dict) else None
            if not isinstance(method, str):
                method = http.path.partition("?")[2].split("&")[0]
            with self._lock:
                self.internal_methods.append(method)
            result = INTERNAL_RESULTS.get(method, {})
            http.send_json(200, json.dumps({"ok": True, "result": result}))
        elif path == "/api/user-actor-credentials":
            http.send_json(
                200,
                json.dumps(
                    {"userId": USER["id"], "wsToken": secrets.token_hex(16), "poolName": "default"}
                ),
            )
        elif path == "/api/thread-actors":
            thread_id = f"T-{uuid.uuid4()}"
            with self._lock:
                self.threads.append(thread_id)
            http.send_json(
                200,
                json.dumps(
                    {
                        "threadId": thread_id,
                        "wsToken": secrets.token_hex(16),
                        "ownerUserId": USER["id"],
                        "threadVersion": 1,
                        "usesThreadActors": True,
                        "poolName": "default",
                    }
                ),
            )
        else:
            self._unknown(path)
            http.send_json(404, json.dumps({"ok": False, "error": f"no route for POST {path}"}))

    def handle_get(self, http: FakeHandler, path: str, headers: dict[str, str]) -> None:
        self._record("GET", http.path, headers, None)
        upgrade = headers.get("upgrade", "").lower() == "websocket"
        if upgrade and path.startswith("/actors/") and "threadActor" in path:
            self._serve_websocket(http, headers)
            return
        self._unknown(path)
        http.send_json(404, json.dumps({"ok": False, "error": f"no route for GET {path}"}))

    def _unknown(self, path: str) -> None:
        with self._lock:
            self.unknown_paths.append(path)

    # WebSocket -----------------------------------------------------------------
    def _serve_websocket(self, http: FakeHandler, headers: dict[str, str]) -> None:
        key = headers.get("sec-websocket-key")
        if not key:
            http.send_json(400, json.dumps({"error": "Sec-WebSocket-Key missing"}))
            return
        http.send_response(101)
        http.send_header("upgrade", "websocket")
        http.send_header("connection", "Upgrade")
        http.send_header("sec-websocket-accept", accept_key(key))
        offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")]
        if SUBPROTOCOL in offered:
            http.send_header("sec-websocket-protocol", SUBPROTOCOL)
        http.end_headers()
        http.wfile.flush()
        http.close_connection = True
        thread_id = _query_value(http.path, "rvt-key") or ""
        session = _Session(self, http, thread_id)
        try:
            while not self._stopping.is_set():
                session.on_text(session.read_message())
        except (WebSocketClosed, OSError):
            pass

    def _answer_for(self, prompt: str) -> str:
        with self._lock:
            queued = self.queued.popleft() if self.queued else None
        if queued is not None:
            return queued
        scripted: str | None = None
        if isinstance(self.reply, str):
            scripted = self.reply
        elif self.reply is not None:
            scripted = self.reply(prompt)
        return scripted if scripted is not None else default_answer(prompt)


class _Session:
    """One thread WebSocket: reads client frames, writes JSON-RPC answers and pushes."""

    def __init__(self, fake: FakeAmp, http: FakeHandler, thread_id: str) -> None:
        self.fake = fake
        self.rfile = http.rfile
        self.wfile = http.wfile
        self.thread_id = thread_id
        self.seq = 0
        self.write_lock = threading.Lock()

    # frames
    def _read_exact(self, count: int) -> bytes:
        data = self.rfile.read(count)
        if len(data) < count:
            raise WebSocketClosed("connection ended inside a frame")
        return data

    def read_message(self) -> str:
        """The next whole text message (control frames answered on the way)."""
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read_exact(2)
            opcode, final = b0 & 0x0F, bool(b0 & 0x80)
            size = b1 & 0x7F
            if size == 126:
                size = struct.unpack("!H", self._read_exact(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", self._read_exact(8))[0]
            if size > MAX_FRAME_BYTES:
                self.send(OP_CLOSE, struct.pack("!H", 1009))
                raise WebSocketClosed(f"frame of {size} bytes")
            mask = self._read_exact(4) if b1 & 0x80 else b""
            payload = self._read_exact(size)
            if mask:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            if opcode == OP_CLOSE:
                self.send(OP_CLOSE, payload[:2])
                raise WebSocketClosed("close frame")
            if opcode == OP_PING:
                self.send(OP_PONG, payload)
                continue
            if opcode == OP_PONG:
                continue
            if opcode not in (OP_TEXT, OP_BINARY, OP_CONT):
                raise WebSocketClosed(f"unknown opcode {opcode}")
            parts.append(payload)
            if final:
                return b"".join(parts).decode("utf-8", "replace")

    def send(self, opcode: int, payload: bytes) -> None:
        with self.write_lock:
            self.wfile.write(encode_frame(opcode, payload))
            self.wfile.flush()

    def send_json(self, value: dict[str, Any]) -> None:
        self.send(OP_TEXT, json.dumps(value, ensure_ascii=False).encode())

    def push(self, kind: str, **params: Any) -> None:
        """A JSON-RPC notification of one thread event (``method`` is the event's type)."""
        self.seq += 1
        if kind == "message_added":
            params["seq"] = self.seq
        self.send_json({"jsonrpc": "2.0", "method": kind, "params": params})

    # JSON-RPC
    def on_text(self, text: str) -> None:
        if text == "ping":
            self.send(OP_TEXT, b"pong")
            return
        try:
            value = json.loads(text)
        except ValueError:
            return
        for message in value if isinstance(value, list) else [value]:
            if isinstance(message, dict):
                self.on_message(message)

    def on_message(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        raw = message.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if not isinstance(method, str):
            return  # (a response to something the fake never asked)
        with self.fake._lock:
            self.fake.rpc.append({"method": method, "params": params})
        if "id" in message:
            self.send_json({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        if method == "executor_connect":
            self.push(
                "executor_connected",
                executorId=f"E-{uuid.uuid4()}",
                registeredToolCount=0,
                guidanceInventory=[],
            )
            self.push("agent_state", state="idle")
        elif method == "client_resume":
            self.push("agent_state", state="idle")
        elif method == "client_append_user_msg":
            self.turn(params)

    def turn(self, params: dict[str, Any]) -> None:
        """Echo the user message, then answer it as one complete assistant message."""
        content = params.get("content")
        prompt = content_text(content)
        user_id = params.get("messageId")
        if not isinstance(user_id, str):
            user_id = message_id()
        self.push(
            "message_added",
            message={
                "threadId": self.thread_id,
                "role": "user",
                "content": content if isinstance(content, list) else [_text(prompt)],
                "messageId": user_id,
            },
        )
        self.fake._add_prompt(prompt)
        self.push("agent_state", state="working")
        self.fake._pause(sleep_seconds(prompt))
        answer = self.fake._answer_for(prompt)
        with self.fake._lock:
            self.fake.answers.append((self.thread_id, answer))
        reply = {
            "threadId": self.thread_id,
            "role": "assistant",
            "content": [_text(answer)],
            "state": {"type": "complete", "stopReason": "end_turn"},
            "messageId": message_id(),
        }
        self.push("message_added", message=reply)
        # The CLI runs its plugins' agent.end handlers on this request (and answers it).
        event = {
            "thread": {"id": self.thread_id},
            "message": prompt,
            "id": user_id,
            "status": "done",
            "messages": [
                {"role": "user", "content": [_text(prompt)], "messageId": user_id},
                {k: v for k, v in reply.items() if k != "threadId"},
            ],
        }
        self.push(
            "plugin_message",
            message={
                "type": "request",
                "id": f"P-{uuid.uuid4()}",
                "method": "agent.end",
                "params": {"event": event},
            },
        )
        self.push("agent_state", state="idle")


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _query_value(target: str, name: str) -> str | None:
    values = parse_qs(urlsplit(target).query).get(name)
    return values[0] if values else None
