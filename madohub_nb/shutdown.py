"""A hub's close, from any thread, bounded in time; and at the interpreter's exit.

:class:`Shutdown` holds the one closed state and runs the close: it marks the hub
closed, ends the routes, runs the runtime's ordered ``stop`` of its parts on the engine
(within :data:`SHUTDOWN_TIMEOUT_S`; on the engine thread itself it finishes after the
caller), then says what became of each worktree (:class:`CloseSummary`) and ends the
engine thread and the recorder.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .engine import aside
from .io.git import WorktreeEnd

if TYPE_CHECKING:
    from .engine import Engine
    from .io.tmux import Tmux
    from .recorder import RoundRecorder
    from .route_registry import RouteRegistry
    from .tile_registry import TileRegistry

SHUTDOWN_TIMEOUT_S = 1.5
"""``close()`` ends routes, watchers and the engine thread within about this long."""

KILL_WAIT_S = 1.0
"""How long a close that ran out of time waits for tmux to kill the hub's session."""


@dataclass(frozen=True)
class CloseSummary:
    """What ``hub.close()`` left behind: the worktrees it kept (they hold changes) and the
    ones it removed (nothing changed there)."""

    worktrees_kept: tuple[WorktreeEnd, ...] = ()
    worktrees_removed: tuple[WorktreeEnd, ...] = ()

    def __str__(self) -> str:
        ends = (*self.worktrees_kept, *self.worktrees_removed)
        return "\n".join(str(e) for e in ends) or "closed; no worktree to keep or remove"


class Shutdown:
    """The close of one hub's runtime: its closed state, the sequence, the at-exit hook."""

    def __init__(
        self,
        *,
        engine: Engine,
        tmux: Tmux,
        session_name: str,
        tiles: TileRegistry,
        routes: RouteRegistry,
        recorder: RoundRecorder,
        stop: Callable[[], Coroutine[Any, Any, None]],
        keep_panes: Callable[[], bool],
    ) -> None:
        self._engine, self._tmux, self._session_name = engine, tmux, session_name
        self._tiles, self._routes, self._recorder = tiles, routes, recorder
        self._stop, self._keep_panes = stop, keep_panes
        self.closed = False
        """The one closed state: set first by ``close()``; no tile, route or round starts after."""
        self.summary: CloseSummary | None = None
        """Set once ``close()`` has ended the tiles (None before, or while it runs)."""
        self._atexit_registered = False
        self._close_lock = threading.Lock()

    def end_panes_at_exit(self) -> None:
        """Once per hub: the panes it made end with the interpreter (unless ``keep_panes``)."""
        if not self._atexit_registered:
            self._atexit_registered = True
            atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        # The whole close, not just kill-session: killing a session while its control-mode
        # client is torn down with the process made tmux 3.3a's server exit now and then,
        # taking adopted panes with it.
        if not self._keep_panes() and not self.closed:
            self._close()

    def close(self) -> CloseSummary | None:
        """Stop routes and watchers, kill created panes, end the engine thread; any thread,
        idempotent. What it kept and removed (None on the engine thread: it finishes after)."""
        with self._close_lock:
            if not self.closed:
                atexit.unregister(self._at_exit)
                self._close()
        return self.summary

    def _close(self) -> None:
        with self._tiles.spawn_lock:
            self.closed = True
        self._routes.end_all()
        if self._engine.in_loop_thread:
            task = self._engine.spawn(self._stop(), owner="shutdown")
            task.add_done_callback(lambda _: self._finish())
            return
        try:
            self._engine.run_sync(self._stop(), SHUTDOWN_TIMEOUT_S)
        except Exception:  # a dead tmux server or a stuck task: still end the thread below
            kill = (
                aside(self._tmux.kill_session, self._session_name, name="madohub kill session")
                if self._tiles.made_here
                else None
            )
            self._tiles.close_hosts_now()
            if kill is not None:
                # Not while the control client is torn down below: tmux 3.3a's server then
                # exits now and then, taking adopted panes with it (as _at_exit says).
                kill.wait(KILL_WAIT_S)
        self._finish()

    def _finish(self) -> None:
        ends = list(self._tiles.worktree_ends)
        seen = {e.tile for e in ends}
        ends += [  # (the shutdown ran out of time before it looked at them: they stay)
            WorktreeEnd(t.name, t.git_worktree, True, "not checked: close() ran out of time")
            for t in self._tiles.tiles.values()
            if t.git_worktree is not None and t.created and t.name not in seen
        ]
        self.summary = CloseSummary(
            tuple(e for e in ends if e.kept), tuple(e for e in ends if not e.kept)
        )
        self._engine.close(timeout_s=0.25)
        self._recorder.close()
