"""Git run by the hub in a working tree an agent controls (issue 38, items 1, 3 and 8).

The agent owns its working tree and ``.git/config``: whatever program they name (fsmonitor,
hooks, clean and smudge filters) must not run when the hub reads what a turn changed or
makes and ends worktrees, and the hub's API key must reach nothing git starts. ``close()``
keeps every piece of an agent's work; a big file is not copied into the repository; a
script that runs out of time ends with all its processes. Real git, tmux, files and sshd.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import git, log_rows, shell_tile, wait_until

import madohub_nb as mh
from madohub_nb.errors import TmuxError
from madohub_nb.io.git import git_script, snapshot
from madohub_nb.io.machine import LocalMachine

KEY = "sk-ant-api03-git38-never-in-a-file"


def arm(repo: Path, leaks: Path) -> None:
    """Make ``repo`` run a program at every chance git gives it: each writes its
    environment to ``leaks/<what>`` (fsmonitor, hooks, a required clean/smudge filter
    with a quote in its name, for every file)."""
    leaks.mkdir(exist_ok=True)
    git(repo, "config", "core.fsmonitor", f"env > {leaks}/fsmonitor; false")
    git(repo, "config", "filter.ev'il.clean", f"env > {leaks}/clean; cat")
    git(repo, "config", "filter.ev'il.smudge", f"env > {leaks}/smudge; cat")
    git(repo, "config", "filter.ev'il.required", "true")
    (repo / ".gitattributes").write_text("* filter=ev'il\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    hooks = repo / ".git" / "hooks"
    for hook in ("post-checkout", "reference-transaction", "post-index-change", "pre-commit"):
        (hooks / hook).write_text(f"#!/bin/sh\nenv > {leaks}/{hook}\n")
        (hooks / hook).chmod(0o755)


def files_holding(root: Path, text: str) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if text.encode() in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue
    return found


def _route(hub: mh.Hub, source: str) -> Any:
    shell_tile(hub, "sink")
    route = hub.connect(source, "sink", dispatch="shadow", cooldown_ms=1000, max_rounds=10)
    wait_until(route.ready.is_set, 10, what="route ready")
    return route


def run_in(hub: mh.Hub, tile: Any, command: str, marker: Path) -> None:
    """Type ``command`` at the tile's shell prompt and wait until it ran (it touches ``marker``)."""
    hub.send(tile.name, f"{command}; touch {marker}", allow_shell=True).result(30)
    wait_until(marker.exists, 15, what=f"{command!r} to run")


# item 1: no program of the repository's runs, and no key reaches one ---------------------


def test_the_hubs_git_runs_none_of_the_repositorys_programs_and_no_key_reaches_a_file(
    hub: mh.Hub, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaks = tmp_path / "leaks"
    arm(repo, leaks)
    for armed in leaks.iterdir():  # the commit above ran some of them: they do work
        armed.unlink()
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    shell_tile(hub, "w", cwd=repo)
    wt = shell_tile(hub, "t", cwd=repo, worktree=True)  # worktree add: checkout, a new ref
    route = _route(hub, "w")
    run_in(hub, hub.tiles["w"], "printf 'a\\nb\\n' > new.txt", tmp_path / "m1")
    wait_until(lambda: len(log_rows(hub, route)) == 1, 30, what="round 1")
    (row,) = log_rows(hub, route)
    assert (row["files_changed"], row["lines_added"], row["meta"]["changed_paths"]) == (
        1, 2, ["new.txt"],
    )  # fmt: skip
    assert (Path(str(wt.worktree)) / "README").read_text() == "one\ntwo\n"
    summary = hub.close()  # the worktree's status, reflogs, removal, branch deletion
    assert summary is not None and [e.tile for e in summary.worktrees_removed] == ["t"]
    assert sorted(p.name for p in leaks.iterdir()) == []
    assert files_holding(tmp_path, KEY) == []


def test_a_source_on_a_host_runs_none_of_the_repositorys_programs_either(
    tmux_socket: str, remote_socket: str, sshd: Any, home: Path, repo: Path, tmp_path: Path
) -> None:
    leaks = tmp_path / "leaks"
    arm(repo, leaks)
    for armed in leaks.iterdir():
        armed.unlink()
    h = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "rounds.sqlite3",
        ssh_command=sshd.ssh_command, remote_socket_name=remote_socket,
    )  # fmt: skip
    try:
        far = shell_tile(h, "far", cwd=str(repo), host="box", worktree=True)
        shell_tile(h, "sink", host="box")
        route = h.connect("far", "sink", dispatch="shadow", cooldown_ms=1000)
        wait_until(route.ready.is_set, 10, what="route ready")
        run_in(h, far, "printf '1\\n' > far.txt", tmp_path / "m")
        wait_until(lambda: len(log_rows(h, route)) == 1, 30, what="the host's round")
        assert log_rows(h, route)[0]["meta"]["changed_paths"] == ["far.txt"]
        summary = h.close()
        assert summary is not None and [e.tile for e in summary.worktrees_kept] == ["far"]
    finally:
        h.close()
    assert sorted(p.name for p in leaks.iterdir()) == []


def test_a_filter_git_cannot_switch_off_stops_the_hubs_git_before_anything_runs(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    """``filter.a=b.clean``: ``-c``/``GIT_CONFIG_PARAMETERS`` cannot name it (they split at
    the first ``=``), so no git command runs there: no worktree, no change stats."""
    leaks = tmp_path / "leaks"
    leaks.mkdir()
    git(repo, "config", "filter.a=b.clean", f"env > {leaks}/clean; cat")
    (repo / ".git" / "info" / "attributes").write_text("* filter=a=b\n")
    with pytest.raises(ValueError, match=r"filter name filter\.a=b cannot be switched off"):
        hub.tile("t", command="sh", cwd=repo, worktree=True)
    shell_tile(hub, "w", cwd=repo)
    route = _route(hub, "w")
    run_in(hub, hub.tiles["w"], "echo x > new.txt", tmp_path / "m")
    wait_until(lambda: len(log_rows(hub, route)) == 1, 30, what="round 1")
    assert "changed_paths" not in log_rows(hub, route)[0]["meta"]
    assert list(leaks.iterdir()) == []


# item 3: close() keeps every piece of an agent's work ------------------------------------


def test_a_worktree_holding_only_ignored_files_is_kept(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    (repo / ".git" / "info" / "exclude").write_text("out/\n*.env\n")
    a = shell_tile(hub, "a", cwd=repo, worktree=True)
    run_in(hub, a, "mkdir out && echo 1 > out/results.csv && echo K=1 > local.env", tmp_path / "m")
    assert git(Path(str(a.worktree)), "status", "--porcelain") == ""  # all of it is ignored
    summary = hub.close()
    assert summary is not None
    assert [(e.tile, e.why) for e in summary.worktrees_kept] == [("a", "2 ignored paths")]
    assert (Path(str(a.worktree)) / "out" / "results.csv").read_text() == "1\n"


@pytest.mark.parametrize(
    "commands",
    [
        # a new branch at the start commit, a commit there, and back to the tile's branch
        "git switch -qc side && echo x >> README && git commit -qam side && git switch -q -",
        # a detached HEAD's commit: only the worktree's HEAD reflog reaches it
        "git switch -q --detach && echo x >> README && git commit -qam lost && git switch -q -",
    ],
    ids=["another-branch", "detached"],
)
def test_commits_made_off_the_tiles_branch_keep_the_worktree_and_its_branch(
    hub: mh.Hub, repo: Path, tmp_path: Path, commands: str
) -> None:
    a = shell_tile(hub, "a", cwd=repo, worktree=True)
    run_in(hub, a, commands, tmp_path / "m")
    assert git(Path(str(a.worktree)), "branch", "--show-current").strip() == "madohub/a"
    summary = hub.close()
    assert summary is not None
    assert [(e.tile, e.why) for e in summary.worktrees_kept] == [("a", "1 new commit")]
    assert Path(str(a.worktree)).is_dir()
    assert "madohub/a" in git(repo, "branch", "--format=%(refname:short)").split()


# item 8: big files are not copied, and a script out of time ends whole ------------------


def objects_bytes(repo: Path) -> int:
    objects = repo / ".git" / "objects"
    return sum(p.stat().st_size for p in objects.rglob("*") if p.is_file())


def test_a_big_untracked_file_is_counted_with_its_size_and_not_copied_into_the_repository(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    w = shell_tile(hub, "w", cwd=repo)
    w.changes.file_max_bytes = 100_000
    route = _route(hub, "w")
    before = objects_bytes(repo)
    run_in(
        hub, w, "head -c 1000000 /dev/urandom > data.bin && echo hi > small.txt", tmp_path / "m1"
    )
    wait_until(lambda: len(log_rows(hub, route)) == 1, 30, what="round 1")
    run_in(hub, w, "echo more >> small.txt", tmp_path / "m2")  # data.bin as it was
    wait_until(lambda: len(log_rows(hub, route)) == 2, 30, what="round 2")
    run_in(hub, w, "head -c 10 /dev/urandom >> data.bin", tmp_path / "m3")
    wait_until(lambda: len(log_rows(hub, route)) == 3, 30, what="round 3")
    first, second, third = log_rows(hub, route)
    assert sorted(first["meta"]["changed_paths"]) == ["data.bin", "small.txt"]
    assert (first["files_changed"], first["lines_added"]) == (2, 1)
    assert first["meta"]["big_files"] == {"data.bin": 1_000_000}
    assert second["meta"]["changed_paths"] == ["small.txt"] and "big_files" not in second["meta"]
    assert third["meta"]["big_files"] == {"data.bin": 1_000_010}
    assert objects_bytes(repo) - before < 100_000
    assert git(repo, "status", "--porcelain").split() == ["??", "data.bin", "??", "small.txt"]


def test_a_big_tracked_file_changed_is_not_read_either(repo: Path) -> None:
    (repo / "data.bin").write_bytes(os.urandom(300_000))
    git(repo, "add", "data.bin")
    git(repo, "commit", "-q", "-m", "data")
    machine = LocalMachine()
    base = snapshot(machine, str(repo), None, 100_000)
    assert base is not None
    before = objects_bytes(repo)
    with open(repo / "data.bin", "r+b") as f:
        f.write(os.urandom(1000))
    now = snapshot(machine, str(repo), base[0], 100_000)
    assert now is not None and now[1] is not None
    assert (now[1].paths, now[1].big_files) == (("data.bin",), (("data.bin", 300_000),))
    assert objects_bytes(repo) - before < 10_000


@pytest.fixture
def reaped() -> Iterator[list[int]]:
    """Pids a test expects gone; any left is killed (by pid) at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_script_out_of_time_is_ended_with_the_git_it_started(
    tmp_path: Path, reaped: list[int]
) -> None:
    script = "mkfifo f && { git hash-object --stdin-paths <>f & echo $! > git.pid; wait; }"
    with pytest.raises(TmuxError, match=r"did not end within 1 s"):
        LocalMachine().run_script(script, str(tmp_path), timeout_s=1.0)
    pid = int((tmp_path / "git.pid").read_text())
    reaped.append(pid)
    wait_until(lambda: _gone(pid), 5, what=f"git (pid {pid}) to end with its script")


def test_a_script_gets_the_hubs_environment_without_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("MADOHUB_PLAIN", "kept")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    done = LocalMachine().run_script("env", str(tmp_path))
    assert KEY.encode() not in done.stdout and b"MADOHUB_PLAIN=kept" in done.stdout
    assert b"GIT_DIR" not in done.stdout


def test_a_git_script_drops_the_git_variables_a_hosts_login_sets(repo: Path) -> None:
    """On a host the environment is the login's: the script itself drops every ``GIT_*``."""
    script = "export GIT_DIR=/nowhere GIT_WORK_TREE=/\n" + git_script(
        "git rev-parse --show-toplevel"
    )
    done = LocalMachine().run_script(script, str(repo))
    assert (done.returncode, done.stdout.decode().strip()) == (0, str(repo))


def test_a_script_out_of_time_on_a_host_is_ended_there_with_its_git(
    sshd: Any, tmp_path: Path, reaped: list[int]
) -> None:
    from madohub_nb.defaults import parse_ssh_command
    from madohub_nb.io.remote import SshMachine

    box = SshMachine("box", parse_ssh_command(sshd.ssh_command))
    script = "mkfifo f && { git hash-object --stdin-paths <>f & echo $! > git.pid; wait; }"
    try:
        with pytest.raises(TmuxError, match=r"did not answer within 2 s"):
            box.run_script(script, str(tmp_path), timeout_s=2.0)
    finally:
        box.stop_master()
    wait_until((tmp_path / "git.pid").exists, 5, what="the host's git to start")
    pid = int((tmp_path / "git.pid").read_text())
    reaped.append(pid)
    wait_until(lambda: _gone(pid), 5, what=f"git (pid {pid}) on the host to end")
