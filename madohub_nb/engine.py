"""The asyncio engine: which loop routing runs on, and the hub's event bus.

Inside Jupyter the engine uses the kernel's running loop, so widgets and
routes share one thread with the cells and nothing needs locking. In a plain
script or a test, where no loop runs, it starts its own loop in a daemon
thread. Either way the public API only *schedules* work and returns at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import MadohubError

log = logging.getLogger("madohub_nb")
T = TypeVar("T")


@dataclass(frozen=True)
class HubEvent:
    """Something widgets and listeners may want to redraw for.

    kinds: ``tile_output`` (name), ``tile_state`` (name, state), ``tile_added`` (name),
    ``route_state`` (route id, state), ``route_added`` (route id), ``round`` (record),
    ``turn_skipped`` (route id, why: ``already routed``, ``not new``, ``no answer``, ``paused``).
    """

    kind: str
    name: str = ""
    state: str = ""
    data: Any = field(default=None, compare=False)


class EventBus:
    """Synchronous fan-out of :class:`HubEvent` to subscribers, on the engine loop."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[HubEvent], None]] = []

    def subscribe(self, callback: Callable[[HubEvent], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def emit(self, event: HubEvent) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # a broken listener must not break routing
                log.exception("madohub_nb event listener failed on %s", event.kind)


class HubFuture(concurrent.futures.Future[T]):
    """A Future for work on the engine loop; awaitable in a notebook cell.

    Blocking on it with ``result()`` from the loop's own thread (a Jupyter
    cell) would freeze the kernel forever, so that raises a teaching error.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self._engine = engine

    def result(self, timeout: float | None = None) -> T:
        if not self.done() and self._engine.in_loop_thread:
            raise MadohubError(
                "waiting with .result() here would block the notebook's event loop; "
                "use `await` on it instead (e.g. `rec = await hub.send(...)`), or just let it run"
            )
        return super().result(timeout)

    def __await__(self) -> Any:
        return asyncio.wrap_future(self).__await__()


class Engine:
    """Owns (or borrows) the event loop that every watcher and route task runs on."""

    def __init__(self) -> None:
        try:
            self.loop = asyncio.get_running_loop()
            self.owns_loop = False
            self._thread: threading.Thread | None = None
        except RuntimeError:
            self.loop = asyncio.new_event_loop()
            self.owns_loop = True
            ready = threading.Event()
            self._thread = threading.Thread(
                target=self._run_loop, args=(ready,), name="madohub-engine", daemon=True
            )
            self._thread.start()
            ready.wait()
        self.closed = False

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    @property
    def in_loop_thread(self) -> bool:
        """True when the caller runs on the engine loop's thread (a Jupyter cell, a callback)."""
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return self._thread is None or threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> HubFuture[T]:
        """Schedule ``coro`` on the engine loop from any thread; returns a Future at once."""
        if self.closed:
            coro.close()
            raise MadohubError(
                "the hub is closed; make a new one with madohub_nb.Hub() or get_hub()"
            )
        outer: HubFuture[T] = HubFuture(self)
        inner = asyncio.run_coroutine_threadsafe(coro, self.loop)

        def copy(done: concurrent.futures.Future[T]) -> None:
            if done.cancelled():
                outer.cancel()
            elif (exc := done.exception()) is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(done.result())

        inner.add_done_callback(copy)
        outer.add_done_callback(lambda f: inner.cancel() if f.cancelled() else None)
        return outer

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the engine loop (thread-safe)."""
        if not self.closed:
            self.loop.call_soon_threadsafe(fn, *args)

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` to completion and return its result, from a thread that is not the loop's."""
        if self.in_loop_thread and not self.owns_loop:
            coro.close()
            raise MadohubError(
                "this call would block the notebook's event loop; use the async variant "
                "(e.g. `await hub.replay_async(...)`) in a cell instead"
            )
        if self.in_loop_thread:
            coro.close()
            raise MadohubError("run_sync called from the engine thread itself")
        return self.submit(coro).result(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the loop thread we own (a borrowed kernel loop is left running)."""
        if self.closed:
            return
        self.closed = True
        if self.owns_loop and self._thread is not None:

            async def _cancel_all() -> None:
                me = asyncio.current_task()
                tasks = [t for t in asyncio.all_tasks(self.loop) if t is not me]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(timeout_s)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self.loop.close()
