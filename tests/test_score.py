"""Scorers of an experiment's runs (issue 40, item 1): real tmux, stand-in agents, real
pytest in a tile's folder, the judge against the fake Anthropic API on 127.0.0.1."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import FAST_IDLE_MS, wait_until
from test_experiment import VARIANTS, _workflow

import madohub_nb as mh
from madohub_nb.defaults import check_prices, price_for
from madohub_nb.score import parse_grade, parse_test_counts
from madohub_nb.testing import FakeAnthropic

KEY = "sk-ant-test-0123456789abcdefghijklmnopqrstuvwxyz"
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"


def _experiment(project: Path, tmp_path: Path, socket: str, score: list[Any], **extra: Any) -> Any:
    return mh.experiment(
        _workflow(project), {"approve": VARIANTS["approve"]}, {"writer": "Write a slug function."},
        timeout_s=60, log_path=tmp_path / "exp.sqlite3", socket_name=socket,
        idle_delay_ms=FAST_IDLE_MS, score=score, **extra,
    )  # fmt: skip


def test_every_kind_of_scorer_fills_its_column(
    project: Path, tmp_path: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)  # the kernel's key: never a command's
    (project / "test_good.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    (project / "test_bad.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    assert 0\n")
    seen: list[Any] = []

    def looked(run: Any) -> float:
        seen.append((run.variant, run.repeat, list(run.rounds["round"]), run.workdir("writer")))
        return run.repeat / 10

    with FakeAnthropic(reply='{"score": 0.75, "why": "close enough"}') as fake:
        exp = _experiment(
            project, tmp_path, tmux_socket,
            [
                mh.score.command(f"{PYTEST} test_good.py", tile="writer", name="good"),
                mh.score.command(f"{PYTEST} test_bad.py", tile="reviewer", name="bad"),
                mh.score.command('test -z "$ANTHROPIC_API_KEY"', tile="writer", name="keyless"),
                mh.score.regex(r"^Done: LGTM", name="lgtm"),
                mh.score.regex("nowhere"),
                looked,
                mh.score.judge("Is it a slug function?", name="quality"),
            ],
            repeats=2, api_key=KEY, base_url=fake.base_url,
        )  # fmt: skip
        reported = list(fake.reported)
    df = exp.df
    assert exp.score_names == ["good", "bad", "keyless", "lgtm", "regex", "looked", "quality"]
    assert list(df.columns)[-9:] == [*exp.score_names, "quality_cost_usd", "meta"]
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["good"]) == [1.0, 1.0] and list(df["bad"]) == [0.0, 0.0]
    assert (
        list(df["keyless"]) == [1.0, 1.0]
        and list(df["lgtm"]) == [1.0, 1.0]
        and list(df["regex"]) == [0.0, 0.0]
    )
    assert list(df["looked"]) == [0.1, 0.2] and list(df["quality"]) == [0.75, 0.75]
    assert [s[:2] for s in sorted(seen)] == [("approve", 1), ("approve", 2)]
    assert all(s[2][0] == 0 and len(s[2]) > 1 and Path(s[3]) == project for s in seen), seen
    meta = df["meta"][0]
    assert meta["good"]["exit"] == 0 and (meta["good"]["passed"], meta["good"]["failed"]) == (2, 0)
    assert meta["bad"]["exit"] == 1 and (meta["bad"]["passed"], meta["bad"]["failed"]) == (1, 1)
    # The judge's cost, priced as the AI transform prices (the default model's row).
    assert len(reported) == 2
    usage = reported[0]["usage"]
    row = price_for(reported[0]["model"], check_prices(None))
    assert row is not None
    cost = (usage["input_tokens"] * row["input"] + usage["output_tokens"] * row["output"]) / 1e6
    assert df["quality_cost_usd"][0] == pytest.approx(cost) and cost > 0
    assert meta["quality"]["input_tokens"] == usage["input_tokens"]
    assert meta["quality"]["why"] == "close enough"


def test_a_failing_scorer_is_nan_and_its_error_and_the_experiment_goes_on(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    pid_file = tmp_path / "sleeper.pid"

    def broken(run: Any) -> float:
        raise RuntimeError("no such metric")

    def words(run: Any) -> int:
        return len(run.final_answer.split())

    with FakeAnthropic(reply="I think it is rather good") as fake:
        exp = _experiment(
            project, tmp_path, tmux_socket,
            [
                broken,
                mh.score.command(f"sleep 30 & echo $! > {pid_file}; wait", tile="writer",
                                 name="slow", timeout_s=1),
                mh.score.judge("Is it good?"),
                words,
            ],
            repeats=2, api_key=KEY, base_url=fake.base_url,
        )  # fmt: skip
    df = exp.df
    assert len(df) == 2 and list(df["stopped_by"]) == ["stop keyword"] * 2
    for row in df.to_dict("records"):
        assert math.isnan(row["broken"]) and math.isnan(row["slow"]) and math.isnan(row["judge"])
        assert row["words"] > 0  # the scorers after a failed one still ran
        assert row["judge_cost_usd"] > 0  # the call was paid for, its reply unreadable
        error = row["error"]
        assert "scorer broken: RuntimeError: no such metric" in error, error
        assert "scorer slow: a script in" in error and "did not end within 1 s" in error, error
        assert "scorer judge: the judge's reply is not" in error, error
        assert "I think it is rather good" in error
    sleeper = int(pid_file.read_text())
    wait_until(lambda: not psutil.pid_exists(sleeper), 5, what="the timed-out command's child gone")


def test_an_earlier_error_stays_before_the_scorers(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    exp = mh.experiment(
        _workflow(project), {"nowhere": {"writer": {"cwd": str(tmp_path / "gone")}}},
        {"writer": "hi"}, timeout_s=30, log_path=tmp_path / "exp.sqlite3",
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS,
        score=[mh.score.command("true", tile="writer")],
    )  # fmt: skip
    error = exp.df["error"][0]
    assert error.startswith("review[nowhere]:tiles.writer: cwd"), error
    assert "; scorer command: the run has no tile 'writer'" in error, error
    assert math.isnan(exp.df["command"][0])


@pytest.mark.parametrize(
    ("score", "says"),
    [
        ([mh.score.regex("a"), mh.score.regex("b")], "score[1]: the column 'regex' is taken"),
        ([mh.score.regex("a", name="rounds")], "the column 'rounds' is taken (exp.df's own"),
        ([mh.score.judge("r", name="q"), mh.score.regex("a", name="q_cost_usd")],
         "the column 'q_cost_usd' is taken (score[0])"),
        (["pytest"], "score[0] must be a scorer"),
    ],
)  # fmt: skip
def test_bad_scorers_are_refused_before_anything_starts(
    project: Path, tmux_socket: str, score: Any, says: str
) -> None:
    with pytest.raises(mh.MadohubValueError) as caught:
        mh.experiment(
            _workflow(project), {"v": {}}, {"writer": "hi"}, socket_name=tmux_socket, score=score
        )
    assert says in str(caught.value), str(caught.value)


def test_names_are_checked_whole() -> None:
    scorers = mh.score.check_scorers(
        [mh.score.regex("a", name="pass"), mh.score.regex("b", name="passed")], ("rounds",)
    )
    assert [s.name for s in scorers] == ["pass", "passed"]


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        ("..F\n1 failed, 2 passed in 0.05s\n", {"passed": 2, "failed": 1}),
        ("===== 3 passed, 1 skipped in 1.20s =====", {"passed": 3, "failed": 0, "skipped": 1}),
        ("E\n1 passed, 2 errors in 0.1s", {"passed": 1, "failed": 0, "errors": 2}),
        ("...\n----\nRan 3 tests in 0.001s\n\nOK\n", {"passed": 3, "failed": 0}),
        ("Ran 4 tests in 0.002s\n\nFAILED (failures=1, errors=1)\n",
         {"passed": 2, "failed": 1, "errors": 1}),
        ("hello", {}),
    ],
)  # fmt: skip
def test_pytest_and_unittest_counts_are_read(output: str, counts: dict[str, int]) -> None:
    assert parse_test_counts(output) == counts


@pytest.mark.parametrize(
    ("reply", "grade"),
    [('{"score": 1, "why": "yes"}', (1.0, "yes")), (" 0.5 ", (0.5, None)),
     ('{"score": 0}', (0.0, None))],
)  # fmt: skip
def test_a_judges_reply_is_read_strictly(reply: str, grade: Any) -> None:
    assert parse_grade(reply) == grade


@pytest.mark.parametrize("reply", ["7/10", '{"score": 1.5}', '{"score": true}', "```0.5```", ""])
def test_a_judges_reply_that_is_not_a_score_is_an_error(reply: str) -> None:
    with pytest.raises(mh.MadohubError, match="the judge's reply is not"):
        parse_grade(reply)


def test_a_judge_with_diff_sees_the_working_folders_changes(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / "slug.py").write_text("def slug(s):\n    return s\n")
    subprocess.run([*git, "add", "slug.py"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=project, check=True)
    (project / "slug.py").write_text("def slug(s):\n    return s.lower().replace(' ', '-')\n")
    asked: list[str] = []

    def grade(body: dict[str, Any]) -> str:
        asked.append(str(body["messages"][-1]["content"]))
        return "1" if "+    return s.lower()" in asked[-1] else "0"

    with FakeAnthropic(reply=grade) as fake:
        exp = _experiment(
            project, tmp_path, tmux_socket,
            [mh.score.judge("Does slug lower-case?", diff="writer", name="diffed"),
             mh.score.judge("Does slug lower-case?", name="blind")],
            api_key=KEY, base_url=fake.base_url,
        )  # fmt: skip
    df = exp.df
    assert df["error"].isna().all(), df["error"].tolist()
    assert (df["diffed"][0], df["blind"][0]) == (1.0, 0.0), asked
    assert "Does slug lower-case?" in asked[0] and "The final answer:\nDone: LGTM" in asked[0]
