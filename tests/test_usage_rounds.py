"""Every round says what it cost: usage columns filled end to end, prices, the fake API's usage."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from conftest import FAST_IDLE_MS, log_rows, one_round, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.defaults import PRICES_USD_PER_MTOK, check_prices, price_for
from madohub_nb.demo.standin_claude import message_usage
from madohub_nb.errors import MadohubValueError
from madohub_nb.io.log import RoundRecord
from madohub_nb.notebook.config import MadoHub
from madohub_nb.pipeline.round import round_cost_usd
from madohub_nb.testing import FakeAnthropic
from madohub_nb.testing.fake_anthropic import CACHED_INPUT_TOKENS, usage_for

KEY = "sk-ant-test-0123456789abcdefghijklmnopqrstuvwxyz"
STANDIN_PRICE = {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": 3.0}
AI_PRICE = {"input": 1.0, "output": 4.0, "cache_read": 0.1, "cache_write": 1.25}


def _last_turn_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a transcript's last turn, read forwards (independent of the reader)."""
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    starts = [
        i
        for i, r in enumerate(recs)
        if r.get("type") == "user" and isinstance(r["message"].get("content"), str)
    ]
    return recs[starts[-1] :]


# --------------------------------------------------------------------------- prices


@pytest.mark.parametrize(
    ("model", "row"),
    [
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("Claude-Sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("anthropic/claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("us.anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1"),
        ("claude-opus-4-6[1m]", "claude-opus-4-6"),
        ("claude-opus-4-5-latest", "claude-opus-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
    ],
)
def test_dated_and_prefixed_model_names_find_their_price_row(model: str, row: str) -> None:
    assert price_for(model, PRICES_USD_PER_MTOK) is PRICES_USD_PER_MTOK[row]


@pytest.mark.parametrize(
    "model", ["claude-opus-4-9", "claude-standin-echo", "fake-model", "", None, "claude"]
)
def test_an_unknown_model_has_no_price_row(model: str | None) -> None:
    assert price_for(model, PRICES_USD_PER_MTOK) is None


def test_cost_is_tokens_times_price_and_nan_for_an_unknown_model() -> None:
    prices = {"m": STANDIN_PRICE, "ai": AI_PRICE}
    rec = RoundRecord(
        route_id="r",
        source="a",
        target="b",
        round=1,
        trigger="on-idle",
        transform="ai-routing",
        dispatch="madoagent",
        status="delivered",
        model="m-20260101",
        input_tokens=1_000,
        output_tokens=2_000,
        cache_read_tokens=3_000,
        cache_write_tokens=4_000,
        ai_model="ai",
        ai_input_tokens=5_000,
        ai_output_tokens=6_000,
    )
    # (1000*2 + 2000*8 + 3000*0.5 + 4000*3) / 1e6 + (5000*1 + 6000*4) / 1e6
    assert round_cost_usd(rec, prices) == pytest.approx(0.0315 + 0.029)
    assert round_cost_usd(rec, prices, source_turn=False) == pytest.approx(0.029)
    rec.ai_model = "unpriced"
    assert math.isnan(round_cost_usd(rec, prices) or 0.0)
    rec.ai_model, rec.cache_write_tokens = None, None  # a count that could not be read
    assert math.isnan(round_cost_usd(rec, prices) or 0.0)
    assert round_cost_usd(rec, prices, source_turn=False) is None  # nothing to cost


def test_the_agents_own_cost_is_the_source_turns_and_a_zero_yields_to_the_price_table() -> None:
    """A channel that reports what the turn cost (OpenCode's) is logged as it said; its 0
    for a model it cannot price yields to the hub's table, which may know the model."""
    prices = {"m": STANDIN_PRICE, "ai": AI_PRICE}
    rec = RoundRecord(
        route_id="r", source="a", target="b", round=1, trigger="on-idle", transform="none",
        dispatch="madoagent", status="delivered", model="m", input_tokens=1_000,
        output_tokens=2_000, cache_read_tokens=3_000, cache_write_tokens=None,
        meta={"agent_cost_usd": 0.25},
    )  # fmt: skip
    assert round_cost_usd(rec, prices) == pytest.approx(0.25)  # (tokens alone: NaN here)
    rec.ai_model, rec.ai_input_tokens, rec.ai_output_tokens = "ai", 5_000, 6_000
    assert round_cost_usd(rec, prices) == pytest.approx(0.25 + 0.029)
    assert round_cost_usd(rec, prices, source_turn=False) == pytest.approx(0.029)
    rec.ai_model, rec.cache_write_tokens, rec.meta = None, 0, {"agent_cost_usd": 0.0}
    assert round_cost_usd(rec, prices) == pytest.approx((1000 * 2 + 2000 * 8 + 3000 * 0.5) / 1e6)
    rec.model = "unpriced"
    assert round_cost_usd(rec, prices) == 0.0  # the agent's 0 beats a NaN


@pytest.mark.parametrize(
    ("prices", "match"),
    [
        ("cheap", "must be a dict"),
        ({"m": {"input": 1, "output": 2}}, "exactly the keys"),
        ({"m": {"input": 1, "output": 2, "cache_read": -1, "cache_write": 0}}, "cache_read"),
        ({"m": {"input": "1", "output": 2, "cache_read": 0, "cache_write": 0}}, "'input'"),
        ({"": STANDIN_PRICE}, "non-empty"),
    ],
)
def test_a_bad_price_table_is_refused_with_a_teaching_error(prices: object, match: str) -> None:
    with pytest.raises(MadohubValueError, match=match):
        check_prices(prices)


def test_the_prices_trait_validates_and_feeds_hub_kwargs() -> None:
    cfg = MadoHub()
    assert cfg.prices is None  # None: the documented defaults
    cfg.prices = {"m": STANDIN_PRICE}
    assert cfg.hub_kwargs()["prices"] == {"m": STANDIN_PRICE}
    with pytest.raises(Exception, match="MadoHub.prices"):
        cfg.prices = {"m": {"input": 1}}
    assert "prices=<1 models>" in repr(cfg)


# --------------------------------------------------------------------------- the fake API


def _request(stream: bool, base_url: str, cached: bool) -> tuple[Any, dict[str, Any]]:
    system: Any = "You are terse."
    if cached:
        system = [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ]
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 100,
        "system": system,
        "messages": [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question, a little longer"},
        ],
    }
    client = anthropic.Anthropic(api_key=KEY, base_url=base_url, max_retries=0)
    if stream:
        with client.messages.stream(**body) as s:  # type: ignore[arg-type]
            return s.get_final_message(), body
    return client.messages.create(**body), body  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "cached"])
def test_the_fake_api_reports_usage_derived_from_the_request(stream: bool, cached: bool) -> None:
    with FakeAnthropic(reply="Short answer.") as fake:
        message, body = _request(stream, fake.base_url, cached)
        again, _ = _request(stream, fake.base_url, cached)
        reported = fake.reported
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (
        reported[0]["usage"]["input_tokens"],
        reported[0]["usage"]["output_tokens"],
    )
    assert usage.cache_read_input_tokens == reported[0]["usage"]["cache_read_input_tokens"]
    assert usage.cache_creation_input_tokens == reported[0]["usage"]["cache_creation_input_tokens"]
    assert again.usage == usage and again.id != message.id  # deterministic, per message
    assert [r["stream"] for r in reported] == [stream, stream]
    content = [{"type": "text", "text": "Short answer."}]
    assert reported[0]["usage"] == usage_for(body, content)
    if cached:
        assert usage.input_tokens == CACHED_INPUT_TOKENS
        assert usage.cache_read_input_tokens > usage.cache_creation_input_tokens > 0
    else:
        assert usage.input_tokens > 20 and usage.cache_read_input_tokens == 0
    assert usage.output_tokens == len(json.dumps(content, sort_keys=True)) // 4


# --------------------------------------------------------------------------- stand-in rounds


@pytest.fixture
def priced_hub(tmux_socket: str, home: Path, tmp_path: Path) -> Iterator[mh.Hub]:
    """A hub whose price table knows the stand-ins' models (and only them)."""
    hub = mh.Hub(
        socket_name=tmux_socket,
        idle_delay_ms=FAST_IDLE_MS,
        log_path=tmp_path / "rounds.sqlite3",
        prices={"claude-standin-echo": STANDIN_PRICE, "standin-echo": STANDIN_PRICE},
    )
    yield hub
    hub.close()


def test_a_stand_in_claude_round_logs_its_source_turn_usage_and_cost(
    priced_hub: mh.Hub, project: Path
) -> None:
    writer = start_standin(priced_hub, "writer", cwd=project)
    start_standin(priced_hub, "reviewer", cwd=project)
    route = priced_hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=1000)
    row = one_round(priced_hub, route, "draft the release notes please")
    # The answer came with the Stop hook (issue 23); the usage still from the transcript.
    assert row["status"] == "shadow" and row["extraction_method"] == "hook", row["error"]
    # What the stand-in wrote: one message; recomputed from the prompt and the answer.
    expected = message_usage(
        "draft the release notes please", [{"type": "text", "text": row["extracted"]}], 1
    )
    assert row["model"] == "claude-standin-echo"
    assert row["input_tokens"] == expected["input_tokens"]
    assert row["output_tokens"] == expected["output_tokens"]
    assert row["cache_read_tokens"] == expected["cache_read_input_tokens"]
    assert row["cache_write_tokens"] == expected["cache_creation_input_tokens"]
    assert row["tool_calls"] == 0
    turn = _last_turn_lines(Path(row["extraction_path"]))
    (duration,) = [r["durationMs"] for r in turn if r.get("subtype") == "turn_duration"]
    assert row["turn_ms"] == duration > 0
    ai_columns = [row["ai_model"], row["ai_input_tokens"], row["ai_output_tokens"]]
    assert all(v is None or (isinstance(v, float) and math.isnan(v)) for v in ai_columns)
    assert row["cost_usd"] == pytest.approx(
        (
            expected["input_tokens"] * 2.0
            + expected["output_tokens"] * 8.0
            + expected["cache_read_input_tokens"] * 0.5
            + expected["cache_creation_input_tokens"] * 3.0
        )
        / 1e6
    )
    assert writer.last_response().usage.model == "claude-standin-echo"  # type: ignore[union-attr]


def _record_span_ms(turn: list[dict[str, Any]]) -> float:
    """The turn's prompt line to its newest assistant line, by the records' own times."""
    from datetime import datetime

    def at(r: dict[str, Any]) -> float:
        return datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")).timestamp()

    answer = [r for r in turn if r.get("type") == "assistant"][-1]
    return round((at(answer) - at(turn[0])) * 1000, 3)


def test_a_hooked_round_waits_for_the_turn_duration_written_after_the_stop_hook(
    priced_hub: mh.Hub, project: Path
) -> None:
    # Claude Code 2.1.197 runs its Stop hook before it writes the turn's turn_duration
    # (issue 38 item 12): the round waits for it, as for the usage, and logs it.
    start_standin(priced_hub, "writer", cwd=project)
    start_standin(priced_hub, "reviewer", cwd=project)
    route = priced_hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=1000)
    row = one_round(priced_hub, route, "[[durationlate 500]] draft the notes")
    assert row["extraction_method"] == "hook", row["error"]
    turn = _last_turn_lines(Path(row["extraction_path"]))
    (duration,) = [r["durationMs"] for r in turn if r.get("subtype") == "turn_duration"]
    assert row["turn_ms"] == duration > 0
    assert row["meta"]["turn_ms_source"] == "record"
    assert row["model"] == "claude-standin-echo"  # and its usage, as before


def test_a_hooked_round_measures_its_turn_when_the_duration_comes_too_late(
    priced_hub: mh.Hub, project: Path
) -> None:
    from madohub_nb.pipeline.triggers import HOOK_RECORD_WAIT_MS

    start_standin(priced_hub, "writer", cwd=project)
    start_standin(priced_hub, "reviewer", cwd=project)
    route = priced_hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=1000)
    late_ms = HOOK_RECORD_WAIT_MS + 3000
    started = time.monotonic()
    row = one_round(priced_hub, route, f"[[durationlate {late_ms}]] draft the notes")
    assert (time.monotonic() - started) * 1000 < late_ms  # it did not wait for the record
    assert row["extraction_method"] == "hook", row["error"]
    turn = _last_turn_lines(Path(row["extraction_path"]))
    assert not [r for r in turn if r.get("subtype") == "turn_duration"]  # not there yet
    # Measured on the record's own clock: its prompt line to its answer line.
    assert row["turn_ms"] == _record_span_ms(turn) > 0
    assert row["meta"]["turn_ms_source"] == "measured"
    assert row["model"] == "claude-standin-echo"


def test_a_stand_in_codex_round_logs_its_token_counts(priced_hub: mh.Hub, project: Path) -> None:
    start_standin(priced_hub, "coder", kind="codex", cwd=project, channel=False)  # (its notify)
    start_standin(priced_hub, "reviewer", cwd=project)
    route = priced_hub.connect("coder", "reviewer", dispatch="shadow", cooldown_ms=1000)
    row = one_round(priced_hub, route, "write the parser")
    assert row["extraction_method"] == "hook", row["error"]  # Codex's notify (issue 23)
    # The rollout's own token_count event of that turn, read forwards.
    lines = [json.loads(x) for x in Path(row["extraction_path"]).read_text().splitlines()]
    counts = [
        r["payload"]["info"]["last_token_usage"]
        for r in lines
        if r["type"] == "event_msg" and r["payload"].get("type") == "token_count"
    ]
    assert row["model"] == "standin-echo"
    assert (row["input_tokens"], row["output_tokens"]) == (
        counts[-1]["input_tokens"],
        counts[-1]["output_tokens"],
    )
    assert (row["cache_read_tokens"], row["cache_write_tokens"], row["tool_calls"]) == (0, 0, 0)
    assert row["turn_ms"] >= 0
    assert row["cost_usd"] == pytest.approx(
        (counts[-1]["input_tokens"] * 2.0 + counts[-1]["output_tokens"] * 8.0) / 1e6
    )


def test_a_screen_extracted_round_leaves_usage_and_cost_empty(
    priced_hub: mh.Hub, project: Path
) -> None:
    start_standin(priced_hub, "writer", cwd=project)
    start_standin(priced_hub, "reviewer", cwd=project)
    # legacy dispatch extracts from the screen only.
    route = priced_hub.connect("writer", "reviewer", dispatch="legacy", cooldown_ms=1000)
    one_round(priced_hub, route, "screen only")
    row = priced_hub.log.df[priced_hub.log.df["route_id"] == route.id].iloc[-1]
    assert row["extraction_method"] == "terminal"
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "turn_ms", "cost_usd"):
        assert math.isnan(row[name]), name
    assert row["model"] is None


@pytest.fixture
def ai_hub(
    tmux_socket: str, home: Path, tmp_path: Path, project: Path
) -> Iterator[tuple[FakeAnthropic, mh.Hub]]:
    with FakeAnthropic(reply="Please review the release notes.") as fake:
        hub = mh.Hub(
            socket_name=tmux_socket,
            idle_delay_ms=FAST_IDLE_MS,
            log_path=tmp_path / "l.sqlite3",
            api_key=KEY,
            base_url=fake.base_url,
            model="claude-haiku-4-5-20251001",
            prices={"claude-standin-echo": STANDIN_PRICE, "claude-haiku-4-5": AI_PRICE},
        )
        try:
            start_standin(hub, "writer", cwd=project)
            start_standin(hub, "reviewer", cwd=project)
            yield fake, hub
        finally:
            hub.close()


@pytest.mark.parametrize("transform", ["ai-routing", "summary"])
def test_an_ai_transform_round_logs_what_the_api_reported(
    ai_hub: tuple[FakeAnthropic, mh.Hub], transform: str
) -> None:
    fake, hub = ai_hub
    route = hub.connect("writer", "reviewer", transform=transform, cooldown_ms=1000)
    row = one_round(hub, route, "release notes")
    assert row["status"] == "delivered", row["error"]
    (reported,) = fake.reported
    assert row["ai_model"] == reported["model"] == "claude-haiku-4-5-20251001"
    assert row["ai_input_tokens"] == reported["usage"]["input_tokens"] > 0
    assert row["ai_output_tokens"] == reported["usage"]["output_tokens"] > 0
    source = (
        row["input_tokens"] * 2.0
        + row["output_tokens"] * 8.0
        + row["cache_read_tokens"] * 0.5
        + row["cache_write_tokens"] * 3.0
    ) / 1e6
    ai = (reported["usage"]["input_tokens"] * 1.0 + reported["usage"]["output_tokens"] * 4.0) / 1e6
    assert row["cost_usd"] == pytest.approx(source + ai)
    # A replay re-runs the transform only: its cost is the new AI call, not the source turn again.
    replayed = hub.replay(row["round_id"], deliver=False).result(60)
    assert replayed.ai_input_tokens == fake.reported[-1]["usage"]["input_tokens"]
    assert replayed.model is None and replayed.cost_usd == pytest.approx(
        (
            fake.reported[-1]["usage"]["input_tokens"] * 1.0
            + fake.reported[-1]["usage"]["output_tokens"] * 4.0
        )
        / 1e6
    )


# --------------------------------------------------------------------------- dashboard


def test_the_dashboard_round_table_shows_cost_and_blank_when_unknown() -> None:
    from madohub_nb.render import ROUND_TABLE_COLUMNS, round_row, rounds_table_html

    base = {"route_id": "a->b#1", "source": "a", "target": "b", "status": "delivered"}
    rows = [
        round_row({**base, "round_id": "priced", "cost_usd": 0.012345}),
        round_row({**base, "round_id": "unpriced", "cost_usd": math.nan}),
    ]
    out = rounds_table_html(rows)
    assert ("cost_usd", "cost") in ROUND_TABLE_COLUMNS
    assert ">$0.0123<" in out
    unpriced = out.split("data-round-id='unpriced'")[1]
    assert "$" not in unpriced and "nan" not in unpriced.lower()


@pytest.mark.parametrize(
    "bad_usage",
    [
        {"input_tokens": -5, "output_tokens": "many"},
        {"output_tokens": 7},  # input missing
        {},
    ],
    ids=["negative-and-text", "missing-input", "empty"],
)
def test_malformed_api_usage_leaves_ai_columns_empty_and_the_round_delivered(
    tmux_socket: str, home: Path, tmp_path: Path, project: Path, bad_usage: dict[str, Any]
) -> None:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        return {"text": "Please review the release notes.", "usage": bad_usage}

    with FakeAnthropic(reply=reply) as fake:
        hub = mh.Hub(
            socket_name=tmux_socket,
            idle_delay_ms=FAST_IDLE_MS,
            log_path=tmp_path / "l.sqlite3",
            api_key=KEY,
            base_url=fake.base_url,
            model="claude-haiku-4-5",
            prices={"claude-standin-echo": STANDIN_PRICE, "claude-haiku-4-5": AI_PRICE},
        )
        try:
            start_standin(hub, "writer", cwd=project)
            start_standin(hub, "reviewer", cwd=project)
            route = hub.connect("writer", "reviewer", transform="ai-routing", cooldown_ms=1000)
            row = one_round(hub, route, "release notes")
        finally:
            hub.close()
    assert row["status"] == "delivered", row["error"]
    assert row["prompt"] == "Please review the release notes."
    assert row["ai_model"] == "claude-haiku-4-5"
    expected_output = bad_usage.get("output_tokens")
    if isinstance(expected_output, int):
        assert row["ai_output_tokens"] == expected_output
    else:
        assert math.isnan(row["ai_output_tokens"])
    assert math.isnan(row["ai_input_tokens"])
    assert row["input_tokens"] == 3  # the source turn's columns are still read
    assert math.isnan(row["cost_usd"])  # a part is unknown: the total is unknown


def test_an_ai_transform_round_logs_the_cache_tokens_the_api_reported(
    tmux_socket: str, home: Path, tmp_path: Path, project: Path
) -> None:
    usage = {
        "input_tokens": 40,
        "output_tokens": 12,
        "cache_read_input_tokens": 3000,
        "cache_creation_input_tokens": 500,
    }
    reply = {"text": "Please review the cached notes.", "usage": usage}
    with FakeAnthropic(reply=lambda body: dict(reply)) as fake:
        hub = mh.Hub(
            socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=tmp_path / "l.sqlite3",
            api_key=KEY, base_url=fake.base_url, model="claude-haiku-4-5",
            prices={"claude-standin-echo": STANDIN_PRICE, "claude-haiku-4-5": AI_PRICE},
        )  # fmt: skip
        try:
            start_standin(hub, "writer", cwd=project)
            start_standin(hub, "reviewer", cwd=project)
            route = hub.connect("writer", "reviewer", transform="summary", cooldown_ms=1000)
            row = one_round(hub, route, "cached notes")
        finally:
            hub.close()
    assert row["status"] == "delivered", row["error"]
    assert fake.reported[-1]["usage"] == usage
    assert row["ai_cache_read_tokens"] == 3000
    assert row["ai_cache_write_tokens"] == 500
    source = (
        row["input_tokens"] * 2.0
        + row["output_tokens"] * 8.0
        + row["cache_read_tokens"] * 0.5
        + row["cache_write_tokens"] * 3.0
    ) / 1e6
    ai = (40 * 1.0 + 12 * 4.0 + 3000 * 0.1 + 500 * 1.25) / 1e6
    assert row["cost_usd"] == pytest.approx(source + ai)


# --------------------------------------------------------------------------- budgets


@pytest.mark.parametrize(
    ("budget", "spent"),
    [
        (
            {"max_cost_usd": 1e-6},
            lambda row: f"spent ${row['cost_usd']:.4f} of max_cost_usd=$1e-06",
        ),
        (
            {"max_tokens": 10},
            lambda row: (
                f"spent {int(row['input_tokens'] + row['output_tokens']):,} tokens of max_tokens=10"
            ),
        ),
    ],
)
def test_a_stand_in_route_stops_on_its_budget_and_types_nothing_more(
    priced_hub: mh.Hub, project: Path, budget: dict[str, Any], spent: Any
) -> None:
    start_standin(priced_hub, "writer", cwd=project)
    reviewer = start_standin(priced_hub, "reviewer", cwd=project)
    route = priced_hub.connect("writer", "reviewer", cooldown_ms=1000, **budget)
    first = one_round(priced_hub, route, "draft the release notes please")
    assert first["status"] == "delivered", first["error"]
    # The first round spent the budget (the stand-in's own transcript usage): exhausted.
    wait_until(lambda: route.state == "exhausted", 10, what="the route exhausted")
    assert route.last_error is not None and spent(first) in route.last_error
    # The writer's next turn is logged, not delivered; nothing reaches the reviewer.
    priced_hub.send("writer", "second-turn-never-delivered").result(30)
    wait_until(lambda: len(log_rows(priced_hub, route)) == 2, 30, what="the exhausted row")
    last = log_rows(priced_hub, route)[-1]
    assert last["status"] == "exhausted" and spent(first) in last["error"]
    assert route.rounds == 1
    time.sleep(1.0)
    assert "second-turn-never-delivered" not in reviewer.screen()  # type: ignore[attr-defined]


def test_a_budgeted_stand_in_route_with_no_price_for_its_model_stops(
    hub: mh.Hub, project: Path
) -> None:
    # The default price table has no row for the stand-in's model: unknown, not free.
    start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project)
    route = hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=1000, max_cost_usd=5)
    row = one_round(hub, route, "what does this cost")
    assert row["model"] == "claude-standin-echo" and math.isnan(row["cost_usd"])
    wait_until(lambda: route.state == "stopped", 10, what="the route stopped")
    assert "model 'claude-standin-echo' has no price" in (route.last_error or "")
    assert "budget=$0.0000/$5" in repr(route)


def test_the_route_card_shows_the_budget_spent() -> None:
    from madohub_nb.render import route_summary_html

    class Card:
        id, source, target, state, rounds, max_rounds = "w->r#1", "w", "r", "active", 1, 5
        last_status, last_error = "delivered", None
        budget_spent = "$0.0123/$2.5 · 1,234/200,000 tokens"

    html = route_summary_html(Card())
    assert 'class="madohub-budget"' in html and "$0.0123/$2.5 · 1,234/200,000 tokens" in html
    Card.budget_spent = ""
    assert "madohub-budget" not in route_summary_html(Card())


def test_a_budget_counts_the_ai_transforms_usage_with_the_source_turns(
    ai_hub: tuple[FakeAnthropic, mh.Hub],
) -> None:
    fake, hub = ai_hub
    route = hub.connect(
        "writer", "reviewer", transform="summary", cooldown_ms=1000, max_tokens=10**6,
        max_cost_usd=100.0,
    )  # fmt: skip
    row = one_round(hub, route, "release notes")
    assert row["status"] == "delivered", row["error"]
    (reported,) = fake.reported
    ai_tokens = reported["usage"]["input_tokens"] + reported["usage"]["output_tokens"]
    assert ai_tokens > 0
    assert route.spent_tokens == int(row["input_tokens"] + row["output_tokens"]) + ai_tokens
    assert route.spent_usd == pytest.approx(row["cost_usd"])
    assert route.state == "active"  # far under both limits: the route goes on
