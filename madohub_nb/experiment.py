"""Experiments: a workflow's variants run as whole conversations on fresh tiles, side by side.

:func:`experiment` checks everything first (the variants' routes and settings, the kickoff's
tiles, ``repeats``), then runs each variant ``repeats`` times, each run in a fresh
:class:`~madohub_nb.Hub` of its own (so its rounds are under its own session id in one log):
the workflow's tiles start, the kickoff prompts are sent, and the run goes on until one of
its routes ends (its stop keyword, ``max_rounds`` or a budget) and every tile is idle again,
or until ``timeout_s``. A run that fails is a row with its error, never the end of the
experiment; an interrupted experiment ends the tiles it made and keeps what finished.
A tile with ``worktree=`` gets a fresh worktree each run, from one base commit
(:mod:`~madohub_nb.experiment_worktrees`); the row says what the run changed there.
With ``hosts=`` the runs are spread over remote hosts, each run's tiles and worktrees on
its host (:mod:`~madohub_nb.experiment_hosts`), its rounds in the one log here.
"""

from __future__ import annotations

import concurrent.futures
import copy
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

from . import experiment_hosts as run_hosts
from . import experiment_worktrees as run_worktrees
from .defaults import parse_ssh_command
from .errors import MadohubError, MadohubValueError, MadohubWarning
from .hub import Hub
from .io.git import Changes, Worktree
from .io.log import RoundLog
from .io.machine import Machine
from .pipeline.route import Route
from .pipeline.workflow import Workflow, check_options, options_named
from .score import Scorer, check_scorers, score_run

if TYPE_CHECKING:
    import pandas as pd

    from .stats import Comparison

DF_COLUMNS: Final = (
    "variant", "repeat", "host", "session_id", "rounds", "stopped_by", "input_tokens", "output_tokens",
    "cost_usd", "wall_s", "files_changed", "lines_added", "lines_removed", "final_answer",
    "error",
)  # fmt: skip
"""``exp.df``'s columns, in order."""
NOT_STARTED: Final = "not started"
"""``stopped_by`` of a run that never started: ``max_cost_usd`` was spent first."""
STOPPED_BY: Final = ("stop keyword", "max rounds", "budget", "timeout", "error", NOT_STARTED)
"""What ``stopped_by`` can say."""
POLL_S: Final = 0.1
"""How often a run looks at its routes and tiles."""
SETTLE_EXTRA_S: Final = 2.0
"""Beyond twice the idle delay: how long a run with an ended route stays quiet before it is over
(a route's next round, if any, types into its target well within this)."""


def apply_variant(workflow: Workflow, name: str, overrides: Mapping[str, Any]) -> Workflow:
    """``workflow`` with one variant's overrides: by route key (``writer->reviewer``) its
    ``connect``/``gather`` settings, by tile name its ``tile`` settings. Errors name
    ``variants.NAME.KEY.SETTING`` and what is allowed."""
    where = f"variants.{name}"
    if not isinstance(overrides, Mapping):
        raise MadohubValueError(f"{where}: must map route ids or tile names to settings")
    tiles, routes = copy.deepcopy(workflow.tiles), copy.deepcopy(workflow.routes)
    keys = workflow.route_keys()
    for key, settings in overrides.items():
        if not isinstance(settings, Mapping):
            raise MadohubValueError(f"{where}.{key}: must be a dict of settings, got {settings!r}")
        if key in tiles:
            checked = check_options(settings, options_named("tile"), "experiment", f"{where}.{key}")
            tiles[key].update(checked)
        elif key in keys:
            spec = routes[keys.index(key)]
            table = options_named("gather" if spec.gather else "connect")
            spec.options.update(check_options(settings, table, "experiment", f"{where}.{key}"))
        else:
            raise MadohubValueError(
                f"{where}.{key}: the workflow has no route or tile {key!r}; "
                f"routes: {', '.join(keys) or 'none'}; tiles: {', '.join(tiles) or 'none'}"
            )
    try:
        varied = Workflow(f"{workflow.name}[{name}]", tiles, routes)
    except MadohubValueError as exc:
        raise MadohubValueError(f"{where}: {exc}") from None
    varied.path = workflow.path
    return varied


@dataclass
class Run:
    """One run of one variant: what ``exp.df`` shows of it."""

    variant: str
    repeat: int
    host: str | None = None
    """The host the run's tiles ran on (``hosts=``); None: this machine."""
    session_id: str | None = None
    rounds: int = 0
    stopped_by: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    wall_s: float | None = None
    files_changed: int | None = None
    lines_added: int | None = None
    lines_removed: int | None = None
    """The diff summary against ``base``, over the run's worktree tiles (None without one)."""
    final_answer: str | None = None
    error: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    """The scorers' columns (``score=``): NaN where one failed (the row's ``error`` says why)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What scorers said beyond their number (a command's test counts, a judge's cost)."""
    base: str | None = None
    """The commit (sha) the run's worktrees started from; None without a worktree tile."""
    worktrees: dict[str, str] = field(default_factory=dict)
    """Each worktree tile's worktree path for this run (kept or not: ``keep_worktrees``)."""
    changes: dict[str, Changes] = field(default_factory=dict)
    """Each worktree tile's changes against ``base`` (paths, lines added and removed)."""
    diffs: dict[str, str] = field(default_factory=dict, repr=False)
    """Each worktree tile's diff text against ``base`` (cut at ``DIFF_MAX_CHARS``): what the
    run's view and report show."""
    cwds: dict[str, str | None] = field(default_factory=dict, repr=False)

    def spent_usd(self, cost_columns: tuple[str, ...] = ()) -> float:
        """The dollars this run spent: its conversation's ``cost_usd`` and its scorers' costs
        (``cost_columns``, a judge's ``<name>_cost_usd``); unknown costs count as 0."""
        costs = [self.cost_usd, *(self.scores.get(c) for c in cost_columns)]
        return sum(c for c in costs if c is not None and math.isfinite(c))

    def row(self, score_columns: tuple[str, ...] = ()) -> dict[str, Any]:
        row = {c: getattr(self, c) for c in DF_COLUMNS}
        if score_columns:
            row |= {c: self.scores.get(c, math.nan) for c in score_columns} | {"meta": self.meta}
        return row

    def workdir(self, tile: str) -> str | None:
        """Where ``tile`` worked in this run: its worktree, else its ``cwd`` (None: the
        folder the hub started it in)."""
        if tile in self.worktrees:
            return self.worktrees[tile]
        if tile not in self.cwds:
            raise MadohubValueError(
                f"run {self.variant}#{self.repeat} has no tile {tile!r}; its tiles: "
                f"{', '.join(self.cwds) or 'none'}"
            )
        return self.cwds[tile]


@dataclass
class Experiment:
    """The outcome of :func:`experiment`: ``df`` (a row per run), ``rounds``, ``log_path``."""

    workflow: Workflow
    variants: dict[str, Workflow]
    log_path: str
    bases: dict[str, str] = field(default_factory=dict)
    """Each worktree tile's folder → the commit its runs' worktrees start from."""
    keep_worktrees: bool | str = "failed"
    allow_shell: bool = False
    runs: list[Run] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)
    _hubs: set[Hub] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _closed: threading.Event = field(default_factory=threading.Event, repr=False)
    scorers: list[Scorer] = field(default_factory=list)
    hosts: run_hosts.RunHosts | None = field(default=None, repr=False)
    """The hosts runs are spread over (``hosts=``); None: every run on this machine."""
    max_cost_usd: float | None = None
    """No run starts once the runs' spending (``spent_usd``) has reached it (None: no limit)."""
    parallel: int = 1
    """Runs at once (the progress line's time left divides by it)."""
    spent_usd: float = 0.0
    """What the runs finished so far spent: conversations and scorers (a judge's calls)."""
    progress: str = ""
    """The progress line as last shown: runs done of all, the time left, the dollars spent."""

    plotter: ClassVar[Callable[..., Any] | None] = None
    html_view: ClassVar[Callable[[Experiment], str] | None] = None
    reporter: ClassVar[Callable[..., Any] | None] = None
    """The views the notebook layer attaches (:mod:`madohub_nb.notebook.experiment_view`):
    this module imports no plotting and no HTML."""

    @property
    def cost_columns(self) -> tuple[str, ...]:
        """The scorers' cost columns (a judge's ``<name>_cost_usd``)."""
        return tuple(c for s in self.scorers for c in s.columns if c.endswith("_cost_usd"))

    @property
    def ran(self) -> pd.DataFrame:
        """``df`` without the runs that never started (``max_cost_usd``): what statistics use."""
        df = self.df
        return df[df["stopped_by"] != NOT_STARTED].reset_index(drop=True)

    @property
    def score_names(self) -> list[str]:
        """The scorers' names (their ``exp.df`` columns), in the order given."""
        return [s.name for s in self.scorers]

    @property
    def df(self) -> pd.DataFrame:
        """One row per finished run, in the order variants and repeats were given; with
        scorers, a column each (and a judge's ``<name>_cost_usd``), then ``meta``."""
        import pandas as pd

        order = list(self.variants)
        runs = sorted(self.runs, key=lambda r: (order.index(r.variant), r.repeat))
        extra = tuple(c for s in self.scorers for c in (s.name, *s.columns))
        columns = [*DF_COLUMNS, *extra, *(["meta"] if extra else [])]
        return pd.DataFrame([r.row(extra) for r in runs], columns=columns)

    @property
    def rounds(self) -> pd.DataFrame:
        """Every round of the experiment's runs, from the log (each run its own session id)."""
        with RoundLog(self.log_path, read_only=True) as log:
            df = log.df
        return df[df["session_id"].isin(self.session_ids)].reset_index(drop=True)

    def summary(self, confidence: float = 0.95, scores: list[str] | None = None) -> pd.DataFrame:
        """One row per variant: ``n``, each score's mean and interval (Wilson for 0/1, else a
        seeded bootstrap), the cost, rounds and wall-time means, cost per success.

        ``scores``: the score columns (None: the experiment's scorers, ``score_names``, or
        without them every numeric or bool column of ``df`` that is not a run column).
        """
        from . import stats

        return stats.summarize(self.ran, self._scores(scores), confidence, list(self.variants))

    def compare(
        self, a: str, b: str, score: str | None = None, confidence: float = 0.95
    ) -> Comparison:
        """Variant ``a`` against ``b`` on ``score`` (None: the only score): ``diff = mean(a) -
        mean(b)``, its interval, a permutation test's ``p_value`` (paired by repeat when the
        runs pair), ``better`` (a name, or None when it cannot tell) and a ``sentence``."""
        from . import stats

        for name in (a, b):
            if name not in self.variants:
                raise MadohubValueError(
                    f"no variant {name!r}; the experiment's: {', '.join(self.variants)}"
                )
        if score is None:
            names = self._scores(None)
            if len(names) != 1:
                raise MadohubValueError(
                    f"say which score to compare (score=...): the scores are "
                    f"{', '.join(names) or 'none (give the experiment a scorer)'}"
                )
            score = names[0]
        return stats.compare(self.ran, a, b, score, confidence)

    def _scores(self, scores: list[str] | None) -> list[str]:
        from . import stats

        if scores is not None:
            return list(scores)
        named = self.score_names
        return list(named) if named else stats.score_columns(self.df, DF_COLUMNS)

    def plot(self, confidence: float = 0.95) -> Any:
        """A matplotlib Figure: each score's mean and interval per variant (``summary()``),
        then rounds, cost and wall time per variant (mean, spread, runs)."""
        return self._view(Experiment.plotter)(self, confidence=confidence)

    def report(
        self,
        path: str | os.PathLike[str],
        compare: tuple[str, str, str] | None = None,
        confidence: float = 0.95,
    ) -> str:
        """Write one self-contained HTML file to ``path`` (nothing loaded from the network):
        the summary with its intervals, the comparison's sentence (``compare=(a, b, score)``;
        None: the first two variants on the first score), the plot, and each run's
        conversation and diff. Returns the file's path."""
        return str(self._view(Experiment.reporter)(self, path, compare, confidence))

    @staticmethod
    def _view(view: Callable[..., Any] | None) -> Callable[..., Any]:
        if view is None:
            raise MadohubError("no experiment views attached; import madohub_nb to draw them")
        return view

    def close(self) -> None:
        """End every run still going (their tiles killed); finished rows stay. Any thread."""
        self._closed.set()
        with self._lock:
            hubs = list(self._hubs)
        for hub in hubs:
            hub.close()

    def _repr_html_(self) -> str:
        return str(self._view(Experiment.html_view)(self))


def _check_kickoff(workflow: Workflow, kickoff: object) -> dict[str, str]:
    if not isinstance(kickoff, Mapping) or not kickoff:
        raise MadohubValueError(
            "kickoff must map tile names to the first prompt, e.g. {'writer': 'Write a slug "
            f"function.'}}, got {kickoff!r}"
        )
    for tile, text in kickoff.items():
        if tile not in workflow.tiles:
            raise MadohubValueError(
                f"kickoff.{tile}: the workflow has no tile {tile!r}; its tiles: "
                f"{', '.join(workflow.tiles)}"
            )
        if not isinstance(text, str) or not text.strip():
            raise MadohubValueError(f"kickoff.{tile}: must be a non-empty prompt, got {text!r}")
    return dict(kickoff)


def _positive_int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MadohubValueError(f"{what} must be a whole number of at least 1, got {value!r}")
    return value


def experiment(
    workflow: str | os.PathLike[str] | Workflow,
    variants: Mapping[str, Mapping[str, Mapping[str, Any]]],
    kickoff: Mapping[str, str],
    repeats: int = 1,
    timeout_s: float = 900.0,
    parallel: int = 1,
    log_path: str | os.PathLike[str] | None = None,
    score: Scorer | Callable[[Any], float | bool] | list[Any] | None = None,
    base: str | None = None,
    keep_worktrees: bool | str = "failed",
    allow_shell: bool = False,
    hosts: list[str] | None = None,
    max_cost_usd: float | None = None,
    **settings: Any,
) -> Experiment:
    """Run each variant of ``workflow`` ``repeats`` times on fresh tiles; tabulate the outcome.

    ``variants``: ``{name: {route id or tile name: {setting: value}}}`` (``{}`` runs the
    workflow as it is). ``kickoff``: the first prompt of each named tile. ``parallel``: runs
    at once. ``log_path``: where the runs log (None: where a hub logs by default).
    ``score``: scorers (``mh.score.command``/``judge``/``regex``, or callables ``f(run)``),
    each a column of ``exp.df``, run in each run's working folders before its tiles end.
    ``base``: the commit (a sha, branch or tag) every run's worktree tiles start from, in a
    fresh worktree of their own (None: the repository's ``HEAD`` when the experiment starts;
    resolved once). ``keep_worktrees``: which runs' worktrees stay after the run (their
    changes are read first, into ``exp.df``): ``"failed"`` (the default) keeps those of runs
    that failed, to look into, and removes the others, so repeated runs leave no pile of
    folders and branches; False removes all, with changes too (they are the experiment's own);
    True keeps all. ``allow_shell``: a kickoff may type into a shell or terminal tile.
    ``hosts``: ssh hosts (as a tile's ``host=``) to spread the runs over: each run takes the
    host with the fewest runs going and starts all its tiles there, its worktrees made there
    from ``base`` (pushed to the host over ssh first); checked, all of them, before any run.
    ``max_cost_usd``: once the runs finished have spent this much (their conversations'
    ``cost_usd`` and their scorers' costs), no further run starts; runs under way finish, and
    each run not started is a row saying why (``stopped_by`` ``"not started"``), left out of
    ``summary()`` and ``compare()``. None (the default): no limit.
    ``settings``: the hubs' other settings (``socket_name``, ``idle_delay_ms``, ...).
    Everything is checked before the first run starts.
    """
    wf = workflow if isinstance(workflow, Workflow) else Workflow.load(workflow)
    if not isinstance(variants, Mapping) or not variants:
        raise MadohubValueError(
            "variants must map a name to its overrides, e.g. "
            "{'terse': {'writer->reviewer': {'template': '…'}}}"
        )
    varied = {str(name): apply_variant(wf, str(name), o) for name, o in variants.items()}
    prompts = _check_kickoff(wf, kickoff)
    scorers = check_scorers(score, (*DF_COLUMNS, "meta"))
    repeats, parallel = _positive_int("repeats", repeats), _positive_int("parallel", parallel)
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0 and math.isfinite(timeout_s)):
        raise MadohubValueError(
            f"timeout_s must be a positive number of seconds, got {timeout_s!r}"
        )
    keep = run_worktrees.check_keep(keep_worktrees)
    host_names = run_hosts.check_hosts(hosts, varied)
    limit = _check_max_cost(max_cost_usd)
    bases = run_worktrees.resolve_bases(varied, base)
    probe = Hub(log_path=log_path, **settings)  # the settings checked, the log's place resolved
    path = probe.log_path
    ssh, remote_socket = parse_ssh_command(probe.ssh_command), probe.remote_socket_name
    probe.close()
    placed = None
    if host_names is not None:
        placed = run_hosts.open_hosts(host_names, varied, bases, ssh, remote_socket)
    exp = Experiment(
        wf, varied, path, bases, keep, allow_shell is True, scorers=scorers, hosts=placed,
        max_cost_usd=limit, parallel=parallel,
    )  # fmt: skip
    jobs = [(name, k) for name in varied for k in range(1, repeats + 1)]
    bar = _progress(len(jobs))
    exp.progress = progress_text(exp.runs, len(jobs), parallel, 0.0)
    bar(0, exp.progress)
    pool = concurrent.futures.ThreadPoolExecutor(parallel, thread_name_prefix="madohub-exp")
    futures = [
        pool.submit(_run, exp, name, k, prompts, timeout_s, path, settings) for name, k in jobs
    ]
    try:
        for done in concurrent.futures.as_completed(futures):
            exp.runs.append(done.result())
            exp.progress = progress_text(exp.runs, len(jobs), parallel, exp.spent_usd)
            bar(len(exp.runs), exp.progress)
    except KeyboardInterrupt:  # the tiles made are ended; what finished stays in exp.df
        exp.close()
        for f in futures:
            f.cancel()
        warnings.warn(
            f"experiment interrupted: {len(exp.runs)} of {len(jobs)} runs finished (exp.df); "
            f"the rounds of the run cut short stay in the log ({path})",
            MadohubWarning,
            stacklevel=2,
        )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if placed is not None:
            placed.close()
    return exp


def _check_max_cost(value: object) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value > 0 and math.isfinite(value))
    ):
        raise MadohubValueError(
            f"max_cost_usd must be a positive number of dollars (e.g. 0.50) or None for no "
            f"limit, got {value!r}"
        )
    return float(value)


def usd(value: float) -> str:
    """Dollars as a progress line and a row say them: cents, or 2 digits below a cent."""
    return f"{value:.2f}" if value >= 0.01 or value == 0 else f"{value:.2g}"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_text(runs: list[Run], total: int, parallel: int, spent_usd: float) -> str:
    """``3/8 runs · ~1m 20s left · $0.42 spent``: the time left is the mean wall time of the
    runs that ran, times the runs still to go, over ``parallel`` (runs at once)."""
    done = len(runs)
    walls = [r.wall_s for r in runs if r.wall_s is not None and r.stopped_by != NOT_STARTED]
    if done >= total:
        left = "done"
    elif not walls:
        left = "time left unknown"
    else:
        still = total - done
        left = f"~{_duration(sum(walls) / len(walls) * still / min(parallel, still))} left"
    return f"{done}/{total} runs · {left} · ${usd(spent_usd)} spent"


def _progress(total: int) -> Callable[[int, str], None]:
    """A progress bar in a notebook (an ipywidgets bar and its line: runs done, time left,
    dollars spent), else nothing."""
    try:
        from IPython import get_ipython

        if get_ipython() is None:
            raise ImportError
        import ipywidgets
        from IPython.display import display
    except ImportError:
        return lambda n, text: None
    bar = ipywidgets.IntProgress(value=0, max=total, description="runs")
    label = ipywidgets.Label(value="")
    display(ipywidgets.HBox([bar, label]))

    def update(n: int, text: str) -> None:
        bar.value, label.value = n, text

    return update


def _run(
    exp: Experiment, name: str, repeat: int, kickoff: Mapping[str, str], timeout_s: float,
    log_path: str, settings: Mapping[str, Any],
) -> Run:  # fmt: skip
    """One run, on a fresh hub, on the host it takes (``hosts=``) or here; never raises."""
    host = exp.hosts.take() if exp.hosts is not None else None
    try:
        return _run_on(exp, host, name, repeat, kickoff, timeout_s, log_path, settings)
    finally:
        if exp.hosts is not None and host is not None:
            exp.hosts.give_back(host)


def _run_on(
    exp: Experiment, host: str | None, name: str, repeat: int, kickoff: Mapping[str, str],
    timeout_s: float, log_path: str, settings: Mapping[str, Any],
) -> Run:  # fmt: skip
    """One run, on a fresh hub; never raises (a failure is the row's ``error``)."""
    run = Run(name, repeat, host=host)
    if exp._closed.is_set():
        run.stopped_by, run.error = "error", "the experiment was closed before this run started"
        return run
    with exp._lock:
        spent = exp.spent_usd
    if exp.max_cost_usd is not None and spent >= exp.max_cost_usd:
        run.stopped_by = NOT_STARTED
        run.error = f"not started: max_cost_usd {usd(exp.max_cost_usd)} reached after {usd(spent)}"
        return run
    started = time.monotonic()
    hub = Hub(**{**settings, "log_path": log_path})
    with exp._lock:
        exp._hubs.add(hub)
        exp.session_ids.append(hub.session_id)
    run.session_id = hub.session_id
    made: dict[str, Worktree] = {}
    machine = exp.hosts.machines[host] if exp.hosts is not None and host is not None else None
    try:
        folders = exp.hosts.repos[host] if exp.hosts is not None and host is not None else None
        workflow, made = run_worktrees.make_run_worktrees(
            exp.variants[name], exp.bases, name, repeat, machine, folders
        )
        if exp.hosts is not None and host is not None:
            workflow = exp.hosts.place(workflow, host)
        run.worktrees = {tile: wt.path for tile, wt in made.items()}
        run.base = next((wt.base for wt in made.values()), None)
        run.cwds = {tile: options.get("cwd") for tile, options in workflow.tiles.items()}
        routes = hub.run(workflow)
        deadline = started + timeout_s
        for tile in hub.tiles.values():
            tile.ready.result(max(0.1, deadline - time.monotonic()))
        _wait(lambda: all(r.ready.is_set() for r in routes), deadline)
        for tile_name, text in kickoff.items():
            _wait(lambda t=tile_name: hub.tiles[t].state == "idle", deadline)
            sent = hub.send(tile_name, text, allow_shell=exp.allow_shell)
            sent.result(max(0.1, deadline - time.monotonic()))
        run.stopped_by = _until_done(hub, routes, deadline)
        if run.stopped_by == "error":
            run.error = next((r.last_error for r in routes if r.last_error), "a route failed")
        elif run.stopped_by == "timeout":
            run.error = f"timed out after {timeout_s} s: {_where_it_was(hub, routes)}"
    except MadohubError as exc:
        run.stopped_by, run.error = "error", str(exc)
    except TimeoutError:
        run.stopped_by = "timeout"
        run.error = f"timed out after {timeout_s} s starting: {_where_it_was(hub, [])}"
    except Exception as exc:  # a run's bug is its row, not the experiment's end
        run.stopped_by, run.error = "error", f"{type(exc).__name__}: {exc}"
    finally:
        wait_s = max(0.0, min(5.0, started + timeout_s + 5 - time.monotonic()))
        _wait_quiet(hub, wait_s)
        score_run(run, hub, exp.scorers)  # in the run's folders, before its tiles end
        hub.close()
        with exp._lock:
            exp._hubs.discard(hub)
    run.wall_s = round(time.monotonic() - started, 3)
    if exp._closed.is_set() and run.stopped_by is None:
        run.stopped_by, run.error = "error", "the experiment was closed during this run"
    _end_worktrees(run, made, exp.keep_worktrees, machine)
    _fill_from_log(run, log_path)
    with exp._lock:  # before the next run of this thread looks at it
        exp.spent_usd += run.spent_usd(exp.cost_columns)
    return run


def _end_worktrees(
    run: Run, made: Mapping[str, Worktree], keep: bool | str, machine: Machine | None = None
) -> None:
    """Read the run's worktrees' changes into its row, then keep or remove them (on
    ``machine``, the run's host; None: here)."""
    if not made:
        return
    run.changes, problem = run_worktrees.read_changes(made, machine)
    for column, value in run_worktrees.totals(run.changes).items():
        setattr(run, column, value)
    run.diffs = run_worktrees.read_diffs(made, machine)
    if problem is not None:
        run.error = run.error or problem
    if not run_worktrees.keeps(keep, failed=run.error is not None):
        run_worktrees.drop_run_worktrees(made, machine)


def _wait(condition: Any, deadline: float) -> None:
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError
        time.sleep(POLL_S)


def _ended_by(route: Route) -> str | None:
    """Why ``route`` ended (``STOPPED_BY``), or None while it goes on."""
    if route.state == "exhausted":
        return "budget" if route.budget.spent() else "max rounds"
    if route.state == "stopped":
        return "stop keyword" if route.last_status == "stopped" else "error"
    return None


def _until_done(hub: Hub, routes: list[Route], deadline: float) -> str:
    """Wait until a route has ended and the run has settled: every tile idle and no round
    finished for ``settle_s`` (longer than a route takes from an idle source to a busy
    target); what ended it, or ``timeout``."""
    settle_s = 2 * hub.idle_delay_ms / 1000 + SETTLE_EXTRA_S
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        if hub.closed:
            return "error"
        reasons = [why for r in routes if (why := _ended_by(r)) is not None]
        if "error" in reasons:
            return "error"
        now = (hub.runtime.recorder.rounds_finished, [t.state for t in hub.tiles.values()])
        if now != last:
            last, since = now, time.monotonic()
        quiet = all(state == "idle" for state in now[1])
        if reasons and quiet and time.monotonic() - since >= settle_s:
            return reasons[0]
        time.sleep(POLL_S)
    return "timeout"


def _where_it_was(hub: Hub, routes: list[Route]) -> str:
    """The routes' and tiles' states, for a run's timeout row."""
    said = [f"route {r.id} {r.state} after {r.rounds} rounds" for r in routes]
    for t in hub.tiles.values():
        try:
            lines = [line for line in t.screen().splitlines() if line.strip()]
        except MadohubError:
            lines = []
        said.append(f"tile {t.name} {t.last_state}, its screen ending {lines[-3:]!r}")
    return "; ".join(said) or "nothing started"


def _wait_quiet(hub: Hub, wait_s: float) -> None:
    """Let rounds under way land in the log (bounded), so the row reads the whole run."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end and hub.runtime.recorder.pending:
        time.sleep(POLL_S)


def _fill_from_log(run: Run, log_path: str) -> None:
    """Rounds, tokens, cost and the final answer of one run, read from its rows in the log."""
    if run.session_id is None:
        return
    try:
        with RoundLog(log_path, read_only=True) as log:
            df = log.df
    except MadohubError as exc:
        run.error = run.error or f"the log could not be read: {exc}"
        return
    rows = df[(df["session_id"] == run.session_id) & (df["round"] > 0)]
    run.rounds = int((rows["status"].isin(("delivered", "shadow"))).sum())
    for column in ("input_tokens", "output_tokens"):
        values = rows[column].dropna()
        setattr(run, column, int(values.sum()) if len(values) else None)
    costs = rows["cost_usd"]
    run.cost_usd = None if costs.isna().all() else float(costs.sum(skipna=False))
    answers = rows["extracted"].dropna()
    run.final_answer = str(answers.iloc[-1]) if len(answers) else None
