"""Widgets: ANSI → HTML, static views, and live views of a real hub on a private tmux socket."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import one_round, shell_tile, start_standin, wait_until

from madohub_nb import Hub
from madohub_nb.errors import MadohubValueError
from madohub_nb.notebook.widgets import (
    DASHBOARD_CLASS,
    TILE_SCREEN_CLASS,
    Dashboard,
    RoundLogTable,
    RouteCard,
    TileView,
    TimelineView,
)
from madohub_nb.pipeline.events import TileOutput
from madohub_nb.render import (
    SCREEN_BG,
    SCREEN_FG,
    ansi_to_html,
    badge,
    color_256,
    html_for_hub,
    html_for_round,
    html_for_route,
    html_for_tile,
    round_row,
    rounds_table_html,
    screen_html,
)

ESC = "\x1b"


def _spans(markup: str) -> list[tuple[str, str]]:
    """(style, text) of every span in ``markup``."""
    return re.findall(r'<span style="([^"]*)">([^<]*)</span>', markup)


# ANSI → HTML ----------------------------------------------------------------------


def test_plain_text_is_escaped_and_unstyled() -> None:
    assert ansi_to_html("a < b & c > d") == "a &lt; b &amp; c &gt; d"


def test_basic_foreground_colour_becomes_a_span_until_reset() -> None:
    out = ansi_to_html(f"{ESC}[31mred{ESC}[0m plain")
    assert _spans(out) == [("color:#cd3131", "red")]
    assert out.endswith(" plain")


def test_bright_and_background_colours() -> None:
    out = ansi_to_html(f"{ESC}[92;44mx{ESC}[m")
    assert _spans(out) == [("color:#23d18b;background-color:#2472c8", "x")]


def test_256_colour_and_truecolour_semicolon_and_colon_forms() -> None:
    out = ansi_to_html(
        f"{ESC}[38;5;196ma{ESC}[38;2;1;2;3mb{ESC}[38:2::10:20:30mc{ESC}[48:5:232md{ESC}[0m"
    )
    assert _spans(out) == [
        ("color:#ff0000", "a"),
        ("color:#010203", "b"),
        ("color:#0a141e", "c"),
        ("color:#0a141e;background-color:#080808", "d"),
    ]


def test_color_256_palette_corners() -> None:
    assert color_256(0) == "#000000"
    assert color_256(15) == "#ffffff"
    assert color_256(16) == "#000000"
    assert color_256(231) == "#ffffff"
    assert color_256(244) == "#808080"


def test_attributes_turn_on_and_off() -> None:
    out = ansi_to_html(f"{ESC}[1;3;4mA{ESC}[22mB{ESC}[23;24mC")
    assert _spans(out) == [
        ("font-weight:bold;font-style:italic;text-decoration:underline", "A"),
        ("font-style:italic;text-decoration:underline", "B"),
    ]
    assert out.endswith("C")


def test_inverse_swaps_default_colours() -> None:
    out = ansi_to_html(f"{ESC}[7m sel {ESC}[27m")
    assert _spans(out) == [(f"color:{SCREEN_BG};background-color:{SCREEN_FG}", " sel ")]


def test_default_fg_and_bg_codes_clear_only_their_colour() -> None:
    out = ansi_to_html(f"{ESC}[31;42ma{ESC}[39mb{ESC}[49mc")
    assert _spans(out) == [
        ("color:#cd3131;background-color:#0dbc79", "a"),
        ("background-color:#0dbc79", "b"),
    ]
    assert out.endswith("c")


def test_non_colour_sequences_and_controls_are_dropped() -> None:
    text = f"{ESC}]0;title\x07{ESC}[2J{ESC}[1;1Hhi{ESC}(B\x08\x00 there\t!\n"
    assert ansi_to_html(text) == "hi there\t!\n"


def test_markup_inside_coloured_text_is_escaped() -> None:
    out = ansi_to_html(f"{ESC}[32m<script>alert('x')</script>{ESC}[0m")
    assert "<script>" not in out
    assert html.unescape(_spans(out)[0][1]) == "<script>alert('x')</script>"


def test_cut_off_escape_at_the_end_is_dropped() -> None:
    assert ansi_to_html(f"done{ESC}") == "done"
    assert ansi_to_html(f"done{ESC}[3") == "done"


def test_screen_html_wraps_in_a_dark_pre_and_marks_empty_screens() -> None:
    out = screen_html(f"{ESC}[31mx{ESC}[0m")
    assert out.startswith('<pre class="madohub-screen"')
    assert "color:#cd3131" in out
    assert "(empty screen)" in screen_html("  \n ")


# Static views -----------------------------------------------------------------------


@dataclasses.dataclass
class _Record:
    round_id: str
    route_id: str
    source: str
    target: str
    round: int
    status: str
    prompt: str | None
    fired_at: datetime
    latency_ms: float | None = None
    error: str | None = None


def test_round_row_accepts_dataclass_mapping_and_rejects_others() -> None:
    rec = _Record("r1", "a->b#1", "a", "b", 1, "delivered", "p", datetime.now(timezone.utc))
    assert round_row(rec)["route_id"] == "a->b#1"
    assert round_row({"round_id": "x"}) == {"round_id": "x"}
    with pytest.raises(MadohubValueError, match="not a round record"):
        round_row(42)


def test_rounds_table_has_one_row_per_round_with_status_badge_and_short_prompt() -> None:
    long_prompt = "word " * 40
    rows = [
        round_row(
            _Record(
                f"r{i}", "a->b#1", "a", "b", i, st, long_prompt, datetime.now(timezone.utc), 1234.4
            )
        )
        for i, st in ((1, "delivered"), (2, "error"))
    ]
    out = rounds_table_html(rows)
    assert out.count("<tr data-round-id=") == 2
    assert "data-round-id='r2'" in out
    assert out.count("madohub-badge") == 2
    assert ">1234<" in out
    assert "…" in out  # the prompt is shortened in the cell ...
    assert html.escape(long_prompt) in out  # ... and complete in its tooltip


def test_rounds_table_says_when_empty() -> None:
    assert "no rounds yet" in rounds_table_html([])


def test_html_for_round_shows_error_and_full_prompt() -> None:
    rec = _Record(
        "r9",
        "x",
        "a",
        "b",
        1,
        "error",
        "line1\nline2",
        datetime.now(timezone.utc),
        error="boom <x>",
    )
    out = html_for_round(rec)
    assert "boom &lt;x&gt;" in out
    assert "line1\nline2" in out


def test_badge_colours_known_states_and_escapes_unknown() -> None:
    assert "#2e7d32" in badge("idle")
    assert "&lt;b&gt;" in badge("<b>")


# Live views over a real hub ------------------------------------------------------------


@pytest.fixture
def hub(tmux_socket: str, tmp_path: Path) -> Iterator[Hub]:
    """A hub on a private tmux socket with a temporary log; its engine runs in a thread."""
    h = Hub(socket_name=tmux_socket, idle_delay_ms=300, log_path=str(tmp_path / "rounds.db"))
    yield h
    h.close()


def test_tile_view_shows_the_screen_in_colour_and_follows_output(hub: Hub) -> None:
    shell_tile(hub, "sh")
    view = TileView(hub, "sh", min_interval_s=0.05)
    try:
        hub.send("sh", r"printf '\033[31mRED-%s\033[0m\n' $((40+2))", allow_shell=True)
        wait_until(lambda: "RED-42" in view.screen_value, 15, what="the output in the view")
        assert "color:#cd3131" in view.screen_value
        assert view.redraws >= 2
        assert TILE_SCREEN_CLASS in view._screen._dom_classes
    finally:
        view.close()


def test_tile_view_coalesces_a_burst_of_output_into_one_redraw(hub: Hub) -> None:
    shell_tile(hub, "sh")
    outputs: list[str] = []
    hub.events.subscribe(lambda e: outputs.append(e.kind) if isinstance(e, TileOutput) else None)
    view = TileView(hub, "sh", min_interval_s=600)
    try:
        wait_until(lambda: view.redraws == 1, 10, what="the first redraw")
        hub.send("sh", "for i in $(seq 30); do echo line-$i; sleep 0.02; done", allow_shell=True)
        wait_until(lambda: len(outputs) >= 5, 15, what="several output events")
        assert view.redraws == 1  # the rest wait for the interval, coalesced
    finally:
        view.close()


def test_timeline_redraw_requests_coalesce_and_it_draws_again_after_its_loop_ended(
    hub: Hub,
) -> None:
    """The views' shared redraw machinery: one loop at a time, reset when it ends."""
    view = TimelineView(hub, min_interval_s=2.0)
    try:
        wait_until(lambda: view.draws >= 1 and not view._drawing, 15, what="the first loop ended")
        first = view.draws
        burst = threading.Thread(target=lambda: [view.request_redraw() for _ in range(50)])
        burst.start()
        burst.join()
        wait_until(lambda: view.draws > first and not view._drawing, 15, what="the burst drawn")
        assert view.draws - first <= 2  # fifty requests: one draw now, one after the interval
        after_burst = view.draws
        view.request_redraw()  # the loop has ended: a new request starts a new one
        wait_until(lambda: view.draws > after_burst, 15, what="a draw after the loop ended")
    finally:
        view.close()


def test_tile_view_draws_output_that_comes_after_its_redraw_loop_ended(hub: Hub) -> None:
    shell_tile(hub, "sh")
    view = TileView(hub, "sh", min_interval_s=0.1)
    try:
        for n in (1, 2):
            mark = f"MARK-{n}"  # typed as MARK-$((n)): only the output shows it
            wait_until(lambda: view.redraws >= 1 and not view._drawing, 15, what="the loop ended")
            hub.send("sh", f"echo MARK-$(({n}))", allow_shell=True)
            wait_until(lambda m=mark: m in view.screen_value, 15, what=f"{mark} in the view")
    finally:
        view.close()


def test_tile_view_of_an_unknown_tile_names_the_known_ones(hub: Hub) -> None:
    shell_tile(hub, "sh")
    with pytest.raises(MadohubValueError, match="tiles: sh"):
        TileView(hub, "nope")


def test_views_keep_updating_on_the_engine_thread_while_the_kernel_thread_blocks(
    hub: Hub,
) -> None:
    """A cell that blocks (time.sleep) must not freeze the views: they are updated on the
    engine's thread, which the kernel's IOPub channel accepts."""
    shell_tile(hub, "sh")
    threads: set[str] = set()

    async def make_views() -> tuple[TileView, RoundLogTable]:  # made inside a running loop,
        return TileView(hub, "sh", min_interval_s=0.05), RoundLogTable(hub)  # as in Jupyter

    view, table = asyncio.run(make_views())
    try:
        view._screen.observe(lambda _: threads.add(threading.current_thread().name), "value")
        table._table.observe(lambda _: threads.add(threading.current_thread().name), "value")
        hub.send("sh", "echo marshalled-$((1+1))", allow_shell=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            "marshalled-2" in view.screen_value and table.records
        ):
            time.sleep(0.5)  # blocks this thread: nothing here drives the views
        assert "marshalled-2" in view.screen_value, "the view did not update while blocked"
        assert table.records, "the round table did not update while blocked"
        assert threads == {hub.engine.thread.name}
    finally:
        view.close()
        table.close()


def test_route_card_buttons_and_events_follow_the_route_state(hub: Hub) -> None:
    shell_tile(hub, "a")
    shell_tile(hub, "b")
    route = hub.connect("a", "b", dispatch="shadow", max_rounds=4)
    card = RouteCard(hub, route)
    try:
        assert "active" in card._summary.value
        assert "0/4" in card._summary.value
        assert (card.pause_button.disabled, card.resume_button.disabled) == (False, True)
        card.pause_button.click()
        assert route.state == "paused"
        wait_until(lambda: "paused" in card._summary.value, 10, what="the card to show paused")
        assert (card.pause_button.disabled, card.resume_button.disabled) == (True, False)
        route.resume()
        wait_until(lambda: "active" in card._summary.value, 10, what="the card to follow resume")
        card.stop_button.click()
        assert route.state == "stopped"
        wait_until(lambda: card.stop_button.disabled, 10, what="stop to be disabled")
    finally:
        card.close()


def test_round_log_table_adds_rounds_as_they_are_logged(hub: Hub) -> None:
    shell_tile(hub, "sh")
    table = RoundLogTable(hub, rows=2)
    try:
        assert table.records == []
        for word in ("one", "two", "three"):
            hub.send("sh", f"echo {word}", allow_shell=True).result(30)
        wait_until(lambda: len(table.records) == 2, 10, what="two rows")
        assert [r["prompt"] for r in table.records] == ["echo two", "echo three"]
        assert "echo three" in table._table.value
        again = RoundLogTable(hub, rows=5)  # a new table starts from the log
        assert [r["prompt"] for r in again.records] == ["echo one", "echo two", "echo three"]
        again.close()
    finally:
        table.close()


def test_dashboard_grows_with_the_hub_and_closes_its_views(hub: Hub) -> None:
    dash = Dashboard(hub, min_interval_s=0.05)
    try:
        assert dash.tile_views == {}
        shell_tile(hub, "a")
        shell_tile(hub, "b")
        wait_until(lambda: set(dash.tile_views) == {"a", "b"}, 10, what="tile views")
        route = hub.connect("a", "b", dispatch="shadow")
        wait_until(lambda: route.id in dash.route_cards, 10, what="the route card")
        assert "2 tiles · 1 routes" in dash._title.value
        assert DASHBOARD_CLASS in dash._dom_classes
    finally:
        dash.close()
    assert all(v._closed for v in dash.tile_views.values())


def test_static_html_of_tile_route_and_hub(hub: Hub) -> None:
    tile = shell_tile(hub, "a")
    shell_tile(hub, "b")
    route = hub.connect("a", "b", dispatch="shadow")
    assert "<b>a</b>" in html_for_tile(tile)
    assert "madohub-screen" in html_for_tile(tile)
    assert "a → b" in html_for_route(route)
    out = html_for_hub(hub)
    assert "2 tiles" in out
    assert html.escape(route.id) in out


def test_route_card_shows_the_budget_spent_as_rounds_count_it(hub: Hub, tmp_path: Path) -> None:
    start_standin(hub, "writer", cwd=tmp_path)
    start_standin(hub, "reviewer", cwd=tmp_path)
    route = hub.connect("writer", "reviewer", dispatch="shadow", max_tokens=200_000)
    card = RouteCard(hub, route)
    try:
        assert "budget <b>0/200,000 tokens</b>" in card._summary.value
        one_round(hub, route, "count my tokens")
        wait_until(lambda: route.spent_tokens > 0, 10, what="the round counted")
        shown = f"budget <b>{route.spent_tokens:,}/200,000 tokens</b>"
        wait_until(lambda: shown in card._summary.value, 10, what="the card to show the spending")
    finally:
        card.close()
