"""The transform playground: try prompt variants on answers already in the round log.

:func:`try_transforms` renders every variant's prompt for every recorded answer, with no
agent running: a template (``prompt-wrap``), a transform, or a route's transform settings
(``{"transform": "summary", "model": ...}``), exactly as a route would build them
(:func:`madohub_nb.pipeline.transforms.make_transform_spec`). AI transforms call the real
``anthropic`` SDK with the hub's API settings and are priced from its price table; with
``judge=`` a model compares the variants' prompts of each round two by two, and
``result.ranking`` counts the wins. A variant that fails on a round says why in its cell;
the others go on. In a notebook the result shows the prompts of one round side by side,
what differs from the first variant marked (the view is attached by the notebook layer).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

from .defaults import MAX_ROUNDS_DEFAULT, check_prices, price_for
from .engine import Engine
from .errors import MadohubError, MadohubValueError
from .io.log import RoundRecord
from .pipeline.transforms import (
    AIClientConfig,
    Transform,
    TransformContext,
    TransformResult,
    TransformSpec,
    apply_with_usage,
    make_transform_spec,
)
from .score import Judge, ask_model

if TYPE_CHECKING:
    import pandas as pd

    from .hub import Hub

COLUMNS: Final = ("round", "variant", "prompt", "tokens", "cost_usd", "error")
"""``result.df``'s columns: one row per (recorded answer, variant)."""
RANKING_COLUMNS: Final = ("variant", "wins", "losses", "win_rate")
CHARS_PER_TOKEN: Final = 4
"""A rendered prompt's tokens are estimated as its characters / 4 (rounded up): the usual
rule of thumb for English and code with Anthropic's tokenizer; an AI variant's are exact."""
AI_WAIT_S: Final = 600.0
"""How long one AI variant's call may take, retries included."""
VARIANT_KEYS: Final = ("transform", "template", "model")
"""What a variant given as settings may set: a route's transform options."""
JUDGE_RUBRIC: Final = (
    "Which prompt will lead the receiving agent to act best on the sender's answer: "
    "complete, clear and short?"
)
JUDGE_SYSTEM: Final = (
    "You compare two prompts written from the same answer of an AI coding agent; each would "
    "be typed into the next agent. Reply with only a JSON object: "
    '{"better": "A" or "B", "why": "<one sentence>"}.'
)

Variant = str | TransformSpec | Transform | Mapping[str, Any]
"""A template (``prompt-wrap``), a transform, or ``{"transform", "template", "model"}``."""


def variant_spec(name: str, variant: object) -> TransformSpec:
    """``variant`` as the ``TransformSpec`` a route with those settings would use."""
    where = f"variants[{name!r}]"
    try:
        if isinstance(variant, TransformSpec):
            return variant
        if isinstance(variant, Transform):
            return make_transform_spec(variant.name)
        if isinstance(variant, str):
            return make_transform_spec("prompt-wrap", variant)
        if isinstance(variant, Mapping):
            unknown = [k for k in variant if k not in VARIANT_KEYS]
            if unknown:
                raise MadohubValueError(
                    f"{unknown[0]!r} is not a transform setting; allowed: {', '.join(VARIANT_KEYS)}"
                )
            return make_transform_spec(
                variant.get("transform", "prompt-wrap"), variant.get("template"),
                variant.get("model"),
            )  # fmt: skip
    except MadohubValueError as exc:
        raise MadohubValueError(f"{where}: {exc}") from None
    raise MadohubValueError(
        f"{where} must be a template, a transform (TransformSpec) or settings like "
        f"{{'transform': 'summary', 'model': '…'}}, got {type(variant).__name__}"
    )


def context_of(rec: RoundRecord, target_kind: str = "unknown") -> TransformContext:
    """What the round's transform saw, from its log row: the extracted answer, the terminal's
    last lines and ``max_rounds`` when the row kept them, a gather's answers."""
    if rec.extracted is None:
        raise MadohubValueError(f"round {rec.round_id} has no extracted answer")
    tail = rec.meta.get("screen_tail")
    max_rounds = rec.meta.get("max_rounds")
    return TransformContext(
        output=rec.extracted,
        screen_lines=list(tail) if isinstance(tail, list) else rec.extracted.splitlines(),
        round=rec.round,
        max_rounds=max_rounds if isinstance(max_rounds, int) else MAX_ROUNDS_DEFAULT,
        source=rec.source,
        target=rec.target,
        target_kind=target_kind,
        answers=rec.extracted if "gathered" in rec.meta else None,
    )


def estimate_tokens(text: str) -> int:
    """``text``'s tokens, estimated (see :data:`CHARS_PER_TOKEN`)."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass
class Playground:
    """What :func:`try_transforms` found: ``df`` (round, variant, prompt, tokens, cost_usd,
    error), ``answers`` (round id -> the recorded answer), ``ranking`` and ``comparisons``
    (with ``judge=``; else None). In a notebook it shows as the side-by-side view."""

    df: pd.DataFrame
    variants: list[str]
    answers: dict[str, str]
    ranking: pd.DataFrame | None = None
    comparisons: pd.DataFrame | None = None
    view_maker: ClassVar[Callable[[Playground], Any] | None] = None
    """The notebook layer's widget (``notebook.display.attach``)."""
    _view: Any = field(default=None, repr=False)

    def prompts(self, round_id: str) -> dict[str, tuple[str | None, str | None]]:
        """``{variant: (prompt, error)}`` of one round."""
        rows = self.df[self.df["round"] == round_id]
        if rows.empty:
            raise MadohubValueError(
                f"no round {round_id!r} here; rounds: {', '.join(self.answers) or 'none'}"
            )
        return {
            str(r["variant"]): (_text(r["prompt"]), _text(r["error"]))
            for r in rows.to_dict("records")
        }

    def widget(self) -> Any:
        """The side-by-side view (ipywidgets), made once."""
        if self._view is None:
            if Playground.view_maker is None:
                raise MadohubError("the playground's view needs the notebook layer (ipywidgets)")
            self._view = Playground.view_maker(self)
        return self._view

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        if Playground.view_maker is None:
            return {"text/plain": repr(self.df)}
        return self.widget()._repr_mimebundle_(**kwargs)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _text(value: object) -> str | None:
    return None if _missing(value) else str(value)


def recorded_rounds(rounds: object, hub: Hub | None) -> list[RoundRecord]:
    """The log rows ``rounds`` names (a slice of ``hub.log.df``, or round ids read from
    ``hub.log``) that have an extracted answer, in their order."""
    import pandas as pd

    if isinstance(rounds, pd.DataFrame):
        missing = [c for c in ("round_id", "extracted") if c not in rounds.columns]
        if missing:
            raise MadohubValueError(
                f"rounds has no {missing[0]!r} column; give a slice of hub.log.df"
            )
        records = [
            _record({str(k): v for k, v in row.items()}) for row in rounds.to_dict("records")
        ]
    elif isinstance(rounds, str) or not isinstance(rounds, Sequence):
        raise MadohubValueError(
            f"rounds must be a slice of hub.log.df or a list of round ids, got {rounds!r}"
        )
    else:
        if hub is None:
            raise MadohubValueError("round ids are read from a hub's log: pass hub=")
        records = [hub.log.get(str(rid)) for rid in rounds]
    found = [r for r in records if r.extracted is not None]
    if not found:
        raise MadohubValueError(
            f"none of the {len(records)} rounds has an extracted answer to transform "
            "(hand sends and failed extractions have none)"
        )
    return found


def _record(row: Mapping[str, Any]) -> RoundRecord:
    """The fields a transform needs from one row of ``hub.log.df``."""
    meta = row.get("meta")
    text = row.get("extracted")
    return RoundRecord(
        round_id=str(row["round_id"]), route_id=str(row.get("route_id", "")),
        source=str(row.get("source", "")), target=str(row.get("target", "")),
        round=int(row.get("round", 0)), trigger="replay", transform="none", dispatch="shadow",
        status="shadow", extracted=None if _missing(text) else str(text),
        meta=meta if isinstance(meta, dict) else {},
    )  # fmt: skip


class _Settings:
    """Where AI calls go and what they cost: the hub's, else the defaults and environment."""

    def __init__(self, hub: Hub | None) -> None:
        self.hub = hub
        self.prices = hub.prices if hub is not None else check_prices(None)
        self._engine: Engine | None = None

    def ai_config(self, model: str | None) -> AIClientConfig:
        if self.hub is not None:
            return self.hub.ai_config(model)
        return AIClientConfig() if model is None else AIClientConfig(model=model)

    def target_kind(self, target: str) -> str:
        tile = self.hub.tiles.get(target) if self.hub is not None else None
        return tile.agent if tile is not None else "unknown"

    def run_ai(self, spec: TransformSpec, ctx: TransformContext) -> TransformResult:
        config = self.ai_config(spec.model)
        if self.hub is not None and not self.hub.closed:
            engine = self.hub.engine
        else:  # the calls are async: run them on an engine of our own (a cell's loop is busy)
            self._engine = self._engine or Engine("madohub-playground")
            engine = self._engine
        return engine.run_sync(apply_with_usage(spec, ctx, ai=config), AI_WAIT_S)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


def _cost(model: str, counts: Mapping[str, int | None], prices: Any) -> float:
    row = price_for(model, prices)
    if row is None or any(v is None for v in counts.values()):
        return math.nan
    return sum(row[k] * (n or 0) for k, n in counts.items()) / 1e6


def try_transforms(
    rounds: pd.DataFrame | Sequence[str],
    variants: Mapping[str, Variant],
    judge: str | Judge | None = None,
    *,
    hub: Hub | None = None,
) -> Playground:
    """Render each of ``variants`` (name -> template, transform or transform settings) for
    every recorded answer in ``rounds`` (a slice of ``hub.log.df``, or round ids of
    ``hub``'s log); no agent runs and nothing is typed. AI variants and the ``judge`` (a
    model name, or ``mh.score.judge(rubric, model=...)``) use ``hub``'s API settings and
    prices (None: ``ANTHROPIC_API_KEY`` and the SDK's defaults). See :class:`Playground`."""
    import pandas as pd

    if not isinstance(variants, Mapping) or not variants:
        raise MadohubValueError(
            "variants must map a name to a template, a transform or transform settings, e.g. "
            "{'terse': 'Fix this: {output}', 'summary': {'transform': 'summary'}}"
        )
    specs = {str(name): variant_spec(str(name), v) for name, v in variants.items()}
    scorer = _judge_of(judge)
    records = recorded_rounds(rounds, hub)
    settings = _Settings(hub)
    rows: list[tuple[Any, ...]] = []
    try:
        for rec in records:
            ctx = context_of(rec, settings.target_kind(rec.target))
            for name, spec in specs.items():
                rows.append((rec.round_id, name, *_render(spec, ctx, settings)))
        played = Playground(
            pd.DataFrame(rows, columns=list(COLUMNS)), list(specs),
            {r.round_id: r.extracted or "" for r in records},
        )  # fmt: skip
        if scorer is not None:
            played.comparisons = _compare(played, scorer, settings)
            played.ranking = ranking(played.comparisons, list(specs))
    finally:
        settings.close()
    return played


def _render(
    spec: TransformSpec, ctx: TransformContext, settings: _Settings
) -> tuple[str | None, float, float, str | None]:
    """(prompt, tokens, cost_usd, error) of one variant on one answer; never raises."""
    try:
        if not spec.is_ai:
            prompt = spec.transform.render(spec, ctx)
            return prompt, float(estimate_tokens(prompt)), 0.0, None
        made = settings.run_ai(spec, ctx)
    except Exception as exc:  # one variant's failure is its cell, not the playground's end
        why = str(exc) if isinstance(exc, MadohubError) else f"{type(exc).__name__}: {exc}"
        return None, math.nan, math.nan, why
    usage = made.usage
    if usage is None:
        return made.prompt, float(estimate_tokens(made.prompt)), math.nan, None
    counts = {"input": usage.input_tokens, "output": usage.output_tokens}
    tokens = math.nan if usage.output_tokens is None else float(usage.output_tokens)
    return made.prompt, tokens, _cost(usage.model, counts, settings.prices), None


# The judge ------------------------------------------------------------------------------


def _judge_of(judge: object) -> Judge | None:
    if judge is None or isinstance(judge, Judge):
        return judge
    if isinstance(judge, str) and judge.strip():
        return Judge(JUDGE_RUBRIC, judge, "judge", False)
    raise MadohubValueError(
        f"judge must be a model name or mh.score.judge(rubric, model=...), got {judge!r}"
    )


def parse_choice(reply: str) -> tuple[str, str | None]:
    """A pairwise judge's reply: ``{"better": "A"|"B", "why": ...}`` or a bare A or B."""
    text = reply.strip()
    try:
        said = json.loads(text)
    except ValueError:
        said = text
    why = None
    if isinstance(said, dict):
        why = said.get("why") if isinstance(said.get("why"), str) else None
        said = said.get("better")
    if not isinstance(said, str) or said.strip().upper() not in ("A", "B"):
        raise MadohubError(f'the judge\'s reply is not {{"better": "A" or "B"}}: {text[:200]!r}')
    return said.strip().upper(), why


def _compare(played: Playground, judge: Judge, settings: _Settings) -> pd.DataFrame:
    """Each round's variants two by two (those that rendered), the judge's pick of each pair.
    Which of a pair is shown first alternates from one question to the next, so a judge that
    favours a position favours no variant (``a`` is the one shown as prompt A)."""
    import pandas as pd

    rows = []
    asked_n = 0
    for round_id, answer in played.answers.items():
        ok = [(v, p) for v, (p, err) in played.prompts(round_id).items() if p is not None]
        for pair in itertools.combinations(ok, 2):
            (a, prompt_a), (b, prompt_b) = pair if asked_n % 2 == 0 else pair[::-1]
            asked_n += 1
            message = (
                f"Rubric:\n{judge.rubric}\n\nThe sender's answer:\n{answer}\n\n"
                f"Prompt A:\n{prompt_a}\n\nPrompt B:\n{prompt_b}"
            )
            winner = why = error = None
            cost = math.nan
            try:
                asked = ask_model(
                    settings.ai_config(judge.model), JUDGE_SYSTEM, message, settings.prices
                )
                cost = asked.cost_usd
                choice, why = parse_choice(asked.reply)
                winner = a if choice == "A" else b
            except MadohubError as exc:
                error = str(exc)
            rows.append((round_id, a, b, winner, why, cost, error))
    columns = ["round", "a", "b", "winner", "why", "cost_usd", "error"]
    return pd.DataFrame(rows, columns=columns)


def ranking(comparisons: pd.DataFrame, variants: list[str]) -> pd.DataFrame:
    """``variant, wins, losses, win_rate`` from the judged pairs, best first (a pair the
    judge could not decide counts for neither)."""
    import pandas as pd

    wins = dict.fromkeys(variants, 0)
    losses = dict.fromkeys(variants, 0)
    for row in comparisons.to_dict("records"):
        winner = _text(row["winner"])
        if winner is None:
            continue
        wins[winner] += 1
        losses[str(row["b"] if winner == row["a"] else row["a"])] += 1
    table = pd.DataFrame(
        [(v, wins[v], losses[v], wins[v] / (wins[v] + losses[v]) if wins[v] + losses[v] else math.nan)
         for v in variants],
        columns=list(RANKING_COLUMNS),
    )  # fmt: skip
    return table.sort_values(["win_rate", "wins"], ascending=False, kind="stable").reset_index(
        drop=True
    )
