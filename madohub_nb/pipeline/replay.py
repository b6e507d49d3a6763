"""Replay: a logged round computed again, with another transform or template.

Pure planning: from the logged record (and the live route and target, when the
hub still has them) to a :class:`RoundPlan` that ``run_round`` executes like
any other round. Nothing is typed unless ``deliver`` is asked for.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import MadohubValueError
from ..io.log import RoundRecord
from ..io.transcripts import Extraction
from ..settings import AI_TRANSFORMS, MAX_ROUNDS_DEFAULT
from .round import RoundPlan
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
) -> RoundPlan:
    """The plan that replays ``orig``; raises a teaching error for what cannot be replayed."""
    name = transform or (orig.transform if orig.transform != "none" else "prompt-wrap")
    tmpl = template if template is not None else (orig.template if name == orig.transform else None)
    spec = make_transform_spec(name, tmpl, model)
    if name in AI_TRANSFORMS:
        require_ai_key(name, api_key)
    if orig.extracted is None:
        raise MadohubValueError(f"round {orig.round_id} has no extracted output to replay")
    if deliver and target is None:
        raise MadohubValueError(
            f"cannot deliver the replay: tile {orig.target!r} is not in this hub"
        )
    if deliver and target is not None and target.profile.executes_input:
        if route is None or not route.allow_shell:
            raise MadohubValueError(
                f"{target.name!r} is a {target.agent}: a delivered replay runs there as a command; "
                "only rounds of a route made with allow_shell=True are replayed into it"
            )
    screen_tail = orig.meta.get("screen_tail")
    max_rounds = route.max_rounds if route else int(orig.meta.get("max_rounds", MAX_ROUNDS_DEFAULT))
    return RoundPlan(
        route_id=orig.route_id,
        source=orig.source,
        target=target,
        round=orig.round,
        max_rounds=max_rounds,
        trigger="replay",
        spec=spec,
        dispatch="madoagent" if deliver else "shadow",
        delivery=delivery,
        extraction=Extraction(
            orig.extracted,
            orig.extraction_method or "terminal",  # type: ignore[arg-type]
            Path(orig.extraction_path) if orig.extraction_path else None,
        ),
        screen_tail=list(screen_tail) if isinstance(screen_tail, list) else None,
        replay_of=orig.round_id,
        meta={"target": orig.target},
        allow_shell=route is not None and route.allow_shell,
    )
