"""The engine borrows a running loop (Jupyter) or runs its own thread (scripts)."""

from __future__ import annotations

import asyncio

import pytest

from madohub_nb.engine import Engine, EventBus, HubEvent
from madohub_nb.errors import MadohubError


async def _double(x: int) -> int:
    await asyncio.sleep(0.01)
    return 2 * x


def test_without_a_running_loop_the_engine_runs_its_own_thread() -> None:
    engine = Engine()
    try:
        assert engine.owns_loop
        assert not engine.in_loop_thread
        assert engine.submit(_double(21)).result(5) == 42
        assert engine.run_sync(_double(2), 5) == 4
    finally:
        engine.close()
    with pytest.raises(MadohubError, match="closed"):
        engine.submit(_double(1))


def test_inside_a_running_loop_the_engine_borrows_it_and_never_blocks_it() -> None:
    async def main() -> None:
        engine = Engine()
        assert not engine.owns_loop
        assert engine.loop is asyncio.get_running_loop()
        fut = engine.submit(_double(5))
        with pytest.raises(MadohubError, match="block the notebook's event loop"):
            fut.result()
        assert await fut == 10
        with pytest.raises(MadohubError, match="await"):
            engine.run_sync(_double(1))
        engine.close()

    asyncio.run(main())


def test_a_failing_listener_does_not_stop_the_others() -> None:
    bus = EventBus()
    seen: list[str] = []

    def broken(event: HubEvent) -> None:
        raise RuntimeError("listener bug")

    bus.subscribe(broken)
    unsubscribe = bus.subscribe(lambda e: seen.append(e.kind))
    bus.emit(HubEvent("round"))
    unsubscribe()
    bus.emit(HubEvent("round"))
    assert seen == ["round"]
