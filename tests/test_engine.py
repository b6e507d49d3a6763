"""The engine always runs its own loop in a thread of its own, in Jupyter and scripts alike."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from madohub_nb.engine import Engine, EventBus, aside, side_by_side, spawn
from madohub_nb.errors import MadohubError
from madohub_nb.pipeline.events import HubEvent, RoundLogged, TileOutput


async def _double(x: int) -> int:
    await asyncio.sleep(0.01)
    return 2 * x


def test_without_a_running_loop_the_engine_runs_its_own_thread() -> None:
    engine = Engine()
    try:
        assert engine.thread is not threading.current_thread()
        assert not engine.in_loop_thread
        assert engine.submit(_double(21)).result(5) == 42
        assert engine.run_sync(_double(2), 5) == 4
    finally:
        engine.close()
    with pytest.raises(MadohubError, match="closed"):
        engine.submit(_double(1))


def test_inside_a_running_loop_the_engine_still_runs_its_own_thread() -> None:
    """Jupyter's kernel runs a loop: the engine must not borrow it (a blocking cell would
    freeze routing); futures resolve with .result() or await from the kernel's side."""

    async def main() -> None:
        engine = Engine()
        try:
            assert engine.loop is not asyncio.get_running_loop()
            assert not engine.in_loop_thread
            assert engine.submit(_double(5)).result(5) == 10
            assert await engine.submit(_double(6)) == 12
        finally:
            engine.close()

    asyncio.run(main())


def test_work_on_the_engine_goes_on_while_the_calling_thread_blocks() -> None:
    engine = Engine()
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(10):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    try:
        fut = engine.submit(ticker())
        started = time.monotonic()
        time.sleep(0.5)  # a cell that blocks the kernel thread
        assert len(ticks) == 10 and ticks[-1] < started + 0.5
        fut.result(1)
    finally:
        engine.close()


def test_result_on_the_engine_thread_itself_raises_instead_of_hanging() -> None:
    engine = Engine()
    try:
        inner = engine.submit(asyncio.sleep(2, result=1))

        async def wait_inside() -> str:
            try:
                inner.result()
            except MadohubError as exc:
                return str(exc)
            return "no error"

        assert "engine's own thread" in engine.submit(wait_inside()).result(5)
        with pytest.raises(MadohubError, match="engine thread itself"):
            asyncio.run(_call_run_sync_inside(engine))
    finally:
        engine.close()


async def _call_run_sync_inside(engine: Engine) -> None:
    async def inner() -> None:
        engine.run_sync(_double(1))

    await engine.submit(inner())


def test_close_from_another_thread_ends_the_engine_thread() -> None:
    engine = Engine()
    engine.submit(asyncio.sleep(60))
    closer = threading.Thread(target=engine.close)
    closer.start()
    closer.join(5)
    engine.thread.join(3)
    assert not engine.thread.is_alive()


def test_a_failing_listener_does_not_stop_the_others() -> None:
    bus = EventBus()
    seen: list[str] = []

    def broken(event: HubEvent) -> None:
        raise RuntimeError("listener bug")

    bus.subscribe(broken)
    unsubscribe = bus.subscribe(lambda e: seen.append(e.kind))
    bus.emit(TileOutput("t", 3))
    unsubscribe()
    bus.emit(TileOutput("t", 3))
    assert seen == ["tile_output"]


def test_each_event_kind_is_a_type_that_keeps_its_old_kind_string() -> None:
    """Listeners match events by type; ``kind`` still says the string they were told apart
    by before (``hub.events`` listeners written against it keep working)."""
    import typing

    from madohub_nb.model import EventKind

    kinds = {cls.kind for cls in typing.get_args(HubEvent)}
    assert kinds == set(typing.get_args(EventKind))
    assert RoundLogged.kind == "round" and TileOutput("t", 3).kind == "tile_output"


def test_many_threads_calling_the_hub_at_once_never_corrupt_it(
    tmux_socket: str, home: Path, tmp_path: Path
) -> None:
    """tile, connect, send, pause and close from several threads at once."""
    import madohub_nb as mh

    hub = mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "l.sqlite3", idle_delay_ms=300)
    errors: list[BaseException] = []
    sent: list[Any] = []
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        try:
            barrier.wait()
            names = [f"t{n}x{k}" for k in range(3)]
            for name in names:
                hub.tile(name, agent="shell", command="bash --norc --noprofile")
            route = hub.connect(names[0], names[1], dispatch="shadow", cooldown_ms=1000)
            hub.connect(names[1], names[2], dispatch="shadow", cooldown_ms=1000)
            route.pause()
            route.resume()
            sent.append(hub.send(names[2], f"echo worker-{n}", allow_shell=True))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        assert len(hub.tiles) == 12
        assert len({t.pane_id for t in hub.tiles.values()}) == 12
        assert len({r.id for r in hub.routes}) == len(hub.routes) == 8
        assert all(r.state == "active" for r in hub.routes)
        assert sorted(f.result(60).status for f in sent) == ["delivered"] * 4
        screens = "\n".join(hub.tiles[f"t{n}x2"].screen() for n in range(4))
        assert all(f"worker-{n}" in screens for n in range(4))
    finally:
        late: list[BaseException] = []

        def keep_calling() -> None:  # calls racing close() fail cleanly or succeed
            for i in range(50):
                try:
                    hub.tile(f"late{i}", agent="shell", command="bash --norc --noprofile")
                except MadohubError:
                    pass
                except BaseException as exc:  # noqa: BLE001
                    late.append(exc)

        racer = threading.Thread(target=keep_calling)
        racer.start()
        closer = threading.Thread(target=hub.close)
        started = time.monotonic()
        closer.start()
        closer.join(30)
        took = time.monotonic() - started
        racer.join(30)
    assert not closer.is_alive(), f"close() hung ({took:.1f} s)"
    assert late == []
    hub.engine.thread.join(5)
    assert not hub.engine.thread.is_alive()
    assert all(r.state == "stopped" for r in hub.routes)
    assert not hub.runtime.tmux.has_session(hub.session_name)


def test_the_engine_owns_every_task_and_cancels_one_owners_alone() -> None:
    """A task spawned for an owner, the tasks it makes (at any depth) and the tasks a
    call_soon for that owner makes all belong to it; cancelling it leaves the others."""
    engine = Engine()
    try:
        started = threading.Event()

        async def child() -> None:
            await asyncio.sleep(60)

        async def parent() -> None:
            asyncio.get_running_loop().create_task(child())  # made deep inside, not spawned
            started.set()
            await asyncio.sleep(60)

        def start_later() -> None:
            asyncio.get_running_loop().create_task(child())

        async def setup() -> None:
            engine.spawn(parent(), owner="a")
            engine.spawn(child(), owner="b")

        engine.run_sync(setup(), 5)
        engine.call_soon(start_later, owner="a")
        assert started.wait(5)

        async def counts() -> tuple[int, int]:
            await asyncio.sleep(0.05)
            return len(engine.tasks_of("a")), len(engine.tasks_of("b"))

        assert engine.run_sync(counts(), 5) == (3, 1)
        engine.run_sync(engine.cancel("a"), 5)
        assert engine.run_sync(counts(), 5) == (0, 1)
    finally:
        engine.close()


def test_spawn_from_any_module_makes_a_named_task_of_the_callers_owner_or_one_named() -> None:
    """``madohub_nb.engine.spawn`` (what io/ and pipeline/ call) makes the task through the
    running loop's engine: named, and of the caller's owner unless one is named."""
    engine = Engine()
    try:

        async def nap() -> None:
            await asyncio.sleep(60)

        async def parent() -> tuple[str, str]:
            inherited = spawn(nap(), name="inherited")
            own = spawn(nap(), name="own", owner="b")
            return inherited.get_name(), own.get_name()

        async def setup() -> tuple[str, str]:
            return await engine.spawn(parent(), owner="a")

        assert engine.run_sync(setup(), 5) == ("inherited", "own")
        names = engine.run_sync(_names_of(engine, "a", "b"), 5)
        assert names == ({"inherited"}, {"own"})
        engine.run_sync(engine.cancel("a"), 5)
        assert engine.run_sync(_names_of(engine, "a", "b"), 5) == (set(), {"own"})
    finally:
        engine.close()


async def _names_of(engine: Engine, *owners: str) -> tuple[set[str], ...]:
    await asyncio.sleep(0.05)
    return tuple({t.get_name() for t in engine.tasks_of(o)} for o in owners)


def test_spawn_on_a_loop_no_engine_runs_is_a_plain_task() -> None:
    async def main() -> str:
        task = spawn(asyncio.sleep(0, "done"), name="plain")
        return f"{task.get_name()} {await task}"

    assert asyncio.run(main()) == "plain done"


def test_a_step_aside_says_it_ended_even_when_it_fails_and_side_by_side_waits_for_all() -> None:
    def fails() -> None:
        raise OSError("host gone")

    assert aside(fails, name="failing step").wait(5)
    ended: list[int] = []
    started = time.monotonic()
    side_by_side(((lambda n: (time.sleep(0.3), ended.append(n)), (n,)) for n in range(3)), name="t")
    took_s = time.monotonic() - started
    assert sorted(ended) == [0, 1, 2] and took_s < 0.8, took_s  # side by side, not in turn
