"""A local stand-in for the Gemini API, as the real Gemini CLI uses it.

Gemini CLI 0.61.0 pointed at ``GOOGLE_GEMINI_BASE_URL`` with a pinned model
calls ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``
(REAL-AGENTS.md); this fake answers it with SSE chunks ``{"candidates":
[{"content": {"parts": [{"text": …}], "role": "model"}, "finishReason":
"STOP"}], "usageMetadata": {…}}``, the last carrying the finish reason and the
usage. ``:generateContent`` (one JSON answer) and ``:countTokens`` are answered
too. It binds 127.0.0.1 only.

Scripted like :mod:`madohub_nb.testing.fake_openai`: the default answer is
``Done: <first 40 characters of the prompt>`` (the prompt is the last text part
of the last user content), ``[[sleep N]]`` pauses N seconds before the text,
``reply`` gives a fixed text or a function of the request body, and
``fail_next`` injects HTTP errors. A scripted reply may also be a tool call,
``{"functionCall": {"name": …, "args": {…}}}``: the client runs the tool and sends
a ``functionResponse`` part back, which :func:`function_response` reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from ._http import FakeHandler, FakeServer, sleep_seconds, split_chunks
from .fake_anthropic import default_answer

Reply = str | Callable[[dict[str, Any]], "str | dict[str, Any] | None"]
"""A fixed answer text, or ``f(request_body) -> text | {"functionCall": …} | None`` (None: the
default answer)."""

DEFAULT_MODEL = "gemini-2.5-flash"

_MODEL_ROUTE = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):([A-Za-z]+)$")


def _parts_text(content: object) -> list[str]:
    """The text parts of one Gemini ``content`` (``{"role", "parts": [{"text"}…]}``)."""
    if not isinstance(content, dict):
        return []
    parts = content.get("parts")
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def prompt_text(body: dict[str, Any]) -> str | None:
    """The prompt of a request: the last text part of the last user content, or None."""
    contents = body.get("contents")
    if not isinstance(contents, list):
        return None
    for content in reversed(contents):
        if isinstance(content, dict) and content.get("role", "user") == "user":
            texts = [t for t in _parts_text(content) if t.strip()]
            if texts:
                return texts[-1]
    return None


def function_response(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``response`` of the last ``functionResponse`` part of a request, if any."""
    contents = body.get("contents")
    found: dict[str, Any] | None = None
    for content in contents if isinstance(contents, list) else []:
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            answer = part.get("functionResponse") if isinstance(part, dict) else None
            if isinstance(answer, dict):
                response = answer.get("response")
                found = response if isinstance(response, dict) else {"output": response}
    return found


def _tokens(value: object) -> int:
    """A stand-in tokenizer: a quarter of the JSON text (at least 1)."""
    return max(1, len(json.dumps(value, sort_keys=True, ensure_ascii=False)) // 4)


def usage_for(body: dict[str, Any], text: str) -> dict[str, int]:
    """``usageMetadata`` for answering ``body`` with ``text``; deterministic.

    Prompt: a quarter of the request's contents, system instruction and tools
    (as JSON); candidates: a quarter of the text's characters.
    """
    prompt = _tokens([body.get("systemInstruction"), body.get("tools"), body.get("contents")])
    candidates = max(1, len(text) // 4)
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates,
    }


def stream_chunks(
    text: str, usage: dict[str, int], model: str, call: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """The SSE chunks of one answer: text pieces (or one ``functionCall`` part), the last
    with ``STOP`` and usage."""
    pieces: list[dict[str, Any]] = (
        [{"functionCall": call}] if call is not None
        else [{"text": piece} for piece in split_chunks(text) or [""]]
    )  # fmt: skip
    for i, piece in enumerate(pieces):
        candidate: dict[str, Any] = {
            "content": {"parts": [piece], "role": "model"},
            "index": 0,
        }
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        if i == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
            chunk["usageMetadata"] = usage
        yield chunk


class FakeGemini(FakeServer):
    """A scripted Gemini API on ``127.0.0.1``, served from a daemon thread.

    Point Gemini CLI at ``base_url`` (``GOOGLE_GEMINI_BASE_URL``). ``requests``
    holds every request, ``prompts`` the prompt of every model request,
    ``reported`` one entry per answer (``model``, ``usage``, ``path``), and
    ``unknown_paths`` the paths it answered 404.
    """

    thread_name = "fake-gemini"
    server_version = "FakeGemini/1"
    request_id_header = "x-goog-request-id"

    def __init__(
        self, reply: Reply | None = None, *, port: int = 0, model: str | None = None
    ) -> None:
        super().__init__(port=port)
        self.reply = reply
        self.model = model
        self.unknown_paths: list[str] = []
        self.reported: list[dict[str, Any]] = []

    def fail_next(self, status: int, times: int = 1) -> None:
        """Answer the next ``times`` model requests with HTTP ``status`` and an error body."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status from 400 to 599, got {status}")
        self._add_faults(status, times)

    def handle_get(self, http: FakeHandler, path: str, headers: dict[str, str]) -> None:
        self._record("GET", http.path, headers, None)
        self._unknown(path)
        http.send_json(404, _error_body(404, f"no route for GET {path}"))

    def handle_post(self, http: FakeHandler, path: str, headers: dict[str, str], body: Any) -> None:
        match = _MODEL_ROUTE.match(path)
        method = match.group(2) if match else None
        if match is None or method not in (
            "streamGenerateContent",
            "generateContent",
            "countTokens",
        ):
            self._unknown(path)
            http.send_json(404, _error_body(404, f"no route for POST {path}"))
            return
        if not isinstance(body, dict):
            http.send_json(400, _error_body(400, "request body is not a JSON object"))
            return
        if method == "countTokens":
            total = _tokens(body.get("contents"))
            http.send_json(200, json.dumps({"totalTokens": total}))
            return
        fault = self._take_fault()
        if fault is not None:
            http.send_json(fault.status, _error_body(fault.status, f"fake error ({fault.status})"))
            return
        model = self.model or match.group(1)
        text, sleep_s = self._answer(body)
        call: dict[str, Any] | None = None
        if isinstance(text, dict):  # a scripted tool call
            call, text = dict(text["functionCall"]), ""
        usage = usage_for(body, text)
        with self._lock:
            self.reported.append({"model": model, "usage": usage, "path": path})
        chunks = list(stream_chunks(text, usage, model, call))
        if method == "generateContent":
            self._pause(sleep_s)
            part = {"functionCall": call} if call is not None else {"text": text}
            whole = {**chunks[-1]}
            whole["candidates"] = [
                {**chunks[-1]["candidates"][0], "content": {"parts": [part], "role": "model"}}
            ]
            http.send_json(200, json.dumps(whole))
            return
        http.start_stream()
        for i, chunk in enumerate(chunks):
            if i == 0 and sleep_s:
                self._pause(sleep_s)
            http.send_event(json.dumps(chunk, ensure_ascii=False))
        http.end_stream()

    def _unknown(self, path: str) -> None:
        with self._lock:
            self.unknown_paths.append(path)

    def _answer(self, body: dict[str, Any]) -> tuple[str | dict[str, Any], float]:
        """``(reply text or tool call, pause seconds)`` for one model request."""
        prompt = prompt_text(body)
        if prompt is not None:
            self._add_prompt(prompt)
        scripted: str | dict[str, Any] | None = None
        if isinstance(self.reply, str):
            scripted = self.reply
        elif self.reply is not None:
            scripted = self.reply(body)
        if isinstance(scripted, dict) and not isinstance(scripted.get("functionCall"), dict):
            raise ValueError(f"a scripted reply dict holds a functionCall, got {scripted!r}")
        text = scripted if scripted is not None else default_answer(prompt or "")
        return text, sleep_seconds(prompt or "")


def _error_body(status: int, message: str) -> str:
    kind = "INVALID_ARGUMENT" if status < 500 else "INTERNAL"
    return json.dumps({"error": {"code": status, "message": message, "status": kind}})
