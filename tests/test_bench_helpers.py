"""The benchmarks' shared helpers (``benchmarks/_common.py``): pure logic, fast.

A duration below zero means its two ends were read from different clocks or origins
(``bench_remote`` once printed "trigger latency p95 -863 ms"); the helpers refuse it
so that no benchmark prints or checks such a figure.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from _common import (  # noqa: E402
    CouldNotMeasure,
    NegativeDuration,
    Report,
    Stopwatch,
    durations_ms,
    elapsed_ms,
    gap_ms_text,
    run_main,
)


def test_a_duration_on_one_clock_is_kept_as_it_is() -> None:
    assert elapsed_ms(10.0, 10.25, "trigger latency") == pytest.approx(250.0)
    assert elapsed_ms(3.0, 3.0, "trigger latency") == 0.0
    assert durations_ms([0.0, 1.5, 900.0], "delivery") == [0.0, 1.5, 900.0]


def test_a_negative_duration_is_refused_naming_what_and_why() -> None:
    with pytest.raises(NegativeDuration, match=r"remote trigger latency: .* -863\.0 ms") as err:
        elapsed_ms(100.863, 100.0, "remote trigger latency")
    assert "different clocks or origins" in str(err.value)
    assert "nothing was printed or checked" in str(err.value)
    assert isinstance(err.value, CouldNotMeasure)  # the benchmark exits 2: could not measure
    with pytest.raises(NegativeDuration, match="sample 2 of 3"):
        durations_ms([5.0, -0.1, 7.0], "local delivery")
    with pytest.raises(NegativeDuration):
        durations_ms([float("nan")], "a duration that is no number")


def test_a_report_refuses_a_line_with_a_negative_duration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = Report("remote")
    with pytest.raises(NegativeDuration, match="p95 -863 ms"):
        report.target(
            "trigger latency over ssh (16 turns)",
            "p95 -863 ms (+70 ms over local)",
            "< 250 ms",
            "local p95 -933 ms",
            True,
        )
    with pytest.raises(NegativeDuration, match="-0.4 s"):
        report.info("made in -0.4 s")
    assert capsys.readouterr().out == ""  # nothing printed, and no target checked
    assert report.missed == []
    # Ranges, names, dates and a gap worded either way are no negative durations.
    report.target("delivery", "p95 12 ms (10-20 ms)", "< 50 ms", "tile-2 s3 on 2026-12-04", True)
    report.info(f"remote: {gap_ms_text(-70.4)} local, {gap_ms_text(5)} local")
    assert "70 ms under local, 5 ms over local" in capsys.readouterr().out


def test_a_negative_figure_makes_the_benchmark_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    def main(args: argparse.Namespace, report: Report) -> None:
        report.target("trigger latency", "p95 -863 ms", "< 250 ms", "none", True)

    assert run_main(main, argparse.ArgumentParser(description="t"), []) == 2
    out = capsys.readouterr()
    assert "COULD NOT MEASURE" in out.err and "-863 ms" in out.err
    assert "targets met" not in out.out


def test_one_clock_for_both_ends_of_elapsed_ms() -> None:
    utc = timezone.utc
    fired, end = datetime(2026, 1, 1, 0, 0, 1, tzinfo=utc), datetime(2026, 1, 1, tzinfo=utc)
    assert elapsed_ms(end, fired, "lag") == pytest.approx(1000.0)
    with pytest.raises(NegativeDuration):
        elapsed_ms(fired, end, "lag")
    with pytest.raises(CouldNotMeasure, match="a datetime, the other a number"):
        elapsed_ms(end.timestamp(), fired, "lag")
    with pytest.raises(CouldNotMeasure, match="time zone"):
        elapsed_ms(end.replace(tzinfo=None), fired, "lag")
    watch = Stopwatch()
    assert watch.ms("a stopwatch") >= 0


# --------------------------------------------------------------- no hand-made durations

_CLOCK_CALLS = {
    "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
    "process_time", "now", "utcnow", "timestamp", "to_pydatetime", "fromisoformat",
    "fromtimestamp",
}  # fmt: skip
"""Calls that read a clock or turn a stamp into a point in time."""
_STAMP_NAME = re.compile(r"^(t\d|t_\w+|at|started|stamp|when|fired|deadline|until|now)$|_at$")
"""Names a benchmark gives only to a point in time (``t0``, ``started``, ``fired_at``); the
others (``end``, ``before``) are found by where their value comes from."""
_STAMP_KEY = re.compile(r"^(first|end|timestamp|time|ts)$|_at$")
"""Fields of a record that hold a point in time (the recorder's ``first``/``end``, the log's
``fired_at``, a transcript's ``timestamp``)."""
_HELPERS = {"elapsed_ms", "durations_ms", "ms", "s", "percentile", "len", "Stopwatch"}
"""Calls whose result is a checked duration or a count, not a point in time."""


def _walk(node: ast.AST) -> list[ast.AST]:
    """``ast.walk`` that does not enter a helper's call (its result is no point in time)."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Call) and _call_name(n) in _HELPERS:
            continue
        out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out


def _call_name(n: ast.Call) -> str:
    return n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")


def _calls(node: ast.AST) -> set[str]:
    return {_call_name(n) for n in _walk(node) if isinstance(n, ast.Call)}


def _names(node: ast.AST) -> set[str]:
    nodes = _walk(node)
    return {n.id for n in nodes if isinstance(n, ast.Name)} | {
        n.attr for n in nodes if isinstance(n, ast.Attribute)
    }


def _keys(node: ast.AST) -> set[str]:
    """The string constants in ``node``: a record's field (``rows["fired_at"]``, ``rec["end"]``)."""
    return {
        n.value for n in _walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _pairs(target: ast.AST, value: ast.AST) -> list[tuple[str, ast.AST]]:
    """(name, the expression it gets) for each name an assignment or loop binds: element-wise
    for ``a, b = x, y``, ``for a, b in zip(x, y)`` and ``for i, a in enumerate(x)``; a tuple
    unpacked from anything else binds names that get nothing known."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if not isinstance(target, ast.Tuple | ast.List):
        return []
    if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
        return [p for t, v in zip(target.elts, value.elts, strict=True) for p in _pairs(t, v)]
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        if value.func.id == "zip" and len(value.args) == len(target.elts):
            return [p for t, v in zip(target.elts, value.args, strict=True) for p in _pairs(t, _item(v))]  # fmt: skip
        if value.func.id == "enumerate" and len(target.elts) == 2 and value.args:
            return _pairs(target.elts[1], _item(value.args[0]))
    return []


def _item(iterable: ast.AST) -> ast.AST:
    """An item of ``iterable`` for taint purposes (a comprehension's element, else itself)."""
    if isinstance(iterable, ast.ListComp | ast.GeneratorExp | ast.SetComp):
        return iterable.elt
    return iterable


def _tainted_names(tree: ast.Module) -> set[str]:
    """Names (and functions) that hold a point in time: assigned from a clock call or from
    another such name, or returning one; to a fixed point."""
    pairs: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs += [p for t in node.targets for p in _pairs(t, node.value)]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value:
            pairs += _pairs(node.target, node.value)
        elif isinstance(node, ast.For | ast.comprehension):
            pairs += _pairs(node.target, _item(node.iter))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            pairs += [
                (node.name, ret.value)
                for ret in ast.walk(node)
                if isinstance(ret, ast.Return) and ret.value is not None
            ]
    tainted: set[str] = set()
    while True:
        grown = tainted | {name for name, value in pairs if _is_stamp(value, tainted)}
        if grown == tainted:
            return tainted
        tainted = grown


def _is_stamp(node: ast.AST, tainted: set[str]) -> bool:
    if _calls(node) & (_CLOCK_CALLS | tainted):
        return True
    if any(_STAMP_KEY.search(k) for k in _keys(node)):
        return True
    return any(n in tainted or _STAMP_NAME.search(n) for n in _names(node))


def hand_made_durations(source: str) -> list[str]:
    """Each ``a - b`` in ``source`` where a side is (or holds) a point in time, and each
    ``.total_seconds()`` (a timedelta made by hand): durations that did not go through
    ``elapsed_ms`` / ``Stopwatch``. A subtraction clamped as ``max(0, a - b)`` (time left to
    sleep, never printed) is allowed."""
    tree = ast.parse(source)
    tainted = _tainted_names(tree)
    clamped = {
        id(arg)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "max"
        if any(isinstance(a, ast.Constant) and a.value == 0 for a in n.args)
        for arg in n.args
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "total_seconds":
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and id(node) not in clamped:
            if _is_stamp(node.left, tainted) or _is_stamp(node.right, tainted):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_rule_finds_hand_made_durations() -> None:
    """The rule below catches the shapes the benchmarks used before (so that it can fail)."""
    for bad in (
        "t0 = time.perf_counter()\nx = (time.perf_counter() - t0) * 1000",
        "started = time.monotonic()\nwall = time.monotonic() - started",
        "lag = (fired.to_pydatetime() - end).total_seconds() * 1000",
        "lags = [f - c for f, c in zip(rows['fired_at'], ends)]",
        "fired = [t.timestamp() for t in rows]\nlag = [(a - b) * 1000 for a, b in zip(fired, xs)]",
        "def typed(n):\n    return float(recorder[n]['end'])\nlat = typed(1) - base",
        "x = rec['fired_at'].timestamp() - float(stamp.read_text())",
    ):
        assert hand_made_durations(bad), bad
    for fine in (
        "n = len(lines) - 1",
        "c1, c0 = 2, 1\nused = c1 - c0",
        "time.sleep(max(0.0, until - time.monotonic()))",
        "lag = elapsed_ms(t0, time.perf_counter(), 'x')",
    ):
        assert not hand_made_durations(fine), fine


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("bench_*.py")), ids=lambda p: p.name)
def test_no_benchmark_subtracts_two_timestamps_by_hand(path: Path) -> None:
    """Every duration a benchmark prints or checks went through ``elapsed_ms`` / ``Stopwatch``
    / ``durations_ms`` (which refuse a negative one), never ``a - b`` of two timestamps."""
    assert hand_made_durations(path.read_text(encoding="utf-8")) == []
