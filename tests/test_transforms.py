"""The transform stage: template validation and rendering, terminal tails, AI transforms.

AI transforms run through the real ``anthropic.AsyncAnthropic`` client against
FakeAnthropic on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from madohub_nb import defaults
from madohub_nb.errors import MadohubValueError, MadohubWarning, TransformError
from madohub_nb.pipeline.transforms import (
    DEFAULT_TEMPLATE,
    TRANSFORM_TYPES,
    AIClientConfig,
    TransformContext,
    TransformSpec,
    apply,
    apply_sync,
    build_ai_request,
    make_transform_spec,
    parse_template,
    require_ai_key,
    resolve_api_key,
    transform_named,
)
from madohub_nb.testing import FakeAnthropic

KEY = "sk-ant-test-S3CRETS3CRETS3CRET-0123456789"


def context(
    output: str = "All tests pass.", screen_lines: list[str] | None = None
) -> TransformContext:
    return TransformContext(
        output=output,
        screen_lines=screen_lines if screen_lines is not None else [],
        round=2,
        max_rounds=5,
        source="writer",
        target="reviewer",
        target_kind="claude",
    )


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def ai_config(fake: FakeAnthropic, **kwargs: Any) -> AIClientConfig:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout_s", 10.0)
    return AIClientConfig(api_key=KEY, base_url=fake.base_url, **kwargs)


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


# Specs and template validation ------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "Review this:\n{output}",
        "{source} -> {target}, round {round}/{maxRounds}: {output}",
        "Literal {{braces}} and {{output}} stay, {output} is filled",
        "No placeholder at all",
    ],
)
def test_good_templates_are_accepted(template: str) -> None:
    spec = make_transform_spec("prompt-wrap", template)
    assert spec.template == template
    assert spec.parsed is not None


@pytest.mark.parametrize(
    "template",
    [
        '{"ok": true, "answer": "{output}"}',
        '{"a": {"b": [1, 2]}} then {output}',
        "Positional {0} {}",
        "Attribute {x.y} {output.upper} {output[0]} {output!r}",
        "Format spec {round:>3} and {__class__}",
        "def f(x):\n    return {x: 1}\n# {output}",
        "Unclosed {output",
        "Stray } brace { and {",
        "set -- ${HOME} {a,b}",
    ],
)
@pytest.mark.filterwarnings("ignore::madohub_nb.errors.MadohubWarning")
def test_brace_text_that_is_not_a_placeholder_comes_out_verbatim(template: str) -> None:
    spec = make_transform_spec("prompt-wrap", template)
    assert apply_sync(spec, context("OUT")) == template.replace("{output}", "OUT")


def test_json_template_is_filled_and_kept_verbatim_through_apply() -> None:
    spec = make_transform_spec(
        "prompt-wrap", 'Reply as JSON {"ok": true, "round": {round}}:\n{output}'
    )
    assert apply_sync(spec, context("x")) == 'Reply as JSON {"ok": true, "round": 2}:\nx'


def test_escape_pairs_still_write_literal_braces() -> None:
    spec = make_transform_spec("prompt-wrap", "{{output}} {{x}} {{{output}}} {{ lone")
    assert apply_sync(spec, context("v")) == "{output} {x} {v} {{ lone"


@pytest.mark.parametrize(
    ("template", "slot", "meant"),
    [
        ("Review {ouput}", "{ouput}", "{output}"),
        ("Review {outptu}", "{outptu}", "{output}"),
        ("Round {Round}", "{Round}", "{round}"),
        ("Of {max_rounds}", "{max_rounds}", "{maxRounds}"),
        ("From {SOURCE}", "{SOURCE}", "{source}"),
        ("Padded {round:>3}", "{round:>3}", "{round}"),
    ],
)
def test_near_miss_warns_naming_the_known_placeholders_and_stays_verbatim(
    template: str, slot: str, meant: str
) -> None:
    with pytest.warns(MadohubWarning) as caught:
        spec = make_transform_spec("prompt-wrap", template)
    (warning,) = caught
    message = str(warning.message)
    assert slot in message and f"did you mean {meant}" in message
    for name in defaults.TEMPLATE_PLACEHOLDERS:
        assert "{" + name + "}" in message
    assert warning.filename == __file__  # points at the caller, not at the toolkit
    assert apply_sync(spec, context("x")) == template


@pytest.mark.parametrize("template", ['{"ok": true} {output}', "{x} {name} {0} {outputs_dir_long}"])
def test_far_brace_text_gives_no_warning(template: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_transform_spec("prompt-wrap", template)


def test_unknown_transform_name_lists_the_allowed_ones() -> None:
    with pytest.raises(MadohubValueError) as info:
        make_transform_spec("prompt-warp")
    for name in defaults.TRANSFORMS:
        assert name in str(info.value)


@pytest.mark.parametrize("name", ["full-output", "raw"])
def test_terminal_transforms_take_no_template(name: str) -> None:
    with pytest.raises(MadohubValueError, match="prompt-wrap"):
        make_transform_spec(name, "{output}")


def test_empty_template_is_refused() -> None:
    with pytest.raises(MadohubValueError, match="empty"):
        make_transform_spec("prompt-wrap", "  \n")


def test_ai_transform_template_is_checked_too() -> None:
    with pytest.warns(MadohubWarning, match=r"\{outptu\}"):
        make_transform_spec("summary", "Summarise {outptu}")
    assert make_transform_spec("ai-routing", "Ask {target} to review {output}").parsed is not None


def test_spec_is_frozen_and_made_equal_by_its_fields() -> None:
    spec = TransformSpec("prompt-wrap", "{output}")
    assert spec == make_transform_spec("prompt-wrap", "{output}")
    with pytest.raises(AttributeError):
        spec.name = "raw"  # type: ignore[misc]


# Rendering ----------------------------------------------------------------------------


def test_prompt_wrap_fills_every_placeholder() -> None:
    spec = make_transform_spec(
        "prompt-wrap", "{source}->{target} {round}/{maxRounds} {{x}}:\n{output}"
    )
    assert apply_sync(spec, context("hello")) == "writer->reviewer 2/5 {x}:\nhello"


def test_default_template_is_used_when_none_is_given() -> None:
    spec = make_transform_spec("prompt-wrap")
    expected = (
        DEFAULT_TEMPLATE.replace("{source}", "writer")
        .replace("{round}", "2")
        .replace("{maxRounds}", "5")
        .replace("{output}", "the answer")
    )
    assert apply_sync(spec, context("the answer")) == expected
    assert "the answer" in expected and "writer" in expected


@pytest.mark.parametrize(
    "output",
    [
        "{round}",
        "{0}",
        "{__class__.__mro__}",
        "%s %d %(name)s",
        "{{ and }}",
        "{output} {maxRounds} {source}",
        "$HOME ${output} \\n",
    ],
)
def test_output_is_inserted_verbatim_never_interpreted(output: str) -> None:
    spec = make_transform_spec("prompt-wrap", "<<{output}>> round {round}")
    assert apply_sync(spec, context(output)) == f"<<{output}>> round 2"


def test_source_name_with_braces_is_inserted_verbatim() -> None:
    ctx = context("x")
    ctx.source = "{output}{round}"
    spec = make_transform_spec("prompt-wrap", "{source}|{output}")
    assert apply_sync(spec, ctx) == "{output}{round}|x"


def test_prompt_wrap_still_renders_an_empty_output() -> None:
    spec = make_transform_spec("prompt-wrap", "Review:\n{output}")
    assert apply_sync(spec, context("")) == "Review:\n"


# Terminal tails -----------------------------------------------------------------------


def test_full_output_is_the_last_30_lines_as_they_are() -> None:
    lines = [f"  line {i}  " for i in range(100)] + ["", "   "]
    text = apply_sync(make_transform_spec("full-output"), context(screen_lines=lines))
    assert text.split("\n") == lines[70:100]
    assert len(text.split("\n")) == defaults.FULL_OUTPUT_LINES


def test_raw_is_the_last_10_lines_with_trailing_blank_lines_dropped() -> None:
    lines = [f"line {i}" for i in range(25)] + ["", "", ""]
    text = apply_sync(make_transform_spec("raw"), context(screen_lines=lines))
    assert text.split("\n") == [f"line {i}" for i in range(15, 25)]


def test_short_screen_is_passed_whole_and_inner_blank_lines_kept() -> None:
    lines = ["first", "", "third"]
    assert apply_sync(make_transform_spec("raw"), context(screen_lines=lines)) == "first\n\nthird"


def test_terminal_transforms_fall_back_to_output_lines_without_a_screen() -> None:
    output = "\n".join(f"out {i}" for i in range(12))
    text = apply_sync(make_transform_spec("raw"), context(output, screen_lines=[]))
    assert text == "\n".join(f"out {i}" for i in range(2, 12))


def test_terminal_transform_with_nothing_at_all_raises() -> None:
    with pytest.raises(TransformError, match="nothing to transform"):
        apply_sync(make_transform_spec("full-output"), context("", screen_lines=["", " "]))


def test_apply_sync_refuses_ai_transforms() -> None:
    with pytest.raises(MadohubValueError, match="await apply"):
        apply_sync(make_transform_spec("ai-routing"), context())


@pytest.mark.asyncio
async def test_async_apply_runs_non_ai_transforms_without_a_client() -> None:
    spec = make_transform_spec("prompt-wrap", "Q: {output}")
    assert await apply(spec, context("why?")) == "Q: why?"


# API key handling -----------------------------------------------------------------------


def test_resolve_api_key_prefers_explicit_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    assert resolve_api_key("sk-explicit") == "sk-explicit"
    assert resolve_api_key(None) == "sk-from-env"
    assert resolve_api_key("  ") == "sk-from-env"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert resolve_api_key(None) is None


def test_each_transform_says_what_it_does() -> None:
    assert tuple(TRANSFORM_TYPES) == defaults.TRANSFORMS
    ai = {n for n, t in TRANSFORM_TYPES.items() if t.needs_ai}
    assert ai == {"ai-routing", "summary"}
    assert {n: t.screen_lines for n, t in TRANSFORM_TYPES.items() if t.reads_screen} == {
        "full-output": defaults.FULL_OUTPUT_LINES,
        "raw": defaults.RAW_LINES,
    }
    assert all(t.system and t.instruction for t in TRANSFORM_TYPES.values() if t.needs_ai)
    with pytest.raises(MadohubValueError, match="unknown transform 'fancy'; allowed: ai-routing"):
        transform_named("fancy")


@pytest.mark.parametrize("name", [n for n, t in TRANSFORM_TYPES.items() if t.needs_ai])
def test_missing_key_is_refused_for_ai_transforms_with_how_to_set_it(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MadohubValueError) as info:
        require_ai_key(name, None)
    message = str(info.value)
    assert "Hub(api_key=" in message
    assert "%config MadoHub.api_key" in message
    assert "ANTHROPIC_API_KEY" in message
    assert require_ai_key("prompt-wrap", None) is None
    assert require_ai_key("summary", KEY) == KEY


@pytest.mark.asyncio
async def test_missing_key_at_call_time_is_a_transform_error(
    monkeypatch: pytest.MonkeyPatch, fake: FakeAnthropic
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = AIClientConfig(base_url=fake.base_url)
    with pytest.raises(TransformError, match="ANTHROPIC_API_KEY"):
        await apply(make_transform_spec("summary"), context(), ai=config)
    assert fake.requests == []


def test_config_repr_never_shows_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = AIClientConfig(api_key=KEY, base_url="http://127.0.0.1:9")
    assert KEY not in repr(config) and KEY not in str(config)
    assert "api_key=set" in repr(config)
    assert "api_key=unset" in repr(AIClientConfig())


def test_config_values_are_checked() -> None:
    with pytest.raises(MadohubValueError, match="timeout_s"):
        AIClientConfig(timeout_s=0)
    with pytest.raises(MadohubValueError, match="max_retries"):
        AIClientConfig(max_retries=99)
    with pytest.raises(MadohubValueError, match="model"):
        AIClientConfig(model="")


# AI transforms through the real SDK ---------------------------------------------------------


@pytest.mark.asyncio
async def test_ai_routing_sends_handoff_context_and_returns_the_model_reply() -> None:
    with FakeAnthropic(reply="  Please review auth.py for the token bug.\n") as fake:
        spec = make_transform_spec("ai-routing")
        prompt = await apply(spec, context("I fixed the token bug in auth.py"), ai=ai_config(fake))
        assert prompt == "Please review auth.py for the token bug."
        assert fake.api_key_seen(KEY)
        body = fake.requests[-1]["body"]
    assert body["model"] == defaults.DEFAULT_MODEL
    assert body["max_tokens"] == defaults.AI_MAX_TOKENS
    for fact in ("'writer'", "'reviewer'", "claude", "2", "5"):
        assert fact in body["system"]
    message = body["messages"][0]
    assert message["role"] == "user"
    assert (
        "<source_output>\nI fixed the token bug in auth.py\n</source_output>" in message["content"]
    )


@pytest.mark.asyncio
async def test_summary_uses_custom_template_as_instruction_and_spec_model() -> None:
    with FakeAnthropic(reply="Summary: tests pass.") as fake:
        spec = make_transform_spec(
            "summary", "In round {round}, summarise for {target}:\n{output}", model="claude-x"
        )
        prompt = await apply(spec, context("{round} 40 tests passed"), ai=ai_config(fake))
        body = fake.requests[-1]["body"]
    assert prompt == "Summary: tests pass."
    assert body["model"] == "claude-x"
    assert "summarise" in body["system"]
    # The template places {output} itself, so the output is not repeated, and a
    # placeholder inside the output stays verbatim.
    assert (
        body["messages"][0]["content"]
        == "In round 2, summarise for reviewer:\n{round} 40 tests passed"
    )


def test_build_ai_request_is_pure_and_matches_what_is_sent() -> None:
    system, message = build_ai_request(make_transform_spec("summary"), context("out"))
    assert "'writer'" in system
    assert message.endswith("<source_output>\nout\n</source_output>")


@pytest.mark.asyncio
async def test_ai_transform_refuses_an_empty_output(fake: FakeAnthropic) -> None:
    with pytest.raises(TransformError, match="nothing to transform"):
        await apply(make_transform_spec("ai-routing"), context("  \n"), ai=ai_config(fake))
    assert fake.requests == []


@pytest.mark.asyncio
async def test_api_500_is_a_transform_error_naming_the_status(fake: FakeAnthropic) -> None:
    fake.fail_next(500)
    with pytest.raises(TransformError, match="API error 500"):
        await apply(make_transform_spec("summary"), context(), ai=ai_config(fake))


@pytest.mark.asyncio
async def test_429_with_retry_after_succeeds_on_retry(fake: FakeAnthropic) -> None:
    fake.fail_next(429, times=1, retry_after=0.05)
    prompt = await apply(
        make_transform_spec("summary"), context("retry me"), ai=ai_config(fake, max_retries=1)
    )
    assert prompt.startswith("Done: ")
    assert len(fake.requests) == 2


@pytest.mark.asyncio
async def test_429_that_keeps_failing_is_a_transform_error(fake: FakeAnthropic) -> None:
    fake.fail_next(429, times=5, retry_after=0.05)
    with pytest.raises(TransformError) as info:
        await apply(make_transform_spec("summary"), context(), ai=ai_config(fake, max_retries=1))
    assert "429" in str(info.value) and "rate limited after 2 attempts" in str(info.value)
    assert len(fake.requests) == 2


@pytest.mark.asyncio
async def test_hanging_api_times_out_with_the_timeout_in_the_message(fake: FakeAnthropic) -> None:
    fake.hang_next(30)
    with pytest.raises(TransformError, match=r"timed out after 0\.3s"):
        await apply(make_transform_spec("summary"), context(), ai=ai_config(fake, timeout_s=0.3))


@pytest.mark.asyncio
async def test_closed_port_is_connection_refused_naming_the_url() -> None:
    base_url = f"http://127.0.0.1:{closed_port()}"
    config = AIClientConfig(api_key=KEY, base_url=base_url, max_retries=0)
    with pytest.raises(TransformError) as info:
        await apply(make_transform_spec("ai-routing"), context(), ai=config)
    assert f"connection refused to {base_url}" in str(info.value)


@pytest.mark.asyncio
async def test_malformed_response_is_a_transform_error(fake: FakeAnthropic) -> None:
    fake.fail_next(200, body="this is not json")
    with pytest.raises(TransformError, match="malformed response"):
        await apply(make_transform_spec("summary"), context(), ai=ai_config(fake))


@pytest.mark.asyncio
async def test_reply_without_text_is_a_transform_error() -> None:
    with FakeAnthropic(reply=lambda body: {"content": [], "stop_reason": "max_tokens"}) as fake:
        with pytest.raises(TransformError, match="no text.*max_tokens"):
            await apply(make_transform_spec("summary"), context(), ai=ai_config(fake))


@pytest.mark.asyncio
async def test_key_echoed_by_the_api_never_reaches_the_error(fake: FakeAnthropic) -> None:
    echo = {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {KEY}"}}
    fake.fail_next(401, body=json.dumps(echo))
    with pytest.raises(TransformError) as info:
        await apply(make_transform_spec("summary"), context(), ai=ai_config(fake))
    error = info.value
    assert "401" in str(error) and "check the API key" in str(error)
    for text in (str(error), repr(error)):
        assert KEY not in text and "S3CRET" not in text
    assert error.__cause__ is None and error.__suppress_context__


@pytest.mark.asyncio
async def test_non_standard_key_echoed_is_scrubbed_too(fake: FakeAnthropic) -> None:
    plain_key = "plain-secret-key-value-42"
    fake.fail_next(403, body=json.dumps({"message": f"key {plain_key} denied"}))
    config = AIClientConfig(api_key=plain_key, base_url=fake.base_url, max_retries=0)
    with pytest.raises(TransformError) as info:
        await apply(make_transform_spec("summary"), context(), ai=config)
    assert "403" in str(info.value)
    assert plain_key not in str(info.value)


def test_parse_template_lists_near_misses_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parsed = parse_template("{ouput} {round} {Target} {x}")
    assert parsed.near_misses == (("{ouput}", "output"), ("{Target}", "target"))
    assert parsed.placeholders == frozenset({"round"})
