"""An experiment's worktrees: each run's worktree tiles start in fresh worktrees of their own.

A tile with ``worktree=`` in an experiment's workflow does not get the hub's worktree (one
fixed branch, ``madohub/<tile>``, kept while it holds changes: the next run would collide
with it). Each run makes its own instead, from the one commit the experiment resolved when
it started (``base=``), on a branch of its own (``madohub/<tile>-<variant>-<repeat>-<id>``)
in ``<repo>.worktrees/<tile>-<variant>-<repeat>-<id>``; the tile starts in it (its ``cwd``).
After the run the worktree's changes against the base are read, and ``keep_worktrees``
decides whether it stays: these worktrees are the experiment's own, so removing one with
changes loses nothing the run's row does not already say (its diff summary). A run on a host
(``hosts=``) makes them the same way there, in the host's repository for the tile's folder
(:mod:`~madohub_nb.experiment_hosts`), through that host's machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from typing import Any, Final

from .errors import MadohubError, MadohubValueError
from .io.git import (
    BRANCH_PREFIX,
    Changes,
    Worktree,
    changes_since,
    drop_worktree,
    make_worktree,
    plan_worktree,
    resolve_commit,
    run_git,
    snapshot,
)
from .io.machine import LocalMachine, Machine
from .pipeline.workflow import Workflow

KEEP_WORKTREES: Final = (False, True, "failed")
"""What ``keep_worktrees`` can be: remove every run's worktrees, keep them all, or keep only
the worktrees of runs that failed (the default: those are the ones to look into)."""
DIFF_MAX_CHARS: Final = 50_000
"""A run's diff text is kept up to this many characters per worktree (``run.diffs``): enough
to read what it did in ``exp``'s view and its report, bounded for a run that rewrote a tree."""


def check_keep(keep: object) -> bool | str:
    """``keep_worktrees`` as given, or a teaching error."""
    if keep is False or keep is True or keep == "failed":
        return keep
    raise MadohubValueError(
        f"keep_worktrees must be False, True or 'failed', got {keep!r}: False removes each "
        "run's worktrees after its diff is read, True keeps them all, 'failed' (the default) "
        "keeps those of runs that failed"
    )


def worktree_tiles(workflow: Workflow) -> dict[str, str]:
    """The workflow's tiles that work in a worktree, each with the folder its repository is
    found from (its ``cwd``, else this process's); a teaching error for a remote one."""
    found: dict[str, str] = {}
    for name, options in workflow.tiles.items():
        if options.get("worktree") in (None, False):
            continue
        if options.get("host") is not None:
            raise MadohubValueError(
                f"tiles.{name}: an experiment makes its runs' worktrees itself, and this tile "
                f"runs on host {options['host']!r}; drop the tile's host= (to run on hosts, "
                "give the experiment hosts=[...]) or its worktree="
            )
        found[name] = os.fspath(options.get("cwd") or os.getcwd())
    return found


def resolve_bases(workflows: Mapping[str, Workflow], base: str | None) -> dict[str, str]:
    """Each worktree tile's folder → the sha of ``base`` (None: ``HEAD``) there, resolved
    once, before the first run, so every run starts from the same commit."""
    machine = LocalMachine()
    shas: dict[str, str] = {}
    for name, workflow in workflows.items():
        for tile, folder in worktree_tiles(workflow).items():
            if folder not in shas:
                try:
                    shas[folder] = resolve_commit(machine, folder, base or "HEAD")
                except MadohubValueError as exc:
                    raise MadohubValueError(f"variants.{name}.{tile}: {exc}") from None
    return shas


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def make_run_worktrees(
    workflow: Workflow,
    bases: Mapping[str, str],
    variant: str,
    repeat: int,
    machine: Machine | None = None,
    folders: Mapping[str, str] | None = None,
) -> tuple[Workflow, dict[str, Worktree]]:
    """``workflow`` with each worktree tile started in a new worktree of its own, and those
    worktrees by tile; none is left when one cannot be made. ``machine``: where they are made
    (None: here); ``folders``: each tile folder's repository there (None: the same folder)."""
    if not worktree_tiles(workflow):
        return workflow, {}
    machine = machine or LocalMachine()
    run_id = secrets.token_hex(3)
    tiles = {name: dict(options) for name, options in workflow.tiles.items()}
    made: dict[str, Worktree] = {}
    try:
        for name, folder in worktree_tiles(workflow).items():
            label = f"{_slug(name)}-{_slug(variant)}-{repeat}-{run_id}"
            plan = plan_worktree(
                machine,
                (folders or {}).get(folder, folder),
                name,
                f"{BRANCH_PREFIX}{label}",
                bases[folder],
                label,
            )
            make_worktree(machine, plan)
            made[name] = plan
            tiles[name]["cwd"] = plan.path
            del tiles[name]["worktree"]
    except BaseException:
        drop_run_worktrees(made, machine)
        raise
    varied = Workflow(workflow.name, tiles, workflow.routes)
    varied.path = workflow.path  # (the variant's hash, not one per run's worktree folders)
    varied.hash = workflow.hash or hashlib.sha256(workflow.dumps().encode()).hexdigest()
    return varied, made


def read_changes(
    worktrees: Mapping[str, Worktree], machine: Machine | None = None
) -> tuple[dict[str, Changes], str | None]:
    """Each worktree's changes against its base (on ``machine``, None: here); and why one
    could not be read, if so."""
    machine = machine or LocalMachine()
    changes: dict[str, Changes] = {}
    problem = None
    for tile, plan in worktrees.items():
        try:
            changes[tile] = changes_since(machine, plan.path, plan.base)
        except MadohubError as exc:
            problem = f"the changes of tile {tile!r} could not be read: {exc}"
    return changes, problem


def read_diffs(worktrees: Mapping[str, Worktree], machine: Machine | None = None) -> dict[str, str]:
    """Each worktree's diff against its base (commits, edits and new files: its whole working
    tree, snapshotted without touching the index), cut at ``DIFF_MAX_CHARS``; a worktree
    whose diff cannot be read says why in its place (on ``machine``, None: here)."""
    machine = machine or LocalMachine()
    diffs: dict[str, str] = {}
    for tile, plan in worktrees.items():
        try:
            done = snapshot(machine, plan.path)
            if done is None:
                raise MadohubError(f"{plan.path} is not a git working tree")
            diff = run_git(machine, f"git diff --no-color {plan.base} {done[0]} --", plan.path)
            text = diff.stdout.decode("utf-8", "replace")
        except MadohubError as exc:
            text = f"[the diff could not be read: {exc}]"
        if len(text) > DIFF_MAX_CHARS:
            text = text[:DIFF_MAX_CHARS] + f"\n[... cut at {DIFF_MAX_CHARS} characters]\n"
        diffs[tile] = text
    return diffs


def drop_run_worktrees(worktrees: Mapping[str, Worktree], machine: Machine | None = None) -> None:
    """Remove the worktrees and their branches, whatever they hold (on ``machine``, None: here)."""
    machine = machine or LocalMachine()
    for plan in worktrees.values():
        drop_worktree(machine, plan)


def keeps(keep: bool | str, failed: bool) -> bool:
    """Whether a run's worktrees stay after it (``keep_worktrees``)."""
    return keep is True or (keep == "failed" and failed)


def totals(changes: Mapping[str, Changes]) -> dict[str, Any]:
    """The row's diff summary: files changed, lines added and removed over every worktree."""
    if not changes:
        return {"files_changed": None, "lines_added": None, "lines_removed": None}
    return {
        "files_changed": sum(c.files_changed for c in changes.values()),
        "lines_added": sum(c.lines_added for c in changes.values()),
        "lines_removed": sum(c.lines_removed for c in changes.values()),
    }
