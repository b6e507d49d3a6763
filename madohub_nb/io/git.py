"""Git, as the hub uses it: a tile's own worktree, and what each turn changed.

Everything here is a short ``sh`` script run by a tile's machine
(:meth:`~madohub_nb.io.machine.Machine.run_script`) in a folder, on this machine or a
host alike, and parsed here; callers run it on a thread, never on the engine loop.

What a turn changed is read from snapshots: the whole working tree (tracked changes and
untracked files, ignored files left out) written as a git tree through a throw-away
index, so the agent's own index and commits are untouched; two snapshots' trees are
compared with ``git diff-tree --numstat``. A snapshot stores the working tree's new
file contents as loose objects in the repository (unreachable: ``git gc`` prunes them).
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import MadohubError, MadohubValueError
from .machine import Machine

CHANGED_PATHS_MAX = 200
"""The most changed paths a round keeps in its ``meta`` (the counts cover them all)."""
BASELINE_WAIT_S = 30.0
"""How long a round waits for its route's first snapshot (taken when the route is made)."""
WORKTREES_SUFFIX = ".worktrees"
"""A tile's worktree is ``<repo>.worktrees/<tile>`` beside the repository's top folder."""
BRANCH_PREFIX = "madohub/"
"""A worktree tile's branch unless named: ``madohub/<tile>``."""

_SNAPSHOT = r"""
nl='
'
out=$(git rev-parse --path-format=absolute --show-toplevel --git-path index 2>/dev/null) || exit 3
top=${out%%"$nl"*}
index=${out#*"$nl"}
cd "$top" || exit 3
tmp=$(mktemp "${TMPDIR:-/tmp}/madohub-index.XXXXXX") || exit 4
trap 'rm -f "$tmp"' EXIT
if [ -f "$index" ]; then cp "$index" "$tmp"; else rm -f "$tmp"; fi
GIT_INDEX_FILE=$tmp git add -A . >/dev/null || exit 5
tree=$(GIT_INDEX_FILE=$tmp git write-tree) || exit 5
printf '%s\n' "$tree"
if [ -n "$old" ] && [ "$old" != "$tree" ]; then
  git diff-tree -r -z --numstat --no-renames "$old" "$tree" || exit 6
fi
"""
_NOT_A_REPOSITORY = 3


@dataclass(frozen=True)
class Changes:
    """What changed in a working tree between two snapshots."""

    paths: tuple[str, ...]
    """Every changed path (added, modified, deleted), relative to the repository's top."""
    lines_added: int
    lines_removed: int
    """Text lines; a binary file counts as a changed file with no lines."""

    @property
    def files_changed(self) -> int:
        return len(self.paths)


def snapshot(
    machine: Machine, folder: str, old: str | None = None
) -> tuple[str, Changes | None] | None:
    """The tree id of ``folder``'s whole working tree now, and what changed since tree ``old``
    (None without one), in one script run; None outside a git working tree."""
    script = f"old={shlex.quote(old or '')}\n{_SNAPSHOT}"
    done = machine.run_script(script, folder)
    if done.returncode in (_NOT_A_REPOSITORY, 127):
        return None
    head, _, numstat = done.stdout.partition(b"\n")
    tree = head.decode(errors="replace").strip()
    if done.returncode != 0 or not tree:
        raise MadohubError(
            f"git could not snapshot the working tree at {folder}: {_last_line(done.stderr)}"
        )
    if old is None:
        return tree, None
    return tree, parse_numstat(numstat)


def parse_numstat(raw: bytes) -> Changes:
    """``git diff-tree -z --numstat`` output: ``added<TAB>removed<TAB>path`` NUL-separated
    (``-`` for a binary file's counts)."""
    paths: list[str] = []
    added = removed = 0
    for item in raw.decode(errors="replace").split("\0"):
        parts = item.split("\t", 2)
        if len(parts) != 3:
            continue
        plus, minus, path = parts
        paths.append(path)
        added += int(plus) if plus.isdigit() else 0
        removed += int(minus) if minus.isdigit() else 0
    return Changes(tuple(paths), added, removed)


class ChangeTracker:
    """What a tile's turns changed in its working tree, per route (``key``): each route
    gets the changes since its own previous round, so a fan-out's rows each say what the
    turn did. ``folder()`` says where the tile works (its worktree, or its pane's folder);
    every method blocks (git), so callers run them on a thread."""

    def __init__(self, machine: Machine, folder: Callable[[], str | None]) -> None:
        self._machine = machine
        self._folder = folder
        self._lock = threading.Lock()
        self._last: dict[str, tuple[str, str] | None] = {}
        """The key's last snapshot (folder, tree), or None: no git working tree there."""
        self._started: dict[str, threading.Event] = {}

    def expect(self, key: str) -> None:
        """A baseline for ``key`` is on its way (:meth:`start` runs on a thread)."""
        with self._lock:
            self._started.setdefault(key, threading.Event())

    def start(self, key: str) -> None:
        """Take ``key``'s baseline: the working tree as its route is made."""
        self.expect(key)
        try:
            self._store(key, self._snap())
        except MadohubError:  # (git failed, a host is down): this route's rounds say nothing
            self._store(key, None)
        finally:
            self._started[key].set()

    def take(self, key: str) -> Changes | None:
        """The changes since ``key``'s previous snapshot (None: no working tree, no baseline,
        or git failed), and a new snapshot in its place."""
        started = self._started.get(key)
        if started is not None:
            started.wait(BASELINE_WAIT_S)
        with self._lock:
            before = self._last.get(key)
        folder = self._folder()
        if folder is None:
            self._store(key, None)
            return None
        old = before[1] if before is not None and before[0] == folder else None
        try:
            now = snapshot(self._machine, folder, old)
        except MadohubError:
            now = None
        self._store(key, (folder, now[0]) if now is not None else None)
        return now[1] if now is not None else None

    def _snap(self) -> tuple[str, str] | None:
        folder = self._folder()
        if folder is None:
            return None
        now = snapshot(self._machine, folder)
        return (folder, now[0]) if now is not None else None

    def _store(self, key: str, snap: tuple[str, str] | None) -> None:
        with self._lock:
            self._last[key] = snap


# worktrees ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worktree:
    """A tile's own git worktree: where it is, its branch, the commit it started from."""

    path: str
    branch: str
    repository: str
    """The top folder of the working tree it was made from."""
    base: str


@dataclass(frozen=True)
class WorktreeEnd:
    """What ``close()`` did with a tile's worktree: removed (no changes) or kept."""

    tile: str
    worktree: Worktree
    kept: bool
    why: str
    """Its changes when kept (``2 changed files, 1 commit``), or why it could not be read."""

    def __str__(self) -> str:
        wt = self.worktree
        if self.kept:
            return f"kept {wt.path} (branch {wt.branch}, tile {self.tile!r}): {self.why}"
        return f"removed {wt.path} (branch {wt.branch}, tile {self.tile!r}): no changes"


def default_branch(tile: str) -> str:
    return f"{BRANCH_PREFIX}{tile}"


def plan_worktree(machine: Machine, cwd: str, tile: str, branch: str) -> Worktree:
    """Check that a worktree for ``tile`` on a new ``branch`` can be made from ``cwd``'s
    repository (nothing is made); a teaching error for each way it cannot."""
    if not isinstance(branch, str) or not branch.strip():
        raise MadohubValueError(f"worktree branch must be a non-empty string, got {branch!r}")
    script = f"""
b={shlex.quote(branch)}
top=$(git rev-parse --show-toplevel 2>/dev/null) || {{ echo norepo; exit 0; }}
echo "top=$top"
echo "dest=$(dirname "$top")/$(basename "$top"){WORKTREES_SUFFIX}/{tile}"
lock=$(git rev-parse --path-format=absolute --git-path index.lock)
[ -e "$lock" ] && echo "locked=$lock"
head=$(git rev-parse -q --verify 'HEAD^{{commit}}') && echo "head=$head"
git check-ref-format --branch "$b" >/dev/null 2>&1 || echo badref
git show-ref --verify -q "refs/heads/$b" && echo exists
[ -e "$(dirname "$top")/$(basename "$top"){WORKTREES_SUFFIX}/{tile}" ] && echo destexists
true
"""
    done = machine.run_script(script, cwd)
    if done.returncode == 127:
        raise MadohubValueError(f"worktree= needs git, and it does not run in {cwd}")
    facts: dict[str, str] = {}
    for line in done.stdout.decode(errors="replace").splitlines():
        key, _, value = line.partition("=")
        facts[key] = value
    if done.returncode != 0 or "norepo" in facts:
        raise MadohubValueError(
            f"worktree= needs a git repository, and cwd {cwd} is not inside one "
            "(git init it, pass a cwd inside a repository, or drop worktree=)"
        )
    top, dest = facts["top"], facts["dest"]
    if "locked" in facts:
        raise MadohubValueError(
            f"the repository at {top} has a locked index ({facts['locked']} exists: another "
            "git command is running, or one crashed); wait for it, or remove the lock file"
        )
    if "badref" in facts:
        raise MadohubValueError(
            f"worktree branch {branch!r} is not a valid git branch name (see git "
            "check-ref-format: no spaces, '..', '~', '^', ':', '?', '*', '[' or trailing '/')"
        )
    if "exists" in facts:
        raise MadohubValueError(
            f"branch {branch!r} already exists in {top}; a worktree tile starts a new branch: "
            "name another one (worktree='NAME'), or delete the old branch"
        )
    if "head" not in facts:
        raise MadohubValueError(
            f"the repository at {top} has no commit yet; a worktree starts from one: commit once"
        )
    if "destexists" in facts:
        raise MadohubValueError(
            f"{dest} already exists (a worktree an earlier tile {tile!r} kept?); "
            "remove it (git worktree remove) or name the tile otherwise"
        )
    return Worktree(dest, branch, top, facts["head"])


def make_worktree(machine: Machine, plan: Worktree) -> None:
    """``git worktree add -b BRANCH PATH BASE``; a MadohubError (nothing left) if git refuses."""
    q = shlex.quote
    script = (
        f"mkdir -p {q(plan.path.rsplit('/', 1)[0])} && "
        f"git worktree add -q -b {q(plan.branch)} {q(plan.path)} {q(plan.base)}"
    )
    done = machine.run_script(script, plan.repository)
    if done.returncode != 0:
        raise MadohubValueError(
            f"git could not make the worktree {plan.path} on branch {plan.branch!r}: "
            f"{_last_line(done.stderr)}"
        )


def drop_worktree(machine: Machine, plan: Worktree) -> None:
    """Remove a worktree and its branch whatever they hold (a tile that never started)."""
    q = shlex.quote
    machine.run_script(
        f"git worktree remove --force {q(plan.path)}; git branch -q -D {q(plan.branch)}",
        plan.repository,
    )


def end_worktree(machine: Machine, tile: str, plan: Worktree) -> WorktreeEnd:
    """Remove the worktree and its branch when nothing changed there (no modified or
    untracked file, no new commit); else keep both and say what they hold."""
    q = shlex.quote
    script = f"""
cd {q(plan.path)} 2>/dev/null || {{ echo gone; exit 0; }}
files=$(git status --porcelain --untracked-files=all | wc -l) || exit 5
commits=$(git rev-list --count {q(plan.base)}..HEAD) || exit 5
echo "files=$files commits=$commits"
if [ "$files" -eq 0 ] && [ "$commits" -eq 0 ]; then
  cd {q(plan.repository)} && git worktree remove {q(plan.path)} &&
  git branch -q -D {q(plan.branch)} && echo removed
fi
true
"""
    try:
        done = machine.run_script(script, plan.repository)
    except MadohubError as exc:
        return WorktreeEnd(tile, plan, True, f"not checked ({exc})")
    out = done.stdout.decode(errors="replace").split()
    if "gone" in out:
        return WorktreeEnd(tile, plan, False, "already gone")
    if "removed" in out:
        return WorktreeEnd(tile, plan, False, "no changes")
    counts = dict(w.split("=", 1) for w in out if "=" in w)
    files, commits = int(counts.get("files", "0")), int(counts.get("commits", "0"))
    if not counts:
        return WorktreeEnd(tile, plan, True, f"not checked ({_last_line(done.stderr)})")
    parts = [f"{files} changed file{'s' * (files != 1)}"] if files else []
    parts += [f"{commits} new commit{'s' * (commits != 1)}"] if commits else []
    return WorktreeEnd(tile, plan, True, ", ".join(parts) or "could not be removed")


def _last_line(data: bytes) -> str:
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no reason given"
