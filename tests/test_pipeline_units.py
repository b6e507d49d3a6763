"""Rounds and routes without tmux: they only see the narrow services protocols.

A small in-memory implementation of ``RouteServices`` stands in for the hub's
runtime (it is our own protocol, not tmux or the filesystem), so what a round
logs and how a route changes state is checked exhaustively and fast.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from madohub_nb.defaults import PRICES_USD_PER_MTOK
from madohub_nb.errors import LogError, MadohubValueError
from madohub_nb.io.log import RoundRecord
from madohub_nb.io.machine import LocalMachine
from madohub_nb.io.tmux import Tmux
from madohub_nb.io.transcripts import Extraction
from madohub_nb.io.watch import PaneStream
from madohub_nb.pipeline.deliver import Deliverer
from madohub_nb.pipeline.events import HubEvent, RouteStateChanged
from madohub_nb.pipeline.round import RoundPlan, dispatch_named, hand_send_plan, run_round
from madohub_nb.pipeline.route import Route, make_route
from madohub_nb.pipeline.tile import Tile
from madohub_nb.pipeline.transforms import AIClientConfig, make_transform_spec


class Services:
    """Records what the pipeline asks of the hub; no tmux, no files, no threads."""

    session_id = "unit"
    prices = PRICES_USD_PER_MTOK

    def __init__(self, writable: bool = True) -> None:
        self.deliverer = Deliverer()
        self.records: list[RoundRecord] = []
        self.recorded_now: list[RoundRecord] = []
        self.events: list[HubEvent] = []
        self.unwritable: list[LogError] = []
        self.writable = writable
        self.idle_delay_ms = 1000

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        return AIClientConfig(api_key=None)

    def ensure_writable(self) -> None:
        if not self.writable:
            raise LogError("the disk is full")

    def log_unwritable(self, exc: LogError) -> None:
        self.unwritable.append(exc)

    async def record(self, rec: RoundRecord) -> RoundRecord:
        self.records.append(rec)
        return rec

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        self.recorded_now.append(rec)
        return rec

    async def watch(self, tile: Tile) -> PaneStream:
        return PaneStream(tile.pane_id, tile.session)

    def emit(self, event: HubEvent) -> None:
        self.events.append(event)

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        fn(*args)


def _tile(name: str, agent: str = "claude") -> Tile:
    """A Tile object for pane %99 of a tmux server that is never started."""
    machine = LocalMachine(Tmux("mh-never-started"))
    return Tile(name, "%99", agent, machine, session="s", created=False)


def _plan(**changes: Any) -> RoundPlan:
    base: dict[str, Any] = dict(
        route_id="w->r#1", source="w", target=None, round=2, max_rounds=5, trigger="on-idle",
        spec=make_transform_spec("prompt-wrap", "R{round}/{maxRounds} {source}->{target}: {output}"),
        dispatch="shadow", delivery="typed", extraction=Extraction("the answer", "jsonl", None),
        meta={"target": "r"},
    )  # fmt: skip
    base.update(changes)
    base["dispatch"] = dispatch_named(base["dispatch"])
    return RoundPlan(**base)


def _run(services: Services, plan: RoundPlan) -> RoundRecord:
    return asyncio.run(run_round(services, plan))


def test_a_shadow_round_is_logged_with_the_prompt_it_would_have_typed() -> None:
    services = Services()
    rec = _run(services, _plan())
    assert services.records == [rec]
    assert (rec.status, rec.prompt, rec.error) == ("shadow", "R2/5 w->r: the answer", None)
    assert (rec.session_id, rec.extraction_method, rec.target) == ("unit", "jsonl", "r")
    assert rec.transform_ms is not None and rec.delivered_at is None


def test_the_stop_keyword_stops_before_any_transform() -> None:
    rec = _run(Services(), _plan(stop_keyword="answer"))
    assert (rec.status, rec.prompt) == ("stopped", None)
    assert "stop keyword 'answer'" in (rec.error or "")


def test_an_exhausted_round_records_the_last_answer_and_types_nothing() -> None:
    rec = _run(Services(), _plan(exhausted=True, dispatch="madoagent"))
    assert (rec.status, rec.extracted, rec.prompt) == ("exhausted", "the answer", None)


def test_nothing_extracted_is_an_error_row_not_an_exception() -> None:
    rec = _run(Services(), _plan(extraction=None))
    assert rec.status == "error" and "nothing was extracted" in (rec.error or "")


def test_a_target_outside_the_hub_is_an_error_row() -> None:
    rec = _run(Services(), _plan(dispatch="madoagent"))
    assert rec.status == "error" and "not a tile of this hub" in (rec.error or "")


def test_a_cancelled_round_is_still_recorded_at_once() -> None:
    """The hub closes while a round waits on the API: one row, recorded without waiting."""
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        services = Services()
        base_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        services.ai_config = lambda model=None: AIClientConfig(  # type: ignore[method-assign]
            api_key="sk-ant-unit-test-key-0000", base_url=base_url, max_retries=0
        )

        async def cancel_midway() -> None:
            task = asyncio.create_task(
                run_round(services, _plan(spec=make_transform_spec("ai-routing")))
            )
            await asyncio.sleep(0.3)  # the request is sent and waits for an answer
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_midway())
    assert services.records == []
    (rec,) = services.recorded_now
    assert rec.status == "error" and "cancelled" in (rec.error or "")


def test_hand_send_plans_check_the_text_and_the_shell_opt_in() -> None:
    plan = hand_send_plan(_tile("r"), "hello", delivery="typed", allow_shell=False)
    assert (plan.route_id, plan.round, plan.prompt, plan.spec) == ("send", 0, "hello", None)
    with pytest.raises(MadohubValueError, match="non-empty"):
        hand_send_plan(_tile("r"), "  ", delivery="typed", allow_shell=False)
    with pytest.raises(MadohubValueError, match="allow_shell=True"):
        hand_send_plan(_tile("sh", "shell"), "ls", delivery="typed", allow_shell=False)
    with pytest.raises(MadohubValueError, match="unknown delivery 'fax'"):
        hand_send_plan(_tile("r"), "hi", delivery="fax", allow_shell=False)


def _route(services: Services, **changes: Any) -> Route:
    options: dict[str, Any] = dict(
        trigger="on-idle", transform="prompt-wrap", template=None, max_rounds=3,
        cooldown_ms=1000, stop_keyword=None, dispatch="madoagent", pattern=None,
        allow_shell=False, delivery="typed", model=None, api_key=None,
    )  # fmt: skip
    options.update(changes)
    return make_route(services, 7, _tile("w"), _tile("r"), **options)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(trigger="sometimes"), "unknown trigger 'sometimes'"),
        (dict(trigger="on-keyword"), "needs pattern="),
        (dict(max_rounds=21), "max_rounds must be from 1 to 20"),
        (dict(cooldown_ms=10), "cooldown_ms must be from 1000 to 30000"),
        (dict(dispatch="carrier"), "unknown dispatch 'carrier'"),
        (dict(transform="ai-routing"), "API key"),
        (dict(transform="fancy"), "unknown transform 'fancy'"),
        (dict(delivery="fax"), "unknown delivery 'fax'"),
    ],
)
def test_make_route_checks_every_option_with_a_teaching_error(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(MadohubValueError, match=message):
        _route(Services(), **change)


def test_make_route_names_the_route_and_refuses_a_shell_or_itself() -> None:
    services = Services()
    route = _route(services)
    assert route.id == "w->r#7"
    assert (route.trigger, route.transform, route.dispatch) == (
        "on-idle",
        "prompt-wrap",
        "madoagent",
    )
    shell = _tile("sh", "shell")
    with pytest.raises(MadohubValueError, match="allow_shell=True"):
        make_route(services, 1, _tile("w"), shell, **{**_route_options(), "allow_shell": False})
    same = _tile("w")
    with pytest.raises(MadohubValueError, match="to itself"):
        make_route(services, 1, same, same, **_route_options())


def _route_options() -> dict[str, Any]:
    return dict(
        trigger="on-idle", transform="prompt-wrap", template=None, max_rounds=3,
        cooldown_ms=1000, stop_keyword=None, dispatch="madoagent", pattern=None,
        allow_shell=False, delivery="typed", model=None, api_key=None,
    )  # fmt: skip


def test_route_states_move_as_documented_and_each_change_is_an_event() -> None:
    services = Services()
    route = _route(services)
    assert route.state == "active"
    route.resume()  # not paused: nothing happens
    route.pause()
    route.pause()
    route.resume()
    route.stop()
    route.resume()  # stopped is final
    route.pause()
    assert route.state == "stopped"
    assert [(type(e), e.state) for e in services.events] == [
        (RouteStateChanged, "paused"),
        (RouteStateChanged, "active"),
        (RouteStateChanged, "stopped"),
    ]
    ended = _route(services)
    ended.end()  # the hub closes
    assert ended.state == "stopped"
