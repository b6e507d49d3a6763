"""Usage columns of rounds whose source is a REAL Claude Code or Codex, against the fake APIs.

The fake APIs report a usage derived from each request (``usage_for``) and keep what
they reported; the round log's token columns must be exactly the sums over the source
turn's API messages, each message counted once, however the agent wrote them down.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.defaults import PRICES_USD_PER_MTOK
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_openai import FakeOpenAIResponses

from .conftest import (
    CLAUDE_VERSIONS,
    CODEX_MODEL,
    DEFAULT_API_KEY,
    REPLY_TIMEOUT_S,
    RealPane,
    write_claude_config,
)

pytestmark = pytest.mark.real_agents

IDLE_DELAY_MS = 1500
ROUND_TIMEOUT_S = 60.0
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


@pytest.fixture
def usage_hub(tmux_socket: str, tmp_path: Path) -> Iterator[mh.Hub]:
    hub = mh.Hub(
        socket_name=tmux_socket,
        idle_delay_ms=IDLE_DELAY_MS,
        log_path=tmp_path / "rounds.sqlite3",
        prices={CODEX_MODEL: PRICE},
    )
    yield hub
    hub.close()


@pytest.fixture
def reviewer_api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def _turn_messages(fake: FakeAnthropic | FakeOpenAIResponses, since: int) -> list[dict[str, Any]]:
    """What the fake reported for the conversation requests answered after ``since``."""
    return [r for r in fake.reported[since:] if not r["title"]]


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_claude_round_usage_equals_what_the_api_reported(
    version: str,
    usage_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    reviewer_api: FakeAnthropic,
    home: Path,
    tmp_path: Path,
) -> None:
    cwds = []
    for i in range(2):  # trust both projects before either Claude starts (REAL-AGENTS.md)
        cwd = tmp_path / f"trusted-{i}"
        cwd.mkdir()
        cwds.append(cwd.resolve())
        write_claude_config(home, cwds[-1], DEFAULT_API_KEY, version)
    a = real_claude_pane(version, cwd=cwds[0])
    b = real_claude_pane(version, cwd=cwds[1], base_url=reviewer_api.base_url)
    usage_hub.tile("writer", pane=a.pane_id)
    usage_hub.tile("reviewer", pane=b.pane_id)
    route = usage_hub.connect("writer", "reviewer", template="Check: {output}", cooldown_ms=1000)
    wait_until(route.ready.is_set, 20, what="the route to listen")

    since = len(fake_anthropic.reported)
    prompt = f"Count the tokens of this turn on {version}"
    a.submit(prompt)
    assert reviewer_api.wait_for_prompts(1, REPLY_TIMEOUT_S) == [f"Check: {default_answer(prompt)}"]
    usage_hub.wait_rounds_sync(1, ROUND_TIMEOUT_S)
    (row,) = log_rows(usage_hub, route)
    assert (row["status"], row["extraction_method"]) == ("delivered", "jsonl"), row["error"]

    billed = _turn_messages(fake_anthropic, since)
    assert billed, "the fake API answered no conversation request"
    assert len({m["id"] for m in billed}) == len(billed)
    assert row["model"] == billed[-1]["model"]
    assert row["input_tokens"] == sum(m["usage"]["input_tokens"] for m in billed)
    assert row["output_tokens"] == sum(m["usage"]["output_tokens"] for m in billed)
    assert row["cache_read_tokens"] == sum(m["usage"]["cache_read_input_tokens"] for m in billed)
    assert row["cache_write_tokens"] == sum(
        m["usage"]["cache_creation_input_tokens"] for m in billed
    )
    assert row["tool_calls"] == 0
    assert row["turn_ms"] > 0  # Claude Code's own turn_duration


def test_real_codex_round_usage_equals_what_the_api_reported(
    usage_hub: mh.Hub,
    real_codex_pane: Callable[..., RealPane],
    fake_openai: FakeOpenAIResponses,
) -> None:
    cx = real_codex_pane()
    codex = usage_hub.tile("codex", pane=cx.pane_id)
    sink = usage_hub.tile("sink", agent="shell", command="bash --norc --noprofile")
    wait_until(lambda: sink.state == "idle", 15, what="the sink shell's prompt")
    route = usage_hub.connect("codex", "sink", dispatch="shadow", cooldown_ms=1000)
    wait_until(route.ready.is_set, 20, what="the route to listen")
    wait_until(lambda: codex.state == "idle", REPLY_TIMEOUT_S, what="Codex ready")

    since = len(fake_openai.reported)
    cx.submit("Count the tokens of this Codex turn")
    usage_hub.wait_rounds_sync(1, ROUND_TIMEOUT_S)
    (row,) = log_rows(usage_hub, route)
    assert (row["status"], row["extraction_method"]) == ("shadow", "rollout"), row["error"]

    billed = _turn_messages(fake_openai, since)
    assert billed, "the fake API answered no model request"
    cached = sum(m["usage"]["input_tokens_details"]["cached_tokens"] for m in billed)
    given = sum(m["usage"]["input_tokens"] for m in billed)
    output = sum(m["usage"]["output_tokens"] for m in billed)
    assert row["model"] == CODEX_MODEL
    assert (row["input_tokens"], row["cache_read_tokens"]) == (given - cached, cached)
    assert row["output_tokens"] == output
    assert row["turn_ms"] >= 0
    assert row["cost_usd"] == pytest.approx(
        ((given - cached) * 3.0 + cached * 0.3 + output * 15.0 + row["cache_write_tokens"] * 3.75)
        / 1e6
    )


def test_real_claude_tool_turn_counts_each_api_message_once(
    usage_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
) -> None:
    pane = real_claude_pane()
    src = usage_hub.tile("src", pane=pane.pane_id)
    sink = usage_hub.tile("sink", agent="shell", command="bash --norc --noprofile")
    wait_until(lambda: sink.state == "idle", 15, what="the sink shell's prompt")
    route = usage_hub.connect("src", "sink", dispatch="shadow", cooldown_ms=1000)
    wait_until(route.ready.is_set, 20, what="the route to listen")

    since = len(fake_anthropic.reported)
    target = pane.cwd / "made_by_tool"
    pane.submit(f"Make a file [[bash touch {target}]]")
    wait_until(lambda: src.state == "waiting", REPLY_TIMEOUT_S, what="the permission prompt")
    pane.press("Enter")  # "❯ 1. Yes" is selected
    wait_until(target.exists, REPLY_TIMEOUT_S, what="the tool to run")
    usage_hub.wait_rounds_sync(1, ROUND_TIMEOUT_S)
    (row,) = log_rows(usage_hub, route)
    assert (row["status"], row["extraction_method"]) == ("shadow", "jsonl"), row["error"]
    assert row["extracted"].startswith("Done:")

    # Two API messages: the tool call (written as two transcript lines, each with the
    # message's usage) and the answer after the tool result. 2.1.197 writes the first
    # prompt of a session after the tool call's lines when the tool waits for permission.
    billed = _turn_messages(fake_anthropic, since)
    assert len(billed) == 2
    lines = Path(row["extraction_path"]).read_text().count(billed[0]["id"])
    assert lines >= 2  # the tool message's usage is on several lines, counted once
    for column, key in [
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("cache_read_tokens", "cache_read_input_tokens"),
        ("cache_write_tokens", "cache_creation_input_tokens"),
    ]:
        assert row[column] == sum(m["usage"][key] for m in billed), column
    assert row["tool_calls"] == 1
    assert row["model"] == billed[-1]["model"]


@pytest.mark.parametrize("budget", ["max_tokens", "max_cost_usd", "no price"])
def test_real_claude_route_stops_on_its_budget(
    budget: str,
    usage_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    reviewer_api: FakeAnthropic,
    home: Path,
    tmp_path: Path,
) -> None:
    version = CLAUDE_VERSIONS[-1]
    cwds = []
    for i in range(2):  # trust both projects before either Claude starts (REAL-AGENTS.md)
        cwd = tmp_path / f"trusted-{i}"
        cwd.mkdir()
        cwds.append(cwd.resolve())
        write_claude_config(home, cwds[-1], DEFAULT_API_KEY, version)
    a = real_claude_pane(version, cwd=cwds[0])
    b = real_claude_pane(version, cwd=cwds[1], base_url=reviewer_api.base_url)
    usage_hub.tile("writer", pane=a.pane_id)
    usage_hub.tile("reviewer", pane=b.pane_id)
    if budget == "max_cost_usd":
        usage_hub.prices = PRICES_USD_PER_MTOK  # Claude Code's model has its price there
    # (usage_hub's own table prices only Codex's model: Claude Code's turn has no price.)
    limit = {"max_tokens": ("max_tokens", 1), "max_cost_usd": ("max_cost_usd", 1e-9)}.get(
        budget, ("max_cost_usd", 5.0)
    )
    route = usage_hub.connect(
        "writer", "reviewer", template="Check: {output}", cooldown_ms=1000, **dict([limit])
    )
    wait_until(route.ready.is_set, 20, what="the route to listen")
    since = len(fake_anthropic.reported)
    a.submit("Spend the budget")
    assert reviewer_api.wait_for_prompts(1, REPLY_TIMEOUT_S) == [
        f"Check: {default_answer('Spend the budget')}"
    ]
    if budget == "no price":  # an unknown cost is never free: the route says so and stops
        wait_until(lambda: route.state == "stopped", ROUND_TIMEOUT_S, what="the route stopped")
        (first,) = log_rows(usage_hub, route)
        assert first["status"] == "delivered" and first["input_tokens"] > 0
        assert f"model {first['model']!r} has no price" in (route.last_error or "")
        return
    wait_until(lambda: route.state == "exhausted", ROUND_TIMEOUT_S, what="the route exhausted")
    (first,) = log_rows(usage_hub, route)
    billed = _turn_messages(fake_anthropic, since)
    if budget == "max_tokens":
        spent = sum(m["usage"]["input_tokens"] + m["usage"]["output_tokens"] for m in billed)
        assert route.spent_tokens == spent > 1
        assert f"spent {spent:,} tokens of max_tokens=1" in (route.last_error or "")
    else:  # Claude Code's model is in the default price table: the cost is known
        assert first["cost_usd"] > 0 and route.spent_usd == pytest.approx(first["cost_usd"])
        assert f"spent ${first['cost_usd']:.4f} of max_cost_usd=$1e-09" in (route.last_error or "")
    # The writer's next turn is logged exhausted; the reviewer's API sees no second prompt.
    a.submit("One more turn")
    wait_until(lambda: len(log_rows(usage_hub, route)) == 2, ROUND_TIMEOUT_S, what="the last row")
    assert log_rows(usage_hub, route)[-1]["status"] == "exhausted"
    time.sleep(2.0)
    assert len(reviewer_api.prompts) == 1
