"""Seeing an experiment (issue 40, items 5 and 6): its plot carries the summary's intervals, its
notebook table drills down to each run's conversation and diff, its report is one file with
nothing from the network, the progress line, and ``max_cost_usd``.

The plot and table are checked fast on runs filled in by hand; the drill-down, report and cost
limit on real runs of stand-in agents in real tmux (the judge on the fake Anthropic API)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import FAST_IDLE_MS
from test_experiment import VARIANTS, _workflow, _worktree_workflow

import madohub_nb as mh
from madohub_nb.experiment import Experiment, Run, progress_text
from madohub_nb.pipeline.workflow import Workflow
from madohub_nb.plot import figure_bytes
from madohub_nb.score import check_scorers
from madohub_nb.testing import FakeAnthropic

KEY = "sk-ant-test-0123456789abcdefghijklmnopqrstuvwxyz"


def tests(run: Any) -> bool:  # the scorers' names, as exp.df's columns
    return True


tests.__test__ = False  # type: ignore[attr-defined]  # (a scorer, not a pytest test)


def quality(run: Any) -> float:
    return 0.5


def _by_hand() -> Experiment:
    """Variants a and b, four runs each, two scorers (0/1 ``tests``, numeric ``quality``)."""
    workflow = Workflow("w", {}, [])
    passes = {"a": [1, 1, 1, 0], "b": [1, 0, 0, 0]}
    runs = [
        Run(v, i + 1, cost_usd=0.1 * (i + 1), rounds=2 + i, wall_s=5.0 + i,
            final_answer=f"<script>alert('{v}{i}')</script> LGTM",
            scores={"tests": float(p), "quality": 0.2 * i + (0.3 if v == "a" else 0.0)},
            diffs={"writer": f"+++ b/slug.py\n+def slug(s): return s.lower()  # <{v}{i}>\n"})
        for v, ps in passes.items() for i, p in enumerate(ps)
    ]  # fmt: skip
    scorers = check_scorers([tests, quality], ())
    return Experiment(
        workflow, {"a": workflow, "b": workflow}, "/nonexistent/log.db", runs=runs,
        scorers=scorers,
    )  # fmt: skip


def test_the_plot_shows_each_scores_mean_and_interval_from_the_summary() -> None:
    exp = _by_hand()
    summary = exp.summary()
    fig = exp.plot()
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["tests", "quality", "rounds", "cost (USD)", "wall time (s)"]
    for ax, score in zip(fig.axes[:2], ("tests", "quality"), strict=True):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
        bars = ax.containers
        assert len(bars) == 2
        for i, (variant, container) in enumerate(zip(("a", "b"), bars, strict=True)):
            line, _caps, (lines,) = container.lines
            assert list(line.get_xdata()) == [i]
            assert line.get_ydata()[0] == pytest.approx(summary.loc[variant, f"{score}_mean"])
            ((x0, low), (x1, high)) = lines.get_segments()[0]
            assert x0 == x1 == i
            assert low == pytest.approx(summary.loc[variant, f"{score}_ci_low"])
            assert high == pytest.approx(summary.loc[variant, f"{score}_ci_high"])
    # 3 of 4 passing: the Wilson interval, read back off the error bar
    (_, _, (lines,)) = fig.axes[0].containers[0].lines
    assert [round(v, 4) for v in lines.get_segments()[0][:, 1]] == [0.3006, 0.9544]
    assert figure_bytes(fig).startswith(b"\x89PNG")


def test_the_notebook_table_has_the_intervals_and_a_drill_down_per_run_escaped() -> None:
    exp = _by_hand()
    page = exp._repr_html_()
    summary = exp.summary()
    spans = dict(re.findall(r"data-score='(\w+)'>([^<]*)</span>", page))
    assert set(spans) == {"tests", "quality"}
    a = summary.loc["a"]
    assert f"0.75 [{a['tests_ci_low']:.3g}, {a['tests_ci_high']:.3g}]" in page
    assert page.count("<details class='madohub-run' ") == 8
    assert page.count("class='madohub-run-diff'") == 8
    assert "<script" not in page and "&lt;script&gt;alert(&#x27;a0&#x27;)" in page
    assert "+def slug(s): return s.lower()  # &lt;b3&gt;" in page  # the diff, escaped


def test_progress_line_says_runs_done_time_left_and_dollars() -> None:
    runs = [Run("a", 1, wall_s=30.0), Run("a", 2, wall_s=50.0)]
    assert progress_text([], 8, 2, 0.0) == "0/8 runs · time left unknown · $0.00 spent"
    # 6 still to go, 40 s each on average, 2 at a time: 2 minutes
    assert progress_text(runs, 8, 2, 0.4213) == "2/8 runs · ~2m 00s left · $0.42 spent"
    assert progress_text(runs, 3, 4, 0.0012) == "2/3 runs · ~40s left · $0.0012 spent"
    assert progress_text(runs, 2, 2, 1.5) == "2/2 runs · done · $1.50 spent"


def test_drill_down_and_report_of_real_runs(
    project: Path, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    def short(run: Any) -> float:
        return 1 / max(1, len(run.rounds))

    exp = mh.experiment(
        _worktree_workflow(project, repo), VARIANTS, {"writer": "Write a slug function."},
        repeats=2, timeout_s=60, log_path=tmp_path / "exp.sqlite3", socket_name=tmux_socket,
        idle_delay_ms=FAST_IDLE_MS, score=[mh.score.regex("LGTM", name="lgtm"), short],
    )  # fmt: skip
    assert exp.df["error"].isna().all(), exp.df["error"].tolist()
    page = exp._repr_html_()
    assert page.count("<details class='madohub-run' ") == 4
    assert page.count("class='madohub-turn'") == len(exp.rounds)
    assert "LGTM Done: Write a slug function." in page  # the approve runs' hand-off
    assert page.count("+++ b/notes.txt") == 4  # each run's diff, its worktree gone by now
    assert all("+Done: " in run.diffs["writer"] for run in exp.runs)
    assert "<script" not in page
    path = exp.report(tmp_path / "report.html")
    text = Path(path).read_text()
    assert text.startswith("<!DOCTYPE html>")
    sentence = str(exp.compare("approve", "plain", score="lgtm"))
    assert sentence.replace("'", "&#x27;") in text
    assert text.count("src='data:image/png;base64,") == 1 + 4  # the plot, each run's timeline
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text)
    assert "<script" not in text and "<link" not in text and "@import" not in text
    other = exp.report(tmp_path / "other.html", compare=("plain", "approve", "short"))
    assert (
        str(exp.compare("plain", "approve", score="short")).replace("'", "&#x27;")
        in Path(other).read_text()
    )
    with pytest.raises(mh.MadohubValueError, match="compare must be"):
        exp.report(tmp_path / "bad.html", compare=("plain", "approve"))  # type: ignore[arg-type]


def test_max_cost_usd_starts_no_run_once_spent_and_summary_leaves_those_out(
    project: Path, tmp_path: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeAnthropic(reply='{"score": 1, "why": "fine"}') as fake:
        exp = mh.experiment(
            _workflow(project), {"approve": VARIANTS["approve"]}, {"writer": "Write a slug."},
            repeats=3, parallel=1, timeout_s=60, log_path=tmp_path / "exp.sqlite3",
            socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, api_key=KEY,
            base_url=fake.base_url, score=[mh.score.judge("Good?", name="q")],
            max_cost_usd=1e-9,
        )  # fmt: skip
        calls = len(fake.reported)
    df = exp.df
    assert calls == 1  # one run ran (and was judged); the others never started
    conversation = df["cost_usd"][0]  # the stand-ins' turns are priced when they say a model
    first_cost = float(df["q_cost_usd"][0]) + (0.0 if pd.isna(conversation) else conversation)
    assert first_cost > 0 and exp.spent_usd == pytest.approx(first_cost)
    assert list(df["stopped_by"]) == ["stop keyword", "not started", "not started"]
    assert pd.isna(df["error"][0])
    said = f"not started: max_cost_usd 1e-09 reached after {first_cost:.2g}"
    assert list(df["error"][1:]) == [said, said]
    assert math.isnan(df["q"][1])
    summary = exp.summary()
    assert summary.loc["approve", "n"] == 1 and summary.loc["approve", "q_mean"] == 1.0
    assert exp.progress == f"3/3 runs · done · ${first_cost:.2g} spent"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "1", True])
def test_a_bad_max_cost_is_refused_before_anything_starts(
    project: Path, tmux_socket: str, bad: Any
) -> None:
    with pytest.raises(mh.MadohubValueError, match="max_cost_usd must be a positive number"):
        mh.experiment(
            _workflow(project), {"v": {}}, {"writer": "hi"}, socket_name=tmux_socket,
            max_cost_usd=bad,
        )  # fmt: skip
