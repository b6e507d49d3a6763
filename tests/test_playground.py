"""The transform playground (issue 40, item 4): variants rendered on rounds recorded in a real
log file, no agent running; AI variants and the judge through the real ``anthropic`` SDK
against the fake Anthropic API on 127.0.0.1; the side-by-side widget; ``%%madohub try``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import madohub_nb as mh
from madohub_nb.defaults import check_prices, price_for
from madohub_nb.errors import MadohubValueError
from madohub_nb.io.log import RoundRecord
from madohub_nb.notebook.config import MadoHub
from madohub_nb.notebook.parsing import parse_round_spec, parse_variants
from madohub_nb.notebook.playground_view import PlaygroundView, diff_html
from madohub_nb.pipeline.transforms import make_transform_spec
from madohub_nb.testing import FakeAnthropic
from madohub_nb.testing.fake_anthropic import prompt_text

KEY = "sk-ant-test-0123456789abcdefghijklmnopqrstuvwxyz"
ANSWERS = ("The tests pass now.", "I renamed slug() to slugify().", "LGTM")


def record(log: Any, text: str | None, n: int, **extra: Any) -> RoundRecord:
    """One round as a route writes it, appended to the real log file."""
    rec = RoundRecord(
        route_id="writer->reviewer#1", source="writer", target="reviewer", round=n,
        trigger="on-idle", transform="prompt-wrap", dispatch="madoagent", status="delivered",
        extracted=text, prompt=f"old prompt {n}", meta={"max_rounds": 7}, **extra,
    )  # fmt: skip
    log.append(rec)
    return rec


@pytest.fixture
def recorded(tmux_socket: str, home: Path, tmp_path: Path) -> Iterator[Any]:
    """A hub (no tile, no agent) whose log file holds three answers and a hand send."""
    hub = mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "rounds.sqlite3")
    for n, text in enumerate(ANSWERS, 1):
        record(hub.log, text, n)
    record(hub.log, None, 0)  # a hand send: no answer to transform
    yield hub
    hub.close()


def test_templates_and_transforms_render_every_recorded_answer(recorded: Any) -> None:
    variants = {
        "terse": "Fix: {output} ({round}/{maxRounds})",
        "spec": make_transform_spec("prompt-wrap", "From {source} to {target}: {output}"),
        "raw": {"transform": "raw"},
        "default": {"transform": "prompt-wrap"},
    }
    played = mh.try_transforms(recorded.log.df, variants, hub=recorded)
    df = played.df
    assert list(df.columns) == ["round", "variant", "prompt", "tokens", "cost_usd", "error"]
    assert len(df) == 3 * 4  # the hand send has no answer: left out
    assert played.variants == list(variants)
    first = df[df["round"] == df["round"][0]].set_index("variant")
    assert first.loc["terse", "prompt"] == "Fix: The tests pass now. (1/7)"
    assert first.loc["spec", "prompt"] == "From writer to reviewer: The tests pass now."
    assert first.loc["raw", "prompt"] == "The tests pass now."
    assert first.loc["default", "prompt"].startswith(
        "Here is the latest output from writer (round 1 of 7)"
    )
    for row in df.to_dict("records"):
        assert row["tokens"] == math.ceil(len(row["prompt"]) / 4)  # the estimate: chars / 4
        assert row["cost_usd"] == 0.0 and row["error"] is None
    # The same rounds named by their ids, read from the hub's log.
    ids = list(recorded.log.df["round_id"][:2])
    again = mh.try_transforms(ids, {"terse": variants["terse"]}, hub=recorded)
    assert list(again.df["prompt"]) == [
        "Fix: The tests pass now. (1/7)", "Fix: I renamed slug() to slugify(). (2/7)"
    ]  # fmt: skip


def test_ai_variant_is_priced_from_what_the_fake_api_billed(
    tmux_socket: str, home: Path, tmp_path: Path
) -> None:
    with FakeAnthropic(reply="Please check the renamed function.") as fake:
        hub = mh.Hub(
            socket_name=tmux_socket, log_path=tmp_path / "r.sqlite3", api_key=KEY,
            base_url=fake.base_url,
        )  # fmt: skip
        try:
            record(hub.log, ANSWERS[1], 1)
            played = mh.try_transforms(
                hub.log.df, {"ai": {"transform": "ai-routing"}, "plain": "{output}"}, hub=hub
            )
        finally:
            hub.close()
        reported = list(fake.reported)
    ai = played.df.set_index("variant").loc["ai"]
    assert ai["prompt"] == "Please check the renamed function." and ai["error"] is None
    assert len(reported) == 1  # the template variant called nothing
    usage = reported[0]["usage"]
    row = price_for(reported[0]["model"], check_prices(None))
    assert row is not None
    cost = (usage["input_tokens"] * row["input"] + usage["output_tokens"] * row["output"]) / 1e6
    assert ai["cost_usd"] == pytest.approx(cost) and cost > 0
    assert ai["tokens"] == usage["output_tokens"]  # the prompt is the model's reply: exact
    assert ANSWERS[1] in prompt_text(fake.requests[-1]["body"])  # it saw the recorded answer


def _pick(body: dict[str, Any]) -> str:
    """The scripted judge: prefers the prompt marked GOOD, and never the one marked BAD."""
    text = prompt_text(body) or ""
    if "UNSURE" in text:
        return "I cannot decide"
    a, b = text.split("Prompt A:\n", 1)[1].split("\n\nPrompt B:\n", 1)
    better = "A" if "GOOD" in a or "BAD" in b else "B"
    return f'{{"better": "{better}", "why": "scripted"}}'


def test_judge_ranks_variants_pairwise_per_round(
    tmux_socket: str, home: Path, tmp_path: Path
) -> None:
    variants = {"bad": "BAD {output}", "plain": "{output}", "good": "GOOD {output}"}
    with FakeAnthropic(reply=_pick) as fake:
        hub = mh.Hub(
            socket_name=tmux_socket, log_path=tmp_path / "r.sqlite3", api_key=KEY,
            base_url=fake.base_url,
        )  # fmt: skip
        try:
            for n, text in enumerate(ANSWERS[:2], 1):
                record(hub.log, text, n)
            record(hub.log, "UNSURE which", 3)
            played = mh.try_transforms(hub.log.df, variants, judge="claude-haiku-4-5", hub=hub)
        finally:
            hub.close()
        models = {r["model"] for r in fake.reported}
    assert models == {"claude-haiku-4-5"}
    comparisons = played.comparisons
    assert comparisons is not None and len(comparisons) == 3 * 3  # three pairs in each round
    decided = comparisons[comparisons["error"].isna()]
    assert len(decided) == 6 and (decided["cost_usd"] > 0).all()
    undecided = comparisons[comparisons["error"].notna()]
    assert undecided["winner"].isna().all()
    assert 'is not {"better"' in undecided["error"].iloc[0]
    ranking = played.ranking
    assert ranking is not None
    assert list(ranking.columns) == ["variant", "wins", "losses", "win_rate"]
    assert ranking.to_dict("records") == [
        {"variant": "good", "wins": 4, "losses": 0, "win_rate": 1.0},
        {"variant": "plain", "wins": 2, "losses": 2, "win_rate": 0.5},
        {"variant": "bad", "wins": 0, "losses": 4, "win_rate": 0.0},
    ]


def test_judge_settings_are_reused_from_score_judge(recorded: Any) -> None:
    with FakeAnthropic(reply='{"better": "B"}') as fake:
        recorded.base_url, recorded.api_key = fake.base_url, KEY
        played = mh.try_transforms(
            recorded.log.df.head(1), {"a": "A {output}", "b": "B {output}"},
            judge=mh.score.judge("Shorter is better.", model="claude-sonnet-4-5"), hub=recorded,
        )  # fmt: skip
        asked = prompt_text(fake.requests[-1]["body"]) or ""
        model = fake.reported[-1]["model"]
    assert asked.startswith("Rubric:\nShorter is better.") and model == "claude-sonnet-4-5"
    assert played.ranking is not None and played.ranking["variant"][0] == "b"


def test_the_judge_sees_each_variant_first_as_often_as_second(recorded: Any) -> None:
    with FakeAnthropic(reply='{"better": "A"}') as fake:  # a judge that always picks the first
        recorded.base_url, recorded.api_key = fake.base_url, KEY
        played = mh.try_transforms(
            recorded.log.df.head(2), {"x": "X {output}", "y": "Y {output}"},
            judge="claude-haiku-4-5", hub=recorded,
        )  # fmt: skip
        shown_first = [
            (prompt_text(r["body"]) or "").split("Prompt A:\n")[1][0] for r in fake.requests
        ]
    assert shown_first == ["X", "Y"]
    assert played.comparisons is not None and list(played.comparisons["a"]) == ["x", "y"]
    assert played.ranking is not None and list(played.ranking["wins"]) == [1, 1]


def test_a_failing_variant_gives_its_error_and_the_others_go_on(recorded: Any) -> None:
    record(recorded.log, "   ", 4)  # an answer of blanks: nothing for raw to pass on
    played = mh.try_transforms(
        recorded.log.df,
        {"summary": {"transform": "summary"}, "raw": {"transform": "raw"}, "ok": "{output}!"},
        hub=recorded,
    )
    df = played.df
    summary = df[df["variant"] == "summary"].reset_index(drop=True)
    assert summary["prompt"].isna().all() and summary["cost_usd"].isna().all()
    assert summary["error"][:3].str.contains("needs an Anthropic API key").all()
    raw = df[df["variant"] == "raw"].reset_index(drop=True)
    assert raw["error"][:3].isna().all() and "nothing to transform" in raw["error"][3]
    assert df[df["variant"] == "ok"]["error"].isna().all()
    assert list(df[df["variant"] == "ok"]["prompt"])[:1] == ["The tests pass now.!"]


def test_bad_variants_and_rounds_are_refused_with_what_is_allowed(recorded: Any) -> None:
    df = recorded.log.df
    with pytest.raises(
        MadohubValueError, match=r"variants\['x'\].*'temperature' is not a transform"
    ):
        mh.try_transforms(df, {"x": {"temperature": 1}}, hub=recorded)
    with pytest.raises(MadohubValueError, match=r"variants\['x'\].*unknown transform 'shout'"):
        mh.try_transforms(df, {"x": {"transform": "shout"}}, hub=recorded)
    with pytest.raises(MadohubValueError, match="none of the 1 rounds has an extracted answer"):
        mh.try_transforms(df.tail(1), {"x": "{output}"}, hub=recorded)
    with pytest.raises(MadohubValueError, match="pass hub="):
        mh.try_transforms(list(df["round_id"]), {"x": "{output}"})
    with pytest.raises(MadohubValueError, match="judge must be a model name"):
        mh.try_transforms(df, {"x": "{output}"}, judge=3, hub=recorded)  # type: ignore[arg-type]


def test_widget_shows_one_round_side_by_side_with_differences_marked(recorded: Any) -> None:
    played = mh.try_transforms(
        recorded.log.df,
        {"base": "Please review: {output}", "other": "Now review: {output}",
         "broken": {"transform": "summary"}},
        hub=recorded,
    )  # fmt: skip
    view = played.widget()
    assert isinstance(view, PlaygroundView) and view is played.widget()
    assert len(view.selector.options) == 3
    shown = view.prompts.value
    assert "Please review: The tests pass now." in shown  # the reference as it is
    assert re.search(r"<del[^>]*>Please</del><ins[^>]*>Now</ins> review:", shown), shown
    assert "error: " in shown and "needs an Anthropic API key" in shown
    view.selector.value = list(played.answers)[1]  # the round selector redraws
    assert "I renamed slug() to slugify()." in view.prompts.value
    assert "The tests pass now." not in view.prompts.value
    bundle = played._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "<del" in bundle["text/html"]


def test_diff_marks_words_added_and_dropped() -> None:
    assert diff_html("a b c", "a x c") == (
        'a <del style="background:#fbd4d4">b</del>'
        '<ins style="background:#d4f7d4;text-decoration:none">x</ins> c'
    )
    assert (
        diff_html("<b>", "<b> &")
        == '&lt;b&gt;<ins style="background:#d4f7d4;text-decoration:none"> &amp;</ins>'
    )


def test_try_cell_parsing() -> None:
    assert parse_variants("[terse]\nFix: {output}\n\n[ai: summary model=claude-haiku-4-5]\n") == {
        "terse": {"transform": "prompt-wrap", "template": "Fix: {output}"},
        "ai": {"transform": "summary", "model": "claude-haiku-4-5"},
    }
    with pytest.raises(MadohubValueError, match="before any \\[NAME\\] line"):
        parse_variants("Fix: {output}")
    with pytest.raises(MadohubValueError, match="written twice"):
        parse_variants("[a]\nx\n[a]\ny")
    rid = "0123456789abcdef0123456789abcdef"
    assert parse_round_spec(f"3-5,9,{rid},12-") == ([3, 4, 5, 9], [rid], 12)
    with pytest.raises(MadohubValueError, match="not a row number, a range"):
        parse_round_spec("7-3")


@pytest.fixture
def ip(recorded: Any, tmux_socket: str, tmp_path: Path) -> Iterator[InteractiveShell]:
    """A real IPython shell whose kernel hub opens the recorded log file."""
    from madohub_nb.notebook.registry import registry

    shell = InteractiveShell.instance()
    MadoHub.clear_instance()
    shell.run_line_magic("load_ext", "madohub_nb")
    shell.run_line_magic("config", f"MadoHub.socket_name = '{tmux_socket}'")
    shell.run_line_magic("config", f"MadoHub.log_path = '{tmp_path / 'rounds.sqlite3'}'")
    yield shell
    registry.reset()
    shell.run_line_magic("unload_ext", "madohub_nb")
    MadoHub.clear_instance()
    shell.config.pop("MadoHub", None)


def test_try_magic_renders_the_cell_variants_on_the_chosen_rows(ip: InteractiveShell) -> None:
    cell = "[terse]\nFix: {output}\n\n[polite]\nPlease look at this:\n{output}\n"
    played = ip.run_cell_magic("madohub", "try --rounds 1-2 --all", cell)
    assert isinstance(played, mh.Playground)
    assert list(played.df["prompt"]) == [
        "Fix: I renamed slug() to slugify().", "Please look at this:\nI renamed slug() to slugify().",
        "Fix: LGTM", "Please look at this:\nLGTM",
    ]  # fmt: skip
    assert "<ins" in played.widget().prompts.value
    # Without --rounds: the last answers (--all: any session's; the hand send has none).
    last = ip.run_cell_magic("madohub", "try --all --tail 2", "[x]\n{round}")
    assert list(last.df["prompt"]) == ["2", "3"]
    ip.user_ns["mine"] = {"raw": {"transform": "raw"}}
    named = ip.run_line_magic("madohub", "try --rounds 0 --variants mine")
    assert list(named.df["prompt"]) == ["The tests pass now."]
    with pytest.raises(UsageError, match="the log has no row 40"):
        ip.run_cell_magic("madohub", "try --rounds 40", "[x]\n{output}")
    with pytest.raises(UsageError, match="no such name"):
        ip.run_line_magic("madohub", "try --variants nothing")


def test_try_magic_ranks_with_a_judge(ip: InteractiveShell) -> None:
    with FakeAnthropic(reply=_pick) as fake:
        ip.run_line_magic("config", f"MadoHub.base_url = '{fake.base_url}'")
        ip.run_line_magic("config", f"MadoHub.api_key = '{KEY}'")
        played = ip.run_cell_magic(
            "madohub",
            "try --rounds 0 --judge claude-haiku-4-5",
            "[plain]\n{output}\n[good]\nGOOD {output}",
        )
        assert len(fake.reported) == 1
    assert played.ranking.to_dict("records")[0] == {
        "variant": "good", "wins": 1, "losses": 0, "win_rate": 1.0
    }  # fmt: skip
    assert played.ranking.to_html(index=False) in played.widget().snapshot_html()


def test_ai_variant_without_a_hub_uses_the_environment_and_its_own_engine(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    with mh.RoundLog(tmp_path / "r.sqlite3") as log:
        record(log, ANSWERS[0], 1)
        df = log.df
    before = {t.name for t in threading.enumerate()}
    with FakeAnthropic(reply="Summary: tests pass.") as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        played = mh.try_transforms(df, {"s": {"transform": "summary"}})
        assert fake.api_key_seen(KEY)
    assert list(played.df["prompt"]) == ["Summary: tests pass."]
    assert played.df["cost_usd"][0] > 0
    after = {t.name for t in threading.enumerate()}
    assert "madohub-playground" not in after - before  # its engine was closed
