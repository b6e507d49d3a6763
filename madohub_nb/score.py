"""Scorers: what a run of an experiment achieved, as one number per run (``mh.score``).

``mh.experiment(..., score=[...])`` takes :func:`command` (a shell command in a tile's
working folder: 1.0 on exit 0, its test counts in the run's ``meta``), :func:`judge` (a model
grades the final answer on a rubric; its cost recorded), :func:`regex` (the final answer
matches) and any callable ``f(run)`` returning a number or a bool (named by its ``__name__``).
Each runs after its run has settled, before the run's tiles end. A scorer that raises or
times out leaves NaN and says why in the run's ``error``; the experiment goes on.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .defaults import price_for
from .errors import MadohubError, MadohubValueError
from .pipeline.transforms import AIClientConfig, resolve_api_key, scrub

if TYPE_CHECKING:
    import pandas as pd

    from .hub import Hub
    from .pipeline.tile import Tile

DIFF_MAX_CHARS: Final = 20_000
"""How much of a working folder's diff a judge is shown (the rest is cut, and said so)."""
JUDGE_MAX_TOKENS: Final = 300
"""The judge's reply: a score and one sentence."""
TAIL_LINES: Final = 5
"""How many last lines of a command's output its ``meta`` keeps."""
JUDGE_SYSTEM: Final = (
    "You grade the outcome of a conversation between AI coding agents against a rubric. "
    'Reply with only a JSON object: {"score": <a number from 0 to 1>, "why": "<one sentence>"}.'
)


class Scorer:
    """One value per run: ``name`` (its ``exp.df`` column) and ``__call__(run) -> float``.

    ``columns``: further ``exp.df`` columns it fills (the judge's ``<name>_cost_usd``)."""

    name: str = "score"

    @property
    def columns(self) -> tuple[str, ...]:
        return ()

    def __call__(self, run: ScoredRun) -> float | bool:
        raise NotImplementedError


class ScoredRun:
    """What a scorer sees of one run: ``variant``, ``repeat``, ``session_id``,
    ``final_answer``, ``rounds`` (its rounds: a slice of the log's DataFrame), ``meta`` (a
    dict scorers write into), ``hub`` (still open) and :meth:`workdir`."""

    def __init__(self, run: Any, hub: Hub, rounds: pd.DataFrame) -> None:
        self._run = run
        self.hub = hub
        self.variant: str = run.variant
        self.repeat: int = run.repeat
        self.session_id: str | None = run.session_id
        self.rounds = rounds
        answers = rounds.loc[rounds["round"] > 0, "extracted"].dropna()
        self.final_answer: str | None = str(answers.iloc[-1]) if len(answers) else None
        self.meta: dict[str, Any] = run.meta
        self.values: dict[str, float] = run.scores

    @property
    def base(self) -> str | None:
        """The commit the run's worktrees started from (None: no worktree tile)."""
        base = getattr(self._run, "base", None)
        return base if isinstance(base, str) else None

    def tile(self, name: str) -> Tile:
        """The run's tile ``name``; a teaching error when the run has none (it failed first)."""
        found = self.hub.tiles.get(name)
        if found is None:
            raise MadohubValueError(
                f"the run has no tile {name!r}; its tiles: {', '.join(self.hub.tiles) or 'none'}"
            )
        return found

    def workdir(self, tile: str) -> str:
        """Where ``tile`` works in this run: its worktree when it has one, else its folder."""
        own = getattr(self._run, "workdir", None)  # the run's own worktrees, when it made them
        if callable(own) and (path := own(tile)) is not None:
            return str(path)
        found = self.hub.tiles.get(tile)
        if found is None:
            raise MadohubValueError(
                f"the run has no tile {tile!r}; its tiles: {', '.join(self.hub.tiles) or 'none'}"
            )
        path = found.worktree or found.pane_path()
        if not path:
            raise MadohubError(f"tile {tile!r}'s working folder cannot be read (its pane is gone)")
        return path


# command ------------------------------------------------------------------------------

_PYTEST_LINE = re.compile(r"\b\d+ (?:passed|failed|errors?)\b.* in [\d.]+s")
_PYTEST_COUNT = re.compile(r"\b(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)\b")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_UNITTEST_END = re.compile(r"^(OK|FAILED)(?: \(([^)]*)\))?\s*$", re.MULTILINE)


def parse_test_counts(output: str) -> dict[str, int]:
    """pytest's summary (``2 passed, 1 failed in 0.1s``) or unittest's (``Ran 3 tests`` and
    ``FAILED (failures=1)``) as ``passed``/``failed``/``errors``/``skipped``; {} if neither."""
    lines = [line for line in output.splitlines() if _PYTEST_LINE.search(line)]
    if lines:
        found = {word: int(n) for n, word in _PYTEST_COUNT.findall(lines[-1])}
        counts = {"passed": found.get("passed", 0), "failed": found.get("failed", 0)}
        errors = found.get("error", 0) + found.get("errors", 0)
        if errors:
            counts["errors"] = errors
        if found.get("skipped"):
            counts["skipped"] = found["skipped"]
        return counts
    ran, end = _UNITTEST_RAN.findall(output), _UNITTEST_END.findall(output)
    if not ran or not end:
        return {}
    said = dict(
        (part.split("=")[0].strip(), int(part.split("=")[1]))
        for part in end[-1][1].split(",") if "=" in part
    )  # fmt: skip
    failed, errors, skipped = (said.get(k, 0) for k in ("failures", "errors", "skipped"))
    counts = {"passed": int(ran[-1]) - failed - errors - skipped, "failed": failed}
    if errors:
        counts["errors"] = errors
    if skipped:
        counts["skipped"] = skipped
    return counts


class Command(Scorer):
    """:func:`command`'s scorer."""

    def __init__(self, cmd: str, tile: str, name: str | None, timeout_s: float) -> None:
        if not isinstance(cmd, str) or not cmd.strip():
            raise MadohubValueError(f"score.command: cmd must be a shell command, got {cmd!r}")
        if not isinstance(tile, str) or not tile:
            raise MadohubValueError(f"score.command: tile must name a tile, got {tile!r}")
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not (0 < timeout_s < math.inf)
        ):
            raise MadohubValueError(
                f"score.command: timeout_s must be a positive number of seconds, got {timeout_s!r}"
            )
        self.cmd, self.tile, self.timeout_s = cmd, tile, float(timeout_s)
        self.name = _name("command", name)

    def __call__(self, run: ScoredRun) -> float:
        tile = run.tile(self.tile)
        cwd = run.workdir(self.tile)
        # The hub's script runner: the environment without API keys, its own process group,
        # all of it killed when the time is up (a TmuxError saying so).
        done = tile.machine.run_script(self.cmd, cwd, self.timeout_s)
        output = (done.stdout + b"\n" + done.stderr).decode("utf-8", "replace")
        tail = [line for line in output.splitlines() if line.strip()][-TAIL_LINES:]
        run.meta[self.name] = {"exit": done.returncode, **parse_test_counts(output), "tail": tail}
        return 1.0 if done.returncode == 0 else 0.0


def command(cmd: str, tile: str, name: str | None = None, timeout_s: float = 60.0) -> Scorer:
    """Run ``cmd`` (``sh -c``) in ``tile``'s working folder (its worktree when it has one)
    after the run: 1.0 on exit 0, else 0.0. ``meta[name]``: ``exit``, pytest's or unittest's
    ``passed``/``failed`` (``errors``, ``skipped`` when some), the output's last lines.
    Past ``timeout_s`` its whole process group is killed and the score is NaN."""
    return Command(cmd, tile, name, timeout_s)


# regex --------------------------------------------------------------------------------


class Regex(Scorer):
    """:func:`regex`'s scorer."""

    def __init__(self, pattern: str, name: str | None) -> None:
        try:
            self.pattern = re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise MadohubValueError(f"score.regex: {pattern!r} is not a pattern: {exc}") from None
        self.name = _name("regex", name)

    def __call__(self, run: ScoredRun) -> float:
        return 1.0 if run.final_answer and self.pattern.search(run.final_answer) else 0.0


def regex(pattern: str, name: str | None = None) -> Scorer:
    """1.0 if the run's final answer matches ``pattern`` (``re.search``), else 0.0."""
    return Regex(pattern, name)


# judge --------------------------------------------------------------------------------


def parse_grade(reply: str) -> tuple[float, str | None]:
    """A judge's reply: a JSON object with ``score`` (0..1) and maybe ``why``, or a bare
    number; anything else is a MadohubError quoting it."""
    text = reply.strip()
    try:
        said = json.loads(text)
    except ValueError:
        said = None
    why = None
    if isinstance(said, dict):
        why = said.get("why") if isinstance(said.get("why"), str) else None
        said = said.get("score")
    if isinstance(said, bool) or not isinstance(said, int | float) or not 0 <= said <= 1:
        raise MadohubError(
            f'the judge\'s reply is not {{"score": <0 to 1>, "why": "..."}}: {text[:200]!r}'
        )
    return float(said), why


def _diff(run: ScoredRun, tiles: Iterable[str]) -> str:
    """The working folders' changes (``git diff`` from a worktree's base, else from HEAD)."""
    from .io.git import run_git

    parts, seen = [], set()
    for name in tiles:
        cwd = run.workdir(name)
        if cwd in seen:
            continue
        seen.add(cwd)
        tile = run.tile(name)
        run_base = run.base  # the experiment's worktrees' start
        own_base = tile.git_worktree.base if tile.git_worktree is not None else None
        base = run_base or own_base or "HEAD"
        done = run_git(tile.machine, f"git diff {base} --", cwd)
        parts.append(f"# {name} ({cwd})\n" + done.stdout.decode("utf-8", "replace"))
    text = "\n".join(parts)
    if len(text) > DIFF_MAX_CHARS:
        text = text[:DIFF_MAX_CHARS] + f"\n[... cut at {DIFF_MAX_CHARS} characters]"
    return text


class Judge(Scorer):
    """:func:`judge`'s scorer."""

    def __init__(
        self, rubric: str, model: str | None, name: str | None, diff: bool | str | Sequence[str]
    ) -> None:
        if not isinstance(rubric, str) or not rubric.strip():
            raise MadohubValueError(f"score.judge: rubric must be a non-empty text, got {rubric!r}")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise MadohubValueError(f"score.judge: model must be a model name, got {model!r}")
        self.rubric, self.model, self.diff = rubric, model, diff
        self.name = _name("judge", name)

    @property
    def columns(self) -> tuple[str, ...]:
        return (f"{self.name}_cost_usd",)

    def __call__(self, run: ScoredRun) -> float:
        message = f"Rubric:\n{self.rubric}\n\nThe final answer:\n{run.final_answer or '(none)'}"
        if self.diff is not False:
            tiles = (
                list(run.hub.tiles) if self.diff is True
                else [self.diff] if isinstance(self.diff, str) else list(self.diff)
            )  # fmt: skip
            message += f"\n\nThe changes in the working folders:\n{_diff(run, tiles)}"
        asked = ask_model(run.hub.ai_config(self.model), JUDGE_SYSTEM, message, run.hub.prices)
        run.values[f"{self.name}_cost_usd"] = asked.cost_usd
        said = {"model": asked.model, "cost_usd": asked.cost_usd}
        run.meta[self.name] = {**said, **{f"{k}_tokens": n for k, n in asked.tokens.items()}}
        score, why = parse_grade(asked.reply)
        run.meta[self.name].update(score=score, why=why)
        return score


@dataclass(frozen=True)
class Asked:
    """A judge's reply, the model that answered, its tokens (``input``, ``output``) and cost."""

    reply: str
    model: str
    tokens: dict[str, int]
    cost_usd: float


def ask_model(
    config: AIClientConfig, system: str, message: str, prices: Mapping[str, Mapping[str, float]]
) -> Asked:
    """One judge's question through the ``anthropic`` SDK (``config``: the hub's API settings),
    priced from ``prices`` (NaN: the model has no price); a failure is a MadohubError."""
    import anthropic

    key = resolve_api_key(config.api_key)
    if key is None:
        raise MadohubError(
            "the judge needs an Anthropic API key: give the experiment api_key= (a hub "
            "setting) or set ANTHROPIC_API_KEY"
        )
    client = anthropic.Anthropic(
        api_key=key, base_url=config.base_url, timeout=config.timeout_s,
        max_retries=config.max_retries,
    )  # fmt: skip
    try:
        with client:
            response = client.messages.create(
                model=config.model, max_tokens=JUDGE_MAX_TOKENS, system=system,
                messages=[{"role": "user", "content": message}],
            )  # fmt: skip
    except anthropic.AnthropicError as err:  # "from None": its chain may carry headers
        raise MadohubError(
            f"the judge's call failed (model {config.model}): "
            + scrub(f"{type(err).__name__}: {err}", key)
        ) from None
    usage = response.usage
    counts = {"input": usage.input_tokens, "output": usage.output_tokens}
    model = response.model or config.model
    row = price_for(model, prices)
    cost = math.nan if row is None else sum(row[k] * n for k, n in counts.items()) / 1e6
    reply = "".join(getattr(b, "text", "") for b in response.content)
    return Asked(reply, model, counts, cost)


def judge(
    rubric: str,
    model: str | None = None,
    name: str | None = None,
    diff: bool | str | Sequence[str] = False,
) -> Scorer:
    """A model grades the run's final answer on ``rubric`` (0 to 1), through the ``anthropic``
    SDK with the hub's API settings (``api_key``, ``base_url``, ``model`` unless ``model``).
    ``diff``: also show it the working folders' changes (True: every tile's; a tile name or
    names: theirs). Its tokens and cost are in ``meta[name]``, the cost in
    ``<name>_cost_usd``; a reply that is not a score is an error (NaN)."""
    return Judge(rubric, model, name, diff)


# a callable, and running them ---------------------------------------------------------


class _Callable(Scorer):
    def __init__(self, fn: Callable[[ScoredRun], float | bool]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, run: ScoredRun) -> float | bool:
        return self.fn(run)


def _name(default: str, name: object) -> str:
    if name is None:
        return default
    if not isinstance(name, str) or not name.strip():
        raise MadohubValueError(f"a scorer's name must be a non-empty text, got {name!r}")
    return name


def check_scorers(score: object, taken: Iterable[str]) -> list[Scorer]:
    """``score`` (None, or a list of scorers and callables) as Scorers whose columns are
    unique and not among ``taken`` (``exp.df``'s own); else a teaching error."""
    if score is None:
        return []
    if isinstance(score, Scorer) or callable(score) or not isinstance(score, list | tuple):
        score = [score]
    scorers: list[Scorer] = []
    seen = {c: "exp.df's own column" for c in taken}
    for i, s in enumerate(score):
        if not isinstance(s, Scorer):
            if not callable(s):
                raise MadohubValueError(
                    f"score[{i}] must be a scorer (mh.score.command/judge/regex) or a callable "
                    f"f(run) -> number, got {s!r}"
                )
            s = _Callable(s)
        for column in (s.name, *s.columns):
            if column in seen:
                raise MadohubValueError(
                    f"score[{i}]: the column {column!r} is taken ({seen[column]}); give each "
                    "scorer its own name= (a callable is named by its __name__)"
                )
            seen[column] = f"score[{i}]"
        scorers.append(s)
    return scorers


def score_run(run: Any, hub: Hub, scorers: Sequence[Scorer]) -> None:
    """Every scorer on ``run`` (an experiment's Run: ``scores``, ``meta``, ``error`` are
    written), while its hub is still open; never raises (a failure is NaN and its error)."""
    if not scorers:
        return
    said: list[str] = []
    if hub.closed:
        rounds = None
        said.append("not scored: the run was closed first")
    else:
        try:
            df = hub.log.df
            rounds = df[df["session_id"] == run.session_id].reset_index(drop=True)
        except MadohubError as exc:
            rounds = None
            said.append(f"not scored: the log could not be read: {exc}")
    view = None if rounds is None else ScoredRun(run, hub, rounds)
    for s in scorers:
        run.scores[s.name] = math.nan
        for column in s.columns:
            run.scores.setdefault(column, math.nan)
        if view is None:
            continue
        try:
            value = s(view)
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, int | float):
                raise MadohubValueError(f"returned {value!r}; a scorer returns a number or a bool")
            run.scores[s.name] = float(value)
        except Exception as exc:  # a scorer's failure is its cell, not the experiment's end
            why = str(exc) if isinstance(exc, MadohubError) else f"{type(exc).__name__}: {exc}"
            said.append(f"scorer {s.name}: {why}")
    if said:
        run.error = "; ".join([run.error, *said] if run.error else said)
