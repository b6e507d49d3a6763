"""A local stand-in for the Anthropic Messages API, for tests, notebooks and benchmarks.

It speaks the API the way the real Claude Code CLI and the ``anthropic`` Python
SDK use it (``HEAD /``, ``POST /v1/messages[?beta=true]`` as JSON or SSE,
``POST /v1/messages/count_tokens``), so both can be pointed at it with
``ANTHROPIC_BASE_URL`` / ``base_url=``. It binds 127.0.0.1 only.

Default answer: ``Done: <first 40 characters of the last user prompt>`` (newlines
written as ``\\n``), as the fake that recorded ``shared/fixtures`` answered.
Markers in a prompt script the model:

- ``[[sleep N]]``: the reply starts at once, then pauses N seconds (a slow model).
- ``[[bash CMD]]``: the model calls the ``Bash`` tool with ``CMD``; the follow-up
  request that carries the tool result is answered ``Done: <result text>``.

Claude Code's session-title side request is answered with ``{"title": ...}``.
``fail_next`` and ``hang_next`` inject API errors and stalls.

Every answer reports a ``usage`` derived from the request alone
(``usage_for``), in the JSON message and in the stream (``message_start``
with ``output_tokens`` 1, the final counts in ``message_delta``), and
``reported`` keeps what each answer said, so tests can compare a round log's
token columns with what the "API" billed.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ._http import (
    FakeHandler,
    FakeServer,
    new_id,
    sleep_seconds,
    split_chunks,
)

Reply = str | Callable[[dict[str, Any]], "str | dict[str, Any] | None"]
"""A fixed answer text, or ``f(request_body) -> text | message dict | None`` (None: default)."""

SNIPPET_CHARS = 40
"""How much of the prompt the default answer echoes (as in the recorded fixtures)."""

TOOL_NAME = "Bash"
TOOL_DESCRIPTION = "Run fake command"
TOOL_PREAMBLE = "Running it."

_BASH_RE = re.compile(r"\[\[bash\s+(.+?)\]\]", re.DOTALL)
_TITLE_SYSTEM_RE = re.compile(r"\btitle\b", re.IGNORECASE)

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic ``error.type`` for each HTTP status the fake can be told to fail with."""


def _blocks(content: object) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _tool_result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in _blocks(content) if b.get("type") == "text")


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    return "\n".join(str(b.get("text", "")) for b in _blocks(system) if b.get("type") == "text")


def last_user_message(body: dict[str, Any]) -> dict[str, Any] | None:
    """The last ``user`` message of a Messages API request body, if any."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return message
    return None


def prompt_text(body: dict[str, Any]) -> str | None:
    """The user's prompt in a request: the last user message's last real text block.

    Claude Code adds ``<system-reminder>``-style text blocks around the prompt, so
    blocks starting with ``<`` are skipped unless nothing else is there. A
    message that carries a tool result has no prompt (it is a follow-up).
    """
    message = last_user_message(body)
    if message is None:
        return None
    blocks = _blocks(message.get("content"))
    if any(b.get("type") == "tool_result" for b in blocks):
        return None
    texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
    if not texts:
        return None
    real = [t for t in texts if not t.lstrip().startswith("<")]
    return (real or texts)[-1]


def tool_result(body: dict[str, Any]) -> str | None:
    """The text of the last tool result in the last user message, if it carries one."""
    message = last_user_message(body)
    if message is None:
        return None
    results = [b for b in _blocks(message.get("content")) if b.get("type") == "tool_result"]
    return _tool_result_text(results[-1]) if results else None


def default_answer(text: str) -> str:
    """``Done: <first 40 characters>``, newlines written as ``\\n`` (as recorded)."""
    return "Done: " + text[:SNIPPET_CHARS].replace("\n", "\\n")


def is_title_request(body: dict[str, Any]) -> bool:
    """Whether this is Claude Code's tool-less side request for a session title."""
    output_config = body.get("output_config")
    if isinstance(output_config, dict):
        fmt = output_config.get("format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            return True
    return not body.get("tools") and bool(_TITLE_SYSTEM_RE.search(_system_text(body)))


def _tokens(value: object) -> int:
    """A stand-in tokenizer: a quarter of the JSON text (at least 1)."""
    return max(1, len(json.dumps(value, sort_keys=True, ensure_ascii=False)) // 4)


def _uses_cache_control(value: object) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_uses_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return any(_uses_cache_control(v) for v in value)
    return False


CACHED_INPUT_TOKENS = 3
"""Uncached input of a cached request (Claude Code's real turns report a handful, too)."""


def usage_for(body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, int]:
    """The usage the fake reports for answering ``body`` with ``content``; deterministic.

    Input: ``_tokens`` of the request (system, tools, messages). A request that
    asks for prompt caching (any ``cache_control``, as Claude Code's do) reads
    everything before its last message from the cache, writes the last
    message to it and pays for ``CACHED_INPUT_TOKENS`` uncached ones. Output:
    ``_tokens`` of the answer's content blocks.
    """
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    head = [body.get("system"), body.get("tools")]
    if _uses_cache_control(body) and messages:
        read = _tokens([*head, messages[:-1]])
        written = _tokens(messages[-1])
        given = CACHED_INPUT_TOKENS
    else:
        read = written = 0
        given = _tokens([*head, messages])
    return {
        "input_tokens": given,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": _tokens(content),
    }


def _title_for(body: dict[str, Any]) -> str:
    message = last_user_message(body)
    texts = [
        str(b.get("text", ""))
        for b in _blocks(message.get("content") if message else None)
        if b.get("type") == "text"
    ]
    words = " ".join(" ".join(texts).split()[:6])
    return words or "Fake session"


class FakeAnthropic(FakeServer):
    """A scripted Anthropic Messages API on ``127.0.0.1``, served from a daemon thread.

    Use as a context manager (or ``start()``/``stop()``); point clients at
    ``base_url`` (``http://127.0.0.1:PORT``, what ``ANTHROPIC_BASE_URL`` /
    ``base_url=`` take). ``requests`` holds every POST received (``method``,
    ``path``, ``headers``, ``body``); ``prompts`` the prompt text of every
    conversation request answered (title side requests, tool-result follow-ups
    and requests failed by ``fail_next`` are not counted); ``reported`` one entry
    per answered message: ``id``, ``model``, ``usage`` as sent, ``title`` (a
    session-title side request) and ``stream``. When ``api_key`` is given,
    requests carrying another key get a 401.
    """

    thread_name = "fake-anthropic"
    server_version = "FakeAnthropic/1"

    def __init__(
        self,
        reply: Reply | None = None,
        *,
        port: int = 0,
        api_key: str | None = None,
        model: str | None = None,
    ) -> None:
        super().__init__(port=port)
        self.reply = reply
        self.expected_api_key = api_key
        self.model = model
        self._hangs: deque[float] = deque()
        self._keys_seen: set[str] = set()
        self.reported: list[dict[str, Any]] = []

    # scripting ---------------------------------------------------------------
    def fail_next(
        self,
        status: int,
        times: int = 1,
        retry_after: float | None = None,
        body: str | None = None,
    ) -> None:
        """Answer the next ``times`` conversation requests with HTTP ``status``.

        The body is Anthropic's error JSON unless ``body`` is given (any text,
        e.g. malformed JSON with status 200). ``retry_after`` sets the
        ``retry-after`` header (seconds).
        """
        if not 200 <= status <= 599:
            raise ValueError(f"status must be an HTTP status from 200 to 599, got {status}")
        self._add_faults(status, times, retry_after, body)

    def hang_next(self, seconds: float, times: int = 1) -> None:
        """Stall the next ``times`` conversation requests ``seconds`` before answering.

        Then they are answered normally (a client that gave up sees nothing).
        """
        with self._lock:
            self._hangs.extend(seconds for _ in range(times))

    def api_key_seen(self, key: str) -> bool:
        """Whether any request carried ``key`` (``x-api-key`` or a Bearer token)."""
        with self._lock:
            return key in self._keys_seen

    # request handling (called from handler threads) -----------------------------
    def handle_head(self, http: FakeHandler, path: str) -> None:
        http.send_bytes(200, b"", "text/plain", head=True)

    def handle_get(self, http: FakeHandler, path: str, headers: dict[str, str]) -> None:
        http.send_bytes(200, b"ok", "text/plain")

    def handle_post(self, http: FakeHandler, path: str, headers: dict[str, str], body: Any) -> None:
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            http.send_json(404, _error_body(404, f"no route for {path}"))
            return
        if not isinstance(body, dict):
            http.send_json(400, _error_body(400, "request body is not a JSON object"))
            return
        expected = self.expected_api_key
        if expected is not None and expected not in (headers.get("x-api-key"), _bearer(headers)):
            http.send_json(401, _error_body(401, "invalid x-api-key"))
            return
        if path.endswith("/count_tokens"):
            tokens = max(1, len(json.dumps(body.get("messages", []))) // 4)
            http.send_json(200, json.dumps({"input_tokens": tokens}))
            return

        # Injected stalls and faults hit conversation requests, not Claude
        # Code's title side request, whose timing relative to them varies.
        title = is_title_request(body)
        hang = None if title else self._take_hang()
        if hang is not None:
            self._pause(hang)
            if self._stopping.is_set():
                http.close_connection = True
                return
        fault = None if title else self._take_fault()
        if fault is not None:
            extra = {}
            if fault.retry_after is not None:
                extra["retry-after"] = f"{fault.retry_after:g}"
            text = fault.body if fault.body is not None else _error_body(fault.status)
            http.send_json(fault.status, text, extra)
            return

        message, sleep_s = self._answer(body)
        if "usage" not in message:  # a scripted reply may bring its own (even a malformed one)
            message["usage"] = usage_for(body, message.get("content", []))
        with self._lock:
            self.reported.append(
                {
                    "id": message["id"],
                    "model": message["model"],
                    "usage": message["usage"],
                    "title": title,
                    "stream": bool(body.get("stream")),
                }
            )
        if body.get("stream"):
            http.start_stream()
            for name, data in sse_events(message):
                http.send_event(json.dumps(data), name)
                if name == "ping" and sleep_s:
                    self._pause(sleep_s)
            http.end_stream()
        else:
            self._pause(sleep_s)
            http.send_json(200, json.dumps(message))

    def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        key = headers.get("x-api-key") or _bearer(headers)
        if key:
            with self._lock:
                self._keys_seen.add(key)
        super()._record(method, path, headers, body)

    def _take_hang(self) -> float | None:
        with self._lock:
            return self._hangs.popleft() if self._hangs else None

    def _answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The reply message for a request, and how long to pause mid-reply."""
        model = self.model or str(body.get("model") or "claude-fake")
        if is_title_request(body):
            payload: dict[str, Any] = {"title": _title_for(body)}
            if "isnewtopic" in _system_text(body).lower():
                payload = {"isNewTopic": False, "title": None}
            return _message(model, [_text_block(json.dumps(payload))], "end_turn"), 0.0

        prompt = prompt_text(body)
        result = tool_result(body)
        sleep_s = 0.0
        if prompt is not None:
            self._add_prompt(prompt)
            sleep_s = sleep_seconds(prompt)
            bash = _BASH_RE.search(prompt)
            if bash:
                tool_use = {
                    "type": "tool_use",
                    "id": new_id("toolu_fake_", 16),
                    "name": TOOL_NAME,
                    "input": {"command": bash.group(1).strip(), "description": TOOL_DESCRIPTION},
                }
                content = [_text_block(TOOL_PREAMBLE), tool_use]
                return _message(model, content, "tool_use"), sleep_s

        scripted = self._scripted(body)
        if isinstance(scripted, dict):
            fields = dict(scripted)
            if "text" in fields and "content" not in fields:
                fields["content"] = [_text_block(str(fields.pop("text")))]
            message = _message(model, [], "end_turn")
            message.update(fields)
            return message, sleep_s
        if scripted is None:
            source = prompt if prompt is not None else result
            scripted = default_answer(source if source is not None else "")
        return _message(model, [_text_block(scripted)], "end_turn"), sleep_s

    def _scripted(self, body: dict[str, Any]) -> str | dict[str, Any] | None:
        if self.reply is None:
            return None
        if isinstance(self.reply, str):
            return self.reply
        return self.reply(body)


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _message(model: str, content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": new_id("msg_fake_", 20),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
    }


def sse_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The Messages API stream events that spell out ``message``, in order."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    usage = message.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    start["usage"] = {**usage, "output_tokens": 1}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message.get("content", [])):
        kind = block.get("type")
        if kind == "tool_use":
            head = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": part}
                for part in split_chunks(json.dumps(block.get("input", {})))
            ]
        else:
            head = {**block, "text": ""}
            deltas = [
                {"type": "text_delta", "text": part}
                for part in split_chunks(str(block.get("text", "")))
            ]
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": head},
        )
        for delta in deltas:
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message.get("stop_reason"),
                "stop_sequence": message.get("stop_sequence"),
            },
            # The final counts: output as generated, input as in message_start (the API repeats them).
            "usage": {"output_tokens": 1, **usage},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _bearer(headers: dict[str, str]) -> str | None:
    """The token of an ``authorization: Bearer …`` header, if the request has one."""
    auth = headers.get("authorization") or ""
    return auth[7:] if auth.lower().startswith("bearer ") else None


def _error_body(status: int, message: str | None = None) -> str:
    kind = ERROR_TYPES.get(status, "api_error")
    text = message or f"fake {kind} (HTTP {status})"
    return json.dumps({"type": "error", "error": {"type": kind, "message": text}})
