"""Beyond pairs (issue 26, items 1 and 2): conditional routes and fan-in, on real tmux with
stand-in agents, each prompt checked where it arrives (the target's own transcript)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from conftest import SkippedTurns, log_rows, start_standin, user_prompts, wait_until
from IPython.core.interactiveshell import InteractiveShell
from test_magics import hub_ip, ip  # noqa: F401  (the shell fixtures, over a real hub)

import madohub_nb as mh
from madohub_nb.errors import MadohubWarning
from madohub_nb.model import EXTRACTION_METHODS, TURN_SIGNALS
from madohub_nb.notebook.magics import parse_command
from madohub_nb.notebook.widgets import Dashboard
from madohub_nb.pipeline.conditions import Condition, Edge, endless_cycles, make_condition
from madohub_nb.pipeline.gather import answers_text
from madohub_nb.plot import lanes_of, timeline_figure

# Pure parts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "unless", "answer", "why"),
    [
        (r"\bLGTM\b", None, "LGTM, ship it", None),
        (r"\bLGTM\b", None, "not LGTM-ish? no: needs work", None),  # \b around the hyphen
        (r"\bLGTM\b", None, "needs work", r"when='\\\\bLGTM\\\\b' did not match"),
        (None, r"\bLGTM\b", "needs work", None),
        (None, r"\bLGTM\b", "LGTM", r"unless='\\\\bLGTM\\\\b' matched the answer \('LGTM'\)"),
        ("ok", "but", "ok but", "unless='but' matched"),
        (None, None, "", None),
    ],
)
def test_a_condition_says_why_an_answer_does_not_pass(
    when: str | None, unless: str | None, answer: str, why: str | None
) -> None:
    got = make_condition(when, unless).why_not(answer)
    if why is None:
        assert got is None
    else:
        assert got is not None and re.search(why, got), got


@pytest.mark.parametrize(("name", "pattern"), [("when", "("), ("unless", "[a-"), ("when", "")])
def test_a_bad_condition_regex_is_a_value_error_naming_it(name: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} "):
        make_condition(**{"when": None, "unless": None, name: pattern})


def _edge(rid: str, src: str, dst: str, stop: str | None = None, **cond: str) -> Edge:
    return Edge(rid, src, dst, make_condition(cond.get("when"), cond.get("unless")), stop)


@pytest.mark.parametrize(
    ("edges", "endless"),
    [
        # a when that matches the empty string passes any answer: nothing can end the loop
        ([_edge("1", "a", "b", when=".*"), _edge("2", "b", "a")], True),
        ([_edge("1", "a", "b", when="x?"), _edge("2", "b", "c"), _edge("3", "c", "a")], True),
        # an answer can fail the condition, or a stop keyword can end it: it can stop
        ([_edge("1", "a", "b", when="LGTM"), _edge("2", "b", "a")], False),
        ([_edge("1", "a", "b", unless="LGTM"), _edge("2", "b", "a")], False),
        ([_edge("1", "a", "b", when=".*"), _edge("2", "b", "a", stop="DONE")], False),
        # no conditional route on it: today's ping-pong, bounded by max_rounds, no warning
        ([_edge("1", "a", "b"), _edge("2", "b", "a")], False),
        # no cycle at all
        ([_edge("1", "a", "b", when=".*"), _edge("2", "b", "c")], False),
    ],
)
def test_endless_cycles_are_those_no_hop_can_end(edges: list[Edge], endless: bool) -> None:
    found = endless_cycles(edges, [edges[-1]])
    assert bool(found) is endless
    if endless:
        assert [e.route_id for e in found[0]][0] == edges[-1].route_id


def test_answers_text_puts_each_answer_under_its_source_and_names_the_missing() -> None:
    text = answers_text({"r1": "Fine.\n", "r2": "Nit: rename x"}, {"r3": "r3 exited"})
    assert (
        text
        == "--- r1 ---\nFine.\n\n--- r2 ---\nNit: rename x\n\n--- r3 ---\n(no answer: r3 exited)"
    )
    assert Condition().passes_everything and not Condition().conditional


# Conditional routes, end to end ---------------------------------------------------------


def test_lgtm_goes_to_the_shipper_and_the_rest_back_to_the_writer(
    hub: mh.Hub, project: Path
) -> None:
    start_standin(hub, "reviewer", cwd=project)
    shipper = start_standin(hub, "shipper", cwd=project)
    writer = start_standin(hub, "writer", cwd=project)
    ship = hub.connect("reviewer", "shipper", when=r"\bLGTM\b", template="Ship: {output}",
                       cooldown_ms=1000)  # fmt: skip
    back = hub.connect("reviewer", "writer", unless=r"\bLGTM\b", template="Fix: {output}",
                       cooldown_ms=1000)  # fmt: skip
    assert (ship.when, ship.unless, back.when, back.unless) == (
        r"\bLGTM\b",
        None,
        None,
        r"\bLGTM\b",
    )
    wait_until(lambda: ship.ready.is_set() and back.ready.is_set(), 5)
    skipped = SkippedTurns(hub)

    hub.send("reviewer", "needs work on naming").result(30)
    wait_until(lambda: back.rounds == 1 and back.last_status, 20, what="the writer's round")
    assert "did not match" in skipped.wait(ship, 0)
    wait_until(lambda: user_prompts(writer) == ["Fix: Done: needs work on naming"], 10)
    assert ship.rounds == 0 and user_prompts(shipper) == []

    hub.send("reviewer", "LGTM").result(30)
    wait_until(lambda: ship.rounds == 1 and ship.last_status, 20, what="the shipper's round")
    assert "matched the answer ('LGTM')" in skipped.wait(back, 0)
    wait_until(lambda: user_prompts(shipper) == ["Ship: Done: LGTM"], 10)
    assert back.rounds == 1 and user_prompts(writer) == ["Fix: Done: needs work on naming"]
    assert [r["status"] for r in log_rows(hub, ship.id)] == ["delivered"]
    assert [r["status"] for r in log_rows(hub, back.id)] == ["delivered"]


def test_a_bad_condition_on_connect_names_it_and_makes_no_route(hub: mh.Hub) -> None:
    start_standin(hub, "a")
    start_standin(hub, "b")
    with pytest.raises(ValueError, match=r"unless '\(LGTM' is not a valid regular expression"):
        hub.connect("a", "b", unless="(LGTM")
    assert hub.routes == []


def test_a_cycle_of_conditional_routes_that_cannot_stop_is_warned_about_by_name(
    hub: mh.Hub,
) -> None:
    start_standin(hub, "a")
    start_standin(hub, "b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about yet, nor for a stoppable cycle
        hub.connect("a", "b", when=".*", dispatch="shadow")
        ba_stops = hub.connect("b", "a", unless="LGTM", dispatch="shadow")
    ba_stops.stop()
    with pytest.warns(MadohubWarning, match=r"b → a → b \(routes b->a#3, a->b#1\).*never stop"):
        hub.connect("b", "a", dispatch="shadow")


# Fan-in, end to end ----------------------------------------------------------------------


def test_three_reviewers_are_gathered_into_one_prompt_for_the_writer(
    hub: mh.Hub, project: Path
) -> None:
    for name in ("r1", "r2", "r3"):
        start_standin(hub, name, cwd=project)
    writer = start_standin(hub, "writer", cwd=project)
    g = hub.gather(["r1", "r2", "r3"], "writer", template="Reviews:\n{answers}", cooldown_ms=1000)
    assert g.id == "r1+r2+r3->writer#1" and g.source == "r1+r2+r3" and g.target == "writer"
    wait_until(lambda: g.ready.is_set(), 10)
    hub.send("r2", "naming is off").result(30)
    hub.send("r1", "tests missing").result(30)
    wait_until(lambda: g.arrived == ["r2", "r1"], 20, what="two answers in")
    assert g.waiting_for == ["r3"] and g.rounds == 0  # not before every source has answered
    assert "waiting for r3" in g.notes
    hub.send("r3", "fine by me").result(30)
    wait_until(lambda: g.rounds == 1 and g.last_status, 20, what="the gathered round")
    expected = (
        "Reviews:\n--- r1 ---\nDone: tests missing\n\n--- r2 ---\nDone: naming is off\n\n"
        "--- r3 ---\nDone: fine by me"
    )
    wait_until(lambda: user_prompts(writer) == [expected], 10, what="the prompt at the writer")
    (row,) = log_rows(hub, g.id)
    assert row["status"] == "delivered" and row["source"] == "r1+r2+r3"
    assert row["prompt"] == expected
    assert row["meta"]["gathered"] == ["r1", "r2", "r3"] and row["meta"]["gather_missing"] == {}
    # The row's method and signal are its least sure answer's (hook, or the transcript when
    # it was read first): each source's own is in meta.
    answers = row["meta"]["gather_answers"]
    methods = [answers[n]["method"] for n in ("r1", "r2", "r3")]
    assert set(methods) <= {"hook", "jsonl"}
    assert row["extraction_method"] == max(methods, key=EXTRACTION_METHODS.index)
    signals = [answers[n]["turn_signal"] for n in ("r1", "r2", "r3")]
    assert row["turn_signal"] == max(signals, key=TURN_SIGNALS.index)
    # The dashboard's route card and the timeline show the gather.
    card = Dashboard(hub).snapshot_html()
    assert "r1+r2+r3 → writer" in card and "gather of 3 · no timeout" in card
    assert g.id in lanes_of(timeline_figure(hub.log.df))
    # A new round needs a new turn of every source again: one more answer is not enough.
    hub.send("r1", "one more thing").result(30)
    wait_until(lambda: g.arrived == ["r1"], 20)
    assert g.rounds == 1 and len(user_prompts(writer)) == 1


def test_a_gather_with_a_silent_source_fires_at_the_timeout_and_names_it(
    hub: mh.Hub, project: Path
) -> None:
    for name in ("r1", "r2"):
        start_standin(hub, name, cwd=project)
    writer = start_standin(hub, "writer", cwd=project)
    g = hub.gather(["r1", "r2"], "writer", timeout_s=2, cooldown_ms=1000)
    wait_until(lambda: g.ready.is_set(), 10)
    hub.send("r1", "looks good").result(30)
    wait_until(lambda: g.arrived == ["r1"], 20)
    wait_until(lambda: g.rounds == 1 and g.last_status, 20, what="the round at the timeout")
    missing = "r2 finished no new turn within timeout_s=2"
    expected = (
        "The latest answers (round 1 of 5):\n\n--- r1 ---\nDone: looks good\n\n"
        f"--- r2 ---\n(no answer: {missing})"
    )
    wait_until(lambda: user_prompts(writer) == [expected], 10, what="the prompt at the writer")
    (row,) = log_rows(hub, g.id)
    assert row["meta"]["gather_missing"] == {"r2": missing}
    assert row["meta"]["gathered"] == ["r1"]
    fired = row["fired_at"].to_pydatetime()
    assert (fired - hub.log.df.iloc[0]["fired_at"].to_pydatetime()).total_seconds() >= 2


def test_a_gather_stops_waiting_for_a_source_that_exits_and_names_it(
    hub: mh.Hub, project: Path
) -> None:
    for name in ("r1", "r2"):
        start_standin(hub, name, cwd=project)
    writer = start_standin(hub, "writer", cwd=project)
    g = hub.gather(["r1", "r2"], "writer", cooldown_ms=1000)
    wait_until(lambda: g.ready.is_set(), 10)
    hub.runtime.tmux.run("kill-pane", "-t", hub.tiles["r2"].pane_id)
    wait_until(lambda: "gone: r2" in g.notes, 20, what="r2 seen gone")
    hub.send("r1", "ready").result(30)
    wait_until(lambda: g.rounds == 1 and g.last_status, 20, what="the round without r2")
    (row,) = log_rows(hub, g.id)
    assert "exited" in row["meta"]["gather_missing"]["r2"]
    (prompt,) = wait_until(lambda: user_prompts(writer), 10)
    assert (
        "--- r1 ---\nDone: ready" in prompt
        and "--- r2 ---\n(no answer: source 'r2' exited" in prompt
    )


def test_a_gather_is_loop_protected_as_a_route_its_stop_keyword_in_any_answer(
    hub: mh.Hub, project: Path
) -> None:
    for name in ("r1", "r2"):
        start_standin(hub, name, cwd=project)
    writer = start_standin(hub, "writer", cwd=project)
    g = hub.gather(["r1", "r2"], "writer", stop_keyword="LGTM", max_rounds=2, cooldown_ms=1000)
    wait_until(lambda: g.ready.is_set(), 10)
    hub.send("r1", "round one").result(30)
    hub.send("r2", "round one too").result(30)
    wait_until(lambda: g.rounds == 1 and g.last_status == "delivered", 20, what="round 1")
    hub.send("r1", "LGTM").result(30)
    hub.send("r2", "still a nit").result(30)
    wait_until(lambda: g.state == "stopped", 20, what="the stop keyword")
    rows = log_rows(hub, g.id)
    assert [r["status"] for r in rows] == ["delivered", "stopped"]
    assert "stop keyword 'LGTM'" in rows[-1]["error"]
    assert len(user_prompts(writer)) == 1  # nothing typed for the stopped round


@pytest.mark.parametrize(
    ("sources", "target", "kwargs", "message"),
    [
        (
            ["r1"],
            "writer",
            {},
            r"at least two sources, got \['r1'\]; for one source use hub.connect",
        ),
        (["r1", "writer"], "writer", {}, "cannot have it as a source too"),
        (["r1", "r1"], "writer", {}, r"each source once; \['r1'\] appear"),
        ("r1", "writer", {}, "sources must be a list of tile names"),
        (["r1", "nobody"], "writer", {}, "no source tile named 'nobody'"),
        (["r1", "r2"], "writer", {"timeout_s": 0}, "timeout_s must be a number of seconds > 0"),
        (["r1", "r2"], "writer", {"transform": "raw"}, "a gather routes answers"),
        (["r1", "r2"], "writer", {"when": "("}, "when '\\(' is not a valid regular expression"),
        (["r1", "r2"], "writer", {"max_rounds": 50}, "max_rounds must be from 1 to 20"),
    ],
)
def test_bad_gathers_are_refused_before_anything_starts(
    hub: mh.Hub, sources: object, target: str, kwargs: dict, message: str
) -> None:
    for name in ("r1", "r2", "writer"):
        start_standin(hub, name)
    with pytest.raises(ValueError, match=message):
        hub.gather(sources, target, **kwargs)  # type: ignore[arg-type]
    assert hub.routes == []


# Magics ---------------------------------------------------------------------------------


def test_gather_and_connect_conditions_parse_to_hub_keywords() -> None:
    args = parse_command(
        "gather r1 r2 r3 -> writer --timeout 10m --template 'R: {answers}' --when LGTM --stop DONE"
    )
    assert (args.sources, args.target, args.timeout) == (["r1", "r2", "r3"], "writer", 600_000)
    assert (args.template, args.when, args.stop) == ("R: {answers}", "LGTM", "DONE")
    args = parse_command(r"connect reviewer -> writer --unless '\bLGTM\b'")
    assert (args.source, args.target, args.unless, args.when) == (
        "reviewer",
        "writer",
        r"\bLGTM\b",
        None,
    )


@pytest.mark.parametrize(
    "line", ["gather r1 r2", "gather -> w", "gather r1 -> w -> x", "gather r1 r2 -> w v"]
)
def test_gather_without_sources_arrow_and_one_target_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match=r"SOURCES? .*-> TARGET"):
        parse_command(line)


@pytest.mark.usefixtures("hub_ip")
def test_the_gather_and_connect_magics_make_them_on_the_kernels_hub(project: Path) -> None:
    from madohub_nb import get_hub

    hub, shell = get_hub(), InteractiveShell.instance()
    for name in ("r1", "r2", "writer"):
        start_standin(hub, name, cwd=project)
    g = shell.run_line_magic("madohub", "gather r1 r2 -> writer --timeout 90s --dispatch shadow")
    assert g.id == "r1+r2->writer#1" and g.timeout_s == 90 and g.dispatch == "shadow"
    c = shell.run_line_magic("madohub", "connect writer -> r1 --when LGTM --unless nope")
    assert (c.when, c.unless) == ("LGTM", "nope")
    routes = shell.run_line_magic("madohub", "routes")
    assert list(routes["id"]) == ["r1+r2->writer#1", "writer->r1#2"]
    assert "gather of 2 · timeout 90 s" in routes.loc[0, "notes"]
    assert routes.loc[1, "notes"] == "when='LGTM' unless='nope'"
    with pytest.raises(Exception, match="at least two sources"):
        shell.run_line_magic("madohub", "gather r1 -> writer")
    # Shadow: the answers are routed (logged), nothing typed into the writer.
    wait_until(lambda: g.ready.is_set(), 10)
    hub.send("r1", "a").result(30)
    hub.send("r2", "b").result(30)
    wait_until(lambda: g.rounds == 1 and g.last_status == "shadow", 20)
    assert "--- r1 ---\nDone: a\n\n--- r2 ---\nDone: b" in log_rows(hub, g.id)[0]["prompt"]


def test_a_gather_with_approve_waits_in_the_inbox_and_delivers_the_edited_prompt(
    hub: mh.Hub,
) -> None:
    for name in ("r1", "r2", "writer"):
        start_standin(hub, name)
    gather = hub.gather(["r1", "r2"], "writer", approve=True, approve_timeout_s=60)
    wait_until(gather.ready.is_set, 10, what="the gather to listen")
    for name in ("r1", "r2"):
        hub.send(name, f"review {name}").result(30)
    wait_until(lambda: list(hub.inbox), 30, what="the gathered prompt in the inbox")
    (ask,) = hub.inbox
    assert (ask.kind, ask.route) == ("approval", gather.id)
    assert "--- r1 ---" in ask.text and "--- r2 ---" in ask.text
    assert user_prompts(hub.tiles["writer"]) == []  # nothing typed while it waits
    rec = ask.approve("both reviews read: go on").result(30)
    assert (rec.status, rec.decision, rec.proposed_prompt) == ("delivered", "edited", ask.text)
    wait_until(lambda: user_prompts(hub.tiles["writer"]), 15, what="the writer's prompt")
    assert user_prompts(hub.tiles["writer"]) == ["both reviews read: go on"]


def test_gather_magic_takes_approve() -> None:
    args = parse_command("gather r1 r2 -> w --approve --approve-timeout 90s")
    assert (args.approve, args.approve_timeout) == (True, 90_000)
