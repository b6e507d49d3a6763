"""Replay, AI transforms through the real SDK against a local fake API, other triggers, paste."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BASH, FAST_IDLE_MS, one_round, start_standin, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb.testing import FakeAnthropic

KEY = "sk-ant-test-0123456789abcdefghijklmnopqrstuvwxyz"


def test_replay_recomputes_a_logged_round_with_another_template(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project)
    route = hub.connect(
        "writer", "reviewer", dispatch="shadow", template="A: {output}", cooldown_ms=1000
    )
    orig = one_round(hub, route)
    assert orig["prompt"] == "A: Done: draft please"
    replayed = hub.replay(orig["round_id"], template="B ({round}/{maxRounds}) {output}").result(30)
    assert replayed.replay_of == orig["round_id"]
    assert replayed.prompt == "B (1/5) Done: draft please"
    assert replayed.status == "shadow"
    raw = hub.replay(orig["round_id"], transform="raw").result(30)
    assert raw.prompt == "Done: draft please"
    df = hub.log.df
    assert list(df["replay_of"].dropna()) == [orig["round_id"], orig["round_id"]]
    delivered = hub.replay(orig["round_id"], template="C: {output}", deliver=True).result(60)
    assert delivered.status == "delivered", delivered.error
    wait_until(lambda: user_prompts(reviewer) == ["C: Done: draft please"], 10)
    with pytest.raises(ValueError, match="no round"):
        hub.replay("nope")


def test_a_new_hub_on_the_same_log_sees_earlier_rounds(
    hub: mh.Hub, project: Path, tmp_path: Path
) -> None:
    start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project)
    route = hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=1000)
    row = one_round(hub, route)
    again = mh.RoundLog(hub.log.path)
    try:
        assert row["round_id"] in set(again.df["round_id"])
    finally:
        again.close()


@pytest.fixture
def ai_pair(tmux_socket: str, home: Path, tmp_path: Path, project: Path) -> Iterator[tuple]:
    """A fake Messages API, a hub whose AI transforms use it, and two stand-in tiles."""
    with FakeAnthropic(reply="Please review the palindrome function.") as fake:
        hub = mh.Hub(
            socket_name=tmux_socket,
            idle_delay_ms=FAST_IDLE_MS,
            log_path=tmp_path / "l.sqlite3",
            api_key=KEY,
            base_url=fake.base_url,
        )
        try:
            start_standin(hub, "writer", cwd=project)
            yield fake, hub, start_standin(hub, "reviewer", cwd=project)
        finally:
            hub.close()


def test_ai_routing_writes_the_prompt_through_the_sdk(ai_pair: tuple) -> None:
    fake, hub, reviewer = ai_pair
    route = hub.connect("writer", "reviewer", transform="ai-routing", cooldown_ms=1000)
    row = one_round(hub, route, "palindrome function")
    assert row["status"] == "delivered", row["error"]
    assert row["prompt"] == "Please review the palindrome function."
    (request,) = [r for r in fake.requests if r["path"].startswith("/v1/messages")]
    assert "Done: palindrome function" in str(request["body"]["messages"])
    wait_until(lambda: user_prompts(reviewer) == ["Please review the palindrome function."], 10)
    text = hub.log.df.to_string() + repr(hub) + repr(route) + repr(hub.ai_config())
    assert KEY not in text


@pytest.mark.parametrize("transform", ["ai-routing", "summary"])
def test_api_errors_make_an_error_round_and_type_nothing(ai_pair: tuple, transform: str) -> None:
    fake, hub, reviewer = ai_pair
    fake.fail_next(500, times=10)
    route = hub.connect("writer", "reviewer", transform=transform, cooldown_ms=1000)
    row = one_round(hub, route)
    assert row["status"] == "error"
    assert "500" in row["error"]
    assert KEY not in row["error"]
    assert user_prompts(reviewer) == []
    assert route.state == "active"  # one failed round does not end the route


def test_on_keyword_fires_when_the_pattern_appears(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project)
    route = hub.connect(
        "writer",
        "reviewer",
        trigger="on-keyword",
        pattern=r"Done: say READY-\d+",
        dispatch="shadow",
        cooldown_ms=1000,
    )
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "say READY-7 now").result(30)
    wait_until(lambda: route.rounds >= 1 and route.last_status, 20)
    row = hub.log.df[hub.log.df["route_id"] == route.id].iloc[0]
    assert row["trigger"] == "on-keyword"
    assert row["status"] == "shadow", row["error"]


def test_always_streams_new_output(hub: mh.Hub) -> None:
    hub.tile("sh", agent="shell", command="bash --norc --noprofile")
    start = hub.tile("sink", agent="shell", command="bash --norc --noprofile")
    wait_until(lambda: start.state == "idle", 10)
    route = hub.connect(
        "sh", "sink", trigger="always", dispatch="shadow", transform="raw", cooldown_ms=1000
    )
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("sh", "echo streamed-$((6*7))", allow_shell=True).result(20)
    wait_until(lambda: any("streamed-42" in (p or "") for p in hub.log.df["extracted"]), 20)


def test_paste_delivery_keeps_a_multi_line_prompt_in_one_piece(hub: mh.Hub, project: Path) -> None:
    target = start_standin(hub, "t", cwd=project)
    text = "first line\nsecond line with / and @\nthird line"
    rec = hub.send("t", text, delivery="paste").result(30)
    assert rec.status == "delivered", rec.error
    assert rec.delivery_mode == "paste"
    wait_until(lambda: user_prompts(target) == [text], 10)


def test_a_replay_after_its_route_is_gone_keeps_max_rounds_and_allow_shell(
    tmux_socket: str, home: Path, tmp_path: Path, project: Path
) -> None:
    """The round's own row says what the route allowed: a new hub (no such route) replays it
    with the route's max_rounds. Into a shell it replays only when asked to: a row's opt-in is
    taken as is only from the hub that wrote it (a log file can come from anyone)."""
    log_path, out = tmp_path / "rounds.sqlite3", tmp_path / "replayed.txt"
    first = mh.Hub(socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=log_path)
    try:
        start_standin(first, "writer", cwd=project)
        first.tile("sh", agent="shell", command=BASH)
        route = first.connect(
            "writer", "sh", dispatch="shadow", allow_shell=True, max_rounds=3, cooldown_ms=1000
        )
        orig = one_round(first, route)
        assert orig["status"] == "shadow", orig["error"]
    finally:
        first.close()
    second = mh.Hub(socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=log_path)
    try:
        sh = second.tile("sh", agent="shell", command=BASH)
        wait_until(lambda: sh.state == "idle", 10, what="sh idle")
        template = "echo R{round}of{maxRounds} >> " + str(out)
        with pytest.raises(mh.MadohubValueError, match="pass allow_shell=True to the replay"):
            second.replay(orig["round_id"], template=template, deliver=True)
        assert not out.exists()
        rec = second.replay(
            orig["round_id"], template=template, deliver=True, allow_shell=True
        ).result(60)
        assert rec.status == "delivered", rec.error
        assert rec.prompt == f"echo R1of3 >> {out}"
        wait_until(lambda: out.exists() and out.read_text() == "R1of3\n", 10, what="replay ran")
    finally:
        second.close()
