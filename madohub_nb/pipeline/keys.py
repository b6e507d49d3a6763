"""Keys, not text: answer a permission prompt, dismiss a dialog, interrupt an agent.

``hub.keys("writer", "Escape")`` presses named keys in a tile through the same
per-target lock the deliverer types under, so keys never land in the middle of
a routed prompt. Only an allow-list of key names is accepted; each press is
logged as a round of route ``keys`` with transform ``keys``.

Keys go only where typed text may go: the tile's reader (its agent, or an
opted-in shell) must still run, not be stopped, and hold the terminal's
foreground, and the window must not have synchronize-panes on, as for typed
delivery (:mod:`madohub_nb.pipeline.deliver`). An Enter meant for a
suspended agent would otherwise run whatever sits on its shell's prompt line.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Final

from ..agents.foreground import Reader
from ..errors import MadohubError, MadohubValueError
from ..io.log import RoundRecord
from ..io.tmux import key_command
from .deliver import send_checked
from .round import RoundServices
from .tile import Tile

KEYS_ROUTE_ID: Final = "keys"
"""``route_id`` (and ``transform``) of the rounds that record key presses."""

NAMED_KEYS: Final = {
    "enter": "Enter",
    "return": "Enter",
    "escape": "Escape",
    "esc": "Escape",
    "tab": "Tab",
    "btab": "BTab",
    "space": "Space",
    "bspace": "BSpace",
    "backspace": "BSpace",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "c-c": "C-c",
    "c-d": "C-d",
    "c-z": "C-z",
}
"""Key names accepted (any case) and the tmux key each one presses."""
SINGLE_KEYS: Final = frozenset("0123456789yYnN")
"""Single characters accepted as keys: digits (menu choices) and y / n."""


def key_names_help() -> str:
    """The accepted key names, for messages and ``--help``."""
    names = sorted({v for v in NAMED_KEYS.values()})
    return ", ".join([*names, "0-9", "y", "n"])


def check_keys(keys: tuple[str, ...] | list[str]) -> list[str]:
    """The tmux key names for ``keys``; a teaching error for anything off the allow-list."""
    if not keys:
        raise MadohubValueError(f"keys needs at least one key; allowed: {key_names_help()}")
    out = []
    for key in keys:
        if not isinstance(key, str):
            raise MadohubValueError(f"a key is a name like 'Enter', got {key!r}")
        if key in SINGLE_KEYS:
            out.append(key)
        elif key.lower() in NAMED_KEYS:
            out.append(NAMED_KEYS[key.lower()])
        else:
            raise MadohubValueError(
                f"key {key!r} is not allowed; allowed: {key_names_help()} (to type text, use send)"
            )
    return out


async def press_keys(hub: RoundServices, tile: Tile, keys: list[str]) -> RoundRecord:
    """Press ``keys`` (checked tmux names) in ``tile`` under its delivery lock; log one round."""
    fired = time.monotonic()
    rec = RoundRecord(
        route_id=KEYS_ROUTE_ID, source="", target=tile.name, round=0, trigger="manual",
        transform=KEYS_ROUTE_ID, dispatch="madoagent", prompt=" ".join(keys), status="error",
        session_id=hub.session_id,
    )  # fmt: skip
    try:
        async with hub.deliverer.pane_lock(tile.pane_id):
            reader = await asyncio.to_thread(tile.reader)
            if isinstance(reader, Reader):
                presses = [key_command(tile.pane_id, k) for k in keys]
                problem = await send_checked(tile, reader, presses)
            else:
                problem = reader
        if problem is None:
            rec.delivered_at = datetime.now(timezone.utc)
            rec.status = "delivered"
        else:
            rec.error = f"keys not pressed in {tile.name!r}: {problem}; no key was pressed"
    except MadohubError as exc:
        rec.error = f"keys not pressed in {tile.name!r}: {exc}"
    rec.deliver_ms = rec.latency_ms = round((time.monotonic() - fired) * 1000, 3)
    return await hub.record(rec)
