"""FakeAnthropic speaks the Messages API well enough for the real ``anthropic`` SDK.

Every test drives the real SDK (or raw HTTP) against a real local server.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import anthropic
import httpx
import pytest

from madohub_nb.testing import FakeAnthropic

KEY = "sk-ant-test-fake-0123456789"


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def client(fake: FakeAnthropic, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 10.0)
    return anthropic.Anthropic(api_key=KEY, base_url=fake.base_url, **kwargs)


def ask(c: anthropic.Anthropic, content: Any, **kwargs: Any) -> anthropic.types.Message:
    return c.messages.create(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": content}],
        **kwargs,
    )


def text_of(message: anthropic.types.Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def sse_event_names(raw: str) -> list[str]:
    return [line[len("event: ") :] for line in raw.splitlines() if line.startswith("event: ")]


@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_head_and_get_root_answer_200(fake: FakeAnthropic, method: str) -> None:
    request = urllib.request.Request(fake.base_url + "/", method=method)
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_default_reply_echoes_first_40_characters_with_newlines_escaped(
    fake: FakeAnthropic,
) -> None:
    prompt = "Multi-line final prompt\nsecond line [[sleep 0]] and more text"
    message = ask(client(fake), prompt)
    # The same answer the recorded fixture transcript_with_tool_use.jsonl holds.
    assert text_of(message) == "Done: Multi-line final prompt\\nsecond line [[sl"
    assert message.id.startswith("msg_")
    assert message.role == "assistant"
    assert message.model == "claude-test"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens > 0
    assert fake.prompts == [prompt]
    assert fake.requests[-1]["path"] == "/v1/messages"
    assert fake.requests[-1]["body"]["messages"][0]["content"] == prompt


def test_prompt_is_last_text_block_that_is_not_an_injected_reminder(fake: FakeAnthropic) -> None:
    blocks = [
        {"type": "text", "text": "<system-reminder>ignore me</system-reminder>"},
        {"type": "text", "text": "The real prompt"},
        {"type": "text", "text": "<system-reminder>and me</system-reminder>"},
    ]
    assert text_of(ask(client(fake), blocks)) == "Done: The real prompt"
    assert fake.prompts == ["The real prompt"]


def test_reply_can_be_a_fixed_string_or_a_function_of_the_request() -> None:
    with FakeAnthropic(reply="Scripted answer") as fake:
        assert text_of(ask(client(fake), "anything")) == "Scripted answer"
    seen: list[str] = []

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body["model"])
        return {"content": [{"type": "text", "text": "from dict"}], "stop_reason": "max_tokens"}

    with FakeAnthropic(reply=reply) as fake:
        message = ask(client(fake), "anything")
    assert text_of(message) == "from dict"
    assert message.stop_reason == "max_tokens"
    assert seen == ["claude-test"]


def test_sdk_stream_reassembles_text_split_over_several_deltas(fake: FakeAnthropic) -> None:
    with client(fake).messages.stream(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "Stream this answer please"}],
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "Done: Stream this answer please"
    assert len(pieces) > 1
    assert final.stop_reason == "end_turn"
    assert text_of(final) == "Done: Stream this answer please"


def test_beta_path_streams_events_in_messages_api_order(fake: FakeAnthropic) -> None:
    body = {
        "model": "claude-test",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "Hello beta"}],
    }
    response = httpx.post(
        fake.base_url + "/v1/messages?beta=true", json=body, headers={"x-api-key": KEY}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    names = sse_event_names(response.text)
    assert names[0] == "message_start"
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert names.count("content_block_delta") > 1
    datas = [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]
    start = datas[0]["message"]
    assert start["type"] == "message" and start["role"] == "assistant" and start["content"] == []
    delta = next(d for d in datas if d["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert "output_tokens" in delta["usage"]
    assert fake.requests[-1]["path"] == "/v1/messages?beta=true"


def test_title_side_request_gets_json_title_and_is_not_a_prompt(fake: FakeAnthropic) -> None:
    message = ask(
        client(fake),
        "Fix the failing login test in auth module",
        system="Generate a concise title for this coding session.",
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": {}}}},
    )
    assert json.loads(text_of(message))["title"].startswith("Fix the failing")
    assert fake.prompts == []
    assert len(fake.requests) == 1


def test_injected_fault_skips_the_title_side_request(fake: FakeAnthropic) -> None:
    fake.fail_next(500)
    title = ask(
        client(fake),
        "Some prompt",
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": {}}}},
    )
    assert "title" in json.loads(text_of(title))
    with pytest.raises(anthropic.InternalServerError):
        ask(client(fake), "Some prompt")


def test_bash_marker_asks_for_tool_then_answers_the_tool_result(fake: FakeAnthropic) -> None:
    c = client(fake)
    prompt = "Needs permission [[bash touch made_by_tool]]"
    first = ask(c, prompt)
    assert first.stop_reason == "tool_use"
    tool_use = next(b for b in first.content if b.type == "tool_use")
    assert tool_use.name == "Bash"
    assert tool_use.input == {"command": "touch made_by_tool", "description": "Run fake command"}
    assert tool_use.id.startswith("toolu_")

    follow_up = c.messages.create(
        model="claude-test",
        max_tokens=100,
        messages=[
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool_use.id,
                        "content": "(Bash completed with no output)",
                    }
                ],
            },
        ],
    )
    assert text_of(follow_up) == "Done: (Bash completed with no output)"
    assert fake.prompts == [prompt]


def test_bash_marker_tool_input_survives_streaming(fake: FakeAnthropic) -> None:
    with client(fake).messages.stream(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "Go [[bash echo 'a \"quoted\" word']]"}],
    ) as stream:
        final = stream.get_final_message()
    tool_use = next(b for b in final.content if b.type == "tool_use")
    assert tool_use.input["command"] == "echo 'a \"quoted\" word'"
    assert final.stop_reason == "tool_use"


def test_sleep_marker_starts_the_stream_then_pauses_before_the_text(fake: FakeAnthropic) -> None:
    events: list[tuple[str, float]] = []
    with client(fake).messages.stream(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "Slow one [[sleep 0.4]]"}],
    ) as stream:
        for event in stream:
            events.append((event.type, time.monotonic()))
    names = [name for name, _ in events]
    assert names[0] == "message_start"
    first_text = next(t for name, t in events if name == "text")
    # A lower bound only: the server waits at least this long between the two.
    assert first_text - events[0][1] >= 0.35


def test_fail_next_returns_anthropic_error_json_with_retry_after(fake: FakeAnthropic) -> None:
    fake.fail_next(429, retry_after=7)
    with pytest.raises(anthropic.RateLimitError) as info:
        ask(client(fake), "rate limited")
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "fake rate_limit_error (HTTP 429)"},
    }
    assert text_of(ask(client(fake), "now fine")) == "Done: now fine"


def test_fail_next_times_then_sdk_retry_succeeds(fake: FakeAnthropic) -> None:
    fake.fail_next(529, times=2, retry_after=0.01)
    message = ask(client(fake, max_retries=2), "eventually")
    assert text_of(message) == "Done: eventually"
    assert len(fake.requests) == 3


def test_overloaded_error_type_for_529(fake: FakeAnthropic) -> None:
    fake.fail_next(529)
    with pytest.raises(anthropic.APIStatusError) as info:
        ask(client(fake), "busy")
    assert info.value.status_code == 529
    assert info.value.type == "overloaded_error"


def test_hang_next_makes_the_client_time_out_then_serves_again(fake: FakeAnthropic) -> None:
    fake.hang_next(30)
    with pytest.raises(anthropic.APITimeoutError):
        ask(client(fake, timeout=0.3), "stalled")
    assert text_of(ask(client(fake), "after")) == "Done: after"


def test_expected_api_key_is_enforced_and_seen() -> None:
    with FakeAnthropic(api_key=KEY) as fake:
        wrong = anthropic.Anthropic(api_key="sk-wrong", base_url=fake.base_url, max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            ask(wrong, "who am I")
        assert text_of(ask(client(fake), "me")) == "Done: me"
        assert fake.api_key_seen(KEY)
        assert not fake.api_key_seen("sk-never-sent")


def test_count_tokens_answers_a_positive_count(fake: FakeAnthropic) -> None:
    count = client(fake).messages.count_tokens(
        model="claude-test", messages=[{"role": "user", "content": "count these words please"}]
    )
    assert count.input_tokens > 0
    assert fake.requests[-1]["path"] == "/v1/messages/count_tokens"


def test_wait_for_prompts_returns_them_or_times_out(fake: FakeAnthropic) -> None:
    ask(client(fake), "one")
    assert fake.wait_for_prompts(1, timeout_s=2) == ["one"]
    with pytest.raises(TimeoutError):
        fake.wait_for_prompts(2, timeout_s=0.1)


def test_stopped_server_refuses_connections() -> None:
    fake = FakeAnthropic().start()
    base_url = fake.base_url
    fake.stop()
    c = anthropic.Anthropic(api_key=KEY, base_url=base_url, max_retries=0, timeout=5)
    with pytest.raises(anthropic.APIConnectionError):
        ask(c, "anyone there?")


def test_responses_stamp_when_each_answer_was_written_in_full(fake: FakeAnthropic) -> None:
    began = datetime.now(timezone.utc)
    with client(fake).messages.stream(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "Stamped [[sleep 0.4]]"}],
    ) as stream:
        for _ in stream:
            pass
    got = datetime.now(timezone.utc)
    ((ended, body),) = fake.responses
    assert body["messages"][0]["content"] == "Stamped [[sleep 0.4]]"
    # After the paused text was streamed, not when the request came in.
    assert began + timedelta(seconds=0.35) <= ended <= got
