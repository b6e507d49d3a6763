"""An experiment's runs spread over remote hosts (issue 40, item 7), on the loopback sshd.

The two hosts, ``box`` and ``box2``, are two names of one private OpenSSH server on
127.0.0.1 (tests/conftest.py ``sshd``); the host's tmux server is another one than the
hub's (``remote_socket``) and its user's HOME is ``sshd.home``, so what ran there is told
by where it wrote: the stand-ins' transcripts, the worktrees in the host's repository.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_IDLE_MS, git

import madohub_nb as mh
from madohub_nb.demo import standin_command
from madohub_nb.experiment_hosts import HOST_REPOS, RunHosts, host_repo_name
from madohub_nb.pipeline.workflow import RouteSpec, Workflow


def _workflow(project: Path, repo: Path) -> Workflow:
    """writer (in a worktree of ``repo``, writing each answer to notes.txt) → reviewer."""
    tile = {"agent": "claude", "command": standin_command("claude"), "cwd": str(project)}
    env = {"MADOHUB_STANDIN_THINK_S": "0.2"}
    return Workflow(
        "review",
        {
            "writer": {**tile, "cwd": str(repo), "worktree": True,
                       "env": {**env, "MADOHUB_STANDIN_WRITE_FILE": "notes.txt"}},
            "reviewer": {**tile, "env": env},
        },
        [
            RouteSpec(["writer"], "reviewer", {"template": "Review: {output}", "max_rounds": 2}),
            RouteSpec(["reviewer"], "writer",
                      {"template": "Fix: {output}", "max_rounds": 2, "stop_keyword": "LGTM"}),
        ],
    )  # fmt: skip


def _settings(sshd: Any, tmux_socket: str, remote_socket: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "socket_name": tmux_socket, "remote_socket_name": remote_socket,
        "ssh_command": sshd.ssh_command, "idle_delay_ms": FAST_IDLE_MS,
        "log_path": tmp_path / "exp.sqlite3",
    }  # fmt: skip


def _sessions(socket: str) -> list[str]:
    done = subprocess.run(
        ["tmux", "-L", socket, "list-sessions", "-F", "#{session_name}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.split()


def _panes(socket: str) -> list[str]:
    done = subprocess.run(
        ["tmux", "-L", socket, "list-panes", "-a", "-F", "#{pane_id}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.split()


def test_runs_spread_over_two_hosts_start_there_from_the_pushed_base_and_log_here(
    sshd: Any, repo: Path, project: Path, tmp_path: Path, tmux_socket: str, remote_socket: str
) -> None:
    variants = {v: {"writer->reviewer": {"template": f"LGTM {v}: {{output}}"}} for v in "ab"}
    scorer = mh.score.command('test -f notes.txt && echo "ran in $PWD as $HOME"', tile="writer")

    def where(run: Any) -> bool:  # (while the run's tiles are still there)
        tiles = {name: run.tile(name) for name in ("writer", "reviewer")}
        run.meta["where"] = {name: tile.machine.name for name, tile in tiles.items()}
        there = _panes(remote_socket)
        run.meta["panes_on_the_host"] = all(t.pane_id in there for t in tiles.values())
        return True

    exp = mh.experiment(
        _workflow(project, repo), variants, {"writer": "Write a slug function."}, repeats=2,
        timeout_s=90, parallel=2, hosts=["box", "box2"], score=[scorer, where],
        **_settings(sshd, tmux_socket, remote_socket, tmp_path),
    )  # fmt: skip
    df = exp.df
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["stopped_by"]) == ["stop keyword"] * 4
    assert sorted(df["host"]) == ["box", "box", "box2", "box2"]  # a free slot each, in turn
    assert list(df["command"]) == [1.0] * 4 and list(df["files_changed"]) == [1] * 4
    # The base commit travelled: the worktrees are in the host's own repository (its HOME's),
    # not beside the repository here, from this repository's HEAD.
    host_home = Path(sshd.home)
    host_repo = host_home / HOST_REPOS / host_repo_name(str(repo))
    head = git(repo, "rev-parse", "HEAD").strip()
    for run in exp.runs:
        assert run.base == head
        path = run.worktrees["writer"]
        assert path.startswith(f"{host_repo}.worktrees/writer-{run.variant}-{run.repeat}-")
        # The command scorer ran on the run's host, in its worktree (the host's HOME).
        tail = run.meta["command"]["tail"]
        assert tail == [f"ran in {path} as {host_home}"], tail
    assert git(host_repo, "cat-file", "-t", head).strip() == "commit"
    assert not (repo.parent / f"{repo.name}.worktrees").exists()  # nothing made here
    # keep_worktrees="failed": the runs that went well left no worktree on the host.
    listed = git(host_repo, "worktree", "list", "--porcelain")
    assert [ln for ln in listed.splitlines() if ln.startswith("worktree ")] == [
        f"worktree {host_repo}"
    ]
    # The tiles ran on the host: the stand-ins wrote their transcripts in its HOME.
    # The tiles ran on the run's host: its machine, panes of the host's tmux server.
    for run in exp.runs:
        assert run.meta["where"] == {"writer": run.host, "reviewer": run.host}, run.meta
        assert run.meta["panes_on_the_host"] is True
    # Every run's rounds are in the one log here.
    assert (
        set(exp.rounds["session_id"]) == set(df["session_id"]) and len(set(df["session_id"])) == 4
    )
    assert not [s for s in _sessions(remote_socket) if s.startswith("madohub-")]  # all ended


def test_a_run_takes_the_host_with_the_fewest_runs_going_then_the_fewest_so_far() -> None:
    hosts = RunHosts({"a": None, "b": None, "c": None})  # type: ignore[dict-item]
    assert [hosts.take() for _ in range(4)] == ["a", "b", "c", "a"]  # going: a2 b1 c1
    hosts.give_back("a")
    hosts.give_back("a")
    hosts.give_back("c")
    assert hosts.take() == "c"  # a and c have none going; c has had fewer runs
    assert hosts.take() == "a"  # a: 0 going, 2 so far; b: 1 going


@pytest.mark.parametrize(
    ("hosts", "says"),
    [
        (["box", "nohost"], r"hosts: 1 of 2 cannot take runs, so none started: host 'nohost': "
                            r"cannot reach host 'nohost' over ssh: .*no such host"),
        (["refused"], r"host 'refused': cannot reach host 'refused' over ssh: .*refused the key"),
        (["notmux"], r"host 'notmux': host 'notmux' has no tmux"),
        (["box", "-oProxyCommand=x"], r"hosts\[1\]: host '-oProxyCommand=x' is not an ssh dest"),
        ([], r"hosts must be a non-empty list of ssh hosts"),
        ("box", r"hosts must be a non-empty list of ssh hosts"),
        (["box", "box"], r"hosts names 'box' more than once"),
    ],
)  # fmt: skip
def test_bad_hosts_are_refused_before_any_run_starts(
    sshd: Any, repo: Path, project: Path, tmp_path: Path, tmux_socket: str, remote_socket: str,
    hosts: Any, says: str,
) -> None:  # fmt: skip
    with pytest.raises(mh.MadohubValueError, match=says):
        mh.experiment(
            _workflow(project, repo), {"v": {}}, {"writer": "hi"}, hosts=hosts,
            **_settings(sshd, tmux_socket, remote_socket, tmp_path),
        )  # fmt: skip
    assert _sessions(tmux_socket) == [] and _sessions(remote_socket) == []


def test_with_hosts_a_tile_naming_its_own_host_or_a_missing_folder_is_refused(
    sshd: Any, repo: Path, project: Path, tmp_path: Path, tmux_socket: str, remote_socket: str
) -> None:
    wf = _workflow(project, repo)
    settings = _settings(sshd, tmux_socket, remote_socket, tmp_path)
    own = {"v": {"reviewer": {"host": "box"}}}
    with pytest.raises(mh.MadohubValueError, match=r"variants\.v\.reviewer: the tile runs on "):
        mh.experiment(wf, own, {"writer": "hi"}, hosts=["box"], **settings)
    gone = {"v": {"reviewer": {"cwd": str(tmp_path / "gone")}}}
    with pytest.raises(mh.MadohubValueError, match=r"host 'box': the tiles' cwd .*gone is not"):
        mh.experiment(wf, gone, {"writer": "hi"}, hosts=["box"], **settings)


def test_a_worktree_tile_on_a_host_of_its_own_points_to_hosts(
    repo: Path, project: Path, tmux_socket: str
) -> None:
    wf = _workflow(project, repo)
    wf.tiles["writer"]["host"] = "box"
    with pytest.raises(mh.MadohubValueError, match=r"tiles\.writer: .*give the experiment hosts="):
        mh.experiment(wf, {"v": {}}, {"writer": "hi"}, socket_name=tmux_socket)
    assert _sessions(tmux_socket) == []
