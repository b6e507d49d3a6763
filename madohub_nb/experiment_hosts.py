"""An experiment's runs spread over remote hosts (``mh.experiment(..., hosts=[...])``).

The hosts are ssh destinations, as a tile's ``host=``: the hubs' ``ssh_command`` and
``remote_socket_name`` settings reach them. Before the first run each host is checked (its
name, ssh, tmux: a one-line error naming every bad host, and nothing starts) and, when the
workflow has worktree tiles, given the experiment's base commit: the hub pushes it
(``git push`` over the same ssh, from the repository here, hooks off) into a repository of
its own on the host, ``~/.cache/madohub_nb/experiments/<folder>-<hash>``, made on first use
and reused by later experiments, so only new objects travel. Each run's worktrees are then
made there from that commit, as they are here for a local run: the host needs ssh, tmux and
git, not a clone made by hand, and every run starts from the same commit wherever it runs.

A run takes the host with the fewest runs going (a free slot); among equals, the one that
has had the fewest runs so far, then the order given: with ``parallel=1`` the runs go round
robin, with more the hosts share the load as runs end. Every tile of a run starts on its
host (a tile naming a ``host`` of its own is refused: the run's host is the experiment's to
choose); a tile's ``cwd`` names a folder on that host. The runs' rounds are logged here, in
the experiment's one log; a command scorer runs on the run's host, in its worktree.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import threading
from collections.abc import Mapping, Sequence
from typing import Final

from .engine import side_by_side
from .errors import MadohubError, MadohubValueError
from .io.git import git_script, run_git
from .io.machine import LocalMachine
from .io.remote import SshMachine, check_host
from .pipeline.workflow import Workflow

HOST_REPOS: Final = ".cache/madohub_nb/experiments"
"""Where, under a host's home, the repositories the experiments push their base commits to are."""
BASE_REF: Final = "refs/madohub/experiment/"
"""The ref (``<prefix><sha>``) a pushed base commit is kept under on the host."""
PUSH_TIMEOUT_S: Final = 600.0
"""How long pushing a base commit to a host may take (a first push carries the history)."""
PREPARE_TIMEOUT_S: Final = 30.0
"""How long making a host's repository, or checking its folders, may take."""


def check_hosts(hosts: object, workflows: Mapping[str, Workflow]) -> list[str] | None:
    """``hosts`` as a list of ssh destinations (None: every run here), and no tile of the
    workflows naming a host of its own; else a teaching error. Nothing is reached yet."""
    if hosts is None:
        return None
    if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
        raise MadohubValueError(
            f"hosts must be a non-empty list of ssh hosts (names from your ssh config or "
            f"'user@hostname'), e.g. hosts=['box-1', 'box-2'], got {hosts!r}"
        )
    names: list[str] = []
    for i, host in enumerate(hosts):
        try:
            names.append(check_host(host))
        except MadohubValueError as exc:
            raise MadohubValueError(f"hosts[{i}]: {exc}") from None
    twice = sorted({h for h in names if names.count(h) > 1})
    if twice:
        raise MadohubValueError(
            f"hosts names {', '.join(map(repr, twice))} more than once; name each host once "
            "(parallel= sets how many runs go at once)"
        )
    for variant, workflow in workflows.items():
        for tile, options in workflow.tiles.items():
            if options.get("host") is not None:
                raise MadohubValueError(
                    f"variants.{variant}.{tile}: the tile runs on host {options['host']!r}, and "
                    "with hosts= each run's tiles start on the run's host; drop the tile's host="
                )
    return names


def host_repo_name(folder: str) -> str:
    """The name of the host's repository for this machine's repository folder ``folder``: its
    base name and a hash of its path (one per repository here, kept between experiments)."""
    digest = hashlib.sha256(os.path.realpath(folder).encode()).hexdigest()[:12]
    base = "".join(c if c.isalnum() or c in "-_." else "-" for c in os.path.basename(folder))
    return f"{base.strip('.') or 'repo'}-{digest}"


class RunHosts:
    """The experiment's hosts: a machine each (its ssh master shared by the experiment's own
    git calls), the repositories there, and which host the next run takes."""

    def __init__(self, machines: dict[str, SshMachine]) -> None:
        self.machines = machines
        self.order = list(machines)
        self.repos: dict[str, dict[str, str]] = {h: {} for h in machines}
        """Each host's repositories: this machine's repository folder → the host's."""
        self._going = dict.fromkeys(self.order, 0)
        self._given = dict.fromkeys(self.order, 0)
        self._lock = threading.Lock()

    def take(self) -> str:
        """The host for the next run: the fewest runs going, then the fewest so far, then the
        order given."""
        with self._lock:
            host = min(self.order, key=lambda h: (self._going[h], self._given[h]))
            self._going[host] += 1
            self._given[host] += 1
            return host

    def give_back(self, host: str) -> None:
        """The run on ``host`` has ended (its tiles and worktrees with it)."""
        with self._lock:
            self._going[host] -= 1

    def place(self, workflow: Workflow, host: str) -> Workflow:
        """``workflow`` with every tile on ``host`` (its hash kept: the variant's, not the run's)."""
        tiles = {name: {**options, "host": host} for name, options in workflow.tiles.items()}
        placed = Workflow(workflow.name, tiles, workflow.routes)
        placed.path = workflow.path
        placed.hash = workflow.hash or hashlib.sha256(workflow.dumps().encode()).hexdigest()
        return placed

    def close(self) -> None:
        """End each host's ssh master (by pid)."""
        for machine in self.machines.values():
            machine.close()


def open_hosts(
    hosts: list[str],
    workflows: Mapping[str, Workflow],
    bases: Mapping[str, str],
    ssh_command: Sequence[str],
    socket_name: str | None,
) -> RunHosts:
    """Reach every host (ssh, tmux), check the folders the tiles start in are there, and push
    each repository's base commit (``bases``: folder here → sha) into the host's repository
    for it, side by side; a MadohubValueError naming each host that failed, before any run."""
    machines = {h: SshMachine(h, ssh_command, socket_name) for h in hosts}
    found = RunHosts(machines)
    cwds = sorted(_plain_cwds(workflows))
    problems: dict[str, str] = {}

    def prepare(host: str) -> None:
        try:
            machine = machines[host]
            machine.probe(socket_name)
            machine.start_master()
            missing = _missing_folders(machine, cwds)
            if missing:
                raise MadohubError(
                    f"the tiles' cwd {', '.join(missing)} is not a folder there (with hosts=, "
                    "a tile's cwd names a folder on its run's host)"
                )
            for folder, sha in bases.items():
                found.repos[host][folder] = _push_base(machine, folder, sha)
        except (MadohubError, OSError) as exc:
            problems[host] = str(exc)

    side_by_side(((prepare, (h,)) for h in hosts), name="madohub experiment hosts")
    if problems:
        found.close()
        said = "; ".join(f"host {h!r}: {why}" for h, why in problems.items())
        raise MadohubValueError(
            f"hosts: {len(problems)} of {len(hosts)} cannot take runs, so none started: {said}. "
            "Check the names against your ssh config (ssh HOST tmux -V should answer), or "
            "leave those hosts out"
        )
    return found


def _plain_cwds(workflows: Mapping[str, Workflow]) -> set[str]:
    """The absolute ``cwd`` of every tile without a worktree (those start in their own)."""
    return {
        str(options["cwd"])
        for workflow in workflows.values()
        for options in workflow.tiles.values()
        if options.get("worktree") in (None, False)
        and str(options.get("cwd") or "").startswith("/")
    }


def _missing_folders(machine: SshMachine, folders: list[str]) -> list[str]:
    """Those of ``folders`` that are not folders on the host (one call)."""
    if not folders:
        return []
    quoted = " ".join(shlex.quote(f) for f in folders)
    done = machine.run_script(
        f'for d in {quoted}; do [ -d "$d" ] || printf "%s\\n" "$d"; done', "~/",
        PREPARE_TIMEOUT_S,
    )  # fmt: skip
    if done.returncode != 0:
        raise MadohubError(f"its folders could not be checked: {_last_line(done.stderr)}")
    return done.stdout.decode(errors="replace").split("\n")[:-1]


_INIT: Final = r"""
if [ ! -d "$d/.git" ]; then
  mkdir -p "${d%/*}" && t=$(mktemp -d "$d.new-XXXXXX") && git init -q "$t" || exit 1
  mv "$t" "$d" 2>/dev/null
  rm -rf "$d/${t##*/}" "$t"
fi
cd "$d" && [ -d .git ] && pwd -P
"""
"""Make the host's repository ``$d`` unless it is there, in a folder of its own first, then
renamed: two names of one host may make it at once (the one renamed second lands inside the
first's, and is removed)."""


def _push_base(machine: SshMachine, folder: str, sha: str) -> str:
    """Push commit ``sha`` of the repository at ``folder`` here into the host's repository for
    it (made on first use); the host repository's path."""
    name = host_repo_name(folder)
    made = run_git(machine, f'd="$HOME"/{HOST_REPOS}/{shlex.quote(name)}\n' + _INIT, "~/")
    if made.returncode == 127:
        raise MadohubError("it has no git (worktree tiles need git on the host): install git there")
    repo = made.stdout.decode(errors="replace").strip()
    if made.returncode != 0 or not repo.startswith("/"):
        raise MadohubError(f"its repository could not be made: {_last_line(made.stderr)}")
    # git's own ssh, as the hub's: its ssh_command's options and the shared master.
    ssh = " ".join(shlex.quote(w) for w in machine.argv((), shell="")[:-3])
    q = shlex.quote
    body = (
        f"GIT_SSH_COMMAND={q(ssh)}; export GIT_SSH_COMMAND\n"
        f"git -c protocol.ssh.allow=always push -q --no-verify {q(f'{machine.host}:{repo}')} "
        f"{q(f'{sha}:{BASE_REF}{sha}')}"
    )
    pushed = LocalMachine().run_script(git_script(body), folder, PUSH_TIMEOUT_S)
    if pushed.returncode != 0 and not _has_commit(machine, repo, sha):
        # (Two names of one host push at once: one takes the ref's lock, the other fails,
        # and the commit is there all the same.)
        raise MadohubError(
            f"the base commit {sha[:12]} could not be pushed to {repo} there: "
            f"{_last_line(pushed.stderr)}"
        )
    return repo


def _has_commit(machine: SshMachine, repo: str, sha: str) -> bool:
    """Whether the host's repository ``repo`` holds commit ``sha``."""
    done = run_git(machine, f"git cat-file -e {shlex.quote(sha + '^{commit}')}", repo)
    return done.returncode == 0


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no reason given"
