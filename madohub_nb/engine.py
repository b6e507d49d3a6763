"""The engine: an asyncio loop in a daemon thread of its own, the hub's event bus, and
the one place the package starts a task or a thread.

The loop never runs on the caller's thread, in Jupyter or in a script: a cell
that blocks (``time.sleep``, a long pandas job) never delays a round. Every
public call only *schedules* work here and returns at once; calls that take
time return a :class:`HubFuture`, which a cell can ``await`` or resolve with
``.result(timeout)`` from the kernel's thread. (An earlier version borrowed the
kernel's own loop; that froze routing whenever a cell blocked.)

Every task is made here, by :func:`spawn` (any module, on the loop) or
:meth:`Engine.spawn`, with an owner and a name; every blocking shutdown step that must not
hold ``close()`` up (a host that stopped answering, a locked log) runs by :func:`aside`
or :func:`side_by_side`, each waited on for a stated time (tests/test_architecture.py
checks that no other module calls ``create_task`` or starts a thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Final, Generic, TypeVar

from .errors import MadohubError

log = logging.getLogger("madohub_nb")
T = TypeVar("T")
E = TypeVar("E")

CLOSE_TIMEOUT_S = 2.0
"""How long closing waits for the loop's tasks to finish before it leaves them."""

_OWNER: contextvars.ContextVar[object] = contextvars.ContextVar("madohub_task_owner", default=None)
"""Who a task belongs to; a task a task makes inherits its owner (the context is copied)."""

INHERIT: Final = object()
"""``spawn(..., owner=INHERIT)``: the new task belongs to the owner of the code that spawns it."""

_ENGINES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Engine] = weakref.WeakKeyDictionary()
"""The engine of each loop an engine runs (for :func:`spawn`)."""


class EventBus(Generic[E]):
    """Synchronous fan-out of events to subscribers, on the engine thread."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[E], None]] = []

    def subscribe(self, callback: Callable[[E], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event; returns a function that unsubscribes."""
        self._subscribers = [*self._subscribers, callback]

        def unsubscribe() -> None:
            self._subscribers = [s for s in self._subscribers if s is not callback]

        return unsubscribe

    def emit(self, event: E) -> None:
        for callback in self._subscribers:
            try:
                callback(event)
            except Exception:  # a broken listener must not break routing
                kind = getattr(event, "kind", type(event).__name__)
                log.exception("madohub_nb event listener failed on %s", kind)


class HubFuture(concurrent.futures.Future[T]):
    """The result of work on the engine thread: ``await`` it, or ``.result(timeout)``.

    Blocking on it from the engine's own thread (a listener, a callback) would
    wait for itself forever, so that raises a teaching error.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self._engine = engine

    def result(self, timeout: float | None = None) -> T:
        if not self.done() and self._engine.in_loop_thread:
            raise MadohubError(
                "waiting with .result() on the engine's own thread would wait forever; "
                "add a callback with .add_done_callback(...) instead"
            )
        return super().result(timeout)

    def __await__(self) -> Any:
        return asyncio.wrap_future(self).__await__()


class Engine:
    """Owns the event loop that every watcher, route and round runs on, in its own thread.

    The engine owns every task on its loop: :meth:`spawn` gives a task an owner (a route,
    a tile, the hub), and every task that task makes, at any depth and in any module,
    belongs to the same owner (a task factory reads the owner from the context it
    inherits). :meth:`cancel` ends one owner's tasks; :meth:`close` ends the rest.
    """

    def __init__(self, name: str = "madohub-engine") -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(self._task_factory)
        _ENGINES[self.loop] = self
        self._owned: dict[object, set[asyncio.Task[Any]]] = {}
        self.closed = False
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(ready,), name=name, daemon=True
        )
        self._thread.start()
        ready.wait()

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    @property
    def in_loop_thread(self) -> bool:
        """True when the caller runs on the engine's thread (a task, a listener, a callback)."""
        return threading.current_thread() is self._thread

    # tasks and their owners ---------------------------------------------------------
    def _task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        owner = context.get(_OWNER) if context is not None else _OWNER.get()
        tasks = self._owned.setdefault(owner, set())
        tasks.add(task)
        task.add_done_callback(lambda done: self._forget(owner, tasks, done))
        return task

    def _forget(
        self, owner: object, tasks: set[asyncio.Task[Any]], done: asyncio.Task[Any]
    ) -> None:
        """A finished task leaves its owner; an owner with none left is forgotten (a route
        that ended must not be kept alive by the engine)."""
        tasks.discard(done)
        if not tasks and self._owned.get(owner) is tasks:
            del self._owned[owner]

    def spawn(
        self, coro: Coroutine[Any, Any, T], owner: object, name: str | None = None
    ) -> asyncio.Task[T]:
        """A task of ``owner`` running ``coro`` (engine thread only); ``owner=INHERIT``: of
        the owner of the code that calls (a route's task's tasks are the route's)."""
        context = contextvars.copy_context()
        if owner is not INHERIT:
            context.run(_OWNER.set, owner)
        return context.run(self.loop.create_task, coro, name=name)

    def tasks_of(self, owner: object) -> set[asyncio.Task[Any]]:
        """The unfinished tasks ``owner`` (and the tasks they made) runs now."""
        return {t for t in self._owned.get(owner, ()) if not t.done()}

    async def cancel(self, owner: object, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Cancel every task of ``owner`` and wait (up to ``timeout_s``) until they end."""
        me = asyncio.current_task()
        tasks = [t for t in self.tasks_of(owner) if t is not me]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)

    def submit(self, coro: Coroutine[Any, Any, T], owner: object = None) -> HubFuture[T]:
        """Schedule ``coro`` on the engine loop from any thread; returns a Future at once."""
        if self.closed:
            coro.close()
            raise MadohubError(
                "the hub is closed; make a new one with madohub_nb.Hub() or get_hub()"
            )
        outer: HubFuture[T] = HubFuture(self)

        def start() -> None:
            if outer.cancelled():
                coro.close()
                return
            task = self.spawn(coro, owner)
            task.add_done_callback(lambda t: _copy_task(t, outer))
            outer.add_done_callback(lambda f: self._cancel_soon(task) if f.cancelled() else None)

        try:
            self.loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop closed meanwhile
            coro.close()
            raise MadohubError(
                "the hub is closed; make a new one with madohub_nb.Hub() or get_hub()"
            ) from None
        return outer

    def _cancel_soon(self, task: asyncio.Task[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self.loop.call_soon_threadsafe(task.cancel)

    def call_soon(self, fn: Callable[..., object], *args: object, owner: object = None) -> None:
        """Run ``fn(*args)`` on the engine thread: now if already there, else soon (thread-safe).

        With ``owner``, the tasks ``fn`` makes belong to it (:meth:`cancel` ends them).
        """
        if self.closed:
            return
        context = contextvars.copy_context()
        if owner is not None:
            context.run(_OWNER.set, owner)
        if self.in_loop_thread:
            context.run(fn, *args)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(fn, *args, context=context)

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the engine and wait for its result (from any other thread)."""
        if self.in_loop_thread:
            coro.close()
            raise MadohubError("run_sync called from the engine thread itself; await it instead")
        return self.submit(coro).result(timeout_s)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Cancel what runs on the loop, stop it and end its thread (safe from any thread)."""
        if self.closed:
            return
        self.closed = True

        async def _cancel_all() -> None:
            me = asyncio.current_task()
            tasks = [t for owned in list(self._owned.values()) for t in owned if t is not me]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout_s)

        if self.in_loop_thread:
            task = self.spawn(_cancel_all(), INHERIT, name="engine close")
            task.add_done_callback(lambda _: self.loop.stop())
            return  # the thread ends by itself once the loop stops
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(timeout_s * 2)
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()


def _copy_task(task: asyncio.Task[T], into: concurrent.futures.Future[T]) -> None:
    """A finished task's outcome into a thread-safe future (unless that was cancelled)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled meanwhile
        if into.done():
            return
        if task.cancelled():
            into.cancel()
        elif (exc := task.exception()) is not None:
            into.set_exception(exc)
        else:
            into.set_result(task.result())


def spawn(coro: Coroutine[Any, Any, T], *, name: str, owner: object = INHERIT) -> asyncio.Task[T]:
    """A task running ``coro`` on the running loop, made by its engine (:meth:`Engine.spawn`):
    it belongs to ``owner``, by default to the owner of the code that spawns it, and
    :meth:`Engine.cancel` or the engine's close ends it. On a loop no engine runs (a test's
    ``asyncio.run``) it is a plain task of that loop."""
    loop = asyncio.get_running_loop()
    engine = _ENGINES.get(loop)
    if engine is None:
        return loop.create_task(coro, name=name)
    return engine.spawn(coro, owner, name)


def aside(fn: Callable[..., object], *args: object, name: str) -> threading.Event:
    """Run the blocking ``fn(*args)`` on a daemon thread of its own, for a step of the
    shutdown that must not hold ``close()`` up (a host that stopped answering, a log still
    locked): returns an event set once it returned (or raised), to wait on for as long as
    the caller's budget allows."""
    done = threading.Event()

    def run() -> None:
        try:
            fn(*args)
        except Exception:  # (said, as an unhandled thread error was; close goes on)
            log.exception("madohub_nb shutdown step %r failed", name)
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    return done


def side_by_side(
    calls: Iterable[tuple[Callable[..., object], tuple[object, ...]]], *, name: str
) -> None:
    """Run blocking shutdown steps each on a thread of its own, side by side (each may wait
    on its own host), and return once all have returned."""
    for done in [aside(fn, *args, name=f"{name} {i}") for i, (fn, args) in enumerate(calls)]:
        done.wait()
