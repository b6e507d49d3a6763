"""Per-pane output control: tmux sends the hub only the output someone needs.

Real tmux, real chatty programs. Counted at the hub's end: ``watcher.output_events``
(every ``%output`` line the hub read) and each stream's ``bytes_total``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from conftest import shell_tile, start_standin, type_at_prompt, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb.io.watch import PaneStream, activity_end_mono

PYTHON_REPL = f"{shlex.quote(sys.executable)} -i -q"


def _stream(hub: mh.Hub, tile: mh.Tile) -> PaneStream:
    wait_until(
        lambda: tile.pane_id in hub.runtime.tiles.watcher.streams, 10, what="the tile's stream"
    )
    return hub.runtime.tiles.watcher.streams[tile.pane_id]


def _y_lines(tile: mh.Tile) -> int:
    """Lines of ``yes | cat -n`` on the screen (numbered: each screen differs from the last)."""
    return sum(1 for ln in tile.screen().splitlines() if ln.split()[-1:] == ["y"])


def test_an_unwatched_chatty_pane_sends_the_hub_nothing_and_a_view_turns_it_on(
    hub: mh.Hub,
) -> None:
    from madohub_nb.notebook.widgets import TileView

    tile = shell_tile(hub, "chatty")
    stream = _stream(hub, tile)
    wait_until(lambda: stream.mode == "off", 10, what="its output to be switched off")
    events, nbytes = hub.runtime.tiles.watcher.output_events, stream.bytes_total
    # Numbered, so the screen changes with every line: a view that follows it redraws
    # (a screen of bare "y" lines can look the same at every capture).
    type_at_prompt(hub, tile.pane_id, "yes | cat -n")
    try:
        # The pane prints at full speed (tmux reads it: its screen fills with y) ...
        wait_until(lambda: _y_lines(tile) > 20, 10, what="yes to fill the screen")
        hub.runtime.tmux.run("clear-history", "-t", tile.pane_id)
        wait_until(lambda: _y_lines(tile) > 20, 10, what="yes to go on printing")
        # ... and none of it, not even the echo of the typed command, reached the hub.
        assert hub.runtime.tiles.watcher.output_events == events
        assert stream.bytes_total == nbytes
        # A view needs to know when the pane speaks: a flooding pane is polled, not streamed.
        view = TileView(hub, "chatty", min_interval_s=0.05)
        try:
            wait_until(lambda: stream.mode == "polled", 10, what="the flood to be polled")
            polls = hub.runtime.tiles.watcher.polls
            wait_until(lambda: view.redraws >= 2, 10, what="the view to follow the pane")
            wait_until(lambda: hub.runtime.tiles.watcher.polls >= polls + 2, 10, what="two polls")
            assert stream.last_output_mono is not None
        finally:
            view.close()
        wait_until(lambda: stream.mode == "off", 10, what="output off once the view closed")
    finally:
        hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "C-c")


def test_a_keyword_route_turns_a_chatty_pane_on_and_fires_then_off_when_done(
    hub: mh.Hub, project: Path
) -> None:
    src = shell_tile(hub, "chatty", cwd=project)
    shell_tile(hub, "sink")
    stream = _stream(hub, src)
    wait_until(lambda: stream.mode == "off", 10, what="its output to be switched off")
    flag = project / "flag"
    type_at_prompt(
        hub, src.pane_id, f"while :; do [ -e {flag} ] && echo KEY-$((6*7)); echo yyyyyyyyyyyy; done"
    )
    wait_until(lambda: "yyyyyyyyyyyy" in src.screen(), 10, what="the loop to print")
    events = hub.runtime.tiles.watcher.output_events
    route = hub.connect(
        "chatty", "sink", trigger="on-keyword", pattern=r"KEY-42", dispatch="shadow",
        max_rounds=1, cooldown_ms=1000,
    )  # fmt: skip
    try:
        wait_until(lambda: route.ready.is_set(), 10, what="the route to listen")
        assert stream.mode == "on"  # settled before the route said it listens
        wait_until(
            lambda: hub.runtime.tiles.watcher.output_events > events + 50,
            10,
            what="streamed output",
        )
        assert route.rounds == 0
        flag.touch()
        wait_until(lambda: route.last_status is not None, 30, what="the keyword round")
        # Its only route done (exhausted, last answer logged): nobody reads the pane again.
        wait_until(lambda: route.state == "exhausted", 10, what="the route to be exhausted")
        first = hub.log.df.sort_values("fired_at").iloc[0]
        assert first["status"] == "shadow" and "KEY-42" in first["prompt"]
        assert route.rounds == 1
        wait_until(lambda: stream.mode == "off", 15, what="output off once the route is done")
    finally:
        hub.runtime.tmux.run("send-keys", "-t", src.pane_id, "C-c")


def test_an_on_idle_route_polls_a_flooding_pane_and_fires_once_the_flood_ends(
    hub: mh.Hub, project: Path
) -> None:
    sink = start_standin(hub, "sink", cwd=project)
    py = hub.tile("py", agent="terminal", command=PYTHON_REPL, ready_pattern=r">>> $")
    wait_until(lambda: py.state == "idle", 15, what="the REPL's prompt")
    stream = _stream(hub, py)
    route = hub.connect("py", "sink", template="REPL said: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10, what="the route to listen")
    assert stream.mode == "on"  # an on-idle route needs the times of output, not the bytes
    flood = (
        'exec("import time\\nt = time.time()\\nwhile time.time() - t < 6:'
        " print('y' * 60, end='\\\\r')\\nprint()\\nprint('flood' + ' over')\")"
    )
    hub.send("py", flood, allow_shell=True).result(30)
    wait_until(lambda: stream.mode == "polled", 10, what="the flood to be polled")
    nbytes, polls = stream.bytes_total, hub.runtime.tiles.watcher.polls
    wait_until(lambda: hub.runtime.tiles.watcher.polls >= polls + 3, 10, what="three polls")
    if "flood over" not in py.screen():  # still flooding: the hub read none of it
        assert stream.bytes_total == nbytes
    wait_until(lambda: route.last_status == "delivered", 40, what="the round after the flood")
    assert stream.mode == "on"  # quiet again: streamed (exact times) again
    assert route.rounds == 1
    (prompt,) = user_prompts(sink)
    assert prompt.startswith("REPL said: ") and prompt.endswith("flood over")


def test_polled_times_are_rounded_up_to_the_end_of_tmuxs_second() -> None:
    # window_activity 100 (s): the output was before 101.0; now is 101.25 wall, 50.0 mono.
    assert activity_end_mono(100, 101.25, 50.0) == 49.75
    # Still inside that second: it may have been just now.
    assert activity_end_mono(100, 100.5, 50.0) == 50.0


def test_a_listener_that_comes_while_tmux_answers_still_gets_the_output(hub: mh.Hub) -> None:
    import asyncio

    from madohub_nb.io.watch import Listener

    tile = shell_tile(hub, "sh")
    stream = _stream(hub, tile)

    async def race() -> Listener:
        first = stream.listen(wants_bytes=False)
        await stream.settled()
        await asyncio.sleep(0.5)  # (no switch is left under way)
        assert stream.mode == "on"
        first.close()  # nobody listens: "pause" is written ...
        await asyncio.sleep(0)
        # ... and before tmux answers, the mode still reads "on": this schedules nothing.
        return stream.listen(wants_bytes=False)

    listener = hub.engine.run_sync(race(), 10)
    wait_until(lambda: stream.mode == "on", 10, what="output on again for the new listener")
    type_at_prompt(hub, tile.pane_id, "echo hello")
    wait_until(lambda: listener.woken, 10, what="the new listener to hear the pane")


def _switch_tasks_by_pane() -> dict[str, int]:
    """Output-switch tasks (``OutputWatcher._apply``) alive on the running loop, by pane."""
    import asyncio

    counts: dict[str, int] = {}
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        if getattr(coro, "__qualname__", "") != "OutputWatcher._apply":
            continue
        frame = getattr(coro, "cr_frame", None)
        if frame is not None:
            pane = frame.f_locals["stream"].pane_id
            counts[pane] = counts.get(pane, 0) + 1
    return counts


def test_many_routes_on_one_session_leave_at_most_one_switch_waiting_per_pane(
    hub: mh.Hub,
) -> None:

    watcher = hub.runtime.tiles.watcher
    tiles = [shell_tile(hub, f"sh{i}") for i in range(6)]
    streams = [_stream(hub, tile) for tile in tiles]
    for stream in streams:
        wait_until(lambda s=stream: s.mode == "off", 10, what="output off (nobody listens)")
    assert len({s.session for s in streams}) == 1

    async def many_routes() -> tuple[dict[str, int], dict[str, int]]:
        # What 10 routes per tile do as they start: watch the source, listen, (settle).
        listeners = []
        for _ in range(10):
            for tile in tiles:
                stream = await watcher.watch(tile.pane_id, tile.session)
                listeners.append(stream.listen(wants_bytes=True))
        seen, waiting = _switch_tasks_by_pane(), watcher.switches_waiting()
        for stream in streams:
            await stream.settled()
        return seen, waiting

    seen, waiting = hub.engine.run_sync(many_routes(), 20)
    # One task per pane, each asked only about its own pane (not 60 x 6 of them).
    assert seen == dict.fromkeys((t.pane_id for t in tiles), 1)
    assert waiting == seen
    for stream in streams:
        wait_until(lambda s=stream: s.mode == "on", 10, what="output on for the listeners")
    wait_until(lambda: not hub.engine.run_sync(_nothing_waiting(watcher), 5), 10, what="no switch")


async def _nothing_waiting(watcher: object) -> bool:
    return bool(watcher.switches_waiting())  # type: ignore[attr-defined]


def test_a_keyword_after_a_flood_of_escaped_bytes_fires_once_with_its_backslashes_intact(
    hub: mh.Hub, project: Path
) -> None:
    # tmux escapes every byte under a space and the backslash (\134) in %output: the
    # keyword holds literal backslash-digit text that a careless unescaping would turn
    # into a newline, and it comes after a flood of escaped newlines (yes).
    src = shell_tile(hub, "chatty", cwd=project)
    shell_tile(hub, "sink")
    route = hub.connect(
        "chatty", "sink", trigger="on-keyword", pattern=r"KEY\\012-42\\134\tend",
        dispatch="shadow", cooldown_ms=1000,
    )  # fmt: skip
    try:
        wait_until(lambda: route.ready.is_set(), 10, what="the route to listen")
        type_at_prompt(
            hub, src.pane_id,
            r"timeout 2 yes; printf '%s\t%s\n' 'KEY\012-42\134' end; timeout 2 yes; touch flood-done",
        )  # fmt: skip
        wait_until(lambda: route.rounds >= 1, 30, what="the keyword round")
        wait_until((project / "flood-done").exists, 30, what="the flood to end")
        wait_until(lambda: route.last_status is not None, 10, what="the round's status")
        # (The pattern matches only the literal backslashes: fired at all means intact.)
        assert len(hub.log.df) == 1 and route.rounds == 1  # once, not once per chunk
    finally:
        route.stop()
        hub.runtime.tmux.run("send-keys", "-t", src.pane_id, "C-c")
