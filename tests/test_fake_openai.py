"""FakeOpenAIResponses speaks the Responses API (and Chat Completions) over real HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import post_json

from madohub_nb.testing.fake_openai import (
    FakeOpenAIResponses,
    function_output,
    prompt_text,
    title_for,
)

ENV_CONTEXT = "<environment_context>\n  <cwd>/tmp/x</cwd>\n</environment_context>"


@pytest.fixture
def fake() -> Iterator[FakeOpenAIResponses]:
    with FakeOpenAIResponses() as f:
        yield f


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _sse(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def test_streamed_response_spells_out_done_and_first_40_chars_of_the_prompt(
    fake: FakeOpenAIResponses,
) -> None:
    prompt = "Please summarise the routing design of this project in detail"
    status, text = post_json(
        f"{fake.base_url}/responses",
        {"model": "m1", "stream": True, "input": [_user(ENV_CONTEXT), _user(prompt)]},
    )
    events = _sse(text)
    kinds = [e["type"] for e in events]
    assert status == 200
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    for needed in ("response.output_item.added", "response.output_item.done"):
        assert needed in kinds
    expected = "Done: " + prompt[:40]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == expected
    item = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    assert item["role"] == "assistant" and item["content"][0]["text"] == expected
    completed = events[-1]["response"]
    assert completed["id"] == events[0]["response"]["id"]
    assert completed["usage"]["total_tokens"] > 0
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert fake.prompts == [prompt]


def test_title_side_request_gets_a_json_title_and_is_not_a_prompt(
    fake: FakeOpenAIResponses,
) -> None:
    body = {
        "stream": True,
        "input": [_user("Generate a concise title.\n\nUser prompt:\nFix the flaky login test now")],
        "text": {
            "format": {
                "type": "json_schema",
                "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
            }
        },
    }
    _, text = post_json(f"{fake.base_url}/responses", body)
    final = [e for e in _sse(text) if e["type"] == "response.output_text.done"][0]["text"]
    assert json.loads(final) == {"title": "Fix the flaky login test"}
    assert fake.prompts == []
    assert len(fake.requests) == 1


def test_title_is_cut_to_codex_schema_limit() -> None:
    body = {"input": [_user("User prompt:\n" + "abcdefghij " * 3 + "x" * 50)]}
    assert len(title_for(body)) == 36


def test_prompt_text_skips_context_messages_but_keeps_them_when_alone() -> None:
    assert prompt_text({"input": [_user(ENV_CONTEXT), _user("real")]}) == "real"
    assert prompt_text({"input": [_user(ENV_CONTEXT)]}) == ENV_CONTEXT
    assert prompt_text({"input": "plain string"}) == "plain string"
    assert prompt_text({"input": []}) is None


def test_scripted_reply_and_non_streaming_response(fake: FakeOpenAIResponses) -> None:
    fake.reply = lambda body: "scripted " + str(body.get("model"))
    status, text = post_json(f"{fake.base_url}/responses", {"model": "m2", "input": [_user("hi")]})
    data = json.loads(text)
    assert status == 200 and data["status"] == "completed"
    assert data["output"][0]["content"][0]["text"] == "scripted m2"


def test_fail_next_returns_the_error_once_then_answers(fake: FakeOpenAIResponses) -> None:
    fake.fail_next(503)
    status, text = post_json(f"{fake.base_url}/responses", {"input": [_user("a")]})
    assert status == 503 and "error" in json.loads(text)
    status, _ = post_json(f"{fake.base_url}/responses", {"input": [_user("a")]})
    assert status == 200
    with pytest.raises(ValueError, match="400 to 599"):
        fake.fail_next(200)


def test_chat_completions_answer_as_json_and_as_stream(fake: FakeOpenAIResponses) -> None:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "chat hi"}]
    _, text = post_json(f"{fake.base_url}/chat/completions", {"messages": messages})
    assert json.loads(text)["choices"][0]["message"]["content"] == "Done: chat hi"
    _, text = post_json(f"{fake.base_url}/chat/completions", {"messages": messages, "stream": True})
    assert text.rstrip().endswith("data: [DONE]")
    chunks = _sse(text)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Done: chat hi"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_models_are_listed_and_unknown_paths_are_404_and_remembered(
    fake: FakeOpenAIResponses,
) -> None:
    with urllib.request.urlopen(f"{fake.base_url}/models", timeout=10) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "fake-model"
    status, _ = post_json(f"{fake.base_url}/embeddings", {"input": "x"})
    assert status == 404
    assert fake.unknown_paths == ["/v1/embeddings"]


def test_base_url_needs_a_started_server() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = FakeOpenAIResponses().base_url


def test_a_scripted_tool_call_streams_as_chat_tool_calls_and_its_output_is_read_back() -> None:
    """As Qwen Code, Copilot CLI and OpenCode see a call of the hub's ``ask``: a streamed
    ``tool_calls`` delta; the output comes back as the next request's ``tool`` message."""

    def reply(body: dict[str, Any]) -> str | dict[str, Any] | None:
        if function_output(body) is not None:
            return f"got {function_output(body)}"
        return {"function_call": {"name": "madohub-ask", "arguments": {"to": "reviewer"}}}

    with FakeOpenAIResponses(reply) as fake:
        url = f"{fake.base_url}/chat/completions"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "ask it"}]
        _, text = post_json(url, {"messages": messages, "stream": True})
        chunks = _sse(text)
        calls = [c for ch in chunks for c in ch["choices"][0]["delta"].get("tool_calls", [])]
        assert calls[0]["function"]["name"] == "madohub-ask" and calls[0]["id"]
        assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"to": "reviewer"}
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        messages += [
            {"role": "assistant", "tool_calls": [{"id": calls[0]["id"], "type": "function"}]},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": "Done: x"},
        ]
        _, text = post_json(url, {"messages": messages, "stream": True})
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in _sse(text)) == (
            "got Done: x"
        )


def test_chat_completions_script_a_tool_call_and_read_its_output_back() -> None:
    """Qwen Code and OpenCode call tools through chat completions: a scripted call comes as one
    ``tool_calls`` entry (its arguments streamed after its name), the tool's ``tool`` message
    is read back by ``function_output``."""
    call = {"function_call": {"name": "bash", "arguments": {"command": "touch x"}}}

    def reply(body: dict[str, Any]) -> Any:
        return call if function_output(body) is None else None

    with FakeOpenAIResponses(reply) as fake:
        url = f"{fake.base_url}/chat/completions"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "run it"}]
        _, text = post_json(url, {"messages": messages, "stream": True})
        chunks = _sse(text)
        opening = chunks[0]["choices"][0]["delta"]["tool_calls"][0]
        assert (opening["index"], opening["function"]) == (0, {"name": "bash", "arguments": ""})
        args = "".join(
            tc["function"].get("arguments", "")
            for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])
        )  # fmt: skip
        assert json.loads(args) == {"command": "touch x"}
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        _, whole = post_json(url, {"messages": messages})
        (entry,) = json.loads(whole)["choices"][0]["message"]["tool_calls"]
        assert (entry["type"], entry["function"]["name"]) == ("function", "bash")
        answered = [
            *messages,
            {"role": "assistant", "content": None, "tool_calls": [entry]},
            {"role": "tool", "tool_call_id": entry["id"], "content": "ran"},
        ]
        assert function_output({"messages": answered}) == "ran"
        _, text = post_json(url, {"messages": answered})
        assert json.loads(text)["choices"][0]["message"]["content"] == "Done: run it"
