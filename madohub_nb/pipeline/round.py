"""One round, start to finish: extract → transform → deliver → log.

The route decides *when* (triggers, loop protection); this module decides
*what happens*, and always writes exactly one row to the round log, whatever
went wrong on the way.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import DeliveryError, LogError, MadohubError
from ..io.log import MIN_SECRET_CHARS, RoundRecord
from ..io.transcripts import Extraction
from .transforms import TransformContext, TransformSpec, apply

if TYPE_CHECKING:
    from ..hub import Hub
    from .route import Route
    from .tile import Tile

SCREEN_TAIL_LINES = 200
"""Scrollback read for the terminal transforms (full-output, raw)."""


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
    dispatch: str
    delivery: str
    extraction: Extraction | None
    extract_ms: float | None = None
    screen_tail: list[str] | None = None
    stop_keyword: str | None = None
    exhausted: bool = False
    replay_of: str | None = None
    prompt: str | None = None
    """A prompt given up front (hand ``send``): skips the transform."""
    fired_mono: float = field(default_factory=time.monotonic)
    meta: dict[str, Any] = field(default_factory=dict)


def _ms(since: float) -> float:
    return round((time.monotonic() - since) * 1000, 3)


async def run_round(hub: Hub, plan: RoundPlan) -> RoundRecord:
    """Run one round and append it to the log; never raises for round-level failures."""
    _register_keys(hub)
    ex = plan.extraction
    target_name = plan.target.name if plan.target is not None else str(plan.meta.get("target", ""))
    rec = RoundRecord(
        route_id=plan.route_id,
        source=plan.source,
        target=target_name,
        round=plan.round,
        trigger=plan.trigger,
        transform=plan.spec.name if plan.spec is not None else "none",
        dispatch=plan.dispatch,
        extracted=ex.text if ex else None,
        extraction_method=ex.method if ex else None,
        extraction_path=str(ex.path) if ex and ex.path else None,
        status="error",
        extract_ms=plan.extract_ms,
        replay_of=plan.replay_of,
        delivery_mode=plan.delivery if plan.dispatch != "shadow" else None,
        template=plan.spec.template if plan.spec is not None else None,
        session_id=hub.session_id,
        meta=dict(plan.meta),
    )
    if plan.screen_tail is not None:
        rec.meta["screen_tail"] = plan.screen_tail[-SCREEN_TAIL_LINES:]
    try:
        await _run(hub, plan, rec)
    except MadohubError as exc:
        rec.status, rec.error = "error", str(exc)
    except Exception as exc:  # a bug or a failure we did not foresee: still one logged row
        rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"
    except asyncio.CancelledError:
        rec.status, rec.error = "error", "cancelled: the hub was closed before the round finished"
        hub._append_round(rec)
        raise
    return hub._append_round(rec)


def log_route_failure(hub: Hub, route: Route, error: str) -> RoundRecord:
    """Log the ``error`` row of a route whose task ended on an exception (never raises)."""
    rec = RoundRecord(
        route_id=route.id,
        source=route.source,
        target=route.target,
        round=route.rounds,
        trigger=route.trigger,
        transform=route.transform,
        dispatch=route.dispatch,
        status="error",
        error=error,
        session_id=hub.session_id,
    )
    return hub._append_round(rec)


def _register_keys(hub: Hub) -> None:
    """Redact the hub's key as it is now (set by %config or the environment after the hub
    was made), before anything of this round can be logged."""
    key = hub.api_key
    if key and len(key.strip()) >= MIN_SECRET_CHARS:
        hub.log.register_secret(key)


async def _run(hub: Hub, plan: RoundPlan, rec: RoundRecord) -> None:
    if plan.exhausted:
        rec.status = "exhausted"
        rec.error = f"max_rounds={plan.max_rounds} reached; the route no longer delivers"
        return
    if plan.stop_keyword and rec.extracted and plan.stop_keyword in rec.extracted:
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
        )
        started = time.monotonic()
        try:
            rec.prompt = await apply(plan.spec, ctx, ai=hub.ai_config(plan.spec.model))
        finally:
            rec.transform_ms = _ms(started)
    if plan.dispatch == "shadow":
        rec.status = "shadow"
        return
    if plan.target is None:
        raise DeliveryError(f"target {rec.target!r} is not a tile of this hub; nothing was typed")
    route = next((r for r in hub.routes if r.id == plan.route_id), None)

    def before_typing() -> None:
        # A route stopped while its round waited for a busy target types nothing later.
        if route is not None and route.state == "stopped" and plan.replay_of is None:
            raise DeliveryError(
                f"route {plan.route_id} was stopped while its round waited for "
                f"{rec.target!r}; nothing was typed"
            )
        hub.log.ensure_writable()

    started = time.monotonic()
    try:
        result = await hub.deliverer.deliver(
            plan.target,
            rec.prompt or "",
            mode=plan.delivery,
            legacy=plan.dispatch == "legacy",
            before_typing=before_typing,
        )
    except LogError as exc:
        # Never type what cannot be logged: pause routing until the log is writable again.
        hub._log_unwritable(exc)
        raise
    finally:
        rec.deliver_ms = _ms(started)
    rec.delivered_at = result.delivered_at
    rec.latency_ms = round((time.monotonic() - plan.fired_mono) * 1000, 3)
    if result.removed_invisible:
        rec.meta["removed_invisible"] = result.removed_invisible
    rec.meta["submit_attempts"] = result.submit_attempts
    rec.meta["submit_verified"] = result.verified
    rec.status = "delivered"
