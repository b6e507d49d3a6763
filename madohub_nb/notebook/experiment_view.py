"""How an experiment shows itself: its plot, its notebook table and its report to share.

Attached to :class:`~madohub_nb.experiment.Experiment` by :mod:`madohub_nb.notebook.display`
(the experiment imports no plotting and no HTML). All three read ``exp.summary()`` for the
scores' means and intervals, so what they show is what the statistics say:

- :func:`experiment_figure`: per score, each variant's mean with its interval as error bars
  (and each run's value), beside rounds, cost and wall time per variant.
- :func:`experiment_html`: the summary table with intervals, then each run as a ``<details>``
  element that opens on its conversation (its rounds as a table and, each round, what the
  source said and what the target was sent) and its worktree diff. Escaped HTML, no script.
- :func:`write_report`: one self-contained HTML file: the same, the comparison's sentence,
  the plot and each run's timeline inline as base64 PNG; nothing is loaded from the network.
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from matplotlib.axes import Axes

from ..errors import MadohubValueError
from ..plot import TimelineFigure, figure_bytes, timeline_figure
from ..render import badge, rounds_table_html

if TYPE_CHECKING:
    import pandas as pd

    from ..experiment import Experiment, Run

RUN_PANELS: Final = (("rounds", "rounds"), ("cost_usd", "cost (USD)"), ("wall_s", "wall time (s)"))
"""The run columns plotted beside the scores: (column, title)."""
ROUND_TEXT_MAX_CHARS: Final = 4000
"""A round's prompt or answer is shown up to this many characters in a run's conversation."""
EXPERIMENT_CLASS: Final = "madohub-experiment"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# The plot ---------------------------------------------------------------------------------


def _values(df: pd.DataFrame, variant: str, column: str) -> list[float]:
    import pandas as pd

    mine = pd.to_numeric(df.loc[df["variant"] == variant, column].astype("float64"))
    return [float(v) for v in mine if math.isfinite(v)]


def _score_panel(ax: Axes, df: pd.DataFrame, summary: pd.DataFrame, score: str) -> None:
    """Each variant's mean of ``score`` with its interval (error bars), and each run's value."""
    variants = list(summary.index)
    for i, variant in enumerate(variants):
        mean = summary.loc[variant, f"{score}_mean"]
        low, high = (
            summary.loc[variant, f"{score}_ci_low"],
            summary.loc[variant, f"{score}_ci_high"],
        )
        if not _finite(mean):
            continue
        ax.errorbar(
            [i], [mean], yerr=[[mean - low], [high - mean]], fmt="o", capsize=6,
            markersize=7, label=variant,
        )  # fmt: skip
        values = _values(df, variant, score)
        ax.scatter([i + 0.12] * len(values), values, color="black", s=10, alpha=0.5, zorder=3)
    ax.set_xticks(range(len(variants)), variants)
    ax.set_xlim(-0.6, len(variants) - 0.4)
    ax.set_title(score)
    ax.grid(axis="y", alpha=0.3)


def _run_panel(ax: Axes, df: pd.DataFrame, variants: Sequence[str], column: str) -> None:
    """A run column per variant: the mean as a bar, the spread of the runs, each run a dot."""
    drawn = 0
    for i, variant in enumerate(variants):
        values = _values(df, variant, column) if column in df else []
        if not values:
            continue
        drawn += 1
        mean = sum(values) / len(values)
        spread = (max(values) - min(values)) / 2
        ax.bar(i, mean, yerr=spread, capsize=4, alpha=0.6)
        ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
    ax.set_xticks(range(len(variants)), list(variants))
    ax.set_xlim(-0.6, len(variants) - 0.4)
    if not drawn:
        ax.text(0.5, 0.5, "none recorded", ha="center", va="center", transform=ax.transAxes,
                color="#757575")  # fmt: skip


def experiment_figure(exp: Experiment, confidence: float = 0.95, pyplot: bool = True) -> Any:
    """Each score's mean and interval per variant (``exp.summary(confidence)``), then rounds,
    cost and wall time per variant, of the runs that ran. ``pyplot``: a pyplot figure (the
    notebook's inline backend shows it, as ``exp.plot()`` always did), else a Figure of its
    own that shows itself as a PNG (the report's: nothing left open in pyplot)."""
    df = exp.ran
    summary = exp.summary(confidence=confidence)
    scores = [c.removesuffix("_mean") for c in summary.columns if c.endswith("_mean")]
    panels = len(scores) + len(RUN_PANELS)
    size = (3.7 * panels, 3.4)
    if pyplot:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=size)
    else:
        fig = TimelineFigure(figsize=size)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    for ax, score in zip(axes, scores, strict=False):
        _score_panel(ax, df, summary, score)
    variants = list(exp.variants)
    for ax, (column, title) in zip(axes[len(scores) :], RUN_PANELS, strict=True):
        _run_panel(ax, df, variants, column)
        ax.set_title(title)
    level = f"{confidence * 100:g}% intervals" if scores else "mean and spread"
    fig.suptitle(f"{exp.workflow.name}: {len(df)} runs ({level})")
    fig.tight_layout()
    return fig


# HTML -------------------------------------------------------------------------------------

TABLE_STYLE: Final = "font-family:sans-serif;font-size:12px;border-collapse:collapse"
CELL_STYLE: Final = "padding:2px 10px 2px 0;text-align:left;white-space:nowrap"
PRE_STYLE: Final = (
    "white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;margin:2px 0;"
    "background:#f6f8fa;padding:4px 6px;border-radius:4px;max-height:30em;overflow:auto"
)


def _number(value: object, digits: int = 3) -> str:
    if not _finite(value):
        return ""
    return f"{value:.{digits}g}"


def interval_text(mean: object, low: object, high: object) -> str:
    """``0.7 [0.397, 0.892]``: a mean and its interval, blank without a mean."""
    if not _finite(mean):
        return ""
    return f"{_number(mean)} [{_number(low)}, {_number(high)}]"


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], css_class: str) -> str:
    th = "".join(f"<th style='{CELL_STYLE}'>{h}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td style='{CELL_STYLE}'>{c}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return (
        f"<table class='{css_class}' style='{TABLE_STYLE}'><thead><tr>{th}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def summary_html(summary: pd.DataFrame, confidence: float = 0.95) -> str:
    """``exp.summary()`` as a table: per variant its runs, each score's mean with its interval,
    the cost, rounds and wall-time means, and the cost per success where there is one."""
    scores = [c.removesuffix("_mean") for c in summary.columns if c.endswith("_mean")]
    extra = [c for c in summary.columns if c.endswith("cost_per_success")]
    level = f"{confidence * 100:g}%"
    head = [
        "variant", "n", *(f"{_e(s)} (mean [{level} CI])" for s in scores), "cost (USD)",
        "rounds", "wall (s)", *(_e(c) for c in extra),
    ]  # fmt: skip
    rows = []
    for variant, row in summary.iterrows():
        rows.append([
            f"<b>{_e(variant)}</b>", _e(int(row["n"])),
            *(
                f"<span class='madohub-interval' data-score='{_e(s)}'>"
                f"{interval_text(row[f'{s}_mean'], row[f'{s}_ci_low'], row[f'{s}_ci_high'])}"
                "</span>"
                for s in scores
            ),
            _number(row.get("cost_usd"), 4), _number(row.get("rounds")),
            _number(row.get("wall_s")), *(_number(row[c], 4) for c in extra),
        ])  # fmt: skip
    return _table(head, rows, "madohub-summary")


def _clip(text: object) -> str:
    said = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    if len(said) > ROUND_TEXT_MAX_CHARS:
        said = said[:ROUND_TEXT_MAX_CHARS] + f"\n[... {len(said) - ROUND_TEXT_MAX_CHARS} more]"
    return said


def conversation_html(rounds: pd.DataFrame) -> str:
    """A run's rounds: their table (time, route, status, cost, ...), then each round's text:
    what its source said and what its target was sent (round 0: the kickoff)."""
    import pandas as pd

    rows = [
        {str(k): v.to_pydatetime() if isinstance(v, pd.Timestamp) else v for k, v in r.items()}
        for r in rounds.to_dict("records")
    ]
    turns = []
    for row in rows:
        said = _clip(row.get("extracted"))
        sent = _clip(row.get("prompt"))
        head = (
            f"round {_e(row.get('round'))} · {_e(row.get('source'))} → {_e(row.get('target'))} "
            f"{badge(str(row.get('status')))}"
        )
        parts = [f"<div><i>{_e(row.get('source'))} said</i></div><pre style='{PRE_STYLE}'>"
                 f"{_e(said)}</pre>"] if said else []  # fmt: skip
        parts.append(
            f"<div><i>sent to {_e(row.get('target'))}</i></div><pre style='{PRE_STYLE}'>"
            f"{_e(sent)}</pre>"
        )
        if row.get("error"):
            parts.append(f"<div style='color:#c62828'>{_e(row.get('error'))}</div>")
        turns.append(
            f"<details class='madohub-turn'><summary>{head}</summary>{''.join(parts)}</details>"
        )
    if not rows:
        return "<div class='madohub-conversation'><i>no rounds in the log</i></div>"
    return f"<div class='madohub-conversation'>{rounds_table_html(rows)}{''.join(turns)}</div>"


def diff_html(run: Run) -> str:
    """The run's worktree diffs (``run.diffs``), or what its row says when it has none."""
    if not run.diffs:
        return "<div class='madohub-diff'><i>no worktree tile: no diff</i></div>"
    parts = []
    for tile, text in run.diffs.items():
        changes = run.changes.get(tile)
        said = (
            f"{_plural(changes.files_changed, 'file')}, +{changes.lines_added} "
            f"−{changes.lines_removed}"
            if changes is not None
            else ""
        )
        body = _e(text) if text.strip() else "<i>(no changes)</i>"
        parts.append(
            f"<div><b>{_e(tile)}</b> {_e(said)}</div><pre class='madohub-diff-text' "
            f"style='{PRE_STYLE}'>{body}</pre>"
        )
    return f"<div class='madohub-diff'>{''.join(parts)}</div>"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _run_line(run: Run, scores: Sequence[str]) -> str:
    said = [
        f"<b>{_e(run.variant)} #{_e(run.repeat)}</b>",
        badge(run.stopped_by),
        _plural(run.rounds, "round"),
    ]
    if _finite(run.cost_usd):
        said.append(f"${run.cost_usd:.4f}")
    if _finite(run.wall_s):
        said.append(f"{run.wall_s:.1f} s")
    said += [f"{_e(s)} {_number(run.scores.get(s))}" for s in scores if s in run.scores]
    if run.files_changed is not None:
        said.append(f"{_plural(run.files_changed, 'file')} +{run.lines_added} −{run.lines_removed}")
    return " · ".join(said)


def _run_html(run: Run, rounds: pd.DataFrame, scores: Sequence[str], timeline: str = "") -> str:
    error = (
        f"<div class='madohub-run-error' style='color:#c62828'>{_e(run.error)}</div>"
        if run.error
        else ""
    )
    answer = (
        f"<div><i>final answer</i></div><pre style='{PRE_STYLE}'>{_e(_clip(run.final_answer))}</pre>"
        if run.final_answer
        else ""
    )
    return (
        f"<details class='madohub-run' data-variant='{_e(run.variant)}' "
        f"data-repeat='{_e(run.repeat)}'><summary>{_run_line(run, scores)}</summary>"
        f"<div style='margin-left:1.2em'>{error}{answer}"
        f"<details class='madohub-run-conversation'><summary>conversation "
        f"({_plural(len(rounds), 'round')} in the log)</summary>{timeline}{conversation_html(rounds)}</details>"
        f"<details class='madohub-run-diff'><summary>diff</summary>{diff_html(run)}</details>"
        f"</div></details>"
    )


def _ordered_runs(exp: Experiment) -> list[Run]:
    order = list(exp.variants)
    return sorted(exp.runs, key=lambda r: (order.index(r.variant), r.repeat))


def _rounds_by_session(exp: Experiment) -> dict[str, pd.DataFrame]:
    if not exp.session_ids:
        return {}
    try:
        rounds = exp.rounds
    except Exception:  # a log gone or unreadable: the runs show without their rounds
        return {}
    return {str(k): v.reset_index(drop=True) for k, v in rounds.groupby("session_id")}


def _empty_rounds() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame()


def runs_html(exp: Experiment, timelines: Mapping[str, str] | None = None) -> str:
    """Each run as a ``<details>``: its line (variant, repeat, how it ended, scores), opening
    on its error, final answer, conversation and diff."""
    by_session = _rounds_by_session(exp)
    scores = exp.score_names
    parts = [
        _run_html(
            run, by_session.get(str(run.session_id), _empty_rounds()), scores,
            (timelines or {}).get(str(run.session_id), ""),
        )
        for run in _ordered_runs(exp)
    ]  # fmt: skip
    return f"<div class='madohub-runs'>{''.join(parts)}</div>"


def experiment_html(exp: Experiment) -> str:
    """``exp`` in a notebook: its name and spending, the summary with intervals, each run's
    drill-down (conversation and diff). Escaped HTML with ``<details>``: no script."""
    summary = exp.summary()
    limit = f" of max_cost_usd {exp.max_cost_usd:g}" if exp.max_cost_usd is not None else ""
    return (
        f"<div class='{EXPERIMENT_CLASS}' style='font-family:sans-serif;font-size:13px'>"
        f"<div><b>Experiment {_e(exp.workflow.name)}</b> · {len(exp.runs)} runs · "
        f"${exp.spent_usd:.4f} spent{_e(limit)}</div>"
        f"{summary_html(summary)}{runs_html(exp)}</div>"
    )


# The report -------------------------------------------------------------------------------

REPORT_STYLE: Final = """
body { font-family: sans-serif; max-width: 1200px; margin: 1.5em auto; padding: 0 1em;
       color: #1f2328; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.5em; }
details { margin: 4px 0; } summary { cursor: pointer; }
.madohub-summary td, .madohub-summary th { border-bottom: 1px solid #d0d7de; }
.madohub-comparison { background: #f6f8fa; padding: 8px 12px; border-left: 4px solid #1565c0; }
img { max-width: 100%; }
"""


def _png(fig: Any) -> str:
    data = base64.b64encode(figure_bytes(fig, "png")).decode("ascii")
    return f"<img alt='{_e(fig.get_suptitle() or 'figure')}' src='data:image/png;base64,{data}'>"


def _comparison(
    exp: Experiment, compare: tuple[str, str, str] | None, confidence: float, scores: list[str]
) -> str:
    if compare is not None:
        if not (isinstance(compare, tuple) and len(compare) == 3):
            raise MadohubValueError(
                f"compare must be (variant a, variant b, score), e.g. ('terse', 'full', "
                f"'tests'), got {compare!r}"
            )
        a, b, score = compare
    else:
        variants = list(exp.variants)
        if len(variants) < 2 or not scores:
            return "No comparison: it needs two variants and a score."
        a, b, score = variants[0], variants[1], scores[0]
    try:
        return str(exp.compare(a, b, score=score, confidence=confidence))
    except MadohubValueError as exc:
        if compare is not None:
            raise
        return f"No comparison of {a!r} and {b!r} on {score!r}: {exc}"


def report_html(
    exp: Experiment, compare: tuple[str, str, str] | None = None, confidence: float = 0.95
) -> str:
    """The report's whole HTML document (see :func:`write_report`)."""
    summary = exp.summary(confidence=confidence)
    scores = [c.removesuffix("_mean") for c in summary.columns if c.endswith("_mean")]
    sentence = _comparison(exp, compare, confidence, scores)
    plot = _png(experiment_figure(exp, confidence, pyplot=False))
    timelines = {
        sid: _png(timeline_figure(rounds, title=f"session {sid}"))
        for sid, rounds in _rounds_by_session(exp).items()
        if len(rounds)
    }
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = f"Experiment {exp.workflow.name}"
    limit = f" (max_cost_usd {exp.max_cost_usd:g})" if exp.max_cost_usd is not None else ""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{REPORT_STYLE}</style></head><body>"
        f"<div class='{EXPERIMENT_CLASS}'><h1>{_e(title)}</h1>"
        f"<p>{len(exp.runs)} runs of {len(exp.variants)} variants "
        f"({_e(', '.join(exp.variants))}) · ${exp.spent_usd:.4f} spent{_e(limit)} · "
        f"written {made} · rounds from {_e(exp.log_path)}</p>"
        f"<h2>Summary</h2>{summary_html(summary, confidence)}"
        f"<h2>Comparison</h2><p class='madohub-comparison'>{_e(sentence)}</p>"
        f"<h2>Plot</h2>{plot}"
        f"<h2>Runs</h2>{runs_html(exp, timelines)}</div></body></html>\n"
    )


def write_report(
    exp: Experiment,
    path: str | os.PathLike[str],
    compare: tuple[str, str, str] | None = None,
    confidence: float = 0.95,
) -> Path:
    """Write ``exp``'s report to ``path``: one HTML file holding everything (the plot and the
    timelines as base64 PNG, its style inline, no script): it opens offline and can be sent
    as it is. Returns the path written."""
    target = Path(path)
    if target.is_dir():
        raise MadohubValueError(
            f"report path {target} is a folder; give a file name, e.g. {target / 'report.html'}"
        )
    document = report_html(exp, compare, confidence)
    target.write_text(document, encoding="utf-8")
    return target
