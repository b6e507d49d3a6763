"""FakeGemini speaks Gemini's generateContent API (streamed as SSE) over real HTTP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import post_json

from madohub_nb.testing.fake_gemini import FakeGemini, function_response, prompt_text


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    with FakeGemini() as f:
        yield f


def _body(*texts: str) -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": t} for t in texts]}],
        "systemInstruction": {"parts": [{"text": "be brief"}]},
    }


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_a_streamed_answer_spells_out_the_default_text_then_stop_and_usage(
    fake: FakeGemini,
) -> None:
    url = f"{fake.base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    status, text = post_json(url, _body("<session_context>…</session_context>", "Say hi"))
    chunks = _sse(text)
    assert status == 200 and len(chunks) >= 2
    joined = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert joined == "Done: Say hi"
    assert all(c["candidates"][0]["content"]["role"] == "model" for c in chunks)
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "finishReason" not in chunks[0]["candidates"][0]
    usage = chunks[-1]["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert fake.prompts == ["Say hi"]
    assert fake.reported[0]["model"] == "gemini-2.5-flash"


def test_a_scripted_reply_whole_and_non_streamed() -> None:
    long = "line one\n> quoted\n```\ncode ✓\n```"
    with FakeGemini(
        reply=lambda body: long if "LONG" in (prompt_text(body) or "") else None
    ) as fake:
        url = f"{fake.base_url}/v1beta/models/m:generateContent"
        status, text = post_json(url, _body("LONG please"))
        assert status == 200
        answer = json.loads(text)
        assert answer["candidates"][0]["content"]["parts"][0]["text"] == long
        status, text = post_json(url, _body("short"))
        assert json.loads(text)["candidates"][0]["content"]["parts"][0]["text"] == "Done: short"


def test_count_tokens_faults_unknown_routes_and_bad_bodies(fake: FakeGemini) -> None:
    base = f"{fake.base_url}/v1beta/models/m"
    status, text = post_json(f"{base}:countTokens", _body("abc"))
    assert status == 200 and json.loads(text)["totalTokens"] > 0
    fake.fail_next(503)
    status, text = post_json(f"{base}:streamGenerateContent?alt=sse", _body("x"))
    assert status == 503 and json.loads(text)["error"]["code"] == 503
    status, _ = post_json(f"{base}:streamGenerateContent?alt=sse", _body("x"))
    assert status == 200
    status, _ = post_json(f"{fake.base_url}/v1/chat/completions", _body("x"))
    assert status == 404 and fake.unknown_paths == ["/v1/chat/completions"]
    req = urllib.request.Request(f"{base}:generateContent", data=b"not json")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    with pytest.raises(ValueError, match="400 to 599"):
        fake.fail_next(200)


def test_a_sleep_marker_pauses_before_the_text(fake: FakeGemini) -> None:
    t0 = time.monotonic()
    status, text = post_json(
        f"{fake.base_url}/v1beta/models/m:streamGenerateContent?alt=sse",
        _body("slow [[sleep 0.5]]"),
    )
    assert status == 200 and time.monotonic() - t0 >= 0.5
    assert "".join(
        c["candidates"][0]["content"]["parts"][0]["text"] for c in _sse(text)
    ).startswith("Done: slow")
    assert fake.base_url.startswith("http://127.0.0.1:")


def test_a_scripted_tool_call_is_a_function_call_part_and_its_response_is_read_back() -> None:
    """As Gemini CLI sees a call of the hub's ``ask``; its result comes back as a
    ``functionResponse`` part, which is no new prompt."""

    def reply(body: dict[str, Any]) -> str | dict[str, Any] | None:
        if function_response(body) is not None:
            return f"got {function_response(body)}"
        return {"function_call": {"name": "mcp_madohub_ask", "args": {"to": "reviewer"}}}

    with FakeGemini(reply) as fake:
        url = f"{fake.base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        _, text = post_json(url, _body("ask it"))
        (chunk,) = _sse(text)
        (part,) = chunk["candidates"][0]["content"]["parts"]
        assert part == {"functionCall": {"name": "mcp_madohub_ask", "args": {"to": "reviewer"}}}
        assert chunk["candidates"][0]["finishReason"] == "STOP"
        body = _body("ask it")
        body["contents"] += [
            {"role": "model", "parts": [part]},
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "mcp_madohub_ask", "response": {"output": "ok"}}}
                ],
            },
        ]
        _, text = post_json(url, body)
        assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in _sse(text)) == (
            "got ok"
        )
        assert fake.prompts == ["ask it"]  # the tool's result was no new prompt


def test_a_scripted_function_call_in_either_method_and_its_response_read_back() -> None:
    """Gemini CLI runs tools from a ``functionCall`` part (streamed or whole); it sends a
    ``functionResponse`` back, whose output :func:`function_response` reads."""
    args = {"command": "touch x"}
    scripted = {"function_call": {"name": "run_shell_command", "args": args}}
    part = {"functionCall": {"name": "run_shell_command", "args": args}}

    def reply(body: dict[str, Any]) -> str | dict[str, Any]:
        result = function_response(body)
        return scripted if result is None else f"got {result}"

    with FakeGemini(reply) as fake:
        url = f"{fake.base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        _, text = post_json(url, _body("run it"))
        (chunk,) = _sse(text)
        assert chunk["candidates"][0]["content"]["parts"] == [part]
        _, whole = post_json(f"{fake.base_url}/v1beta/models/m:generateContent", _body("run it"))
        assert json.loads(whole)["candidates"][0]["content"]["parts"] == [part]
        answered = _body("run it")
        answered["contents"] += [
            {"role": "model", "parts": [part]},
            {"role": "user", "parts": [{"functionResponse": {
                "name": "run_shell_command", "response": {"output": "ran"}}}]},
        ]  # fmt: skip
        assert function_response(answered) == "ran"
        _, text = post_json(url, answered)
        assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in _sse(text)) == (
            "got ran"
        )
    with pytest.raises(ValueError, match="holds a function_call"):  # (a script's mistake)
        FakeGemini(lambda body: {"text": "x"})._answer(_body("a"))
