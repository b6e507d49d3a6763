"""The hub as an MCP server: the SDK's own client calls list_agents, send and ask over
streamable HTTP on 127.0.0.1, against stand-in agents on a real tmux (issue 25)."""

from __future__ import annotations

import asyncio
import html
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx2
import pandas as pd
import psutil
import pytest
from conftest import log_rows, shell_tile, start_standin, user_prompts, wait_until
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import madohub_nb as mh
from madohub_nb.pipeline.tile import McpLimits

Call = tuple[bool, str]
"""(is_error, text) of one tool call."""


async def _session(url: str, token: str | None, work: Callable[[Any], Awaitable[Any]]) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await work(client)


async def _call(client: Any, tool: str, args: dict[str, Any]) -> Call:
    result = await client.call_tool(tool, args)
    return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)


def call(hub: mh.Hub, token: str | None, tool: str, **args: Any) -> Call:
    """One tool call of a new MCP session carrying ``token`` (None: no Authorization)."""
    return asyncio.run(_session(hub.mcp.url, token, lambda c: _call(c, tool, args)))


def mcp_rows(hub: mh.Hub) -> list[dict[str, Any]]:
    return [r for r in log_rows(hub) if str(r["route_id"]).startswith("mcp:")]


@pytest.fixture
def pair(hub: mh.Hub, project: Path) -> tuple[mh.Tile, mh.Tile]:
    """A lead and a reviewer (echo stand-ins); the lead holds a token reaching every agent."""
    hub.mcp_cooldown_ms = 1000
    lead = start_standin(hub, "lead", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project)
    hub.mcp.grant("lead")
    return lead, reviewer


def test_the_server_listens_on_loopback_only_and_ends_with_the_hub(hub: mh.Hub) -> None:
    url = urlparse(hub.mcp.url)
    assert (url.scheme, url.hostname, url.path) == ("http", "127.0.0.1", "/mcp")
    assert url.port is not None
    with socket.create_connection(("127.0.0.1", url.port), timeout=5):
        pass
    hub.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", url.port), timeout=2).close()


def test_list_agents_names_what_the_caller_may_reach(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile], project: Path
) -> None:
    start_standin(hub, "tester", cwd=project)
    shell_tile(hub, "sh")
    is_error, text = call(hub, hub.mcp.token("lead"), "list_agents")
    assert not is_error, text
    for name in ("reviewer", "tester"):
        assert f'"name": "{name}"' in text
    assert '"name": "lead"' not in text and '"name": "sh"' not in text  # not itself, no shell
    assert '"state": "idle"' in text and '"agent": "claude"' in text
    hub.mcp.grant("lead", ["tester"])
    is_error, text = call(hub, hub.mcp.token("lead"), "list_agents")
    assert not is_error and '"tester"' in text and '"reviewer"' not in text


def test_send_types_into_the_target_as_hub_send_does_and_logs_a_round(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    _, reviewer = pair
    assert call(hub, hub.mcp.token("lead"), "send", to="reviewer", text="please review") == (
        False,
        "delivered",
    )
    wait_until(lambda: user_prompts(reviewer) == ["please review"], 15, what="the prompt")
    (row,) = mcp_rows(hub)
    assert row["route_id"] == "mcp:lead->reviewer"
    assert (row["source"], row["target"], row["trigger"]) == ("lead", "reviewer", "mcp")
    assert (row["status"], row["prompt"], row["round"]) == ("delivered", "please review", 1)
    assert row["meta"]["tool"] == "send" and row["meta"]["submit_verified"]


def test_a_send_to_a_target_busy_in_its_own_turn_is_typed_once_its_turn_ends(
    hub: mh.Hub, project: Path
) -> None:
    """Queued as a route's round is: nothing is typed into a turn in progress."""
    hub.mcp_cooldown_ms = 1000
    start_standin(hub, "lead", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project, think_s=3.0)
    hub.mcp.grant("lead")
    hub.send("reviewer", "first task").result(30)
    wait_until(lambda: reviewer.state == "busy", 10, what="the reviewer busy in its turn")
    assert call(hub, hub.mcp.token("lead"), "send", to="reviewer", text="second task") == (
        False,
        "delivered",
    )
    assert reviewer.last_response() is not None  # its first turn had ended when it was typed
    wait_until(
        lambda: user_prompts(reviewer) == ["first task", "second task"], 15, what="both prompts"
    )
    (row,) = mcp_rows(hub)
    assert row["status"] == "delivered"
    assert row["delivered_at"] - row["fired_at"] >= pd.Timedelta(seconds=1.5)  # it waited


def test_ask_returns_the_targets_next_whole_answer(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    _, reviewer = pair
    is_error, text = call(
        hub, hub.mcp.token("lead"), "ask", to="reviewer", text="is it right?", timeout_s=60
    )
    assert (is_error, text) == (False, "Done: is it right?")
    assert user_prompts(reviewer) == ["is it right?"]
    wait_until(lambda: len(mcp_rows(hub)) == 2, 10, what="both rows")
    asked, answered = mcp_rows(hub)
    assert asked["route_id"] == answered["route_id"] == "mcp:lead->reviewer"
    assert (asked["source"], asked["prompt"], asked["status"]) == (
        "lead",
        "is it right?",
        "delivered",
    )
    assert (answered["source"], answered["target"]) == ("reviewer", "lead")
    assert answered["extracted"] == "Done: is it right?"
    assert answered["extraction_method"] in ("hook", "jsonl")
    assert answered["turn_signal"] in ("hook", "status", "transcript")
    assert answered["meta"]["answer_to"] == asked["round_id"]


INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}  # fmt: skip
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _initialize(http: Any, url: str, token: str | None) -> Any:
    """One raw ``initialize`` POST (a new session), as any HTTP client can send it."""
    headers = dict(MCP_HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return await http.post(url, json=INITIALIZE, headers=headers)


def _messages(exc: BaseException) -> str:
    """Every message of ``exc`` and the exceptions grouped in it."""
    return " | ".join([str(exc), *(_messages(e) for e in getattr(exc, "exceptions", ()))])


def test_requests_without_a_good_token_get_401_and_open_no_session(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    """Refused at the transport, before the SDK makes a session: no token, a token the hub
    did not give, one that ended; the SDK's own client fails to connect and types nothing."""
    _, reviewer = pair
    url, old = hub.mcp.url, hub.mcp.token("lead")
    hub.mcp.grant("lead")  # a new token: the old one ends

    async def raw() -> list[Any]:
        async with httpx2.AsyncClient(timeout=30) as http:
            return [await _initialize(http, url, t) for t in (None, "not-a-token", old)]

    for response, says in zip(
        asyncio.run(raw()),
        ["carries no bearer token", "not one this hub gave", "not one"],
        strict=True,
    ):
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "mcp-session-id" not in response.headers
        assert says in response.json()["error"]["message"]
    for token, says in [(None, "no bearer token"), ("not-a-token", "not one this hub gave")]:
        with pytest.raises(Exception) as refused:  # noqa: PT011 (the SDK's error, in a group)
            call(hub, token, "send", to="reviewer", text="hello")
        assert says in _messages(refused.value)
    gate = hub.mcp.gate
    assert gate is not None and gate.refused >= 6
    assert user_prompts(reviewer) == [] and mcp_rows(hub) == []


def test_many_tokenless_clients_do_not_lock_the_token_holder_out(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    url, token = hub.mcp.url, hub.mcp.token("lead")

    async def crowd() -> tuple[list[int], float]:
        async with httpx2.AsyncClient(timeout=30) as http:
            codes = await asyncio.gather(
                *(_initialize(http, url, None if i % 2 else f"guess-{i}") for i in range(300))
            )
        started = time.monotonic()
        ok = await _session(url, token, lambda c: _call(c, "list_agents", {}))
        assert ok[0] is False and '"reviewer"' in ok[1]
        return [r.status_code for r in codes], time.monotonic() - started

    codes, took = asyncio.run(crowd())
    assert set(codes) == {401}
    assert took < 5, took


def test_a_token_keeps_at_most_its_session_cap_and_its_oldest_close(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    from madohub_nb.io.mcp import SESSIONS_PER_TOKEN

    url, token = hub.mcp.url, hub.mcp.token("lead")
    gate = hub.mcp.gate
    assert gate is not None

    async def open_many() -> tuple[list[str], list[int]]:
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = []
            for _ in range(SESSIONS_PER_TOKEN + 4):
                response = await _initialize(http, url, token)
                assert response.status_code == 200, response.text
                opened.append(response.headers["mcp-session-id"])
            headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            codes = []
            for session in opened:
                response = await http.post(
                    url, json=ping, headers={**headers, "mcp-session-id": session}
                )
                codes.append(response.status_code)
            return opened, codes

    opened, codes = asyncio.run(open_many())
    assert gate.sessions(token) == opened[4:]
    assert codes[:4] == [404] * 4  # the oldest were closed
    assert all(code < 400 for code in codes[4:]), codes
    assert call(hub, token, "list_agents")[0] is False  # a new session still opens


def test_bad_targets_and_texts_are_clear_tool_errors(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile], project: Path
) -> None:
    _, reviewer = pair
    shell_tile(hub, "sh")
    gone = start_standin(hub, "gone", cwd=project)
    hub.runtime.tmux.run("kill-pane", "-t", gone.pane_id)
    wait_until(lambda: gone.state == "exited", 15, what="gone exited")
    token = hub.mcp.token("lead")
    cases = [
        (
            dict(to="nobody", text="hi"),
            "there is no agent 'nobody'; you may reach ['gone', 'reviewer']",
        ),
        (dict(to="lead", text="hi"), "'lead' is you"),
        (dict(to="sh", text="rm -rf /"), "runs as a command"),
        (dict(to="gone", text="hi"), "'gone' has exited"),
        (dict(to="reviewer", text="  "), "'text' must be a non-empty string"),
        (dict(to="reviewer", text="x" * 100_001), "at most 100000 are typed"),
    ]
    for args, says in cases:
        is_error, text = call(hub, token, "send", **args)
        assert is_error and says in text, (args["to"], text)
    is_error, text = call(hub, token, "ask", to="reviewer", text="hi", timeout_s=0)
    assert is_error and "timeout_s must be a number of seconds > 0" in text
    assert user_prompts(reviewer) == []
    assert "$" in hub.tiles["sh"].screen() and "rm -rf" not in hub.tiles["sh"].screen()
    refused = mcp_rows(hub)
    assert len(refused) == len(cases) + 1
    assert all(r["status"] == "error" and r["error"].startswith("refused: ") for r in refused)


def test_a_named_shell_is_reached_only_with_allow_shell(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "lead", cwd=project)
    sh = shell_tile(hub, "sh")
    hub.mcp.grant("lead", ["sh"])
    is_error, text = call(hub, hub.mcp.token("lead"), "send", to="sh", text="echo mcp-$((6*7))")
    assert is_error and "allow_shell=True" in text
    hub.mcp.grant("lead", ["sh"], allow_shell=True)
    assert call(hub, hub.mcp.token("lead"), "send", to="sh", text="echo mcp-$((6*7))") == (
        False,
        "delivered",
    )
    wait_until(lambda: "mcp-42" in sh.screen(), 10, what="the command's output")


def test_loop_protection_ends_a_pair_at_max_rounds(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    _, reviewer = pair
    hub.mcp_max_rounds = 2
    token = hub.mcp.token("lead")
    started = time.monotonic()
    assert call(hub, token, "send", to="reviewer", text="one")[0] is False
    assert call(hub, token, "send", to="reviewer", text="two")[0] is False
    assert time.monotonic() - started >= 1.0  # the second waited for mcp_cooldown_ms
    is_error, text = call(hub, token, "send", to="reviewer", text="three")
    assert is_error and "mcp:lead->reviewer reached mcp_max_rounds=2" in text
    wait_until(lambda: user_prompts(reviewer) == ["one", "two"], 15, what="two prompts")
    hub.mcp.reset()
    wait_until(lambda: call(hub, token, "send", to="reviewer", text="four")[0] is False, 10)


def test_a_callers_own_limits_govern_its_pairs_and_others_keep_the_hubs(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    lead, reviewer = pair
    hub.mcp_max_rounds = 5
    assert hub.mcp.limits("lead") == McpLimits(5, 1000)  # the hub's settings
    assert hub.mcp.set_limits("lead", max_rounds=1, cooldown_ms=2500) == McpLimits(1, 2500)
    token, other = hub.mcp.token("lead"), hub.mcp.grant("reviewer")
    assert call(hub, token, "send", to="reviewer", text="one")[0] is False
    is_error, text = call(hub, token, "send", to="reviewer", text="two")
    assert is_error and "mcp:lead->reviewer reached mcp_max_rounds=1" in text
    assert hub.mcp.pair("mcp:lead->reviewer").state == "exhausted"
    started = time.monotonic()  # the reviewer follows the hub's settings: 5 rounds, 1 s apart
    for text in ("a", "b"):
        assert call(hub, other, "send", to="lead", text=text)[0] is False
    assert 1.0 <= time.monotonic() - started < 2.5
    assert hub.mcp.pair("mcp:reviewer->lead").max_rounds == 5
    hub.mcp.reset()
    hub.mcp.set_limits("lead", max_rounds=3)  # cooldown_ms None: the hub's again
    assert hub.mcp.limits("lead") == McpLimits(3, 1000)
    wait_until(lambda: call(hub, token, "send", to="reviewer", text="three")[0] is False, 10)
    wait_until(lambda: user_prompts(reviewer) == ["one", "three"], 15, what="two prompts")
    hub.mcp.set_limits("lead", cooldown_ms=2500)
    started = time.monotonic()
    assert call(hub, token, "send", to="reviewer", text="four")[0] is False
    assert time.monotonic() - started >= 2.0  # its own cooldown, not the hub's 1 s
    wait_until(lambda: user_prompts(lead) == ["a", "b"], 15, what="the reviewer's two sends")
    for bad, says in [
        (dict(max_rounds=0), "mcp_max_rounds must be from 1 to 20, got 0"),
        (dict(max_rounds="3"), "mcp_max_rounds must be a whole number from 1 to 20"),
        (dict(cooldown_ms=10), "mcp_cooldown_ms must be from 1000 to 30000 ms, got 10"),
        (dict(cooldown_ms=True), "mcp_cooldown_ms must be a whole number"),
    ]:
        with pytest.raises(ValueError, match=says):
            hub.mcp.set_limits("lead", **bad)  # type: ignore[arg-type]
    assert hub.mcp.limits("lead") == McpLimits(5, 2500)  # unchanged by the refused calls
    with pytest.raises(ValueError, match="no MCP tile named 'nobody'"):
        hub.mcp.set_limits("nobody", max_rounds=2)


def test_a_tiles_limits_come_from_hub_tile_and_round_trip_through_its_workflow(
    hub: mh.Hub, project: Path
) -> None:
    from madohub_nb.demo import standin_command

    start_standin(hub, "reviewer", cwd=project)
    lead = hub.tile(
        "lead", agent="claude", command=standin_command("claude"), cwd=project,
        mcp=["reviewer"], mcp_max_rounds=2, mcp_cooldown_ms=1500,
    )  # fmt: skip
    wait_until(lambda: lead.state == "idle", 15, what="lead idle")
    assert hub.mcp.limits("lead") == McpLimits(2, 1500)
    hub.mcp_max_rounds = 9  # the hub's setting does not change a tile's own limit
    assert hub.mcp.limits("lead").max_rounds == 2
    tiles = hub.workflow().tiles
    assert (tiles["lead"]["mcp_max_rounds"], tiles["lead"]["mcp_cooldown_ms"]) == (2, 1500)
    assert "mcp_max_rounds" not in tiles["reviewer"]
    text = hub.workflow().dumps()
    assert "mcp_max_rounds = 2" in text and "mcp_cooldown_ms = 1500" in text
    again = mh.Workflow.loads(text).tiles["lead"]
    assert (again["mcp_max_rounds"], again["mcp_cooldown_ms"]) == (2, 1500)
    with pytest.raises(ValueError, match="mcp_max_rounds"):
        mh.Workflow.loads(text.replace("mcp_max_rounds = 2", "mcp_max_rounds = 50"))


def test_a_tiles_mcp_limits_are_checked(hub: mh.Hub) -> None:
    for kwargs, says in [
        (dict(mcp=True, mcp_max_rounds=0), "mcp_max_rounds must be from 1 to 20, got 0"),
        (dict(mcp=True, mcp_max_rounds=2.5), "mcp_max_rounds must be a whole number"),
        (dict(mcp=True, mcp_cooldown_ms=999), "mcp_cooldown_ms must be from 1000 to 30000 ms"),
        (dict(mcp_max_rounds=3), "limit the MCP calls of a tile started with mcp="),
        (dict(mcp_cooldown_ms=2000), "give mcp=True"),
    ]:
        with pytest.raises(ValueError, match=says):
            hub.tile("a", agent="claude", command="claude", **kwargs)  # type: ignore[arg-type]
    assert hub.tiles == {} and hub.mcp.token("a") is None


def test_an_ask_that_would_wait_on_its_own_caller_is_refused_at_once(
    hub: mh.Hub, project: Path
) -> None:
    hub.mcp_cooldown_ms = 1000
    start_standin(hub, "lead", cwd=project)
    start_standin(hub, "reviewer", cwd=project, think_s=4)
    lead, reviewer = hub.mcp.grant("lead"), hub.mcp.grant("reviewer")
    url = hub.mcp.url

    async def both() -> tuple[Call, Call, float]:
        first = asyncio.ensure_future(
            _session(
                url, lead, lambda c: _call(c, "ask", dict(to="reviewer", text="a?", timeout_s=60))
            )
        )
        await asyncio.sleep(1.5)  # the lead's ask is in flight: the reviewer thinks
        started = time.monotonic()
        back = await _session(
            url, reviewer, lambda c: _call(c, "ask", dict(to="lead", text="b?", timeout_s=60))
        )
        took = time.monotonic() - started
        return await first, back, took

    first, back, took = asyncio.run(both())
    assert first == (False, "Done: a?")
    assert back[0] and "would wait on you: reviewer -> lead -> reviewer" in back[1], back
    assert took < 2.5  # at once, not after the lead's ask ended


def _ask(url: str, token: str, to: str, text: str) -> Awaitable[Call]:
    return _session(url, token, lambda c: _call(c, "ask", dict(to=to, text=text, timeout_s=60)))


def test_every_ask_in_flight_counts_in_the_cycle_check(hub: mh.Hub, project: Path) -> None:
    """lead → reviewer and lead → tester both in flight: reviewer → lead closes a ring through
    the first of them (one kept target per caller would only know the second)."""
    hub.mcp_cooldown_ms = 1000
    start_standin(hub, "lead", cwd=project)
    start_standin(hub, "reviewer", cwd=project, think_s=4)
    tester = start_standin(hub, "tester", cwd=project, think_s=4)
    lead, reviewer = hub.mcp.grant("lead"), hub.mcp.grant("reviewer")
    url = hub.mcp.url

    async def three() -> tuple[Call, Call, Call, float]:
        first = asyncio.ensure_future(_ask(url, lead, "reviewer", "r?"))
        await asyncio.sleep(1.0)
        second = asyncio.ensure_future(_ask(url, lead, "tester", "t?"))
        await asyncio.sleep(1.0)  # both of the lead's asks are in flight
        started = time.monotonic()
        back = await _ask(url, reviewer, "lead", "b?")
        took = time.monotonic() - started
        return await first, await second, back, took

    first, second, back, took = asyncio.run(three())
    assert (first, second) == ((False, "Done: r?"), (False, "Done: t?"))
    assert back[0] and "would wait on you: reviewer -> lead -> reviewer" in back[1], back
    assert took < 2.5
    assert user_prompts(tester) == ["t?"]
    assert not [r for r in mcp_rows(hub) if r["route_id"] == "mcp:reviewer->lead" and r["round"]]


def test_an_ask_of_a_target_busy_in_its_own_turn_gets_the_answer_to_its_own_prompt(
    hub: mh.Hub, project: Path
) -> None:
    """The target's turn in progress ends first; the ask's answer is the next one, which its
    own prompt started (never "Done: first task")."""
    hub.mcp_cooldown_ms = 1000
    start_standin(hub, "lead", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project, think_s=3.0)
    token = hub.mcp.grant("lead")
    hub.send("reviewer", "first task").result(30)
    wait_until(lambda: reviewer.state == "busy", 10, what="the reviewer busy in its turn")
    is_error, text = call(hub, token, "ask", to="reviewer", text="second task", timeout_s=60)
    assert (is_error, text) == (False, "Done: second task")
    assert user_prompts(reviewer) == ["first task", "second task"]
    wait_until(lambda: len(mcp_rows(hub)) == 2, 10, what="both rows")
    assert mcp_rows(hub)[1]["extracted"] == "Done: second task"


def test_an_ask_passes_over_a_turn_the_person_typed_whose_answer_reached_the_record_late(
    hub: mh.Hub, project: Path
) -> None:
    """The person's turn ends on screen before its record holds its answer; the ask is typed
    then, and its own turn's answer lags in the record too: when the screen says the ask's
    turn is over the record's last answer is the person's. Its user message is not the ask's
    prompt, so the ask waits for the next answer: its own (never "Done: theirs ...")."""
    hub.mcp_cooldown_ms = 1000
    start_standin(hub, "lead", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project, think_s=0.3)
    token = hub.mcp.grant("lead")
    theirs = "theirs [[sleep 1]] [[recordlate 2500]]"
    mine = "mine [[nohook]] [[sleep 2]] [[recordlate 1500]]"  # (no Stop hook tells its answer)
    hub.runtime.tmux.run("send-keys", "-t", reviewer.pane_id, "-l", "--", theirs)
    hub.runtime.tmux.run("send-keys", "-t", reviewer.pane_id, "Enter")
    wait_until(lambda: reviewer.state == "busy", 10, what="the reviewer busy in the person's turn")
    is_error, text = call(hub, token, "ask", to="reviewer", text=mine, timeout_s=60)
    assert (is_error, text) == (False, f"Done: {mine[:40]}")
    assert user_prompts(reviewer) == [theirs, mine]
    wait_until(lambda: len(mcp_rows(hub)) == 2, 10, what="both rows")
    assert mcp_rows(hub)[1]["extracted"] == f"Done: {mine[:40]}"


def test_answers_prompt_matches_the_record_user_message_of_the_ask_only() -> None:
    """Control characters and whitespace do not matter; another prompt never matches; a
    record that does not say its prompt keeps the ordering rule."""
    from madohub_nb.io.agent_records.base import Extraction
    from madohub_nb.pipeline.handoff import answers_prompt

    def said(prompt: str | None) -> Extraction:
        return Extraction("Done", "jsonl", None, prompt=prompt)

    assert answers_prompt(said("review\n  the\tdiff please"), "review the\x1b[31m diff please")
    assert not answers_prompt(said("review the diff"), "review the diff please")
    assert not answers_prompt(said("a task the person typed"), "review the diff")
    assert answers_prompt(said(None), "review the diff")
    assert answers_prompt(None, "review the diff")


def test_two_callers_asking_one_agent_at_once_each_get_their_own_answer(
    hub: mh.Hub, project: Path
) -> None:
    hub.mcp_cooldown_ms = 1000
    start_standin(hub, "lead", cwd=project)
    start_standin(hub, "tester", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project, think_s=1.5)
    lead, tester = hub.mcp.grant("lead"), hub.mcp.grant("tester")
    url = hub.mcp.url

    async def both() -> list[Call]:
        return list(
            await asyncio.gather(
                _ask(url, lead, "reviewer", "from lead"),
                _ask(url, tester, "reviewer", "from tester"),
            )
        )

    assert asyncio.run(both()) == [(False, "Done: from lead"), (False, "Done: from tester")]
    assert sorted(user_prompts(reviewer)) == ["from lead", "from tester"]
    wait_until(lambda: len(mcp_rows(hub)) == 4, 10, what="four rows")
    answers = {r["target"]: r["extracted"] for r in mcp_rows(hub) if r["source"] == "reviewer"}
    assert answers == {"lead": "Done: from lead", "tester": "Done: from tester"}


def test_a_burst_of_calls_is_refused(hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]) -> None:
    async def burst(client: Any) -> list[Call]:
        return list(await asyncio.gather(*(_call(client, "list_agents", {}) for _ in range(40))))

    results = asyncio.run(_session(hub.mcp.url, hub.mcp.token("lead"), burst))
    refused = [text for is_error, text in results if is_error]
    assert refused and all("more than 20 calls within a second" in t for t in refused)
    assert len(results) - len(refused) >= 20


def _log_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("rounds.sqlite3*"))


def test_refused_calls_log_bounded_fields(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile], tmp_path: Path
) -> None:
    """8 calls with a 1 MB ``to``: the rows keep a cut name (with a visible mark), not 24 MB."""
    before = _log_bytes(tmp_path)
    huge = "x" * 1_000_000

    async def eight(client: Any) -> list[Call]:
        return [await _call(client, "send", dict(to=huge, text="hi")) for _ in range(8)]

    results = asyncio.run(_session(hub.mcp.url, hub.mcp.token("lead"), eight))
    wait_until(lambda: len(mcp_rows(hub)) == 8, 10, what="eight refused rows")
    grown = _log_bytes(tmp_path) - before
    assert grown < 100_000, f"the log grew by {grown} bytes"
    assert all(is_error and "there is no agent 'xxx" in text for is_error, text in results)
    assert all(len(text) < 1000 and "cut 999920 characters" in text for _, text in results)
    row = mcp_rows(hub)[0]
    assert len(row["route_id"]) < 200 and "cut 999920 characters" in row["target"]
    assert len(row["error"]) < 2200


def test_a_burst_of_refused_calls_is_cut_short_and_not_logged(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    """After 10 refusals in a minute every call of that token is refused at once, and one
    row (not one per call) says so; other callers are not affected."""
    _, reviewer = pair

    async def many(client: Any) -> list[Call]:
        return [await _call(client, "send", dict(to=f"nobody{i}", text="x")) for i in range(25)]

    results = asyncio.run(_session(hub.mcp.url, hub.mcp.token("lead"), many))
    assert all(is_error for is_error, _ in results)
    assert all("there is no agent 'nobody" in text for _, text in results[:10])
    assert all("made 10 refused calls within 60 s" in text for _, text in results[10:])
    wait_until(lambda: len(mcp_rows(hub)) == 11, 10, what="ten refusals and one summary")
    rows = mcp_rows(hub)
    assert "refused calls within 60 s" in rows[-1]["error"] and "not logged" in rows[-1]["error"]
    is_error, text = call(hub, hub.mcp.token("lead"), "send", to="reviewer", text="hi")
    assert is_error and "refused for" in text  # a good call too, until the minute is over
    assert user_prompts(reviewer) == []
    other = hub.mcp.grant("reviewer")
    assert call(hub, other, "list_agents")[0] is False
    assert len(mcp_rows(hub)) == 11


def test_an_ask_past_its_timeout_errors_and_the_late_answer_is_logged(
    hub: mh.Hub, project: Path
) -> None:
    start_standin(hub, "lead", cwd=project)
    start_standin(hub, "slow", cwd=project, think_s=3)
    token = hub.mcp.grant("lead")
    is_error, text = call(hub, token, "ask", to="slow", text="take your time", timeout_s=1)
    assert is_error and "did not finish its answer within timeout_s=1" in text
    wait_until(lambda: len(mcp_rows(hub)) == 2, 20, what="the late answer's row")
    late = mcp_rows(hub)[-1]
    assert (late["source"], late["extracted"]) == ("slow", "Done: take your time")
    assert late["status"] == "error" and late["meta"]["late"] is True
    assert "answered after the ask timed out" in late["error"]


def test_a_tile_started_with_mcp_asks_another_through_the_hub(hub: mh.Hub, project: Path) -> None:
    """``hub.tile(..., mcp=["reviewer"])``: the stand-in Claude gets ``--mcp-config`` (a private
    file of the hub's with its token) and the tools pre-allowed; its call reaches the reviewer."""
    from madohub_nb.demo import standin_command

    hub.mcp_cooldown_ms = 1000
    reviewer = start_standin(hub, "reviewer", cwd=project)
    lead = hub.tile(
        "lead", agent="claude", command=standin_command("claude"), cwd=project,
        env={"MADOHUB_STANDIN_THINK_S": "0.3"}, mcp=["reviewer"],
    )  # fmt: skip
    wait_until(lambda: lead.state == "idle", 15, what="lead idle")
    argv = psutil.Process(lead.agent_process().pid).cmdline()  # type: ignore[union-attr]
    config = Path(argv[argv.index("--mcp-config") + 1])
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    assert hub.mcp.token("lead") in config.read_text()
    assert hub.mcp.token("lead") not in " ".join(argv)  # the token is never on a command line
    assert "mcp__madohub__ask" in argv[argv.index("--allowedTools") + 1]
    hub.send("lead", "[[mcp ask reviewer: is this right?]]").result(30)
    wait_until(lambda: len(mcp_rows(hub)) == 2, 30, what="the ask's two rows")
    wait_until(
        lambda: (
            (lead.last_response() or None) is not None
            and lead.last_response().text == "Done: is this right?"
        ),  # type: ignore[union-attr]
        15,
        what="the lead's answer: the reviewer's, as the tool result",
    )
    assert user_prompts(reviewer) == ["is this right?"]
    assert [r["source"] for r in mcp_rows(hub)] == ["lead", "reviewer"]
    hub.send("lead", "[[mcp send tester: hi]]").result(30)
    wait_until(lambda: "send error" in (lead.last_response().text or ""), 15)  # type: ignore[union-attr]
    assert "you may reach ['reviewer']" in lead.last_response().text  # type: ignore[union-attr]
    hub.close()
    assert not config.exists()


def test_a_codex_tile_gets_the_server_on_its_command_line_and_its_token_in_its_env(
    hub: mh.Hub, project: Path
) -> None:
    """``mcp=`` on Codex: ``-c mcp_servers.madohub.…`` (the URL, the token's variable, no
    approval prompt); the token is in the pane's environment only, and it is the tile's."""
    from madohub_nb.demo import standin_command

    start_standin(hub, "reviewer", cwd=project)
    cx = hub.tile(
        "cx", agent="codex", command=standin_command("codex"), cwd=project, mcp=["reviewer"]
    )
    wait_until(lambda: cx.state == "idle", 15, what="codex idle")
    proc = psutil.Process(cx.agent_process().pid)  # type: ignore[union-attr]
    argv = proc.cmdline()
    overrides = [argv[i + 1] for i, word in enumerate(argv) if word == "-c"]
    assert f'mcp_servers.madohub.url="{hub.mcp.url}"' in overrides
    assert 'mcp_servers.madohub.bearer_token_env_var="MADOHUB_MCP_TOKEN"' in overrides
    assert 'mcp_servers.madohub.default_tools_approval_mode="approve"' in overrides
    token = hub.mcp.token("cx")
    assert token is not None and token not in " ".join(argv)
    assert proc.environ()["MADOHUB_MCP_TOKEN"] == token
    is_error, text = call(hub, token, "list_agents")  # who that token is: cx, reaching reviewer
    assert not is_error and '"name": "reviewer"' in text, text


def test_mcp_on_a_tile_is_checked(hub: mh.Hub) -> None:
    with pytest.raises(ValueError, match="mcp must be True"):
        hub.tile("a", agent="claude", command="claude", mcp="reviewer")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one the hub can configure yet"):
        hub.tile("b", command="bash", mcp=True)
    with pytest.raises(ValueError, match=r"it can: claude, codex, gemini, qwen, copilot, opencode"):
        hub.tile("b", agent="pi", command="pi", mcp=True)
    with pytest.raises(ValueError, match="an adopted pane"):
        hub.tile("c", pane="%0", mcp=True)
    assert hub.tiles == {}


def test_the_tile_magic_takes_mcp_and_its_names() -> None:
    from madohub_nb.notebook.parsing import parse_command

    assert parse_command("tile lead --cmd claude").mcp is None
    assert parse_command("tile lead --cmd claude --mcp").mcp == []
    args = parse_command("tile lead --cmd claude --mcp reviewer tester --allow-shell")
    assert (args.mcp, args.allow_shell) == (["reviewer", "tester"], True)
    args = parse_command("tile lead --cmd claude --mcp --mcp-max-rounds 3 --mcp-cooldown 2.5s")
    assert (args.mcp_max_rounds, args.mcp_cooldown) == (3, 2500)
    assert parse_command("tile lead --cmd claude --mcp").mcp_max_rounds is None
    for bad in ("--mcp-max-rounds 0", "--mcp-max-rounds 21", "--mcp-cooldown 10ms"):
        with pytest.raises(ValueError, match="mcp"):
            parse_command(f"tile lead --cmd claude --mcp {bad}")


def test_the_dashboard_shows_each_pair_as_a_route_and_a_timeline_lane(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    """Each caller → target pair gets a card (rounds of ``mcp_max_rounds``, state, last
    status) and a lane in the timeline, where an ask's answer bar follows its question's."""
    from madohub_nb.notebook.widgets import Dashboard
    from madohub_nb.plot import lanes_of

    dash = Dashboard(hub)
    try:
        token = hub.mcp.token("lead")
        assert call(hub, token, "ask", to="reviewer", text="q1") == (False, "Done: q1")
        hub.mcp.grant("reviewer")
        assert call(hub, hub.mcp.token("reviewer"), "send", to="lead", text="hi")[0] is False
        assert call(hub, token, "send", to="nobody", text="x")[0] is True
        ids = ["mcp:lead->reviewer", "mcp:reviewer->lead", "mcp:lead->nobody"]
        wait_until(lambda: list(dash.mcp_cards) == ids, 15, what="a card per pair")
        cards = {i: dash.mcp_cards[i].snapshot_html() for i in ids}
        assert "rounds <b>1/5</b>" in cards["mcp:lead->reviewer"]
        assert "lead → reviewer" in cards["mcp:lead->reviewer"]
        assert "rounds <b>0/5</b>" in cards["mcp:lead->nobody"]  # refused: no round used
        assert "refused: there is no agent" in cards["mcp:lead->nobody"]
        assert "3 MCP pairs" in dash.snapshot_html()
        lanes = [html.escape(i) for i in ids]  # (the SVG's text: "mcp:lead-&gt;reviewer")
        wait_until(lambda: all(i in dash.timeline.svg for i in lanes), 15, what="the live lanes")
        df = hub.log.df
        assert lanes_of(hub.log.plot()) == ids
        asked, answered = df[df["route_id"] == ids[0]].to_dict("records")
        assert answered["fired_at"] == asked["delivered_at"] < answered["delivered_at"]
    finally:
        dash.close()
    later = Dashboard(hub)  # opened after the calls: the pairs are there at once
    try:
        assert list(later.mcp_cards) == ids
        hub.mcp.reset()
        wait_until(lambda: "rounds <b>0/5</b>" in later.mcp_cards[ids[0]].summary_html(), 5)
    finally:
        later.close()


async def _bridge_calls(config: dict[str, Any], env: dict[str, str], calls: list[Any]) -> Any:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    entry = config["mcpServers"]["madohub"]
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env={**env, **entry["env"]}
    )
    async with Client(stdio_client(params)) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        return tools, [await _call(client, tool, args) for tool, args in calls]


def test_the_stdio_bridge_forwards_the_tools_and_the_hubs_refusals(
    hub: mh.Hub, pair: tuple[mh.Tile, mh.Tile]
) -> None:
    """``hub.mcp.bridge_config(name)``: an agent that speaks only stdio starts the bridge
    (a real process, the token in its env) and calls the hub through it."""
    import os
    import subprocess
    import sys

    _, reviewer = pair
    config = hub.mcp.bridge_config("lead")
    entry = config["mcpServers"]["madohub"]
    assert hub.mcp.token("lead") not in " ".join(entry["args"])
    env = {"PYTHONPATH": os.getcwd()}
    calls = [
        ("ask", {"to": "reviewer", "text": "via stdio?"}),
        ("send", {"to": "lead", "text": "x"}),
    ]
    tools, results = asyncio.run(_bridge_calls(config, env, calls))
    assert tools == ["ask", "list_agents", "send"]
    assert results[0] == (False, "Done: via stdio?")
    # the same words as over HTTP, not wrapped twice
    assert results[1] == (
        True,
        "Error executing tool send: 'lead' is you; you may reach ['reviewer']",
    )
    assert user_prompts(reviewer) == ["via stdio?"]
    assert [r["source"] for r in mcp_rows(hub)] == ["lead", "reviewer", "lead"]
    hub.mcp.revoke("lead")  # an ended token: the hub's refusal, through the bridge
    (_, results) = asyncio.run(_bridge_calls(config, env, [("list_agents", {})]))
    assert results[0][0] is True and "not one this hub gave" in results[0][1], results
    no_token = {**config["mcpServers"]["madohub"], "env": {"MADOHUB_MCP_TOKEN": ""}}
    (_, results) = asyncio.run(
        _bridge_calls({"mcpServers": {"madohub": no_token}}, env, [("list_agents", {})])
    )
    assert results[0][0] is True and "the bridge has no token" in results[0][1], results
    bad = subprocess.run(
        [sys.executable, "-m", "madohub_nb.io.mcp_bridge", "http://example.com/mcp"],
        capture_output=True, text=True, timeout=30, env={**os.environ, **env},
    )  # fmt: skip
    assert bad.returncode == 2 and "on this machine, http://127.0.0.1:PORT/mcp" in bad.stderr
