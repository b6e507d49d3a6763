"""Routing end to end on real tmux with stand-in agents: triggers, loop protection, dispatch."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from conftest import (
    BASH,
    SkippedTurns,
    log_rows,
    repaint,
    start_standin,
    user_prompts,
    wait_until,
)

import madohub_nb as mh
from madohub_nb.pipeline.extract import transcript_path


def _turn_ends(tile: mh.Tile) -> list[datetime]:
    """When each turn of a Claude-like tile ended (its transcript's turn_duration records)."""
    path = transcript_path(tile)
    assert path is not None
    ends = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "system" and rec.get("subtype") == "turn_duration":
            ends.append(datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")))
    return ends


def test_on_idle_fires_once_per_finished_turn(hub: mh.Hub, project: Path) -> None:
    writer = start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project)
    route = hub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "first draft").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 20, what="round 1")
    # Output that is no new turn: the trigger looks again, sees the routed turn, lets it go.
    skipped = SkippedTurns(hub)
    repaint(hub, writer)
    assert skipped.wait(route, 0) == "already routed"
    assert route.rounds == 1
    rows = log_rows(hub, route.id)
    assert [r["status"] for r in rows] == ["delivered"]
    assert rows[0]["extraction_method"] == "hook"  # the Stop hook's answer (issue 23)
    assert rows[0]["prompt"] == "Review: Done: first draft"
    wait_until(lambda: user_prompts(reviewer) == ["Review: Done: first draft"], 10)
    assert writer.state == "idle"


def test_on_idle_never_fires_while_the_agent_is_busy(hub: mh.Hub, project: Path) -> None:
    writer = start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project)
    route = hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    # A 3 s turn: far longer than the idle delay, with spinner output all along.
    hub.send("writer", "slow one [[sleep 3]]").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 20)
    fired = log_rows(hub, route.id)[0]["fired_at"].to_pydatetime()
    (turn_end,) = _turn_ends(writer)
    assert fired > turn_end


def test_ping_pong_stops_at_max_rounds(hub: mh.Hub, project: Path) -> None:
    a = start_standin(hub, "a", persona="counter", cwd=project)
    b = start_standin(hub, "b", persona="counter", cwd=project)
    ab = hub.connect("a", "b", max_rounds=2, cooldown_ms=1000)
    ba = hub.connect("b", "a", max_rounds=2, cooldown_ms=1000)
    wait_until(lambda: ab.ready.is_set() and ba.ready.is_set(), 5)
    hub.send("a", "start counting").result(30)
    wait_until(
        lambda: ab.state == "exhausted" and ba.state == "exhausted", 60, what="both exhausted"
    )
    wait_until(lambda: any(r["status"] == "exhausted" for r in log_rows(hub, ab.id)), 20)
    delivered = [r for r in log_rows(hub) if r["status"] == "delivered" and r["route_id"] != "send"]
    assert len(delivered) == 4
    assert max(r["round"] for r in delivered) == 2
    # a: "start counting" -> count 1, ba's two prompts -> count 2, count 3. a->b delivered
    # count 1 and 2; its one exhausted row holds a's answer to the last prompt, count 3.
    # b answered a->b's two prompts; b->a delivered both, so b has no turn left to log.
    (exhausted,) = [r for r in log_rows(hub) if r["status"] == "exhausted"]
    assert exhausted["route_id"] == ab.id
    assert exhausted["extracted"] == "count 3" == a.last_response().text
    assert exhausted["round"] == 3 and pd.isna(exhausted["prompt"])
    # At the receiving ends: each side got exactly the two delivered prompts, nothing after.
    assert len(user_prompts(a)) == 3 and len(user_prompts(b)) == 2
    assert [r["prompt"] for r in log_rows(hub, ab.id)][:2] == user_prompts(b)
    # A later look at b's finished turn is skipped, not routed.
    skipped = SkippedTurns(hub)
    repaint(hub, b)
    assert skipped.wait(ba, 0) == "already routed"
    assert ab.rounds == 2 and ba.rounds == 2
    assert len(user_prompts(a)) == 3 and len(user_prompts(b)) == 2


def test_stop_keyword_stops_the_route_and_types_nothing(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project)
    route = hub.connect("writer", "reviewer", stop_keyword="LGTM", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "LGTM from me").result(30)
    wait_until(lambda: route.state == "stopped", 20)
    (row,) = log_rows(hub, route.id)
    assert row["status"] == "stopped"
    assert "LGTM" in row["error"]
    assert pd.isna(row["prompt"])
    assert user_prompts(reviewer) == []


def test_shadow_logs_the_prompt_and_types_nothing(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project)
    route = hub.connect(
        "writer", "reviewer", dispatch="shadow", template="Would send: {output}", cooldown_ms=1000
    )
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "shadow test").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 20)
    (row,) = log_rows(hub, route.id)
    assert row["status"] == "shadow"
    assert row["prompt"] == "Would send: Done: shadow test"
    assert pd.isna(row["delivered_at"])
    assert user_prompts(reviewer) == []


def test_legacy_dispatch_extracts_from_the_terminal(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project)
    route = hub.connect(
        "writer", "reviewer", dispatch="legacy", cooldown_ms=1000, template="L: {output}"
    )
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "legacy path").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 20)
    (row,) = log_rows(hub, route.id)
    assert row["status"] == "delivered", row["error"]
    assert row["extraction_method"] == "terminal"
    assert row["extracted"] == "Done: legacy path"
    wait_until(lambda: user_prompts(reviewer) == ["L: Done: legacy path"], 10)


def test_cooldown_spaces_out_rounds(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "writer", cwd=project, think_s=0.1)
    start_standin(hub, "reviewer", cwd=project)
    route = hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=4000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "one").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 20)
    hub.send("writer", "two").result(30)
    wait_until(lambda: route.rounds == 2 and len(log_rows(hub, route.id)) == 2, 30)
    first, second = log_rows(hub, route.id)
    gap_s = (second["fired_at"] - first["fired_at"]).total_seconds()
    assert gap_s >= 4.0


def test_two_routes_into_one_target_never_interleave(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "a", cwd=project)
    start_standin(hub, "b", cwd=project)
    sink = start_standin(hub, "sink", cwd=project, think_s=0.2)
    long_a = "\n".join(f"alpha line {i}" for i in range(6))
    long_b = "\n".join(f"bravo line {i}" for i in range(6))
    ra = hub.connect("a", "sink", template=long_a + "\n{output}", cooldown_ms=1000)
    rb = hub.connect("b", "sink", template=long_b + "\n{output}", cooldown_ms=1000)
    wait_until(lambda: ra.ready.is_set() and rb.ready.is_set(), 5)
    fa, fb = hub.send("a", "from a"), hub.send("b", "from b")
    fa.result(30), fb.result(30)
    wait_until(lambda: len(user_prompts(sink)) == 2, 40, what="two prompts in sink")
    prompts = sorted(user_prompts(sink))
    assert prompts == sorted([long_a + "\nDone: from a", long_b + "\nDone: from b"])


def test_hand_send_is_logged_as_round_zero(hub: mh.Hub, project: Path) -> None:
    target = start_standin(hub, "t", cwd=project)
    rec = hub.send("t", "line one\nline two").result(30)
    assert rec.status == "delivered", rec.error
    assert rec.round == 0 and rec.route_id == "send"
    wait_until(lambda: user_prompts(target) == ["line one\nline two"], 10)


def test_submit_is_pressed_once_a_slow_agent_shows_the_prompt(hub: mh.Hub, project: Path) -> None:
    """An agent slow to read its input (a loaded machine) would get the text and the submit
    key in one read, and the Codex stand-in, like the real one, takes an Enter that close to
    typed text as a newline: delivery waits until the prompt shows in its box. (Before, the
    box, not yet repainted, looked as if the prompt had left it: the round was logged as
    submitted while the prompt sat in the box; seen with the real Copilot CLI.)"""
    from madohub_nb.demo import standin_command
    from madohub_nb.demo.standin_tui import READ_LAG_ENV

    env = {"MADOHUB_STANDIN_THINK_S": "0.2", READ_LAG_ENV: "1.5"}
    coder = hub.tile(
        "coder", agent="codex", command=standin_command("codex"), cwd=project, env=env,
        channel=False,  # (typed delivery is what this is about: Codex's channel takes no keys)
    )  # fmt: skip
    wait_until(lambda: coder.state == "idle", 15, what="coder idle")
    rec = hub.send("coder", "Slow prompt one").result(60)
    assert rec.status == "delivered" and rec.meta["submit_verified"], rec.error
    found = wait_until(
        lambda: (r := coder.last_response()) and r.method == "rollout" and r, 20, what="an answer"
    )
    assert found.text == "Done: Slow prompt one"
    assert rec.meta["submit_attempts"] == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"trigger": "on-fire"},
            "unknown trigger 'on-fire'; allowed: on-idle, on-complete, on-keyword, always",
        ),
        ({"transform": "magic"}, "unknown transform 'magic'"),
        ({"dispatch": "fast"}, "unknown dispatch 'fast'; allowed: madoagent, legacy, shadow"),
        ({"max_rounds": 21}, "max_rounds must be from 1 to 20, got 21"),
        ({"max_rounds": 0}, "max_rounds must be from 1 to 20, got 0"),
        ({"cooldown_ms": 500}, "cooldown_ms must be from 1000 to 30000 ms, got 500"),
        ({"trigger": "on-keyword"}, "needs pattern="),
        ({"trigger": "on-keyword", "pattern": "("}, "not a valid regular expression"),
        ({"transform": "ai-routing"}, "ANTHROPIC_API_KEY"),
    ],
)
def test_bad_route_arguments_are_value_errors(hub: mh.Hub, kwargs: dict, message: str) -> None:
    hub.tile("x", agent="shell", command="bash --norc")
    hub.tile("y", agent="claude", command="bash --norc")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        hub.connect("x", "y", **kwargs)
    assert hub.routes == []


def test_routing_into_a_shell_needs_allow_shell(hub: mh.Hub) -> None:
    hub.tile("x", agent="shell", command="bash --norc")
    hub.tile("y", agent="shell", command="bash --norc")
    with pytest.raises(ValueError, match="allow_shell=True"):
        hub.connect("x", "y")
    assert hub.connect("x", "y", allow_shell=True).state == "active"


def test_per_pane_delivery_locks_are_dropped_when_no_delivery_needs_them(
    hub: mh.Hub, project: Path
) -> None:
    """Panes that come and go leave no lock behind (memory over a long session)."""
    targets = [start_standin(hub, f"t{i}", cwd=project) for i in range(3)]
    sends = [hub.send(t.name, f"to {t.name}") for t in targets for _ in range(2)]
    assert [f.result(60).status for f in sends] == ["delivered"] * 6
    for t in targets:
        wait_until(lambda t=t: user_prompts(t) == [f"to {t.name}"] * 2, 20)
    assert hub.runtime.deliverer._locks == {} and hub.runtime.deliverer._lock_users == {}


def test_ended_routes_beyond_the_bound_leave_hub_routes_but_their_rows_stay(
    hub: mh.Hub, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory over a long session: the newest ended routes stay listed, older ones are freed."""
    import gc
    import weakref

    from madohub_nb import route_registry as routes

    monkeypatch.setattr(routes, "ENDED_ROUTES_KEPT", 2)
    start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project)
    ended = [hub.connect("writer", "reviewer", dispatch="shadow", template="saw: {output}")]
    wait_until(lambda: ended[0].ready.is_set(), 5)
    hub.send("writer", "before the end").result(30)
    wait_until(lambda: ended[0].rounds == 1 and ended[0].last_status, 20, what="a shadow round")
    first_id = ended[0].id
    (round_id,) = [r["round_id"] for r in log_rows(hub, first_id)]
    for _ in range(3):
        ended.append(hub.connect("writer", "reviewer", dispatch="shadow"))
        wait_until(lambda: ended[-1].ready.is_set(), 5)
    for r in ended:
        r.stop()
    wait_until(lambda: all(r.ended for r in ended), 10, what="the routes' tasks to end")
    assert hub.routes == ended  # nothing is dropped until a route is made
    live = hub.connect("writer", "reviewer", dispatch="shadow")
    assert hub.routes == [*ended[2:], live]
    assert not live.ended
    with pytest.raises(mh.MadohubValueError, match="2 ended routes made earlier are no longer"):
        hub.route(first_id)
    # Their rows stay, a replay of one still works, and the dropped routes are freed.
    assert [r["round_id"] for r in log_rows(hub, first_id)] == [round_id]
    replayed = hub.replay(round_id, template="again: {output}").result(30)
    assert replayed.prompt == "again: Done: before the end"
    gone = weakref.ref(ended[0])
    ended.clear()
    r = live

    def freed() -> bool:
        gc.collect()
        return gone() is None

    # A route's cancelled timer (a recheck is at most RECHECK_MS away) keeps the task's
    # context, which names its route as owner, until the timer's time comes: then it goes.
    wait_until(freed, 10, what="the dropped route freed")


def test_a_shell_tile_running_a_plain_program_takes_input_when_quiet(
    hub: mh.Hub, tmp_path: Path
) -> None:
    """``agent="shell"`` with a command that is no shell (``cat > file``): tmux's ``sh -c``
    never shows a prompt, so the tile is ready as a terminal tile is, once quiet."""
    out = tmp_path / "typed.txt"
    cat = hub.tile("cat", agent="shell", command=f"cat > {out}")
    src = hub.tile("src", agent="shell", command=BASH)
    wait_until(lambda: cat.state == "idle", 10, what="cat idle when quiet")
    wait_until(lambda: src.state == "idle", 10, what="src idle")
    route = hub.connect(
        "src", "cat", trigger="on-keyword", pattern=r"SHIP-\d+", allow_shell=True, cooldown_ms=1000
    )
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("src", "echo SHIP-$((40+2))", allow_shell=True).result(30)
    wait_until(lambda: route.last_status, 30, what="the route's round")
    (row,) = log_rows(hub, route.id)
    assert row["status"] == "delivered", row["error"]
    wait_until(lambda: out.exists() and "SHIP-42" in out.read_text(), 10, what="cat wrote it")


def test_a_round_into_a_target_that_never_gets_ready_ends_as_an_error_row(hub: mh.Hub) -> None:
    """A target that never becomes ready (it prints without pause) is waited for at most the
    route's target_wait_s; then the round is an error row saying what it waited for."""
    ticker = hub.tile(
        "ticker", agent="shell", command="sh -c 'while :; do echo tick; sleep 0.2; done'"
    )
    src = hub.tile("src", agent="shell", command=BASH)
    wait_until(lambda: src.state == "idle", 10, what="src idle")
    route = hub.connect(
        "src", "ticker", trigger="on-keyword", pattern=r"SHIP-\d+", allow_shell=True,
        cooldown_ms=1000,
    )  # fmt: skip
    route.target_wait_s = 2.0
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("src", "echo SHIP-$((40+2))", allow_shell=True).result(30)
    wait_until(lambda: route.last_status, 30, what="the route's round to end")
    (row,) = log_rows(hub, route.id)
    assert row["status"] == "error"
    assert "'ticker' was not idle after 2 s (state: busy); nothing was typed" in row["error"]
    assert 2000 <= row["deliver_ms"] < 20_000
    assert "SHIP-42" not in ticker.history()
    assert ticker.state == "busy" and route.state == "active"


def test_on_idle_never_fires_while_the_hub_types_a_prompt_into_the_source(
    hub: mh.Hub, project: Path
) -> None:
    """A prompt typed into a fresh agent shows in its box, then its screen is quiet until the
    submit: on a loaded machine longer than the idle delay. That is no finished turn (seen:
    a real Claude Code's start-up screen routed as its first answer while its kickoff was
    typed; the next prompt then landed in the middle of its real first turn)."""
    import asyncio
    import threading
    import time

    from conftest import FAST_IDLE_MS

    writer = start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project)
    route = hub.connect("writer", "reviewer", dispatch="shadow", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    held, release = threading.Event(), threading.Event()

    async def slow_delivery() -> None:
        """The writer's pane held as a delivery holds it while it types."""
        async with hub.runtime.deliverer.pane_lock(writer.pane_id):
            held.set()
            while not release.is_set():
                await asyncio.sleep(0.05)

    skipped = SkippedTurns(hub)
    delivery = hub.engine.submit(slow_delivery())
    wait_until(held.is_set, 5, what="the pane held")
    hub.runtime.tmux.run("send-keys", "-t", writer.pane_id, "-l", "--", "first draft")
    wait_until(lambda: "first draft" in writer.screen(), 10, what="the typed prompt")
    time.sleep(3 * FAST_IDLE_MS / 1000)  # the scenario: the quiet before a slow submit
    # No turn was taken as finished meanwhile: no round, and not even one let go (here the
    # stand-in's screen holds no answer yet; a real Claude Code's start-up banner was routed).
    assert (route.rounds, skipped.events) == (0, [])
    release.set()
    delivery.result(5)
    hub.runtime.tmux.run("send-keys", "-t", writer.pane_id, "Enter")
    wait_until(lambda: route.rounds >= 1 and route.last_status, 20, what="the turn's round")
    rows = log_rows(hub, route.id)
    assert [r["extracted"] for r in rows] == ["Done: first draft"]
