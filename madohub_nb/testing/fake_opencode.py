"""A local stand-in for OpenCode 1.18.33's own server (the TUI's API), for the fast tier.

Real HTTP and SSE on ``127.0.0.1``, HTTP basic auth (user ``opencode``, the password it was
given), the endpoints the hub's channel uses (``GET /path``, ``GET``/``POST /session``,
``POST /tui/select-session``, ``POST /session/{id}/prompt_async``, ``POST
/permission/{id}/reply``, ``GET /event``) and the events, in the order and shape the real
one sent them (tests/fixtures/opencode_channel/events-1.18.33.sse). One session's prompts
run one at a time: a prompt sent while one runs waits (OpenCode's ``QUEUED``) and runs as
its own turn.

Scripted like the fake model APIs: the answer is ``reply(prompt)`` (default ``Done: <first
40 characters>``), ``[[sleep N]]`` pauses N seconds before the answer, and ``[[ask]]``
makes the turn ask permission to run :data:`ASK_COMMAND` first (a ``bash`` tool step).
:meth:`FakeOpenCode.kill` ends it the way a killed server ends: streams cut, port closed.
"""

from __future__ import annotations

import base64
import itertools
import json
import queue
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from ._http import sleep_seconds, split_chunks
from .fake_anthropic import default_answer

USERNAME: Final = "opencode"
ASK_MARKER: Final = "[[ask]]"
ASK_COMMAND: Final = "touch made_by_tool"
ASK_DESCRIPTION: Final = "Create the file made_by_tool"
STEP_COST_USD: Final = 0.0125
"""What each model step costs (the real one reports 0 for an unpriced model)."""
CACHE_READ_TOKENS: Final = 7
ASK_WAIT_S: Final = 60.0


def _tokens(text: str) -> int:
    return len(text) // 4 + 1


class FakeOpenCode:
    """OpenCode's server for one folder, answering prompts from a script (see the module)."""

    def __init__(
        self,
        password: str,
        directory: str,
        *,
        reply: Callable[[str], str] | None = None,
        port: int = 0,
    ) -> None:
        """``port``: where to listen on 127.0.0.1 (0: a free one, see :attr:`port`)."""
        self.password = password
        self.directory = directory
        self.reply = reply or default_answer
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, answered or refused."""
        self.sessions: dict[str, dict[str, Any]] = {}
        self.selected: str | None = None
        self.selects: list[str] = []
        """Every session ``/tui/select-session`` was asked to show, in order."""
        self.failing: set[tuple[str, str]] = set()
        """(method, path) answered HTTP 500, as a server in trouble would."""
        self.silent_streams = 0
        """How many of the next ``/event`` streams send nothing at all (as the real one's
        first did once while its TUI was still starting)."""
        self.prompts: list[str] = []
        self.unheard = 0
        """How many of the next prompts are taken (HTTP 204) and then never started nor
        recorded, as by a server too busy to say (the hub must not type them again)."""
        self._ids = itertools.count(1)
        self._clients: list[queue.Queue[dict[str, Any] | None]] = []
        self._lock = threading.Lock()
        self._work: queue.Queue[tuple[str, str, str] | None] = queue.Queue()
        self._asks: dict[str, queue.Queue[str]] = {}
        self._stopped = threading.Event()
        self._abort = threading.Event()
        """Set to cut the running turn's pause short: by ``/abort``, or by ``kill``."""
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._threads = [
            threading.Thread(target=self._server.serve_forever, name="fake-opencode", daemon=True),
            threading.Thread(target=self._run_prompts, name="fake-opencode-turns", daemon=True),
        ]

    # ------------------------------------------------------------------ lifetime

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> FakeOpenCode:
        for thread in self._threads:
            thread.start()
        return self

    def kill(self) -> None:
        """End as a killed server ends: event streams cut, the port closed, turns dropped."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._abort.set()
        self._work.put(None)
        for answers in list(self._asks.values()):
            answers.put("reject")
        with self._lock:
            for client in self._clients:
                client.put(None)
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> FakeOpenCode:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    # ------------------------------------------------------------------ events

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{time.time_ns() // 1000:x}{next(self._ids):06d}fake"

    def emit(self, kind: str, properties: dict[str, Any]) -> None:
        """Send one event to every open ``/event`` stream."""
        event = {"id": self._new_id("evt"), "type": kind, "properties": properties}
        with self._lock:
            for client in self._clients:
                client.put(event)

    def _now_ms(self) -> int:
        return int(time.time() * 1000)

    # ------------------------------------------------------------------ sessions

    def new_session(self) -> str:
        """A new session in its folder (``POST /session``); its id."""
        now, session_id = self._now_ms(), self._new_id("ses")
        session: dict[str, Any] = {
            "id": session_id, "directory": self.directory, "version": "1.18.33",
            "title": "New session", "time": {"created": now, "updated": now},
        }  # fmt: skip
        self.sessions[session_id] = session
        self.emit("session.created", {"sessionID": session_id, "info": session})
        return session_id

    def select(self, session_id: str) -> None:
        """The TUI shows ``session_id`` (``POST /tui/select-session``)."""
        self.selected = session_id
        self.selects.append(session_id)
        self.emit("tui.session.select", {"sessionID": session_id})

    def type_prompt(self, text: str) -> None:
        """A prompt the person typed in the TUI: into the session it shows (a new one, shown,
        when it shows none), as a turn of its own like any other."""
        if self.selected is None or self.selected not in self.sessions:
            self.select(self.new_session())
        assert self.selected is not None
        self.sessions[self.selected]["time"]["updated"] = self._now_ms()
        self._prompt(self.selected, {"parts": [{"type": "text", "text": text}]})

    # ------------------------------------------------------------------ prompts and turns

    def _prompt(self, session_id: str, body: dict[str, Any]) -> None:
        text = "".join(
            str(p.get("text", "")) for p in body.get("parts", []) if p.get("type") == "text"
        )
        message_id = str(body.get("messageID") or self._new_id("msg"))
        self.prompts.append(text)
        user = {
            "id": message_id, "sessionID": session_id, "role": "user",
            "time": {"created": self._now_ms()}, "agent": "build",
            "model": {"providerID": "fake", "modelID": "fake-model"},
        }  # fmt: skip
        self.emit("message.updated", {"sessionID": session_id, "info": user})
        part = {
            "id": self._new_id("prt"), "sessionID": session_id, "messageID": message_id,
            "type": "text", "text": text,
        }  # fmt: skip
        self.emit("message.part.updated", {"sessionID": session_id, "part": part, "time": 0})
        self._work.put((session_id, message_id, text))

    def _run_prompts(self) -> None:
        while (item := self._work.get()) is not None:
            session_id, parent, text = item
            self.emit("session.status", {"sessionID": session_id, "status": {"type": "busy"}})
            if ASK_MARKER in text and not self._ask_step(session_id, parent):
                return
            if not self._answer_step(session_id, parent, text):
                return
            if self._work.empty():
                self.emit("session.status", {"sessionID": session_id, "status": {"type": "idle"}})
                self.emit("session.idle", {"sessionID": session_id})

    def _assistant(self, session_id: str, parent: str) -> dict[str, Any]:
        info = {
            "id": self._new_id("msg"), "sessionID": session_id, "role": "assistant",
            "parentID": parent, "time": {"created": self._now_ms()}, "mode": "build",
            "agent": "build", "modelID": "fake-model", "providerID": "fake",
            "path": {"cwd": self.directory, "root": self.directory}, "cost": 0,
            "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        }  # fmt: skip
        self.emit("message.updated", {"sessionID": session_id, "info": info})
        self._part(info, {"type": "step-start"})
        return info

    def _part(self, info: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
        whole = {
            "id": part.get("id") or self._new_id("prt"),
            "sessionID": info["sessionID"],
            "messageID": info["id"],
            **part,
        }
        self.emit("message.part.updated", {"sessionID": info["sessionID"], "part": whole})
        return whole

    def _finish(self, info: dict[str, Any], finish: str, input_text: str, output: str) -> None:
        self._part(info, {"type": "step-finish", "reason": finish})
        inputs, outputs = _tokens(input_text), _tokens(output)
        info = {
            **info,
            "time": {**info["time"], "completed": self._now_ms()},
            "finish": finish,
            "cost": STEP_COST_USD,
            "tokens": {
                "total": inputs + outputs + CACHE_READ_TOKENS, "input": inputs,
                "output": outputs, "reasoning": 0,
                "cache": {"write": 0, "read": CACHE_READ_TOKENS},
            },
        }  # fmt: skip
        for _ in range(2):  # the real one sends the completed message twice
            self.emit("message.updated", {"sessionID": info["sessionID"], "info": info})

    def _ask_step(self, session_id: str, parent: str) -> bool:
        """A ``bash`` tool step that asks first; False when the server was killed meanwhile."""
        info = self._assistant(session_id, parent)
        call_id = self._new_id("call")
        tool_input = {"command": ASK_COMMAND, "description": ASK_DESCRIPTION}
        tool = self._part(
            info,
            {"type": "tool", "callID": call_id, "tool": "bash",
             "state": {"status": "running", "input": tool_input}},
        )  # fmt: skip
        ask_id = self._new_id("per")
        answers: queue.Queue[str] = queue.Queue()
        self._asks[ask_id] = answers
        self.emit(
            "permission.asked",
            {"id": ask_id, "sessionID": session_id, "permission": "bash",
             "patterns": [ASK_COMMAND], "metadata": {"command": ASK_COMMAND},
             "always": ["touch *"], "tool": {"messageID": info["id"], "callID": call_id}},
        )  # fmt: skip
        try:
            reply = answers.get(timeout=ASK_WAIT_S)
        except queue.Empty:
            return False
        if self._stopped.is_set():
            return False
        self.emit(
            "permission.replied", {"sessionID": session_id, "requestID": ask_id, "reply": reply}
        )
        status = "error" if reply == "reject" else "completed"
        self._part(info, {**tool, "state": {"status": status, "input": tool_input}})
        self._finish(info, "tool-calls", ASK_COMMAND, ASK_COMMAND)
        return True

    def _answer_step(self, session_id: str, parent: str, prompt: str) -> bool:
        """The step that answers (after the prompt's pause, as a slow model would); False
        when the server was killed meanwhile."""
        info = self._assistant(session_id, parent)
        self._abort.clear()
        if (pause_s := sleep_seconds(prompt)) and self._abort.wait(pause_s):
            if self._stopped.is_set():
                return False
            self._aborted(info)
            return True
        answer = self.reply(prompt)
        part = self._part(info, {"type": "text", "text": ""})
        for chunk in split_chunks(answer):
            self.emit(
                "message.part.delta",
                {"sessionID": session_id, "messageID": info["id"], "partID": part["id"],
                 "field": "text", "delta": chunk},
            )  # fmt: skip
        self._part(info, {**part, "text": answer})
        self._finish(info, "stop", prompt, answer)
        return True

    def _aborted(self, info: dict[str, Any]) -> None:
        """As the real one ends a turn interrupted before its text (``POST .../abort``)."""
        error = {"name": "MessageAbortedError", "data": {"message": "Aborted"}}
        session_id = info["sessionID"]
        self.emit("session.error", {"sessionID": session_id, "error": error})
        done = {**info, "time": {**info["time"], "completed": self._now_ms()}, "error": error}
        self.emit("message.updated", {"sessionID": session_id, "info": done})

    # ------------------------------------------------------------------ HTTP

    def _route(self, http: BaseHTTPRequestHandler, method: str, body: Any) -> None:
        url = urlsplit(http.path)
        path = url.path
        if path == "/event" and method == "GET":
            self._stream(http)
            return
        if path == "/path":
            self._send(http, 200, {"home": "", "directory": self.directory, "worktree": "/"})
        elif path == "/session" and method == "GET":
            folder = parse_qs(url.query).get("directory", [self.directory])[0]
            listed = [s for s in self.sessions.values() if s["directory"] == folder]
            self._send(http, 200, listed)
        elif path == "/session" and method == "POST":
            self._send(http, 200, self.sessions[self.new_session()])
        elif path == "/tui/select-session" and method == "POST":
            self.select(str(body.get("sessionID")))
            self._send(http, 200, True)
        elif path.startswith("/session/") and path.endswith("/prompt_async") and method == "POST":
            session_id = path.split("/")[2]
            if session_id not in self.sessions:
                self._send(http, 404, {"name": "NotFoundError", "data": {"message": session_id}})
                return
            self.sessions[session_id]["time"]["updated"] = self._now_ms()
            if self.unheard > 0:
                self.unheard -= 1
            else:
                self._prompt(session_id, body)
            self._send(http, 204, None)
        elif path.startswith("/session/") and path.endswith("/abort") and method == "POST":
            self._abort.set()
            self._send(http, 200, True)
        elif path.startswith("/permission/") and path.endswith("/reply") and method == "POST":
            answers = self._asks.pop(path.split("/")[2], None)
            if answers is None:
                self._send(http, 404, {"name": "NotFoundError"})
                return
            answers.put(str(body.get("reply")))
            self._send(http, 200, True)
        else:
            self._send(http, 404, {"name": "NotFoundError", "data": {"message": path}})

    def _send(self, http: BaseHTTPRequestHandler, status: int, data: object) -> None:
        payload = b"" if status == 204 else json.dumps(data).encode()
        http.send_response(status)
        if status != 204:
            http.send_header("Content-Type", "application/json")
        http.send_header("Content-Length", str(len(payload)))
        http.end_headers()
        http.wfile.write(payload)

    def _stream(self, http: BaseHTTPRequestHandler) -> None:
        if self.silent_streams > 0:
            self.silent_streams -= 1
            http.send_response(200)
            http.send_header("Content-Type", "text/event-stream")
            http.end_headers()
            http.close_connection = True
            self._stopped.wait()
            return
        events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        with self._lock:
            self._clients.append(events)
        http.send_response(200)
        http.send_header("Content-Type", "text/event-stream")
        http.send_header("Cache-Control", "no-cache")
        http.end_headers()
        http.close_connection = True
        first = {"id": self._new_id("evt"), "type": "server.connected", "properties": {}}
        try:
            event: dict[str, Any] | None = first
            while event is not None and not self._stopped.is_set():
                http.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                http.wfile.flush()
                event = events.get()
        except OSError:
            pass
        finally:
            with self._lock:
                self._clients.remove(events)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self
        expected = "Basic " + base64.b64encode(f"{USERNAME}:{self.password}".encode()).decode()

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                fake.requests.append((method, urlsplit(self.path).path))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.headers.get("Authorization") != expected:
                    fake._send(self, 401, {"name": "Unauthorized"})
                    return
                if (method, urlsplit(self.path).path) in fake.failing:
                    fake._send(self, 500, {"name": "UnknownError"})
                    return
                fake._route(self, method, json.loads(raw) if raw else {})

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Quiet: tests read ``requests``."""

        return Handler
