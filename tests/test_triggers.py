"""Triggers and loop protection as pure state machines (time passed in, no tmux)."""

from __future__ import annotations

import re

import pytest

from madohub_nb.errors import MadohubValueError
from madohub_nb.pipeline.protection import LoopGuard
from madohub_nb.pipeline.triggers import (
    IdleDetector,
    IdleTrigger,
    KeywordDetector,
    KeywordTrigger,
    StreamDetector,
    StreamTrigger,
    check_completion_pattern,
    check_trigger,
    make_detector,
)


def test_on_idle_waits_for_silence_then_fires_when_idle() -> None:
    trig = IdleTrigger(idle_delay_ms=8000)
    assert trig.next_check_ms() is None  # no output yet: nothing to wait for
    trig.output(1000)
    assert trig.next_check_ms() == 9000
    assert trig.evaluate(5000, "idle").action == "check"
    trig.output(6000)  # new output resets the silence
    assert trig.next_check_ms() == 14000
    assert trig.evaluate(13999, "idle").action == "check"
    assert trig.evaluate(14000, "idle").action == "fire"


def test_on_idle_rechecks_when_silent_but_not_idle() -> None:
    trig = IdleTrigger(idle_delay_ms=1000)
    trig.output(0)
    decision = trig.evaluate(1000, "waiting")
    assert decision.action == "check" and decision.at_ms == 3000
    assert trig.evaluate(2000, "idle").action == "check"
    assert trig.evaluate(3000, "idle").action == "fire"


def test_one_turn_fires_once() -> None:
    trig = IdleTrigger(idle_delay_ms=100)
    trig.baseline("turn-0")
    trig.output(0)
    assert trig.evaluate(100, "idle").action == "fire"
    assert not trig.accept("turn-0")  # the answer that was there before the route: never
    trig.output(200)
    assert trig.evaluate(300, "idle").action == "fire"
    assert trig.accept("turn-1")
    assert trig.next_check_ms() is None
    trig.output(400)  # a repaint, same turn
    assert trig.evaluate(500, "idle").action == "fire"
    assert not trig.accept("turn-1")
    assert not trig.accept(None)


def test_a_refused_turn_says_why() -> None:
    trig = IdleTrigger(idle_delay_ms=100)
    assert not trig.accept(None)
    assert trig.skip_reason == "no answer"
    assert trig.accept("turn-1", unique=True, text_key="text-1")
    assert not trig.accept("turn-1", unique=True, text_key="text-1")
    assert trig.skip_reason == "already routed"
    assert trig.accept("turn-2", unique=True, text_key="text-2")
    assert not trig.accept("turn-1", unique=True)  # an older turn showing again
    assert trig.skip_reason == "already routed"
    # The screen shows the text of the turn last read from the transcript.
    assert not trig.accept("screen-hash", text_key="text-2")
    assert trig.skip_reason == "not new"


def test_keyword_matches_only_new_output_across_chunks() -> None:
    trig = KeywordTrigger(r"DONE \d+")
    assert trig.output(0, "work... DO").action == "wait"
    decision = trig.output(1, "NE 42 more")
    assert decision.action == "fire" and decision.text == "DONE 42"
    assert trig.output(2, " more text").action == "wait"  # the old match is consumed


def test_a_keyword_deep_inside_one_big_chunk_still_fires() -> None:
    # A flooding pane's output arrives in chunks far over the kept window.
    flood = "y\n" * 10_000
    trig = KeywordTrigger(r"KEY-42")
    assert trig.output(0, flood + "KEY-42\n" + flood).text == "KEY-42"
    assert trig.output(1, flood).action == "wait"
    idle = IdleTrigger(idle_delay_ms=1000, completion_pattern=re.compile(r"^ALL DONE$", re.M))
    idle.output(0, flood + "ALL DONE\n" + flood)
    assert idle.completed


def test_stream_trigger_batches_output() -> None:
    trig = StreamTrigger()
    assert trig.output(0, "   ").action == "wait"
    assert trig.output(1, "line 1\n").action == "fire"
    trig.output(2, "line 2\n")
    assert trig.take() == "   line 1\nline 2\n"
    assert trig.take() == ""


@pytest.mark.parametrize(
    ("trigger", "pattern", "message"),
    [
        ("on-keyword", None, "needs pattern="),
        ("on-keyword", "[", "not a valid regular expression"),
        ("on-idle", "x", "only used by trigger 'on-keyword'"),
        ("sometimes", None, "allowed: on-idle, on-complete, on-keyword, always"),
    ],
)
def test_bad_triggers_say_what_is_allowed(trigger: str, pattern: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_trigger(trigger, pattern)


def test_loop_guard_counts_rounds_and_cooldown() -> None:
    guard = LoopGuard(max_rounds=2, cooldown_ms=3000, stop_keyword="LGTM")
    assert guard.cooldown_left_ms(0) == 0
    assert guard.fire(1000) == 1
    assert guard.cooldown_left_ms(2000) == 2000
    assert guard.cooldown_left_ms(4000) == 0
    assert guard.fire(4000) == 2
    assert guard.exhausted
    with pytest.raises(ValueError, match="all 2 rounds"):
        guard.fire(9000)
    assert LoopGuard.says_stop(guard.stop_keyword, "looks good, LGTM")
    assert not LoopGuard.says_stop(guard.stop_keyword, "lgtm")  # case matters: the keyword is exact
    assert not LoopGuard.says_stop(guard.stop_keyword, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_rounds": 0}, "from 1 to 20"),
        ({"max_rounds": 21}, "from 1 to 20"),
        ({"max_rounds": 2.5}, "whole number"),
        ({"max_rounds": True}, "whole number"),
        ({"cooldown_ms": 999}, "from 1000 to 30000 ms"),
        ({"cooldown_ms": 30001}, "from 1000 to 30000 ms"),
        ({"stop_keyword": "  "}, "non-empty string"),
    ],
)
def test_loop_guard_refuses_out_of_range_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoopGuard(**kwargs)


def test_a_turn_read_again_from_the_screen_is_not_new() -> None:
    trig = IdleTrigger(idle_delay_ms=100)
    trig.output(0)
    assert trig.evaluate(100, "idle").action == "fire"
    assert trig.accept("msg_1", unique=True, text_key="answer")
    trig.output(200)  # the transcript is gone: the same answer, now read from the screen
    assert trig.evaluate(300, "idle").action == "fire"
    assert not trig.accept("screen:abc", text_key="answer")
    trig.output(400)  # the same text in a new transcript turn is a new turn
    assert trig.evaluate(500, "idle").action == "fire"
    assert trig.accept("msg_2", unique=True, text_key="answer")


def test_on_idle_waits_for_the_completion_keyword_then_silence() -> None:
    trig = IdleTrigger(idle_delay_ms=1000, completion_pattern=re.compile(r"^ALL DONE$", re.M))
    trig.output(0, "working...\n")
    assert trig.next_check_ms() is None  # silence alone is not enough: wait for the keyword
    trig.output(500, "still ALL DONE? no\nALL ")
    assert trig.next_check_ms() is None
    trig.output(700, "DONE\r\n")  # the keyword split across two chunks still counts
    assert trig.completed and trig.next_check_ms() == 1700
    trig.output(900, "trailing chatter\n")  # output after the keyword delays the firing
    assert trig.evaluate(1899, "busy").action == "check"
    # The keyword is the evidence: the screen state is not asked.
    assert trig.evaluate(1900, "busy").action == "fire"
    assert trig.accept("turn-1")
    trig.output(3000, "next turn\n")
    assert not trig.completed and trig.next_check_ms() is None


def test_completion_keyword_of_an_old_turn_waits_for_a_new_match() -> None:
    trig = IdleTrigger(idle_delay_ms=100, completion_pattern=re.compile("DONE"))
    trig.baseline("turn-0")
    trig.output(0, "DONE")
    assert trig.evaluate(100, "idle").action == "fire"
    assert not trig.accept("turn-0")
    trig.output(200, "more")
    assert trig.next_check_ms() is None


def test_without_completion_pattern_todays_evidence_applies() -> None:
    trig = IdleTrigger(idle_delay_ms=100)
    trig.output(0, "no keyword anywhere")
    assert trig.evaluate(100, "busy").action == "check"
    assert trig.evaluate(2100, "idle").action == "fire"


def test_bad_completion_pattern_is_one_line_naming_the_parameter() -> None:
    with pytest.raises(MadohubValueError) as info:
        check_completion_pattern("on-idle", "[DONE")
    assert "completion_pattern" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(MadohubValueError, match="on-idle"):
        check_completion_pattern("always", "DONE")
    assert check_completion_pattern("on-complete", None) is None
    assert check_completion_pattern("on-complete", "DONE") is not None


@pytest.mark.parametrize(
    ("trigger", "pattern", "completion", "kind", "pollable"),
    [
        ("on-idle", None, None, IdleDetector, True),
        ("on-complete", None, None, IdleDetector, True),
        ("on-idle", None, re.compile("DONE"), IdleDetector, False),  # it needs the bytes
        ("on-keyword", "GO", None, KeywordDetector, False),
        ("always", None, None, StreamDetector, False),
    ],
)
def test_each_trigger_is_a_turn_detector_named_as_the_api_names_it(
    trigger: str,
    pattern: str | None,
    completion: re.Pattern[str] | None,
    kind: type,
    pollable: bool,
) -> None:
    detector = make_detector(
        trigger, pattern=pattern, idle_delay_ms=lambda: 1000, completion_pattern=completion
    )
    assert isinstance(detector, kind)
    assert (detector.name, detector.pollable) == (trigger, pollable)


def test_the_idle_detector_reads_the_idle_delay_live() -> None:
    delay = {"ms": 1000}
    detector = make_detector("on-idle", pattern=None, idle_delay_ms=lambda: delay["ms"])
    assert isinstance(detector, IdleDetector)
    assert detector.wait_s(0.0) is None  # no output yet: wait for some
    detector.trigger.output(100.0)
    assert detector.wait_s(100.0) == pytest.approx(1.0)
    delay["ms"] = 3000
    assert detector.wait_s(100.0) == pytest.approx(3.0)
