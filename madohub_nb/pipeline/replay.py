"""Replay: a logged round computed again, with another transform or template.

Pure planning: from the logged record (and the live route and target, when the
hub still has them) to a :class:`RoundPlan` that ``run_round`` executes like
any other round. Nothing is typed unless ``deliver`` is asked for.
"""

from __future__ import annotations

from pathlib import Path

from ..defaults import MAX_ROUNDS_DEFAULT, TARGET_WAIT_S
from ..errors import MadohubValueError
from ..io.log import RoundRecord
from ..io.transcripts import Extraction
from .round import DISPATCHES, RoundPlan
from .route import Route
from .tile import Tile
from .transforms import make_transform_spec, require_ai_key


def replay_plan(
    orig: RoundRecord,
    *,
    transform: str | None,
    template: str | None,
    deliver: bool,
    model: str | None,
    route: Route | None,
    target: Tile | None,
    delivery: str,
    api_key: str | None,
    target_wait_s: float = TARGET_WAIT_S,
    allow_shell: bool = False,
    session_id: str | None = None,
) -> RoundPlan:
    """The plan that replays ``orig``; raises a teaching error for what cannot be replayed."""
    name = transform or (orig.transform if orig.transform != "none" else "prompt-wrap")
    tmpl = template if template is not None else (orig.template if name == orig.transform else None)
    spec = make_transform_spec(name, tmpl, model)
    if spec.is_ai:
        require_ai_key(name, api_key)
    if orig.extracted is None:
        raise MadohubValueError(f"round {orig.round_id} has no extracted output to replay")
    if deliver and target is None:
        raise MadohubValueError(
            f"cannot deliver the replay: tile {orig.target!r} is not in this hub"
        )
    # The live route's settings, else those its round recorded (the route ended or was dropped);
    # an opt-in to typing into a shell is taken from a row only if this hub wrote it (a log
    # file can come from anyone), else only from the caller.
    own_row = session_id is not None and orig.session_id == session_id
    recorded = own_row and orig.meta.get("allow_shell") is True
    allow_shell = allow_shell or (route.allow_shell if route else recorded)
    max_rounds = route.max_rounds if route else _count(orig.meta.get("max_rounds"))
    if deliver and target is not None and target.profile.executes_input:
        if not allow_shell:
            raise MadohubValueError(
                f"{target.name!r} is a {target.agent}: a delivered replay runs there as a command; "
                "only rounds of a route made with allow_shell=True are replayed into it "
                "(or pass allow_shell=True to the replay)"
            )
    screen_tail = orig.meta.get("screen_tail")
    return RoundPlan(
        route_id=orig.route_id,
        source=orig.source,
        target=target,
        round=orig.round,
        max_rounds=max_rounds,
        trigger="replay",
        spec=spec,
        dispatch=DISPATCHES["madoagent" if deliver else "shadow"],
        delivery=delivery,
        extraction=Extraction(
            orig.extracted,
            orig.extraction_method or "terminal",  # type: ignore[arg-type]
            Path(orig.extraction_path) if orig.extraction_path else None,
        ),
        screen_tail=list(screen_tail) if isinstance(screen_tail, list) else None,
        replay_of=orig.round_id,
        allow_shell=allow_shell,
        target_wait_s=target_wait_s,
        meta={"target": orig.target},
    )


def _count(value: object) -> int:
    """A recorded ``max_rounds``; rows from before it was recorded take the default."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return MAX_ROUNDS_DEFAULT
