"""Git, as the hub uses it: a tile's own worktree, and what each turn changed.

Everything here is a short ``sh`` script run by a tile's machine
(:meth:`~madohub_nb.io.machine.Machine.run_script`) in a folder, on this machine or a
host alike, and parsed here; callers run it on a thread, never on the engine loop. Each
goes through :func:`git_script`: the working tree and its ``.git/config`` are the agent's,
so git runs none of the programs they name (hooks, fsmonitor, filters).

What a turn changed is read from snapshots: the whole working tree (tracked changes and
untracked files, ignored files left out) written as a git tree through a throw-away
index, so the agent's own index and commits are untouched; two snapshots' trees are
compared with ``git diff-tree --numstat``. A snapshot stores the working tree's new
file contents as loose objects in the repository (unreachable: ``git gc`` prunes them),
but for files over :data:`FILE_MAX_BYTES`, which a small stand-in replaces.
"""

from __future__ import annotations

import shlex
import subprocess
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

FILE_MAX_BYTES = 10 * 1024 * 1024
"""A snapshot does not read a file bigger than this (it would be copied into the repository's
objects at every change): it counts as changed when its size or time changes, its size is
in the round's ``meta["big_files"]``."""

_FILTER_NOT_OFF = 8
"""The prelude's exit when a filter cannot be switched off (its name holds ``=``)."""

GIT_CONFIG_OFF: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", ""),
    ("core.hooksPath", "/dev/null"),
    ("core.attributesFile", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", "false"),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
"""Configuration that would make git start a program, set (on top of every config file) so
that it does not: the repository's working tree and ``.git/config`` are the agent's."""

_GIT_PRELUDE = r"""
case $(export -p) in *GIT_*)  # (none here: LocalMachine drops them; a host may have some)
  for mh_v in $(env | sed -n 's/^\(GIT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$mh_v"; done ;;
esac
export GIT_CONFIG_NOSYSTEM=1 GIT_ATTR_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0
export GIT_PAGER=cat GIT_NO_REPLACE_OBJECTS=1
mh_fixed=@FIXED@
mh_git_off() {
  GIT_CONFIG_PARAMETERS=$mh_fixed
  export GIT_CONFIG_PARAMETERS
  mh_names=$(command git config --name-only --get-regexp '^filter\.' 2>/dev/null)
  if [ $? -gt 1 ]; then echo "git config could not be read here" >&2; return 1; fi
  while IFS= read -r mh_n; do
    [ -n "$mh_n" ] || continue
    mh_n=${mh_n%.*}
    case $mh_n in
      *=*) echo "git filter name $mh_n cannot be switched off (it holds '=')" >&2; return 1 ;;
    esac
    case $mh_n in *"'"*) mh_n=$(printf '%s' "$mh_n" | sed "s/'/'\\\\''/g") ;; esac
    for mh_k in clean= smudge= process= required=false; do
      GIT_CONFIG_PARAMETERS="$GIT_CONFIG_PARAMETERS '$mh_n.$mh_k'"
    done
  done <<MH_NAMES
$mh_names
MH_NAMES
}
mh_git_off || exit @FILTER_NOT_OFF@
mh_off_in=$PWD
git() {
  if [ "$mh_off_in" != "$PWD" ]; then mh_git_off || return; mh_off_in=$PWD; fi
  command git "$@"
}
"""
"""Run before every git script (:func:`git_script`): the environment without any ``GIT_*``
variable of the caller's, no system config or attributes, and a ``git`` that first (once
per folder) turns off every program its configuration names: fsmonitor, hooks, pager,
ssh, and each filter (clean, smudge, process) any config file defines (their names read
with ``git config``, which runs nothing), through ``GIT_CONFIG_PARAMETERS`` so that the
git processes git starts get the same; where that cannot be done, the script stops
(exit :data:`_FILTER_NOT_OFF`) before git runs. (So a worktree of a Git LFS repository
holds LFS's pointer files.)"""


def git_script(body: str) -> str:
    """``body`` (a ``sh`` script calling ``git``) with git's programs off: the one place that
    builds how the hub runs git (its environment comes from the machine, cleaned of keys)."""
    fixed = " ".join(_sq(f"{key}={value}") for key, value in GIT_CONFIG_OFF)
    prelude = _GIT_PRELUDE.replace("@FIXED@", shlex.quote(fixed))
    return prelude.replace("@FILTER_NOT_OFF@", str(_FILTER_NOT_OFF)) + body


def _sq(text: str) -> str:
    """``text`` single-quoted as git reads ``GIT_CONFIG_PARAMETERS`` (and ``sh`` its words)."""
    return "'" + text.replace("'", "'\\''") + "'"


def run_git(machine: Machine, body: str, cwd: str) -> subprocess.CompletedProcess[bytes]:
    """:func:`git_script` of ``body`` run by ``machine`` in ``cwd``."""
    return machine.run_script(git_script(body), cwd)


_SNAPSHOT = r"""
nl='
'
out=$(git rev-parse --path-format=absolute --show-toplevel --git-path index 2>/dev/null) || exit 3
top=${out%%"$nl"*}
index=${out#*"$nl"}
cd "$top" || exit 3
d=$(mktemp -d "${TMPDIR:-/tmp}/madohub-snapshot.XXXXXX") || exit 4
trap 'rm -rf "$d"' EXIT
tmp=$d/index spec=$d/spec info=$d/info big=$d/big
: > "$info"
if [ -f "$index" ]; then cp "$index" "$tmp"; else rm -f "$tmp"; fi
export GIT_INDEX_FILE="$tmp" spec info max
printf '.\0' > "$spec"
find . -name .git -prune -o -type f -size +"$max"c -print0 > "$big.out" 2>/dev/null
if [ -s "$big.out" ]; then  # the big files git would read: untracked or modified
  GIT_LITERAL_PATHSPECS=1 xargs -0 git ls-files -z -o -m --exclude-standard -- \
    < "$big.out" > "$big" || exit 5
  xargs -0 sh -c '
  for f do
    [ -f "$f" ] && [ ! -h "$f" ] || continue
    s=$(wc -c < "$f") || continue
    s=${s##* }
    [ "$s" -gt "$max" ] || continue
    t=$(stat -c %Y "$f" 2>/dev/null || stat -f %m "$f" 2>/dev/null)
    b=$(printf "madohub: not read, %s bytes, time %s\0" "$s" "$t" |
      git hash-object --no-filters -w --stdin) || exit 255
    printf ":(exclude,literal)%s\0" "$f" >> "$spec"
    printf "100644 %s\t%s\0" "$b" "$f" >> "$info"
    printf "%s\t%s\0" "$s" "$f"
  done
  exit 0' sh < "$big" > "$big.out" || exit 5
  mv "$big.out" "$big"
else
  : > "$big"
fi
if [ -s "$info" ]; then
  git add -A --pathspec-from-file="$spec" --pathspec-file-nul >/dev/null || exit 5
  git update-index -z --index-info < "$info" || exit 5
else
  git add -A . >/dev/null || exit 5
fi
tree=$(git write-tree) || exit 5
printf '%s\n' "$tree"
cat "$big"
printf '\0'
if [ -n "$old" ] && [ "$old" != "$tree" ]; then
  git diff-tree -r -z --numstat --no-renames --no-ext-diff --no-textconv "$old" "$tree" || exit 6
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
    big_files: tuple[tuple[str, int], ...] = ()
    """The changed paths too big to read (:data:`FILE_MAX_BYTES`), with their size in bytes."""

    @property
    def files_changed(self) -> int:
        return len(self.paths)


def snapshot(
    machine: Machine,
    folder: str,
    old: str | None = None,
    file_max_bytes: int = FILE_MAX_BYTES,
) -> tuple[str, Changes | None] | None:
    """The tree id of ``folder``'s whole working tree now, and what changed since tree ``old``
    (None without one), in one script run; None outside a git working tree. A file above
    ``file_max_bytes`` is not read: a small stand-in naming its size and time takes its place."""
    script = f"old={shlex.quote(old or '')}\nmax={int(file_max_bytes)}\n{_SNAPSHOT}"
    done = run_git(machine, script, folder)
    if done.returncode in (_NOT_A_REPOSITORY, 127):
        return None
    head, _, rest = done.stdout.partition(b"\n")
    tree = head.decode(errors="replace").strip()
    if done.returncode != 0 or not tree:
        raise MadohubError(
            f"git could not snapshot the working tree at {folder}: {_last_line(done.stderr)}"
        )
    if old is None:
        return tree, None
    sizes: dict[str, int] = {}
    records = rest.split(b"\0")
    for n, record in enumerate(records):
        if not record:
            rest = b"\0".join(records[n + 1 :])
            break
        size, _, path = record.decode(errors="replace").partition("\t")
        if size.isdigit():
            sizes[path] = int(size)
    changes = parse_numstat(rest)
    big = tuple((p, sizes[p]) for p in changes.paths if p in sizes)
    return tree, Changes(changes.paths, changes.lines_added, changes.lines_removed, big)


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

    def __init__(
        self,
        machine: Machine,
        folder: Callable[[], str | None],
        file_max_bytes: int = FILE_MAX_BYTES,
    ) -> None:
        self._machine = machine
        self._folder = folder
        self.file_max_bytes = file_max_bytes
        """Files above this are not read (:data:`FILE_MAX_BYTES`)."""
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
            now = snapshot(self._machine, folder, old, self.file_max_bytes)
        except MadohubError:
            now = None
        self._store(key, (folder, now[0]) if now is not None else None)
        return now[1] if now is not None else None

    def _snap(self) -> tuple[str, str] | None:
        folder = self._folder()
        if folder is None:
            return None
        now = snapshot(self._machine, folder, None, self.file_max_bytes)
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


def plan_worktree(
    machine: Machine, cwd: str, tile: str, branch: str, base: str = "HEAD", folder: str = ""
) -> Worktree:
    """Check that a worktree for ``tile`` on a new ``branch`` from commit ``base`` can be made
    from ``cwd``'s repository (nothing is made), in ``<repo>.worktrees/<folder or tile>``; a
    teaching error for each way it cannot."""
    if not isinstance(branch, str) or not branch.strip():
        raise MadohubValueError(f"worktree branch must be a non-empty string, got {branch!r}")
    name = shlex.quote(folder or tile)
    script = f"""
b={shlex.quote(branch)}
top=$(git rev-parse --show-toplevel 2>/dev/null) || {{ echo norepo; exit 0; }}
echo "top=$top"
echo "dest=$(dirname "$top")/$(basename "$top"){WORKTREES_SUFFIX}/"{name}
lock=$(git rev-parse --path-format=absolute --git-path index.lock)
[ -e "$lock" ] && echo "locked=$lock"
head=$(git rev-parse -q --verify {shlex.quote(base + "^{commit}")}) && echo "head=$head"
git check-ref-format --branch "$b" >/dev/null 2>&1 || echo badref
git show-ref --verify -q "refs/heads/$b" && echo exists
[ -e "$(dirname "$top")/$(basename "$top"){WORKTREES_SUFFIX}/"{name} ] && echo destexists
true
"""
    done = run_git(machine, script, cwd)
    if done.returncode == 127:
        raise MadohubValueError(f"worktree= needs git, and it does not run in {cwd}")
    if done.returncode == _FILTER_NOT_OFF:
        raise MadohubValueError(
            f"worktree= refused for {cwd}: {_last_line(done.stderr)}, and the hub runs none "
            "of a repository's programs; rename that filter (git config --rename-section)"
        )
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
    if "head" not in facts and base != "HEAD":
        raise MadohubValueError(
            f"base={base!r} is not a commit of the repository at {top}; give a commit, branch "
            "or tag it has (git log shows them)"
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


_REPOSITORY_LOCKS: dict[tuple[str | None, str], threading.Lock] = {}
_REPOSITORY_LOCKS_GUARD = threading.Lock()


def repository_lock(machine: Machine, repository: str) -> threading.Lock:
    """The lock this process holds while it adds or removes a worktree of ``repository`` (on
    ``machine``). ``git worktree add``/``remove`` and ``git branch -D`` read the admin folder
    of every worktree of the repository, and one that another git is making at that moment is
    half written: "fatal: failed to read .git/worktrees/NAME/commondir" (seen with an
    experiment's parallel runs on a loaded machine). So they take turns."""
    key = (machine.name, repository)
    with _REPOSITORY_LOCKS_GUARD:
        return _REPOSITORY_LOCKS.setdefault(key, threading.Lock())


def make_worktree(machine: Machine, plan: Worktree) -> None:
    """``git worktree add -b BRANCH PATH BASE``; a MadohubError (nothing left) if git refuses."""
    q = shlex.quote
    script = (
        f"mkdir -p {q(plan.path.rsplit('/', 1)[0])} && "
        f"git worktree add -q -b {q(plan.branch)} {q(plan.path)} {q(plan.base)}"
    )
    with repository_lock(machine, plan.repository):
        done = run_git(machine, script, plan.repository)
    if done.returncode != 0:
        raise MadohubValueError(
            f"git could not make the worktree {plan.path} on branch {plan.branch!r}: "
            f"{_last_line(done.stderr)}"
        )


def drop_worktree(machine: Machine, plan: Worktree) -> None:
    """Remove a worktree and its branch whatever they hold (a tile that never started)."""
    q = shlex.quote
    with repository_lock(machine, plan.repository):
        run_git(
            machine,
            f"git worktree remove --force {q(plan.path)}; git branch -q -D {q(plan.branch)}",
            plan.repository,
        )


def end_worktree(machine: Machine, tile: str, plan: Worktree) -> WorktreeEnd:
    """Remove the worktree and its branch when nothing of the agent's would go with them: no
    modified, untracked or ignored file, and no commit that only the tile's branch, the
    worktree's ``HEAD`` or their reflogs reach (an agent may switch branch, detach or reset);
    else, or when that cannot be read, keep both and say what they hold."""
    q = shlex.quote
    script = f"""
cd {q(plan.path)} 2>/dev/null || {{ echo gone; exit 0; }}
st=$(mktemp "${{TMPDIR:-/tmp}}/madohub-status.XXXXXX") || exit 4
refs=$(mktemp "${{TMPDIR:-/tmp}}/madohub-refs.XXXXXX") || exit 4
trap 'rm -f "$st" "$refs"' EXIT
git status --porcelain --untracked-files=all --ignore-submodules=all > "$st" || exit 5
files=$(grep -c '' "$st")
git status --porcelain --untracked-files=normal --ignored --ignore-submodules=all > "$st" ||
  exit 5
ignored=$(grep -c '^!! ' "$st")
git log -g --format=%H HEAD >> "$refs" 2>/dev/null
git log -g --format=%H {q("refs/heads/" + plan.branch)} >> "$refs" 2>/dev/null
git rev-parse -q --verify {q("refs/heads/" + plan.branch)} >> "$refs"
echo HEAD >> "$refs"
echo {q("^" + plan.base)} >> "$refs"
commits=$(git rev-list --count --stdin < "$refs") || exit 5
echo "files=$files ignored=$ignored commits=$commits"
if [ "$files" -eq 0 ] && [ "$ignored" -eq 0 ] && [ "$commits" -eq 0 ]; then
  cd {q(plan.repository)} && git worktree remove {q(plan.path)} && echo removed &&
  git branch -q -D {q(plan.branch)}
fi
true
"""
    try:
        with repository_lock(machine, plan.repository):
            done = run_git(machine, script, plan.repository)
    except MadohubError as exc:
        return WorktreeEnd(tile, plan, True, f"not checked ({exc})")
    out = done.stdout.decode(errors="replace").split()
    if "gone" in out:
        return WorktreeEnd(tile, plan, False, "already gone")
    if "removed" in out:
        return WorktreeEnd(tile, plan, False, "no changes")
    counts = dict(w.split("=", 1) for w in out if "=" in w)
    if not counts or not all(v.isdigit() for v in counts.values()):
        return WorktreeEnd(tile, plan, True, f"not checked ({_last_line(done.stderr)})")
    files, ignored, commits = (int(counts.get(k, "0")) for k in ("files", "ignored", "commits"))
    parts = [f"{files} changed file{'s' * (files != 1)}"] if files else []
    parts += [f"{ignored} ignored path{'s' * (ignored != 1)}"] if ignored else []
    parts += [f"{commits} new commit{'s' * (commits != 1)}"] if commits else []
    return WorktreeEnd(tile, plan, True, ", ".join(parts) or "could not be removed")


def resolve_commit(machine: Machine, cwd: str, base: str) -> str:
    """The full sha of commit-ish ``base`` in ``cwd``'s repository; a teaching error when
    ``cwd`` is not in a repository or ``base`` names no commit there."""
    if not isinstance(base, str) or not base.strip():
        raise MadohubValueError(f"base must be a commit, branch or tag (a string), got {base!r}")
    script = f"""
git rev-parse --show-toplevel >/dev/null 2>&1 || {{ echo norepo; exit 0; }}
git rev-parse -q --verify {shlex.quote(base + "^{commit}")} || echo nocommit
true
"""
    out = run_git(machine, script, cwd).stdout.decode(errors="replace").split()
    if not out or "norepo" in out:
        raise MadohubValueError(
            f"worktree= needs a git repository, and cwd {cwd} is not inside one "
            "(git init it, pass a cwd inside a repository, or drop worktree=)"
        )
    if "nocommit" in out:
        raise MadohubValueError(
            f"base={base!r} is not a commit of the repository at {cwd}; give a commit, branch "
            "or tag it has (git log shows them)"
        )
    return out[0]


def changes_since(machine: Machine, folder: str, base: str) -> Changes:
    """What ``folder``'s working tree holds that commit ``base`` does not (commits, edits and
    untracked files alike; the repository's index is not touched)."""
    done = snapshot(machine, folder, old=base)
    if done is None or done[1] is None:
        raise MadohubError(f"{folder} is not a git working tree: its changes cannot be read")
    return done[1]


def _last_line(data: bytes) -> str:
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no reason given"
