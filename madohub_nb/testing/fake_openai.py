"""A local stand-in for the OpenAI Responses API, as the real Codex CLI uses it.

Codex 0.171.0 pointed at a custom provider (``wire_api = "responses"``) calls
only ``POST /v1/responses`` with ``stream: true`` (REAL-AGENTS.md); this fake
answers it with the SSE events Codex reads (``response.created``,
``response.output_item.added``, ``response.output_text.delta``/``.done``,
``response.output_item.done``, ``response.completed`` with usage), including its
side request for a thread title (a ``json_schema`` text format asking for
``{"title": ...}``), which is answered but not counted as a prompt. For other
OpenAI-compatible clients it also answers ``POST /v1/chat/completions`` (JSON or
SSE chunks) and ``GET /v1/models``. It binds 127.0.0.1 only.

The model is scripted like :mod:`madohub_nb.testing.fake_anthropic`: the default
answer is ``Done: <first 40 characters of the last user input text>``, and a
``[[sleep N]]`` marker in the prompt makes the reply start at once and pause N
seconds before its text (a slow model). ``fail_next`` injects HTTP errors. A
scripted reply may also be a tool call, ``{"function_call": {"name": …, "arguments":
{…}}}`` (a Responses ``function_call`` item, ``namespace`` kept when given; in
``/v1/chat/completions`` a ``tool_calls`` entry): the client runs the tool and sends its
output back, which :func:`function_output` reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from ._http import (
    FakeHandler,
    FakeServer,
    new_id,
    sleep_seconds,
    split_chunks,
)
from .fake_anthropic import default_answer

Reply = str | Callable[[dict[str, Any]], "str | dict[str, Any] | None"]
"""A fixed answer text, or ``f(request_body) -> text | {"function_call": …} | None`` (None:
the default answer)."""

DEFAULT_MODEL = "fake-model"
"""What ``GET /v1/models`` lists and responses name when the request names no model."""

TITLE_PROMPT_MARKER = "User prompt:"
"""Codex's title request quotes the user's prompt after this line."""

TITLE_MAX_CHARS = 36

ID_CHARS = 24
"""Random hex digits in the ids the fake makes up (``resp_fake_…``, ``msg_fake_…``)."""


def _new_id(prefix: str) -> str:
    return new_id(prefix, ID_CHARS)


def _text_of(content: object) -> list[str]:
    """The text parts of a Responses or Chat Completions message ``content``."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        str(part.get("text", ""))
        for part in content
        if isinstance(part, dict) and part.get("type") in ("input_text", "text", "output_text")
    ]


def _user_texts(body: dict[str, Any]) -> list[str]:
    """Every user text in a request, oldest first (``input`` or ``messages``)."""
    items = body.get("input")
    if isinstance(items, str):
        return [items]
    if not isinstance(items, list):
        items = body.get("messages")
    if not isinstance(items, list):
        return []
    texts: list[str] = []
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            texts.extend(_text_of(item.get("content")))
    return texts


def prompt_text(body: dict[str, Any]) -> str | None:
    """The user's prompt in a request: the last user input text that is not context.

    Codex sends its environment and AGENTS.md as extra user messages wrapped in
    ``<environment_context>``-style tags (or starting ``# AGENTS.md``); those are
    skipped unless nothing else is there.
    """
    texts = [t for t in _user_texts(body) if t.strip()]
    if not texts:
        return None
    real = [t for t in texts if not t.lstrip().startswith(("<", "# AGENTS.md"))]
    return (real or texts)[-1]


def function_output(body: dict[str, Any]) -> str | None:
    """The output text of the last ``function_call_output`` item (Responses) or ``tool``
    message (Chat Completions) of a request, if any."""
    items = body.get("input")
    if not isinstance(items, list):
        messages = body.get("messages")
        answers = [
            m for m in messages if isinstance(m, dict) and m.get("role") == "tool"
        ] if isinstance(messages, list) else []  # fmt: skip
        if not answers:
            return None
        content = answers[-1].get("content")
        return content if isinstance(content, str) else "".join(_text_of(content))
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    if not outputs:
        return None
    output = outputs[-1].get("output")
    if isinstance(output, str):
        return output
    return "".join(_text_of(output)) if isinstance(output, list) else json.dumps(output)


def function_call_item(call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    """A Responses ``function_call`` output item for ``{"name", "arguments"[, "namespace"]}``."""
    arguments = call.get("arguments", {})
    item = {
        "id": _new_id("fc_fake_"),
        "type": "function_call",
        "status": status,
        "call_id": str(call.get("call_id") or _new_id("call_fake_")),
        "name": str(call["name"]),
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
    }
    if call.get("namespace"):
        item["namespace"] = str(call["namespace"])
    return item


def function_call_events(
    model: str, call: dict[str, Any], usage: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The ``/v1/responses`` stream events of one answer that is a single tool call."""
    response = response_object(model, "", usage, status="in_progress")
    item = function_call_item(call)
    yield {"type": "response.created", "response": response}
    yield {"type": "response.in_progress", "response": response}
    yield {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {**item, "status": "in_progress", "arguments": ""},
    }
    where = {"item_id": item["id"], "output_index": 0}
    yield {"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]}
    yield {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]}
    yield {"type": "response.output_item.done", "output_index": 0, "item": item}
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    yield {"type": "response.completed", "response": done}


def is_title_request(body: dict[str, Any]) -> bool:
    """Whether this is Codex's side request for a thread title (JSON ``{"title": ...}``)."""
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return False
    schema = fmt.get("schema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return isinstance(properties, dict) and "title" in properties


def title_for(body: dict[str, Any]) -> str:
    """A short title (at most 36 characters, as Codex's schema asks) from the user's words."""
    text = prompt_text(body) or ""
    _, marker, after = text.rpartition(TITLE_PROMPT_MARKER)
    words = " ".join((after if marker else text).split()[:5])
    return (words or "Fake task")[:TITLE_MAX_CHARS]


def _tokens(value: object) -> int:
    """A stand-in tokenizer: a quarter of the JSON text (at least 1)."""
    return max(1, len(json.dumps(value, sort_keys=True, ensure_ascii=False)) // 4)


def usage_for(body: dict[str, Any], text: str) -> dict[str, Any]:
    """The usage the fake reports for answering ``body`` with ``text``; deterministic.

    Input: a quarter of the request's instructions, tools and input items (as
    JSON). When the request carries a ``prompt_cache_key`` (Codex sends one),
    everything before its last input item counts as cached. Output: a quarter
    of the text's characters.
    """
    items = body.get("input", body.get("messages"))
    items = items if isinstance(items, list) else [items]
    head = [body.get("instructions"), body.get("tools")]
    input_tokens = _tokens([*head, items])
    cached = 0
    if body.get("prompt_cache_key") and len(items) > 1:
        cached = min(input_tokens, _tokens([*head, items[:-1]]))
    output_tokens = max(1, len(text) // 4)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(model: str, text: str, usage: dict[str, Any], *, status: str) -> dict[str, Any]:
    """A Responses API ``response`` object holding one assistant message (or none yet)."""
    output: list[dict[str, Any]] = []
    if status == "completed":
        output = [_message_item(_new_id("msg_fake_"), text, "completed")]
    return {
        "id": _new_id("resp_fake_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "usage": usage if status == "completed" else None,
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def responses_events(model: str, text: str, usage: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``/v1/responses`` stream events that spell out one assistant message, in order.

    The first two events come before any text, so a pause after them looks
    like a model that is thinking.
    """
    response = response_object(model, text, usage, status="in_progress")
    response_id = response["id"]
    item_id = _new_id("msg_fake_")
    yield {"type": "response.created", "response": response}
    yield {"type": "response.in_progress", "response": response}
    yield {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": _message_item(item_id, "", "in_progress"),
    }
    part = {"type": "output_text", "text": "", "annotations": []}
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    yield {"type": "response.content_part.added", **where, "part": part}
    for delta in split_chunks(text):
        yield {"type": "response.output_text.delta", **where, "delta": delta}
    yield {"type": "response.output_text.done", **where, "text": text}
    yield {"type": "response.content_part.done", **where, "part": {**part, "text": text}}
    item = _message_item(item_id, text, "completed")
    yield {"type": "response.output_item.done", "output_index": 0, "item": item}
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    done["id"] = response_id
    yield {"type": "response.completed", "response": done}


def chat_completion(model: str, text: str, usage: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming ``/v1/chat/completions`` answer."""
    return {
        "id": _new_id("chatcmpl-fake"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage["input_tokens"],
            "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["total_tokens"],
        },
    }


def chat_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions ``tool_calls`` entry for ``{"name", "arguments"}``."""
    arguments = call.get("arguments", {})
    return {
        "id": str(call.get("call_id") or _new_id("call_fake_")),
        "type": "function",
        "function": {
            "name": str(call["name"]),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def chat_tool_completion(model: str, call: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming ``/v1/chat/completions`` answer that is a single tool call."""
    done = chat_completion(model, "", usage)
    done["choices"][0]["message"] = {
        "role": "assistant", "content": None, "tool_calls": [chat_tool_call(call)],
    }  # fmt: skip
    done["choices"][0]["finish_reason"] = "tool_calls"
    return done


def chat_tool_chunks(
    model: str, call: dict[str, Any], usage: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The ``/v1/chat/completions`` stream chunks of a single tool call (before ``[DONE]``)."""
    entry = chat_tool_call(call)
    base = {
        "id": _new_id("chatcmpl-fake"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    opening = {
        **entry,
        "index": 0,
        "function": {"name": entry["function"]["name"], "arguments": ""},
    }
    arguments = {"index": 0, "function": {"arguments": entry["function"]["arguments"]}}
    for delta in (
        {"role": "assistant", "content": None, "tool_calls": [opening]},
        {"tool_calls": [arguments]},
    ):
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {
        **base,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": chat_completion(model, "", usage)["usage"],
    }


def chat_chunks(model: str, text: str, usage: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``/v1/chat/completions`` stream chunks for one answer (before ``[DONE]``)."""
    base = {
        "id": _new_id("chatcmpl-fake"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    yield {
        **base,
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        ],
    }
    for delta in split_chunks(text):
        yield {
            **base,
            "choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": None}],
        }
    final = chat_completion(model, text, usage)
    yield {
        **base,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": final["usage"],
    }


class FakeOpenAIResponses(FakeServer):
    """A scripted OpenAI Responses API on ``127.0.0.1``, served from a daemon thread.

    Use as a context manager (or ``start()``/``stop()``). Point Codex at
    ``base_url`` (``http://127.0.0.1:PORT/v1``, what a provider's ``base_url``
    takes). ``requests`` holds every request received (``method``, ``path``,
    ``headers``, ``body``), ``prompts`` the prompt text of every model request,
    ``reported`` one entry per answer (``model``, ``usage`` as sent, ``title``
    for a session-title request), and ``unknown_paths`` the paths it answered 404.
    """

    thread_name = "fake-openai"
    server_version = "FakeOpenAI/1"
    base_path = "/v1"
    request_id_header = "x-request-id"
    request_id_chars = ID_CHARS

    def __init__(
        self, reply: Reply | None = None, *, port: int = 0, model: str | None = None
    ) -> None:
        super().__init__(port=port)
        self.reply = reply
        self.model = model
        self.unknown_paths: list[str] = []
        self.reported: list[dict[str, Any]] = []

    # scripting ---------------------------------------------------------------
    def fail_next(self, status: int, times: int = 1) -> None:
        """Answer the next ``times`` model requests with HTTP ``status`` and an error body."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status from 400 to 599, got {status}")
        self._add_faults(status, times)

    # request handling (called from handler threads) -----------------------------
    def handle_get(self, http: FakeHandler, path: str, headers: dict[str, str]) -> None:
        self._record("GET", http.path, headers, None)
        if path == "/v1/models":
            model = self.model or DEFAULT_MODEL
            listing = {
                "object": "list",
                "data": [{"id": model, "object": "model", "created": 0, "owned_by": "fake"}],
            }
            http.send_json(200, json.dumps(listing))
            return
        self._unknown(path)
        http.send_json(404, _error_body(404, f"no route for GET {path}"))

    def handle_post(self, http: FakeHandler, path: str, headers: dict[str, str], body: Any) -> None:
        if path not in ("/v1/responses", "/v1/chat/completions"):
            self._unknown(path)
            http.send_json(404, _error_body(404, f"no route for POST {path}"))
            return
        if not isinstance(body, dict):
            http.send_json(400, _error_body(400, "request body is not a JSON object"))
            return
        fault = self._take_fault()
        if fault is not None:
            status = fault.status
            http.send_json(status, _error_body(status, f"fake error (HTTP {status})"))
            return

        model, text, _, sleep_s = self._answer(body)
        call: dict[str, Any] | None = None
        if isinstance(text, dict):  # a scripted tool call
            call, text = dict(text["function_call"]), ""
        usage = usage_for(body, text)
        with self._lock:
            self.reported.append(
                {"model": model, "usage": usage, "title": is_title_request(body), "path": path}
            )
        if call is not None and path == "/v1/chat/completions":
            if not body.get("stream"):
                http.send_json(200, json.dumps(chat_tool_completion(model, call, usage)))
                return
            http.start_stream()
            for chunk in chat_tool_chunks(model, call, usage):
                http.send_event(json.dumps(chunk))
            http.send_event("[DONE]")
            http.end_stream()
        elif call is not None:
            if not body.get("stream"):
                http.send_json(
                    400,
                    _error_body(400, "the fake scripts tool calls in streamed /v1/responses only"),
                )
                return
            http.start_stream()
            for seq, event in enumerate(function_call_events(model, call, usage)):
                http.send_event(json.dumps({**event, "sequence_number": seq}), event["type"])
            http.end_stream()
        elif path == "/v1/responses":
            if body.get("stream"):
                self._stream_responses(http, model, text, usage, sleep_s)
            else:
                self._pause(sleep_s)
                done = response_object(model, text, usage, status="completed")
                http.send_json(200, json.dumps(done))
        elif body.get("stream"):
            self._stream_chat(http, model, text, usage, sleep_s)
        else:
            self._pause(sleep_s)
            http.send_json(200, json.dumps(chat_completion(model, text, usage)))

    def _stream_responses(
        self, http: FakeHandler, model: str, text: str, usage: dict[str, Any], sleep_s: float
    ) -> None:
        http.start_stream()
        for seq, event in enumerate(responses_events(model, text, usage)):
            http.send_event(json.dumps({**event, "sequence_number": seq}), event["type"])
            if event["type"] == "response.in_progress" and sleep_s:
                self._pause(sleep_s)
        http.end_stream()

    def _stream_chat(
        self, http: FakeHandler, model: str, text: str, usage: dict[str, Any], sleep_s: float
    ) -> None:
        http.start_stream()
        for index, chunk in enumerate(chat_chunks(model, text, usage)):
            http.send_event(json.dumps(chunk))
            if index == 0 and sleep_s:
                self._pause(sleep_s)
        http.send_event("[DONE]")
        http.end_stream()

    def _unknown(self, path: str) -> None:
        with self._lock:
            self.unknown_paths.append(path)

    def _answer(self, body: dict[str, Any]) -> tuple[str, Any, str, float]:
        """``(model, reply text or tool call, prompt, pause seconds)`` for one model request."""
        model = self.model or str(body.get("model") or DEFAULT_MODEL)
        if is_title_request(body):
            return model, json.dumps({"title": title_for(body)}), "", 0.0
        prompt = prompt_text(body)
        if prompt is not None:
            self._add_prompt(prompt)
        scripted: str | dict[str, Any] | None = None
        if isinstance(self.reply, str):
            scripted = self.reply
        elif self.reply is not None:
            scripted = self.reply(body)
        if isinstance(scripted, dict) and not isinstance(scripted.get("function_call"), dict):
            raise ValueError(f"a scripted reply dict holds a function_call, got {scripted!r}")
        text = scripted if scripted is not None else default_answer(prompt or "")
        return model, text, prompt or "", sleep_seconds(prompt or "")


def _error_body(status: int, message: str) -> str:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}})
