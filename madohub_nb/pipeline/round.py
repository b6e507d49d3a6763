"""One round, start to finish: extract → transform → deliver → log.

The route decides *when* (triggers, loop protection); this module decides
*what happens*, and always writes exactly one row to the round log, whatever
went wrong on the way.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ..defaults import DELIVERY_MODES, DISPATCH_MODES, TARGET_WAIT_S, check_choice, price_for
from ..errors import DeliveryError, LogError, MadohubError, MadohubValueError
from ..io.agent_records.base import USAGE_FIELDS, Extraction, TurnUsage
from ..io.git import CHANGED_PATHS_MAX, Changes
from ..io.log import RoundRecord
from .deliver import ChannelUnsureError, Deliverer, Delivery
from .protection import LoopGuard
from .tile import Tile
from .transforms import AIClientConfig, TransformContext, TransformSpec, apply_with_usage

SCREEN_TAIL_LINES = 200
"""Scrollback read for the terminal transforms (full-output, raw)."""


@dataclass(frozen=True)
class Dispatch:
    """A dispatch mode as data: what a round does with its prompt (see DESIGN's dispatch modes).

    ``types_text``: the prompt is typed into the target (``shadow`` only logs it).
    ``extracts_from_transcript``: the source's answer is read from the agent's own
    record where it has one (``legacy`` reads the terminal only).
    ``agent_aware_delivery``: wait for the target to be ready and submit as its agent
    wants (``legacy``: a plain send-keys and Enter).
    """

    name: str
    types_text: bool = True
    extracts_from_transcript: bool = True
    agent_aware_delivery: bool = True

    def __str__(self) -> str:
        return self.name


DISPATCHES: Final[Mapping[str, Dispatch]] = {
    d.name: d
    for d in (
        Dispatch("madoagent"),
        Dispatch("legacy", extracts_from_transcript=False, agent_aware_delivery=False),
        Dispatch("shadow", types_text=False),
    )
}
"""Every dispatch mode by name, in the order of ``defaults.DISPATCH_MODES``."""


def dispatch_named(name: str) -> Dispatch:
    """The dispatch mode called ``name``, or a teaching error listing the modes."""
    return DISPATCHES[check_choice("dispatch", name, DISPATCH_MODES)]


@dataclass(frozen=True)
class GatherRound:
    """What makes a round a gather's: the sources whose answers came in (in the gather's
    order), why each other one did not, and how each answer in was read. The transform's
    ``{answers}`` is then the gathered text."""

    arrived: tuple[str, ...]
    missing: Mapping[str, str]
    """{source: why no answer came in}."""
    how_read: Mapping[str, Mapping[str, str | None]]
    """{source: {"method": extraction method, "turn_signal": ...}}."""

    def meta(self) -> dict[str, Any]:
        """The round row's ``meta`` keys: ``gathered``, ``gather_missing``, ``gather_answers``."""
        return {
            "gathered": list(self.arrived),
            "gather_missing": dict(self.missing),
            "gather_answers": {n: dict(how) for n, how in self.how_read.items()},
        }


@dataclass
class RoundPlan:
    """Everything a round needs to know before it runs."""

    route_id: str
    source: str
    target: Tile | None
    round: int
    max_rounds: int
    trigger: str
    spec: TransformSpec | None
    """None for a hand ``send``: the prompt is given, nothing is transformed."""
    dispatch: Dispatch
    delivery: str
    extraction: Extraction | None
    extract_ms: float | None = None
    turn_signal: str | None = None
    """Which evidence ended the source turn (``hook``, ``status``, ...); None: no turn."""
    screen_tail: list[str] | None = None
    stop_keyword: str | None = None
    allow_shell: bool = False
    """The user opted in to typing into a shell or an interpreter (``allow_shell=True``);
    recorded so a replay of the round keeps it."""
    exhausted: bool = False
    exhausted_reason: str | None = None
    """Why the route is exhausted when it is not ``max_rounds`` (a budget spent)."""
    replay_of: str | None = None
    prompt: str | None = None
    """A prompt given up front (hand ``send``): skips the transform."""
    still_wanted: Callable[[], bool] | None = None
    """Asked just before typing: False (the route was stopped meanwhile) types nothing."""
    target_wait_s: float = TARGET_WAIT_S
    """How long to wait for the target to become ready before the round ends as an error."""
    when_ready: Callable[[], Awaitable[None]] | None = None
    """Awaited under the target's pane lock once it is ready, just before typing (an MCP
    ``ask`` starts listening for the turn its own prompt starts)."""
    approve: Callable[[str], Awaitable[tuple[str, str]]] | None = None
    """An approval route's person: given the prompt, their decision (``approved``, ``edited``,
    ``rejected``, ``expired``) and the text to type (or why nothing is)."""
    fired_mono: float = field(default_factory=time.monotonic)
    gather: GatherRound | None = None
    """A gather's round: its sources' answers in one prompt (None: any other round)."""
    meta: dict[str, Any] = field(default_factory=dict)
    changes: Changes | None = None
    """What the source turn changed in its git working tree (None: not one, or unread)."""


class RoundServices(Protocol):
    """What a round needs from the hub around it, and nothing more."""

    session_id: str

    @property
    def deliverer(self) -> Deliverer:
        """Types prompts into panes, one at a time per pane."""

    @property
    def prices(self) -> Mapping[str, Mapping[str, float]]:
        """The price table (USD per million tokens) that makes ``cost_usd``."""

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        """The Anthropic client settings for an AI transform (key, base URL, model)."""

    def ensure_writable(self) -> None:
        """Raise ``LogError`` if the round log cannot take the round about to be typed."""

    def log_unwritable(self, exc: LogError) -> None:
        """The log refused a write: pause routing until it is writable again."""

    async def record(self, rec: RoundRecord) -> RoundRecord:
        """Write a finished round (or keep it when the log refuses); returns it as logged."""

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        """:meth:`record` without waiting, for a round cancelled mid-way."""


def _ms(since: float) -> float:
    return round((time.monotonic() - since) * 1000, 3)


def _tokens_cost(
    model: str | None, counts: Mapping[str, int | None], prices: Mapping[str, Mapping[str, float]]
) -> float:
    """USD for ``counts`` (price key -> tokens) at ``model``'s row; NaN if anything is unknown."""
    row = price_for(model, prices)
    if row is None or any(v is None for v in counts.values()):
        return math.nan
    return sum(row[key] * (tokens or 0) for key, tokens in counts.items()) / 1_000_000


def round_cost_usd(
    rec: RoundRecord, prices: Mapping[str, Mapping[str, float]], *, source_turn: bool = True
) -> float | None:
    """What a round cost: the source turn (when ``source_turn``) plus the AI transform.

    The source turn's part is the agent's own figure where it gave one (its channel;
    ``meta["agent_cost_usd"]``), else its tokens at its model's price. NaN when a part's
    model has no price or a count it needs could not be read
    (a screen-extracted source turn included); None when the round has no part
    at all (a hand ``send``). Replays leave the source turn out: it was paid
    for, and logged, by the original round.
    """
    parts: list[float] = []
    agent_cost = _agent_cost(rec, prices)
    if source_turn and agent_cost is not None:
        parts.append(agent_cost)
    elif source_turn:
        parts.append(
            _tokens_cost(
                rec.model,
                {
                    "input": rec.input_tokens,
                    "output": rec.output_tokens,
                    "cache_read": rec.cache_read_tokens,
                    "cache_write": rec.cache_write_tokens,
                },
                prices,
            )
        )
    if rec.ai_model is not None:
        counts = {"input": rec.ai_input_tokens, "output": rec.ai_output_tokens}
        # Cache counts are priced when the API reported them (it does not for uncached calls).
        if rec.ai_cache_read_tokens is not None:
            counts["cache_read"] = rec.ai_cache_read_tokens
        if rec.ai_cache_write_tokens is not None:
            counts["cache_write"] = rec.ai_cache_write_tokens
        parts.append(_tokens_cost(rec.ai_model, counts, prices))
    return sum(parts) if parts else None


AGENT_COST_KEY = "agent_cost_usd"
"""``meta`` key: what the source agent itself said its turn cost (its channel's figure)."""


def _agent_cost(rec: RoundRecord, prices: Mapping[str, Mapping[str, float]]) -> float | None:
    """The source agent's own figure for its turn, when it is the one to log: above 0, or 0
    for a model the price table does not price (OpenCode says 0 for a model it has no price
    for, where the table may know better). None: price the tokens."""
    cost = rec.meta.get(AGENT_COST_KEY)
    if not isinstance(cost, int | float) or isinstance(cost, bool) or math.isnan(cost):
        return None
    return float(cost) if cost > 0 or price_for(rec.model, prices) is None else None


def round_tokens(rec: RoundRecord) -> int | None:
    """A routed round's input + output tokens: its source turn's plus its AI transform's.

    None when a count it needs could not be read (a screen-extracted source turn, an
    API reply without usage): a token budget cannot count it.
    """
    counts = [rec.input_tokens, rec.output_tokens]
    if rec.ai_model is not None:
        counts += [rec.ai_input_tokens, rec.ai_output_tokens]
    if any(v is None for v in counts):
        return None
    return sum(v or 0 for v in counts)


def _fill_cost(hub: RoundServices, plan: RoundPlan, rec: RoundRecord) -> None:
    routed = plan.spec is not None and plan.replay_of is None and plan.prompt is None
    rec.cost_usd = round_cost_usd(rec, hub.prices, source_turn=routed)


def _fill_turn_ms(rec: RoundRecord, usage: TurnUsage) -> None:
    """The turn's duration: the record's own, else measured from the record's times; which
    one is said in ``meta["turn_ms_source"]`` (``record`` | ``measured``)."""
    if usage.turn_ms is not None:
        rec.meta["turn_ms_source"] = "record"
    elif usage.measured_turn_ms is not None:
        rec.turn_ms = usage.measured_turn_ms
        rec.meta["turn_ms_source"] = "measured"


def _fill_changes(rec: RoundRecord, changes: Changes) -> None:
    rec.files_changed = changes.files_changed
    rec.lines_added, rec.lines_removed = changes.lines_added, changes.lines_removed
    rec.meta["changed_paths"] = list(changes.paths[:CHANGED_PATHS_MAX])
    if changes.files_changed > CHANGED_PATHS_MAX:
        rec.meta["changed_paths_cut"] = changes.files_changed - CHANGED_PATHS_MAX
    if changes.big_files:  # not read (too big): their size instead of their lines
        rec.meta["big_files"] = dict(changes.big_files[:CHANGED_PATHS_MAX])


async def run_round(hub: RoundServices, plan: RoundPlan) -> RoundRecord:
    """Run one round and append it to the log; never raises for round-level failures."""
    ex = plan.extraction
    target_name = plan.target.name if plan.target is not None else str(plan.meta.get("target", ""))
    rec = RoundRecord(
        route_id=plan.route_id,
        source=plan.source,
        target=target_name,
        round=plan.round,
        trigger=plan.trigger,
        transform=plan.spec.name if plan.spec is not None else "none",
        dispatch=plan.dispatch.name,
        extracted=ex.text if ex else None,
        extraction_method=ex.method if ex else None,
        extraction_path=str(ex.path) if ex and ex.path else None,
        turn_signal=plan.turn_signal,
        status="error",
        extract_ms=plan.extract_ms,
        replay_of=plan.replay_of,
        delivery_mode=plan.delivery if plan.dispatch.types_text else None,
        template=plan.spec.template if plan.spec is not None else None,
        session_id=hub.session_id,
        meta={**(plan.gather.meta() if plan.gather is not None else {}), **plan.meta},
    )
    if plan.spec is not None:  # what a replay needs once the route is gone (see replay.py)
        rec.meta.setdefault("max_rounds", plan.max_rounds)
        rec.meta.setdefault("allow_shell", plan.allow_shell)
    if plan.screen_tail is not None:
        rec.meta["screen_tail"] = plan.screen_tail[-SCREEN_TAIL_LINES:]
    if plan.changes is not None:
        _fill_changes(rec, plan.changes)
    if ex is not None and ex.usage is not None:  # screen extractions have none: left empty
        for name in USAGE_FIELDS:
            setattr(rec, name, getattr(ex.usage, name))
        _fill_turn_ms(rec, ex.usage)
        if ex.usage.cost_usd is not None:
            rec.meta[AGENT_COST_KEY] = ex.usage.cost_usd
    try:
        await _run(hub, plan, rec)
    except MadohubError as exc:
        rec.status, rec.error = "error", str(exc)
    except Exception as exc:  # a bug or a failure we did not foresee: still one logged row
        rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"
    except asyncio.CancelledError:
        rec.status, rec.error = "error", "cancelled: the hub was closed before the round finished"
        _fill_cost(hub, plan, rec)
        hub.record_now(rec)
        raise
    _fill_cost(hub, plan, rec)
    return await hub.record(rec)


async def _run(hub: RoundServices, plan: RoundPlan, rec: RoundRecord) -> None:
    if plan.exhausted:
        rec.status = "exhausted"
        rec.error = (
            plan.exhausted_reason
            or f"max_rounds={plan.max_rounds} reached; the route no longer delivers"
        )
        return
    if LoopGuard.says_stop(plan.stop_keyword, rec.extracted):
        rec.status = "stopped"
        rec.error = f"stop keyword {plan.stop_keyword!r} found in the source output"
        return
    if plan.prompt is not None or plan.spec is None:
        rec.prompt = plan.prompt
    else:
        if ex := plan.extraction:
            output = ex.text
        else:
            raise MadohubError("nothing was extracted from the source")
        ctx = TransformContext(
            output=output,
            screen_lines=plan.screen_tail if plan.screen_tail is not None else output.splitlines(),
            round=plan.round,
            max_rounds=plan.max_rounds,
            source=plan.source,
            target=rec.target,
            target_kind=plan.target.agent if plan.target is not None else "unknown",
            answers=output if plan.gather is not None else None,
        )
        started = time.monotonic()
        try:
            made = await apply_with_usage(plan.spec, ctx, ai=hub.ai_config(plan.spec.model))
        finally:
            rec.transform_ms = _ms(started)
        rec.prompt = made.prompt
        if made.usage is not None:
            rec.ai_model = made.usage.model
            rec.ai_input_tokens = made.usage.input_tokens
            rec.ai_output_tokens = made.usage.output_tokens
            rec.ai_cache_read_tokens = made.usage.cache_read_tokens
            rec.ai_cache_write_tokens = made.usage.cache_write_tokens
    if not plan.dispatch.types_text:
        rec.status = "shadow"
        return
    if plan.target is None:
        raise DeliveryError(f"target {rec.target!r} is not a tile of this hub; nothing was typed")
    if plan.approve is not None and not await _approved(plan.approve, rec):
        return

    def before_typing() -> None:
        # A route stopped while its round waited for a busy target types nothing later.
        if plan.still_wanted is not None and not plan.still_wanted():
            raise DeliveryError(
                f"route {plan.route_id} was stopped while its round waited for "
                f"{rec.target!r}; nothing was typed"
            )
        hub.ensure_writable()

    started = time.monotonic()
    try:
        result = await hub.deliverer.deliver(
            plan.target,
            rec.prompt or "",
            delivery=Delivery.of(plan.delivery, plan.dispatch.agent_aware_delivery),
            ready_timeout_s=plan.target_wait_s,
            before_typing=before_typing,
            allow_shell=plan.allow_shell,
            when_ready=plan.when_ready,
        )
    except LogError as exc:
        # Never type what cannot be logged: pause routing until the log is writable again.
        hub.log_unwritable(exc)
        raise
    except ChannelUnsureError:  # handed to the target's channel, not seen started: not typed
        rec.delivery_mode = Delivery.CHANNEL.value
        rec.meta["channel_unsure"] = True
        raise
    finally:
        rec.deliver_ms = _ms(started)
    rec.delivered_at = result.delivered_at
    rec.latency_ms = round((time.monotonic() - plan.fired_mono) * 1000, 3)
    if result.removed_invisible:
        rec.meta["removed_invisible"] = result.removed_invisible
    rec.meta["submit_attempts"] = result.submit_attempts
    rec.meta["submit_verified"] = result.verified
    if result.ack is not None:  # the target's channel took it (issue 39)
        rec.delivery_mode = Delivery.CHANNEL.value
        rec.meta["channel_turn_id"] = result.ack.turn_id
        rec.meta["channel_queued"] = result.ack.queued
    if result.channel_error is not None:
        rec.meta["channel_error"] = result.channel_error
    rec.status = "delivered"


async def _approved(approve: Callable[[str], Awaitable[tuple[str, str]]], rec: RoundRecord) -> bool:
    """Wait for a person's decision on the prompt; False (logged ``rejected``): type nothing."""
    decision, text = await approve(rec.prompt or "")
    rec.decision = decision
    if decision == "edited":
        rec.proposed_prompt, rec.prompt = rec.prompt, text
    if decision in ("approved", "edited"):
        return True
    rec.status = "rejected"
    why = f": {text}" if text else ""
    rec.error = (
        f"rejected by a person{why}; nothing was typed"
        if decision == "rejected"
        else f"the approval expired{why}; nothing was typed"
    )
    return False


def hand_send_plan(
    target: Tile,
    text: object,
    *,
    delivery: str,
    allow_shell: bool,
    target_wait_s: float = TARGET_WAIT_S,
) -> RoundPlan:
    """The plan of a hand ``send``: round 0 of route ``send``, the text typed as given."""
    if not isinstance(text, str) or not text.strip():
        raise MadohubValueError("text must be a non-empty string")
    check_choice("delivery", delivery, DELIVERY_MODES)
    if target.profile.executes_input and not allow_shell:
        raise MadohubValueError(
            f"{target.name!r} is a {target.agent}: typed text runs as a command; "
            "pass allow_shell=True to send anyway"
        )
    return RoundPlan(
        route_id="send", source="", target=target, round=0, max_rounds=0, trigger="manual",
        spec=None, dispatch=DISPATCHES["madoagent"], delivery=delivery, extraction=None,
        prompt=text, allow_shell=allow_shell, target_wait_s=target_wait_s,
    )  # fmt: skip
