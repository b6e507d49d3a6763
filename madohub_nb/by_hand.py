"""What a person does by hand through the hub: type text, press keys, replay a round.

Each makes a round (logged like a route's) and runs it on the engine, returning the
future of its row at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .pipeline.keys import check_keys, press_keys
from .pipeline.replay import replay_plan
from .pipeline.round import hand_send_plan, run_round

if TYPE_CHECKING:
    from .engine import HubFuture
    from .io.log import RoundRecord
    from .parts import RuntimeParts
    from .pipeline.tile import Tile


def send(
    rt: RuntimeParts, tile: str | Tile, text: str, delivery: str | None, allow_shell: bool
) -> HubFuture[RoundRecord]:
    """``hub.send``: ``text`` typed into ``tile`` as round 0 of route ``send``."""
    dst = rt.tiles.named(tile, "target")
    plan = hand_send_plan(
        dst, text, delivery=delivery or rt.settings["delivery"], allow_shell=allow_shell,
        target_wait_s=rt.settings["target_wait_s"],
    )  # fmt: skip
    return rt.engine.submit(run_round(rt.services, plan))


def replay(
    rt: RuntimeParts,
    round_id: str,
    transform: str | None,
    template: str | None,
    deliver: bool,
    model: str | None,
    allow_shell: bool,
) -> HubFuture[RoundRecord]:
    """``hub.replay``: a logged round's prompt recomputed as a new row (delivered if asked)."""
    orig = rt.log.get(round_id)
    plan = replay_plan(
        orig, transform=transform, template=template, deliver=deliver, model=model,
        route=rt.routes.by_id(orig.route_id), target=rt.tiles.tiles.get(orig.target),
        delivery=rt.settings["delivery"], api_key=rt.api_key,
        target_wait_s=rt.settings["target_wait_s"], allow_shell=allow_shell,
        session_id=rt.session_id,
    )  # fmt: skip
    return rt.engine.submit(run_round(rt.services, plan))


def keys(rt: RuntimeParts, tile: str | Tile, names: tuple[str, ...]) -> HubFuture[RoundRecord]:
    """``hub.keys``: ``names`` pressed in ``tile``."""
    target, checked = rt.tiles.named(tile, "target"), check_keys(names)
    return rt.engine.submit(press_keys(rt.services, target, checked))
