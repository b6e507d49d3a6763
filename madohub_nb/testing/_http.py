"""The HTTP plumbing the fake model APIs share: a local server, recording, faults, SSE.

:class:`FakeServer` serves on ``127.0.0.1`` from a daemon thread, records every
request, counts prompts (``wait_for_prompts``), queues injected faults and
closes open connections on ``stop()``. Each fake subclasses it and answers
requests in its ``handle_post`` / ``handle_get`` / ``handle_head`` hooks, writing
through the :class:`FakeHandler` it is given.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

STREAM_CHUNKS = 3
"""Number of text deltas one streamed answer is split into."""

_SLEEP_RE = re.compile(r"\[\[sleep\s+([0-9]+(?:\.[0-9]+)?)\]\]")

_Self = TypeVar("_Self", bound="FakeServer")


def new_id(prefix: str, hex_chars: int) -> str:
    """``prefix`` followed by ``hex_chars`` random hex digits (ids of messages, requests…)."""
    return f"{prefix}{uuid.uuid4().hex[:hex_chars]}"


def sleep_seconds(text: str) -> float:
    """The pause a ``[[sleep N]]`` marker asks for (0 without one)."""
    match = _SLEEP_RE.search(text)
    return float(match.group(1)) if match else 0.0


def split_chunks(text: str, count: int = STREAM_CHUNKS) -> list[str]:
    """``text`` cut into at most ``count`` nearly equal pieces (none for empty text)."""
    if not text:
        return []
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass
class Fault:
    """One injected failure: the HTTP status, a ``retry-after`` and a body to send instead."""

    status: int
    retry_after: float | None = None
    body: str | None = None


class FakeServer:
    """A scripted HTTP API on ``127.0.0.1``, served from a daemon thread.

    Use as a context manager (or ``start()``/``stop()``); point clients at
    ``base_url``. ``requests`` holds every request recorded (``method``,
    ``path``, ``headers``, ``body``), ``prompts`` the prompt text of every
    model request answered, ``responses`` when each POST's answer was written in full
    (UTC) with its body: an agent's end of turn as its API saw it.
    """

    thread_name: ClassVar[str] = "fake-api"
    server_version: ClassVar[str] = "FakeAPI/1"
    base_path: ClassVar[str] = ""
    """What ``base_url`` adds after the port (``/v1`` for OpenAI clients)."""
    request_id_header: ClassVar[str] = "request-id"
    request_id_chars: ClassVar[int] = 20

    def __init__(self, *, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.prompts: list[str] = []
        self.responses: list[tuple[datetime, Any]] = []
        self._port = port
        self._lock = threading.Condition()
        self._faults: deque[Fault] = deque()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------
    def start(self: _Self) -> _Self:
        """Bind and serve in a daemon thread; returns self."""
        if self._server is not None:
            return self
        self._stopping.clear()
        handler = type(
            "Handler", (FakeHandler,), {"fake": self, "server_version": self.server_version}
        )
        server = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.thread_name}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake paused handlers and close open connections."""
        server = self._server
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self: _Self) -> _Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The TCP port served (0 before ``start()``)."""
        return self._server.server_address[1] if self._server else 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` plus the API's path prefix: what clients' base URL takes."""
        if self._server is None:
            name = type(self).__name__
            raise RuntimeError(f"{name} is not started; use start() or a with block")
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    # waiting -----------------------------------------------------------------
    def wait_for_prompts(self, count: int, timeout_s: float = 10.0) -> list[str]:
        """Block until ``count`` prompts arrived; return them. TimeoutError otherwise."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.prompts) >= count, timeout_s):
                raise TimeoutError(
                    f"{type(self).__name__} got {len(self.prompts)} of {count} prompts in "
                    f"{timeout_s}s: {self.prompts!r}"
                )
            return list(self.prompts)

    # request handling (called from handler threads) -----------------------------
    def handle_post(self, http: FakeHandler, path: str, headers: dict[str, str], body: Any) -> None:
        """Answer a POST to ``path`` (query and trailing ``/`` removed); ``body`` is its JSON.

        ``body`` is None when the request body is not JSON. The request is
        already recorded.
        """
        http.send_json(404, json.dumps({"error": f"no route for POST {path}"}))

    def handle_get(self, http: FakeHandler, path: str, headers: dict[str, str]) -> None:
        """Answer a GET to ``path`` (not recorded unless the fake records it)."""
        http.send_json(404, json.dumps({"error": f"no route for GET {path}"}))

    def handle_head(self, http: FakeHandler, path: str) -> None:
        """Answer a HEAD request: 501, as ``http.server`` does for a method it lacks."""
        http.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({http.command!r})")

    def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})
            self._lock.notify_all()

    def _add_prompt(self, text: str) -> None:
        with self._lock:
            self.prompts.append(text)
            self._lock.notify_all()

    def _add_faults(
        self, status: int, times: int, retry_after: float | None = None, body: str | None = None
    ) -> None:
        """Fail the next ``times`` requests the fake takes faults for (see ``Fault``)."""
        with self._lock:
            self._faults.extend(Fault(status, retry_after, body) for _ in range(times))

    def _take_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when ``stop()`` comes first."""
        self._stopping.wait(seconds)


class FakeHandler(BaseHTTPRequestHandler):
    """One connection to a :class:`FakeServer`: parses requests and writes answers.

    ``start()`` makes a subclass per server with ``fake`` set.
    """

    protocol_version = "HTTP/1.1"
    fake: FakeServer

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: tests read ``fake.requests`` instead of a log."""

    @property
    def route(self) -> str:
        """The request path without query and trailing ``/``."""
        return urlsplit(self.path).path.rstrip("/")

    def header_dict(self) -> dict[str, str]:
        """The request headers, names lower-cased."""
        return {k.lower(): v for k, v in self.headers.items()}

    def do_HEAD(self) -> None:
        self.fake.handle_head(self, self.route)

    def do_GET(self) -> None:
        self.fake.handle_get(self, self.route, self.header_dict())

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else {}
            except ValueError:
                body = None
            headers = self.header_dict()
            self.fake._record("POST", self.path, headers, body)
            self.fake.handle_post(self, self.route, headers, body)
            with self.fake._lock:
                self.fake.responses.append((datetime.now(timezone.utc), body))
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    # writing -------------------------------------------------------------------
    def send_request_id(self) -> None:
        """The fake's request-id header, as the real API sends one with every answer."""
        fake = self.fake
        self.send_header(fake.request_id_header, new_id("req_fake_", fake.request_id_chars))

    def send_json(self, status: int, text: str, extra: dict[str, str] | None = None) -> None:
        """Answer ``status`` with the JSON ``text`` and any ``extra`` headers."""
        self.send_bytes(status, text.encode(), "application/json", extra=extra)

    def send_bytes(
        self,
        status: int,
        data: bytes,
        content_type: str,
        *,
        head: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        """Answer ``status`` with ``data`` (only its headers when ``head``)."""
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_request_id()
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)
        self.wfile.flush()

    def start_stream(self) -> None:
        """Begin a 200 ``text/event-stream`` answer sent in chunks."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_request_id()
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def send_event(self, data: str, event: str | None = None) -> None:
        """One server-sent event (``event:`` line only when named), sent at once."""
        head = f"event: {event}\n" if event is not None else ""
        self.send_chunk(f"{head}data: {data}\n\n".encode())

    def send_chunk(self, data: bytes) -> None:
        """One chunk of a chunked answer, flushed so the client sees it now."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        """The last (empty) chunk."""
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
