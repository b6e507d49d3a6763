"""Experiments (issue 27, item 2): a workflow's variants run as whole conversations on fresh
stand-in tiles; ``exp.df`` checked against the log, and against the prompts at the targets."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import BASH, FAST_IDLE_MS, git, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.agents.kinds import claude as claude_kind
from madohub_nb.demo import standin_command
from madohub_nb.experiment import DF_COLUMNS, Run, apply_variant
from madohub_nb.pipeline.extract import transcript_path
from madohub_nb.pipeline.workflow import RouteSpec, Workflow


def _workflow(project: Path) -> Workflow:
    env = {"MADOHUB_STANDIN_THINK_S": "0.2"}
    tile = {
        "agent": "claude",
        "command": standin_command("claude"),
        "cwd": str(project),
        "env": env,
    }
    return Workflow(
        "review",
        {"writer": dict(tile), "reviewer": dict(tile)},
        [
            RouteSpec(["writer"], "reviewer", {"template": "Review: {output}", "max_rounds": 2}),
            RouteSpec(
                ["reviewer"],
                "writer",
                {"template": "Fix: {output}", "max_rounds": 2, "stop_keyword": "LGTM"},
            ),  # fmt: skip
        ],
    )


VARIANTS = {
    # The echo stand-in answers "Done: <prompt>": a template saying LGTM ends the loop at once.
    "approve": {"writer->reviewer": {"template": "LGTM {output}"}},
    "plain": {},
}


def _tmux_sessions(socket: str) -> list[str]:
    done = subprocess.run(
        ["tmux", "-L", socket, "list-sessions", "-F", "#{session_name}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.split()


def test_two_variants_twice_each_tabulate_what_the_log_holds(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    exp = mh.experiment(
        _workflow(project), VARIANTS, {"writer": "Write a slug function."}, repeats=2,
        timeout_s=60, parallel=1, log_path=tmp_path / "exp.sqlite3",
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS,
    )  # fmt: skip
    df = exp.df
    assert list(df.columns) == list(DF_COLUMNS)
    assert list(zip(df["variant"], df["repeat"], strict=True)) == [
        ("approve", 1), ("approve", 2), ("plain", 1), ("plain", 2)
    ]  # fmt: skip
    seen = exp.rounds[["session_id", "route_id", "round", "status", "error", "turn_signal"]]
    assert df["error"].isna().all(), f"{df['error'].tolist()}\n{seen.to_string()}"
    assert list(df["stopped_by"]) == ["stop keyword"] * 2 + ["max rounds"] * 2
    assert list(df["rounds"]) == [1, 1, 4, 4]
    assert exp.log_path == str(tmp_path / "exp.sqlite3")
    assert len(set(df["session_id"])) == 4  # each run under its own session id
    rounds = exp.rounds
    for run in df.to_dict("records"):
        mine = rounds[rounds["session_id"] == run["session_id"]]
        assert list(mine["prompt"])[0] == "Write a slug function."  # the kickoff: round 0
        rows = mine[mine["round"] > 0]
        assert run["rounds"] == int((rows["status"] == "delivered").sum())
        assert run["input_tokens"] == int(rows["input_tokens"].sum())
        assert run["output_tokens"] == int(rows["output_tokens"].sum())
        assert run["final_answer"] == rows["extracted"].dropna().iloc[-1]
        name = f"review[{run['variant']}]"
        assert set(rows["workflow"]) == {name} and mine["workflow"].iloc[0] is None
        delivered = rows[rows["status"] == "delivered"]
        prompts = list(delivered["prompt"])
        if run["variant"] == "approve":
            assert prompts == ["LGTM Done: Write a slug function."]
            assert "LGTM" in run["final_answer"]
        else:
            assert prompts[:2] == ["Review: Done: Write a slug function.",
                                   "Fix: Done: Review: Done: Write a slug function."]  # fmt: skip
    assert rounds.loc[rounds["round"] > 0, "input_tokens"].notna().all()  # usage read
    assert df["wall_s"].gt(0).all()
    assert not [s for s in _tmux_sessions(tmux_socket) if s.startswith("madohub-")]  # all ended
    fig = exp.plot()
    assert [ax.get_title() for ax in fig.axes] == ["rounds", "cost (USD)", "wall time (s)"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["approve", "plain"]


def test_a_run_that_fails_is_a_row_with_its_error(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    exp = mh.experiment(
        _workflow(project), {"nowhere": {"writer": {"cwd": str(tmp_path / "gone")}}},
        {"writer": "hi"}, timeout_s=30, log_path=tmp_path / "exp.sqlite3",
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS,
    )  # fmt: skip
    row = exp.df.to_dict("records")[0]
    assert row["stopped_by"] == "error" and row["rounds"] == 0
    assert "tiles.writer: cwd" in row["error"] and "not an existing directory" in row["error"]


@pytest.mark.parametrize(
    ("variants", "kickoff", "extra", "says"),
    [
        ({"v": {"writer->shipper": {"template": "x"}}}, {"writer": "hi"}, {},
         "variants.v.writer->shipper: the workflow has no route or tile 'writer->shipper'"),
        ({"v": {"writer->reviewer": {"tempalte": "x"}}}, {"writer": "hi"}, {},
         "variants.v.writer->reviewer.tempalte: unknown key"),
        ({"v": {"writer->reviewer": {"max_rounds": 50}}}, {"writer": "hi"}, {},
         "max_rounds must be from 1 to 20"),
        ({"v": {"writer": {"comand": "x"}}}, {"writer": "hi"}, {}, "variants.v.writer.comand"),
        ({}, {"writer": "hi"}, {}, "variants must map a name"),
        ({"v": {}}, {"shipper": "hi"}, {}, "kickoff.shipper: the workflow has no tile"),
        ({"v": {}}, {"writer": "hi"}, {"repeats": 0}, "repeats must be a whole number of at least 1"),
        ({"v": {}}, {"writer": "hi"}, {"timeout_s": -1}, "timeout_s must be a positive"),
    ],
)  # fmt: skip
def test_bad_experiments_are_refused_before_anything_starts(
    project: Path, tmux_socket: str, variants: Any, kickoff: Any, extra: Any, says: str
) -> None:
    with pytest.raises(mh.MadohubValueError, match=None) as caught:
        mh.experiment(_workflow(project), variants, kickoff, socket_name=tmux_socket, **extra)
    assert says in str(caught.value), str(caught.value)
    assert _tmux_sessions(tmux_socket) == []


def test_a_workflow_holding_a_key_cannot_be_an_experiment_either(project: Path) -> None:
    with pytest.raises(
        mh.MadohubValueError,
        match=r"^variants\.v: .*tiles\.writer\.env\.CODEX_API_KEY: holds an API key",
    ):
        apply_variant(
            _workflow(project), "v", {"writer": {"env": {"CODEX_API_KEY": "abcdefghijkl"}}}
        )


def test_an_interrupted_experiment_ends_its_tiles_and_keeps_what_finished(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    import os
    import signal
    import threading

    log = tmp_path / "exp.sqlite3"
    fired = threading.Event()

    def interrupt_during_the_second_run() -> None:
        # The first run ends at its stop keyword; once the second has routed a round, Ctrl-C.
        def routed_in_two_sessions() -> bool:
            if not log.exists():
                return False
            with mh.RoundLog(log, read_only=True) as rl:
                df = rl.df
            return df[df["round"] > 0]["session_id"].nunique() >= 2

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not routed_in_two_sessions():
            time.sleep(0.2)
        fired.set()
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_during_the_second_run, daemon=True).start()
    slow = {"writer->reviewer": {"max_rounds": 20}, "reviewer->writer": {"max_rounds": 20}}
    with pytest.warns(mh.MadohubWarning, match="interrupted: 1 of 2 runs finished"):
        exp = mh.experiment(
            _workflow(project), {"approve": VARIANTS["approve"], "slow": slow},
            {"writer": "Write a slug function."}, timeout_s=120, log_path=log,
            socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS,
        )  # fmt: skip
    assert fired.is_set()
    df = exp.df
    assert list(df["variant"]) == ["approve"] and list(df["stopped_by"]) == ["stop keyword"]
    assert not [s for s in _tmux_sessions(tmux_socket) if s.startswith("madohub-")]
    rounds = exp.rounds  # the interrupted run's rounds so far stay in the log
    assert rounds["session_id"].nunique() == 2
    assert (rounds[rounds["session_id"] != df["session_id"][0]]["round"] > 0).any()


def test_two_runs_at_once_keep_their_own_tiles_rounds_and_rows(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    # Two variants whose prompts tell them apart, run side by side (parallel=2) on one
    # tmux server, the four stand-ins in one directory: no run may read another's tiles.
    variants = {v: {"writer->reviewer": {"template": f"LGTM {v}: {{output}}"}} for v in "ab"}
    began = time.monotonic()
    exp = mh.experiment(
        _workflow(project), variants, {"writer": "Write a slug function."}, repeats=1,
        timeout_s=60, parallel=2, log_path=tmp_path / "exp.sqlite3",
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS,
    )  # fmt: skip
    elapsed = time.monotonic() - began
    df = exp.df
    rounds = exp.rounds
    seen = rounds[["session_id", "route_id", "round", "status", "error", "prompt"]].to_string()
    assert df["error"].isna().all(), f"{df['error'].tolist()}\n{seen}"
    assert list(df["variant"]) == ["a", "b"] and list(df["stopped_by"]) == ["stop keyword"] * 2
    assert df["session_id"].nunique() == 2
    spans = {}
    for run in df.to_dict("records"):
        mine = rounds[rounds["session_id"] == run["session_id"]]
        routed = mine[mine["round"] > 0]
        delivered = routed[routed["status"] == "delivered"]
        v = run["variant"]
        assert list(delivered["prompt"]) == [f"LGTM {v}: Done: Write a slug function."], seen
        assert run["final_answer"] == f"Done: LGTM {v}: Done: Write a slug function."
        assert set(routed["workflow"]) == {f"review[{v}]"}
        assert run["input_tokens"] == int(routed["input_tokens"].sum()) > 0
        spans[v] = (mine["fired_at"].min(), mine["fired_at"].max())
    # The runs overlapped: each started before the other's last round (run one after the
    # other, one would start after the other had ended), and took less than their sum.
    assert spans["a"][0] < spans["b"][1] and spans["b"][0] < spans["a"][1], spans
    assert elapsed < float(df["wall_s"].sum()), (elapsed, df["wall_s"].tolist())
    assert not [s for s in _tmux_sessions(tmux_socket) if s.startswith("madohub-")]


def test_a_fresh_agent_never_takes_another_agents_transcript_of_its_cwd_for_its_own(
    hub: mh.Hub, project: Path
) -> None:
    # Runs of an experiment start Claudes in one project and config folder, beside others
    # (the kernel's tiles, the other runs). Until a fresh one writes its sessions file, its
    # transcript is looked for among its cwd's: another's, read as its own, made it look
    # idle before it could take input (its kickoff was lost) and gave it another's answer.
    a = start_standin(hub, "a", cwd=project)
    hub.send("a", "hello from a").result(30)
    wait_until(
        lambda: (found := a.last_response()) and found.method == "jsonl", 15, what="a's answer"
    )
    theirs = transcript_path(a)
    assert theirs is not None
    b = start_standin(hub, "b", cwd=project)
    proc = b.agent_process()
    assert proc is not None
    b_config = claude_kind.config_dir(b, proc)
    assert b_config is not None
    own = b_config / "sessions" / f"{proc.pid}.json"
    wait_until(own.exists, 15, what="b's sessions file")
    own.unlink()  # not written yet, as at its start
    started = psutil.Process(proc.pid).create_time()

    os.utime(theirs, (started + 5, started + 5))  # newer than b, but a's sessions file names it
    assert (transcript_path(b), b.turn_finished()) == (None, None)
    found = b.last_response()
    assert found is None or found.method == "terminal", found

    hub.send("a", "/exit").result(30)  # a is gone, its sessions file with it
    wait_until(lambda: a.state == "exited", 15, what="a exited")
    os.utime(theirs, (started - 5, started - 5))  # a transcript older than b: a past session's
    assert (transcript_path(b), b.turn_finished()) == (None, None)

    # Written since b started and named by no other Claude: b's, as far as anyone can tell
    # (a Claude that writes no sessions file at all, older versions, is read so).
    os.utime(theirs, (started + 5, started + 5))
    assert transcript_path(b) == theirs


# Runs that start equal (issue 40, item 2) ------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return git(repo, *args).strip()


@pytest.fixture
def repo(tmp_path: Path, home: Path) -> Path:
    """A repository with two commits (README: one line, then two) and a clean working tree."""
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    _git(r, "config", "user.email", "t@example.invalid")
    _git(r, "config", "user.name", "t")
    for text in ("one\n", "one\ntwo\n"):
        (r / "README").write_text(text)
        _git(r, "add", "README")
        _git(r, "commit", "-q", "-m", f"README {text!r}")
    return r


def _worktree_workflow(project: Path, repo: Path) -> Workflow:
    """The review workflow whose writer works in a worktree of ``repo`` and writes each
    answer to ``notes.txt`` there (a run changes its worktree)."""
    wf = _workflow(project)
    wf.tiles["writer"].update(
        cwd=str(repo), worktree=True,
        env={**wf.tiles["writer"]["env"], "MADOHUB_STANDIN_WRITE_FILE": "notes.txt"},
    )  # fmt: skip
    return wf


def _worktree_list(repo: Path) -> list[str]:
    out = _git(repo, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def test_a_worktree_tile_gets_a_fresh_worktree_each_run_and_its_diff_is_in_the_row(
    project: Path, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    # Two variants × 2 repeats: every run changes its worktree, and none may collide with
    # the one before (the bug: "branch 'madohub/writer' already exists" from run 2 on).
    exp = mh.experiment(
        _worktree_workflow(project, repo), VARIANTS, {"writer": "Write a slug function."},
        repeats=2, timeout_s=60, log_path=tmp_path / "exp.sqlite3",
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS,
    )  # fmt: skip
    df = exp.df
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["files_changed"]) == [1, 1, 1, 1]  # notes.txt, against the base
    assert df["lines_added"].ge(1).all() and df["lines_removed"].eq(0).all()
    head = _git(repo, "rev-parse", "HEAD")
    paths = set()
    for run in exp.runs:
        assert run.base == head  # resolved once, when the experiment started
        assert set(run.changes) == {"writer"} and run.changes["writer"].files_changed == 1
        assert run.changes["writer"].paths == ("notes.txt",)
        path = run.worktrees["writer"]
        assert path.startswith(f"{repo}.worktrees/writer-{run.variant}-{run.repeat}-")
        assert run.workdir("writer") == path and run.workdir("reviewer") == str(project)
        paths.add(path)
    assert len(paths) == 4
    # keep_worktrees="failed" (the default): runs that succeeded leave nothing behind.
    assert _worktree_list(repo) == [str(repo)]
    assert _git(repo, "branch", "--format=%(refname:short)") == "main"
    assert not (repo / "notes.txt").exists()


def test_kept_worktrees_start_from_the_base_given_and_parallel_runs_never_collide(
    project: Path, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    first = _git(repo, "rev-parse", "HEAD~1")
    variants = {v: {"writer->reviewer": {"template": f"LGTM {v}: {{output}}"}} for v in "ab"}
    exp = mh.experiment(
        _worktree_workflow(project, repo), variants, {"writer": "Write a slug function."},
        timeout_s=60, parallel=2, base="HEAD~1", keep_worktrees=True,
        log_path=tmp_path / "exp.sqlite3", socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS,
    )  # fmt: skip
    assert exp.df["error"].isna().all(), exp.df["error"].tolist()
    kept = [run.worktrees["writer"] for run in exp.runs]
    assert sorted(_worktree_list(repo)) == sorted([str(repo), *kept])
    branches = {_git(Path(p), "branch", "--show-current") for p in kept}
    assert len(branches) == 2 and all(b.startswith("madohub/writer-") for b in branches)
    for path in kept:  # each from HEAD~1 (README one line), with the writer's notes
        assert _git(Path(path), "merge-base", "HEAD", "main") == first
        assert Path(path, "README").read_text() == "one\n"
        assert Path(path, "notes.txt").read_text().startswith("Done: ")


def test_keep_worktrees_false_removes_a_changed_worktree_and_a_failed_run_keeps_its_own(
    project: Path, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    wf = _worktree_workflow(project, repo)
    common: dict[str, Any] = {
        "timeout_s": 60, "log_path": tmp_path / "exp.sqlite3", "socket_name": tmux_socket,
        "idle_delay_ms": FAST_IDLE_MS,
    }  # fmt: skip
    exp = mh.experiment(wf, {"plain": {}}, {"writer": "hi"}, keep_worktrees=False, **common)
    assert exp.df["error"].isna().all() and list(exp.df["files_changed"]) == [1]
    assert _worktree_list(repo) == [str(repo)]
    # A run that fails (its reviewer cannot start) keeps its writer's worktree by default.
    broken = {"broken": {"reviewer": {"cwd": str(tmp_path / "gone")}}}
    exp = mh.experiment(wf, broken, {"writer": "hi"}, **common)
    (run,) = exp.runs
    assert run.error is not None and "not an existing directory" in run.error
    assert _worktree_list(repo) == [str(repo), run.worktrees["writer"]]


def test_a_runs_workdir_is_its_worktree_else_its_cwd_and_names_the_tiles_it_has() -> None:
    run = Run("v", 1, worktrees={"writer": "/r.worktrees/w"}, cwds={"writer": "/r", "rv": None})
    assert run.workdir("writer") == "/r.worktrees/w" and run.workdir("rv") is None
    with pytest.raises(
        mh.MadohubValueError, match=r"run v#1 has no tile 'x'; its tiles: writer, rv"
    ):
        run.workdir("x")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"base": "no-such-ref"}, "base='no-such-ref' is not a commit"),
        ({"keep_worktrees": "sometimes"}, "keep_worktrees must be False, True or 'failed'"),
    ],
)
def test_a_bad_base_or_keep_worktrees_is_refused_before_anything_starts(
    project: Path, repo: Path, tmux_socket: str, extra: dict[str, Any], says: str
) -> None:
    with pytest.raises(mh.MadohubValueError, match=says):
        mh.experiment(
            _worktree_workflow(project, repo), {"v": {}}, {"writer": "hi"},
            socket_name=tmux_socket, **extra,
        )  # fmt: skip
    assert _worktree_list(repo) == [str(repo)]


# A kickoff to a shell (issue 40, item 8) -------------------------------------------------


def test_a_kickoff_to_a_shell_tile_needs_allow_shell(
    project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    wf = Workflow(
        "shell", {"sh": {"agent": "shell", "command": BASH, "cwd": str(project)}}, []
    )  # fmt: skip
    common: dict[str, Any] = {
        "timeout_s": 8, "log_path": tmp_path / "exp.sqlite3", "socket_name": tmux_socket,
        "idle_delay_ms": FAST_IDLE_MS,
    }  # fmt: skip
    kickoff = {"sh": "echo made > made.txt"}
    exp = mh.experiment(wf, {"v": {}}, kickoff, **common)
    (run,) = exp.runs
    assert run.error is not None and "allow_shell=True" in run.error, run.error
    assert not (project / "made.txt").exists()
    exp = mh.experiment(wf, {"v": {}}, kickoff, allow_shell=True, **common)
    assert (project / "made.txt").read_text() == "made\n"
    rounds = exp.rounds
    assert list(rounds.loc[rounds["round"] == 0, "status"]) == ["delivered"]
