"""The round timeline (``hub.log.plot()``), error columns and the widgets' static snapshots."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from conftest import start_recorder, wait_until
from matplotlib.figure import Figure

from madohub_nb.io.log import RoundLog, RoundRecord
from madohub_nb.plot import EMPTY_TEXT, lanes_of, timeline_svg
from madohub_nb.render import ROUND_TABLE_COLUMNS, rounds_table_html, route_summary_html

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def _round(route_id: str, i: int, status: str, **kw: Any) -> RoundRecord:
    delivered = T0 + timedelta(seconds=3 * i + 2) if status == "delivered" else None
    return RoundRecord(
        route_id=route_id, source="a", target="b", round=i, trigger="on-idle",
        transform="prompt-wrap", dispatch="madoagent", status=status,
        fired_at=T0 + timedelta(seconds=3 * i), delivered_at=delivered,
        latency_ms=2000.0 if delivered else None, **kw,
    )  # fmt: skip


def test_an_empty_log_plots_a_figure_that_says_so(tmp_path: Path) -> None:
    with RoundLog(tmp_path / "r.db") as log:
        fig = log.plot()
    assert isinstance(fig, Figure)
    assert lanes_of(fig) == []
    assert [t.get_text() for t in fig.get_axes()[0].texts] == [EMPTY_TEXT]


def test_the_timeline_has_one_lane_per_route_bars_by_status_and_latency_beneath(
    tmp_path: Path,
) -> None:
    with RoundLog(tmp_path / "r.db") as log:
        for i, (route, status) in enumerate(
            [
                ("a->b#1", "delivered"),
                ("b->a#2", "shadow"),
                ("a->b#1", "error"),
                ("send", "delivered"),
            ]
        ):
            log.append(_round(route, i, status, session_id="s1" if i < 3 else "s2"))
        fig = log.plot()
        mine = log.plot(session_id="s1")
    assert lanes_of(fig) == ["a->b#1", "b->a#2", "send"]
    assert lanes_of(mine) == ["a->b#1", "b->a#2"]
    bars, latency = fig.get_axes()[:2]
    assert [len(c.get_paths()) for c in bars.collections] == [2, 1, 1]
    assert latency.get_ylabel() == "latency (ms)"
    assert png_ok(fig._repr_png_())  # type: ignore[attr-defined]
    assert timeline_svg(log_df(tmp_path)).startswith("<svg")


def png_ok(data: bytes) -> bool:
    return data.startswith(b"\x89PNG") and len(data) > 1000


def log_df(tmp_path: Path) -> Any:
    with RoundLog(tmp_path / "r.db") as log:
        return log.df


def test_the_round_table_has_an_error_column_shortened_with_the_full_text_on_hover() -> None:
    assert ROUND_TABLE_COLUMNS[-1] == ("error", "error")
    error = "delivery failed: " + "x" * 200
    html = rounds_table_html([{"round_id": "r1", "status": "error", "error": error}])
    assert f'title="{error}"' in html
    assert "…</span>" in html and "x" * 100 not in html.replace(f'title="{error}"', "")


def test_a_route_summary_shows_its_last_error() -> None:
    class R:
        id, source, target, state, rounds, max_rounds = "a->b#1", "a", "b", "stopped", 2, 5
        last_status, last_error = "error", "source 'a' exited <gone>"

    html = route_summary_html(R())
    assert "last error: source &#x27;a&#x27; exited &lt;gone&gt;" in html


def test_the_dashboard_draws_the_timeline_live_and_carries_a_static_snapshot(
    hub: Any, tmp_path: Path
) -> None:
    from madohub_nb.notebook.widgets import Dashboard

    start_recorder(hub, "rec", tmp_path / "typed.bin")
    dash = Dashboard(hub)
    try:
        wait_until(lambda: dash.timeline.draws >= 1, 15, what="the first timeline")
        assert "no rounds yet" in dash.timeline.svg
        hub.keys("rec", "Enter").result(15)
        wait_until(lambda: "keys" in dash.timeline.svg and "<svg" in dash.timeline.svg, 15)
        bundle = dash._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        snapshot = bundle["text/html"]
        assert snapshot.startswith('<div class="madohub-dashboard">')
        assert "<svg" in snapshot and "<b>rec</b>" in snapshot and "madohub-rounds" in snapshot
        assert "attach -r -t" in snapshot
    finally:
        dash.close()
