"""Tiles in their own git worktrees, and what each turn changed (issue 26, items 3 and 4).

Real git repositories in temporary folders, real tmux, shells that write files as an
agent's tools would; everything is checked with git itself.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BASH, git, log_rows, shell_tile, wait_until

import madohub_nb as mh
from madohub_nb.io.git import Changes, parse_numstat


def worktrees(repo: Path) -> list[str]:
    out = git(repo, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


def panes(hub: mh.Hub) -> list[str]:
    done = subprocess.run(
        ["tmux", "-L", str(hub.socket_name), "list-panes", "-a", "-F", "#{pane_id}"],
        capture_output=True,
        text=True,
    )
    return done.stdout.split()


def run_in(hub: mh.Hub, tile: Any, command: str, marker: Path) -> None:
    """Type ``command`` at the tile's shell prompt and wait until it ran (it touches ``marker``)."""
    hub.send(tile.name, f"{command}; touch {marker}", allow_shell=True).result(30)
    wait_until(marker.exists, 15, what=f"{command!r} to run")


# worktrees -------------------------------------------------------------------------------


def test_a_worktree_tile_works_on_its_own_branch_and_close_keeps_only_the_changed_one(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    a = shell_tile(hub, "a", cwd=repo, worktree=True)
    b = shell_tile(hub, "b", cwd=repo, worktree="try-b")
    assert a.worktree == str(tmp_path / "repo.worktrees" / "a")
    assert b.worktree == str(tmp_path / "repo.worktrees" / "b")
    assert worktrees(repo) == [str(repo), a.worktree, b.worktree]
    assert git(Path(a.worktree), "branch", "--show-current").strip() == "madohub/a"
    assert git(Path(b.worktree), "branch", "--show-current").strip() == "try-b"
    wait_until(lambda: a.pane_path() == a.worktree, 10, what="a's shell in its worktree")
    assert b.pane_path() == b.worktree

    run_in(hub, a, "echo mine > notes.txt", tmp_path / "a-done")  # untracked: a change
    assert (Path(a.worktree) / "notes.txt").read_text() == "mine\n"
    assert not (repo / "notes.txt").exists() and not (Path(b.worktree) / "notes.txt").exists()

    summary = hub.close()
    assert summary is not None
    assert [(e.tile, e.kept, e.why) for e in summary.worktrees_kept] == [
        ("a", True, "1 changed file")
    ]
    assert [e.tile for e in summary.worktrees_removed] == ["b"]
    assert f"kept {a.worktree} (branch madohub/a" in str(summary)
    assert worktrees(repo) == [str(repo), a.worktree]
    assert branches(repo) == ["madohub/a", "main"]
    assert git(repo, "status", "--porcelain") == ""  # the main checkout untouched
    assert hub.close() is summary  # idempotent: the same summary


def test_a_new_commit_in_a_worktree_keeps_it_though_its_tree_is_clean(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    a = shell_tile(hub, "a", cwd=repo, worktree=True)
    run_in(hub, a, "echo x >> README && git commit -qam more", tmp_path / "done")
    summary = hub.close()
    assert summary is not None
    assert [(e.tile, e.why) for e in summary.worktrees_kept] == [("a", "1 new commit")]
    assert a.worktree in worktrees(repo)


def _lock_index(repo: Path) -> None:
    (repo / ".git" / "index.lock").write_text("")


def _take_branch(repo: Path) -> None:
    git(repo, "branch", "taken")


@pytest.mark.parametrize(
    ("cwd_of", "branch", "prepare", "error"),
    [
        ("outside", True, None, r"needs a git repository, and cwd .* is not inside one"),
        ("repo", True, _lock_index, r"locked index \(.*index\.lock exists"),
        ("repo", "taken", _take_branch, r"branch 'taken' already exists"),
        ("repo", "bad..name", None, r"'bad\.\.name' is not a valid git branch name"),
        ("repo", "has space", None, r"'has space' is not a valid git branch name"),
        ("repo", 3, None, r"worktree must be True .*, a branch name, or None; got 3"),
    ],
)
def test_a_worktree_that_cannot_be_made_is_a_clear_error_before_any_pane_starts(
    hub: mh.Hub, repo: Path, tmp_path: Path, cwd_of: str, branch: Any, prepare: Any, error: str
) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    if prepare is not None:
        prepare(repo)
    before = (worktrees(repo), branches(repo))
    with pytest.raises(ValueError, match=error):
        hub.tile("w", command=BASH, cwd=outside if cwd_of == "outside" else repo, worktree=branch)
    assert panes(hub) == [] and hub.tiles == {}
    assert (worktrees(repo), branches(repo)) == before  # nothing half made
    assert not (tmp_path / "repo.worktrees" / "w").exists()


def test_two_tiles_asking_for_one_branch_the_second_is_refused_and_nothing_of_it_made(
    hub: mh.Hub, repo: Path
) -> None:
    first = shell_tile(hub, "first", cwd=repo, worktree="shared")
    made = panes(hub)
    with pytest.raises(ValueError, match=r"already works on branch 'shared'|'shared' already"):
        hub.tile("second", command=BASH, cwd=repo, worktree="shared")
    assert panes(hub) == made and list(hub.tiles) == ["first"]
    assert worktrees(repo) == [str(repo), first.worktree]


def test_worktree_is_for_new_panes(hub: mh.Hub, repo: Path) -> None:
    with pytest.raises(ValueError, match="worktree= makes a new pane's worktree"):
        hub.tile("x", pane="%0", worktree=True)


def test_a_pane_that_cannot_start_leaves_no_worktree_behind(hub: mh.Hub, repo: Path) -> None:
    """A later step failing (here the name clash found as the pane is added) drops the
    worktree and its branch again."""
    shell_tile(hub, "dup", cwd=repo)
    with pytest.raises(ValueError, match="already exists"):
        hub.tile("dup", command=BASH, cwd=repo, worktree=True)
    assert worktrees(repo) == [str(repo)] and branches(repo) == ["main"]


# what each turn changed ----------------------------------------------------------------


def _route(hub: mh.Hub, source: str) -> Any:
    shell_tile(hub, "sink")
    route = hub.connect(source, "sink", dispatch="shadow", cooldown_ms=1000, max_rounds=10)
    wait_until(route.ready.is_set, 10, what="route ready")
    return route


def _turn(hub: mh.Hub, route: Any, command: str, n: int, marker: Path) -> dict[str, Any]:
    """One turn of the source shell running ``command``; the route's round ``n``."""
    run_in(hub, hub.tiles[route.source], command, marker)
    wait_until(lambda: route.rounds >= n and len(log_rows(hub, route)) >= n, 30, what=f"round {n}")
    return log_rows(hub, route)[n - 1]


def test_each_round_records_what_its_turn_changed_since_the_previous_round(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    shell_tile(hub, "w", cwd=repo)
    route = _route(hub, "w")
    first = _turn(
        hub, route, "printf 'a\\nb\\nc\\n' > new.txt && echo three >> README", 1, tmp_path / "m1"
    )
    assert (first["files_changed"], first["lines_added"], first["lines_removed"]) == (2, 4, 0)
    assert sorted(first["meta"]["changed_paths"]) == ["README", "new.txt"]
    second = _turn(hub, route, "true", 2, tmp_path / "m2")  # a turn that changed nothing
    assert (second["files_changed"], second["lines_added"], second["lines_removed"]) == (0, 0, 0)
    assert second["meta"]["changed_paths"] == []
    third = _turn(hub, route, "printf 'a\\n' > new.txt && rm README", 3, tmp_path / "m3")
    assert (third["files_changed"], third["lines_added"], third["lines_removed"]) == (2, 0, 5)
    assert git(repo, "status", "--porcelain").split() == ["D", "README", "??", "new.txt"]
    df = hub.log.df
    routed = df[df["route_id"] == route.id]
    assert routed["files_changed"].tolist() == [2.0, 0.0, 2.0]  # read back from the file
    assert df[df["route_id"] == "send"]["files_changed"].isna().all()  # hand sends: no turn


def test_a_worktree_tiles_rounds_count_changes_in_its_worktree(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    w = shell_tile(hub, "w", cwd=repo, worktree=True)
    route = _route(hub, "w")
    row = _turn(hub, route, "cd / && echo x > $OLDPWD/f.txt && cd - >/dev/null", 1, tmp_path / "m")
    assert (row["files_changed"], row["lines_added"], row["meta"]["changed_paths"]) == (
        1, 1, ["f.txt"],
    )  # fmt: skip
    assert (Path(str(w.worktree)) / "f.txt").exists() and not (repo / "f.txt").exists()


def test_a_source_outside_git_leaves_the_change_columns_empty(hub: mh.Hub, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    shell_tile(hub, "w", cwd=plain)
    route = _route(hub, "w")
    row = _turn(hub, route, "echo x > f.txt", 1, tmp_path / "m")
    assert all(math.isnan(row[c]) for c in ("files_changed", "lines_added", "lines_removed"))
    assert "changed_paths" not in row["meta"]


def test_numstat_of_a_binary_file_counts_the_file_and_no_lines() -> None:
    raw = b"3\t1\tsrc/a.py\x00-\t-\timg.png\x000\t2\twith\ttab.txt\x00"
    assert parse_numstat(raw) == Changes(("src/a.py", "img.png", "with\ttab.txt"), 3, 3)
    assert parse_numstat(b"") == Changes((), 0, 0)


def test_the_dashboard_table_shows_what_a_round_changed() -> None:
    from madohub_nb.render import rounds_table_html

    html = rounds_table_html(
        [{"round_id": "r", "status": "delivered", "files_changed": 2.0, "lines_added": 7.0,
          "lines_removed": float("nan")}]
    )  # fmt: skip
    assert (
        "<th style='text-align:left;padding:2px 10px 2px 0;white-space:nowrap'>files</th>" in html
    )
    assert ">2</td>" in html and ">7</td>" in html and "2.0" not in html


# magics ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "worktree"),
    [("tile b --cmd claude", None), ("tile b --worktree", True), ("tile b --worktree try-b", "try-b"),
     ("tile b --worktree --cwd /tmp", True)],
)  # fmt: skip
def test_magic_tile_worktree_takes_an_optional_branch(line: str, worktree: object) -> None:
    from madohub_nb.notebook.parsing import parse_command

    assert parse_command(line).worktree == worktree


def test_magic_tile_worktree_makes_one_and_close_prints_what_it_kept(
    home: Path, tmux_socket: str, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from madohub_nb.notebook.config import MadoHub
    from madohub_nb.notebook.registry import registry

    ip = InteractiveShell.instance()
    MadoHub.clear_instance()
    ip.run_line_magic("load_ext", "madohub_nb")
    try:
        ip.run_line_magic("config", f"MadoHub.socket_name = '{tmux_socket}'")
        ip.run_line_magic("config", f"MadoHub.log_path = '{tmp_path / 'rounds.db'}'")
        tile = ip.run_line_magic(
            "madohub", f'tile kept --agent shell --cmd "{BASH}" --cwd {repo} --worktree'
        )
        assert tile.worktree == str(tmp_path / "repo.worktrees" / "kept")
        (Path(tile.worktree) / "draft.md").write_text("# draft\n")
        ip.run_line_magic(
            "madohub", f'tile gone --agent shell --cmd "{BASH}" --cwd {repo} --worktree x'
        )
        capsys.readouterr()
        ip.run_line_magic("madohub", "close")
        out = capsys.readouterr().out
        assert f"kept {tile.worktree} (branch madohub/kept, tile 'kept'): 1 changed file" in out
        assert "removed " in out and "(branch x, tile 'gone'): no changes" in out
        assert branches(repo) == ["madohub/kept", "main"]
    finally:
        registry.reset()
        ip.run_line_magic("unload_ext", "madohub_nb")
        MadoHub.clear_instance()
        ip.config.pop("MadoHub", None)


# on a host -------------------------------------------------------------------------------


@pytest.fixture
def rhub(
    tmux_socket: str, remote_socket: str, sshd: object, home: Path, tmp_path: Path
) -> Iterator[mh.Hub]:
    """A hub reaching the private loopback sshd as host ``box`` (as in test_remote.py)."""
    h = mh.Hub(
        socket_name=tmux_socket,
        idle_delay_ms=700,
        log_path=tmp_path / "rounds.sqlite3",
        ssh_command=sshd.ssh_command,  # type: ignore[attr-defined]
        remote_socket_name=remote_socket,
    )
    yield h
    h.close()


def test_a_worktree_tile_on_a_host_is_made_there_and_kept_only_with_changes(
    rhub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    far = shell_tile(rhub, "far", cwd=str(repo), host="box", worktree=True)
    idle = shell_tile(rhub, "idle", cwd=str(repo), host="box", worktree="idle-branch")
    assert far.worktree == str(tmp_path / "repo.worktrees" / "far")
    assert worktrees(repo) == [str(repo), far.worktree, idle.worktree]
    assert rhub.runtime.tmux.run("list-panes", "-a", "-F", "#{pane_id}", check=False) == ""
    run_in(rhub, far, "echo remote > far.txt", tmp_path / "far-done")
    summary = rhub.close()
    assert summary is not None
    assert [(e.tile, e.why) for e in summary.worktrees_kept] == [("far", "1 changed file")]
    assert [e.tile for e in summary.worktrees_removed] == ["idle"]
    assert worktrees(repo) == [str(repo), far.worktree]
    assert branches(repo) == ["madohub/far", "main"]


def test_a_worktree_on_a_host_outside_a_repository_is_refused_before_a_pane(
    rhub: mh.Hub, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ValueError, match=r"needs a git repository, and cwd .*plain is not inside"):
        rhub.tile("far", command=BASH, cwd=str(plain), host="box", worktree=True)
    assert rhub.tiles == {}


def test_a_stand_in_agent_writing_its_drafts_in_its_worktree_shows_each_rounds_change(
    hub: mh.Hub, repo: Path
) -> None:
    """The demo writer writes each draft to slug.py (as a Write tool would): round 1 adds
    the file, round 2 rewrites it; the main checkout never sees it."""
    from madohub_nb.demo import standin_command

    writer = hub.tile(
        "writer", agent="claude", command=standin_command("claude", persona="writer"),
        cwd=repo, worktree=True,
        env={"MADOHUB_STANDIN_THINK_S": "0.2", "MADOHUB_STANDIN_WRITE_FILE": "slug.py"},
    )  # fmt: skip
    wait_until(lambda: writer.state == "idle", 15, what="writer idle")
    route = _route(hub, "writer")
    hub.send("writer", "Write a URL slug function.").result(30)
    wait_until(lambda: len(log_rows(hub, route)) == 1, 30, what="round 1")
    hub.send("writer", "Please revise: add type hints.").result(30)
    wait_until(lambda: len(log_rows(hub, route)) == 2, 30, what="round 2")
    first, second = log_rows(hub, route)
    draft = (Path(str(writer.worktree)) / "slug.py").read_text()
    assert first["files_changed"] == 1 and first["lines_removed"] == 0
    assert first["lines_added"] == len(first["extracted"].splitlines())
    assert second["meta"]["changed_paths"] == ["slug.py"]
    assert second["lines_added"] > 0 and second["lines_removed"] > 0
    assert draft == second["extracted"] + "\n"
    assert not (repo / "slug.py").exists()


def test_a_repository_without_a_commit_is_refused_for_a_worktree(
    hub: mh.Hub, tmp_path: Path
) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    with pytest.raises(ValueError, match=r"has no commit yet; a worktree starts from one"):
        hub.tile("w", command=BASH, cwd=fresh, worktree=True)
    assert panes(hub) == [] and branches(fresh) == []


def test_a_source_on_a_host_records_what_its_turn_changed_there(
    rhub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    far = shell_tile(rhub, "far", cwd=str(repo), host="box", worktree=True)
    shell_tile(rhub, "sink", host="box")
    route = rhub.connect("far", "sink", dispatch="shadow", cooldown_ms=1000)
    wait_until(route.ready.is_set, 10, what="route ready")
    run_in(rhub, far, "printf '1\\n2\\n' > far.txt", tmp_path / "m")
    wait_until(lambda: len(log_rows(rhub, route)) == 1, 30, what="the host's round")
    (row,) = log_rows(rhub, route)
    assert (row["files_changed"], row["lines_added"], row["meta"]["changed_paths"]) == (
        1, 2, ["far.txt"],
    )  # fmt: skip


def test_each_route_of_a_fan_out_records_the_turns_changes(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    """Two routes from one source: each counts from its own previous round, so both rows
    of one turn say what it changed (neither gets an empty diff because the other ran)."""
    shell_tile(hub, "w", cwd=repo)
    shell_tile(hub, "s1")
    shell_tile(hub, "s2")
    routes = [hub.connect("w", s, dispatch="shadow", cooldown_ms=1000) for s in ("s1", "s2")]
    for route in routes:
        wait_until(route.ready.is_set, 10, what="route ready")
    run_in(hub, hub.tiles["w"], "echo one > f.txt", tmp_path / "m")
    wait_until(lambda: all(len(log_rows(hub, r)) == 1 for r in routes), 30, what="both rounds")
    rows = [log_rows(hub, r)[0] for r in routes]
    assert [(r["files_changed"], r["meta"]["changed_paths"]) for r in rows] == [
        (1, ["f.txt"]), (1, ["f.txt"]),
    ]  # fmt: skip


def test_a_worktree_tile_whose_command_fails_can_be_made_again_on_its_branch(
    hub: mh.Hub, repo: Path
) -> None:
    dies = hub.tile("dies", agent="shell", command="sh -c 'echo boom; exit 3'", cwd=repo,
                    worktree=True)  # fmt: skip
    with pytest.raises(mh.TileError, match="exited at once"):
        dies.ready.result(10)
    first = dies.worktree
    assert first in worktrees(repo)
    again = shell_tile(hub, "dies", cwd=repo, worktree=True)  # its unchanged worktree went first
    assert again.worktree == first and dies.worktree is None
    assert branches(repo) == ["madohub/dies", "main"]
    assert worktrees(repo) == [str(repo), again.worktree]


def test_a_gathers_rows_leave_the_change_columns_empty_while_each_sources_route_has_them(
    hub: mh.Hub, repo: Path, tmp_path: Path
) -> None:
    """Two sources in one working tree, gathered: the gather's round is several turns, so it
    records no changes of its own; a plain route of one source still records its turn's."""
    shell_tile(hub, "a", cwd=repo)
    shell_tile(hub, "b", cwd=repo)
    shell_tile(hub, "sink")
    gather = hub.gather(["a", "b"], "sink", dispatch="shadow", cooldown_ms=1000)
    plain = hub.connect("a", "sink", dispatch="shadow", cooldown_ms=1000)
    for route in (gather, plain):
        wait_until(route.ready.is_set, 10, what="route ready")
    run_in(hub, hub.tiles["a"], "echo one > a.txt", tmp_path / "ma")
    wait_until(lambda: log_rows(hub, plain), 30, what="a's own round")  # before b writes
    run_in(hub, hub.tiles["b"], "echo two > b.txt", tmp_path / "mb")
    wait_until(lambda: log_rows(hub, gather), 30, what="the gather's round")
    gathered, own = log_rows(hub, gather)[0], log_rows(hub, plain)[0]
    assert math.isnan(gathered["files_changed"]) and "changed_paths" not in gathered["meta"]
    assert (own["files_changed"], own["meta"]["changed_paths"]) == (1, ["a.txt"])


CONCURRENT_WORKTREES = 16
"""Worktrees of one repository made at once (an experiment's parallel runs, many of them)."""
BATCHES = 2


def test_worktrees_made_and_removed_at_once_in_one_repository_all_succeed(repo: Path) -> None:
    """An experiment's parallel runs each add a worktree of one repository, then remove it.
    ``git worktree add`` reads the admin folder of every worktree, and one another git is
    making is half written ("failed to read .git/worktrees/NAME/commondir"): seen with four
    runs on a loaded machine; here, without the repository's lock, in most batches."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from madohub_nb.io.git import drop_worktree, make_worktree, plan_worktree
    from madohub_nb.io.machine import LocalMachine

    machine = LocalMachine()
    start = threading.Barrier(CONCURRENT_WORKTREES)

    def add_and_remove(name: str) -> str | None:
        plan = plan_worktree(machine, str(repo), name, f"madohub/{name}", "HEAD", name)
        start.wait(30)  # every thread's git starts at once
        try:
            make_worktree(machine, plan)
        except mh.MadohubError as exc:
            return str(exc)
        drop_worktree(machine, plan)
        return None

    for k in range(BATCHES):
        names = [f"run-{k}-{i}" for i in range(CONCURRENT_WORKTREES)]
        with ThreadPoolExecutor(CONCURRENT_WORKTREES) as pool:
            failed = [e for e in pool.map(add_and_remove, names) if e is not None]
        assert failed == [], failed
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]
