"""The tiles' git worktrees: each made on a branch of its own before its pane starts, and
at close removed when nothing changed there, else kept and named in the close summary.

The branches in use are kept in a dict that is copied on write; a lock makes the check
and the making of a worktree one step, so two tiles never race for one branch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Iterable

from .errors import MadohubError, MadohubValueError
from .io.git import Worktree, WorktreeEnd, drop_worktree, end_worktree, make_worktree, plan_worktree
from .io.machine import Machine
from .pipeline.tile import Tile

log = logging.getLogger("madohub_nb")


class TileWorktrees:
    """The worktrees of one hub's tiles, and what close did with each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        """Held while a worktree is checked and made: two tiles never race for one branch."""
        self._branches: dict[tuple[str | None, str, str], str] = {}
        """(host, repository, branch) → the tile whose worktree is on it."""
        self.ends: list[WorktreeEnd] = []
        """What close() did with each tile's worktree (removed, or kept with its changes)."""

    def make(self, machine: Machine, name: str, workdir: str | None, branch: str) -> Worktree:
        """A new git worktree of ``workdir``'s repository on a new ``branch``, every check
        first (see :func:`~madohub_nb.io.git.plan_worktree`); none is made when one fails."""
        folder = workdir or (os.getcwd() if machine.name is None else "~")
        with self._lock:
            plan = plan_worktree(machine, folder, name, branch)
            key = (machine.name, plan.repository, plan.branch)
            other = self._branches.get(key)
            if other is not None:
                raise MadohubValueError(
                    f"tile {other!r} already works on branch {branch!r} of {plan.repository}; "
                    "each worktree tile needs a branch of its own: name another one"
                )
            make_worktree(machine, plan)
            self._branches = {**self._branches, key: name}
        return plan

    def end_failed(self, old: Tile | None) -> None:
        """A tile whose command failed at start-up is made again: its worktree goes first
        when nothing changed there (its branch is free again), else it stays, kept."""
        if old is None or old.error is None or old.git_worktree is None:
            return
        done = end_worktree(old.machine, old.name, old.git_worktree)
        if not done.kept:
            self.forget(old.machine, old.git_worktree, drop=False)
            old.git_worktree = None
        else:
            self.ends = [*self.ends, done]

    def forget(self, machine: Machine, worktree: Worktree, drop: bool) -> None:
        """Free the worktree's branch; with ``drop``, remove the worktree too."""
        with self._lock:
            key = (machine.name, worktree.repository, worktree.branch)
            self._branches = {k: v for k, v in self._branches.items() if k != key}
        if drop:
            drop_worktree(machine, worktree)

    async def end_all(self, tiles: Iterable[Tile]) -> None:
        """End the worktree tiles' panes, then remove each worktree without changes and keep
        (and name) each with changes; before the host links close (git runs over them)."""
        ours = [t for t in tiles if t.git_worktree is not None and t.created]

        def end(tile: Tile) -> WorktreeEnd:
            assert tile.git_worktree is not None
            with contextlib.suppress(MadohubError):
                tile.tmux.kill_pane(tile.pane_id)  # (its agent writes nothing more)
            done = end_worktree(tile.machine, tile.name, tile.git_worktree)
            if not done.kept:
                self.forget(tile.machine, tile.git_worktree, drop=False)
            (log.warning if done.kept else log.info)("worktree %s", done)
            return done

        ends = await asyncio.gather(
            *(asyncio.to_thread(end, t) for t in ours if t.machine.reachable),
            return_exceptions=True,
        )
        unreachable = [
            WorktreeEnd(
                t.name, t.git_worktree, True, f"not checked: host {t.machine.name!r} is unreachable"
            )  # fmt: skip
            for t in ours
            if not t.machine.reachable and t.git_worktree is not None
        ]
        made = [e for e in ends if isinstance(e, WorktreeEnd)]
        self.ends = [*self.ends, *made, *unreachable]
