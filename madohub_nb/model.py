"""The words of the system, defined once: kinds, states, statuses, events.

Every state a tile, route or round can be in is a ``Literal`` type here, used
where its values are (``Tile.state``, ``Route.state``, ``RoundRecord.status``,
``HubEvent.kind``), with the tuple of its values where something validates them. Nothing in this module
does I/O or imports the rest of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

AGENT_KINDS: Final[tuple[str, ...]] = (
    "claude", "codex", "amp", "opencode", "qwen", "aider", "gemini", "copilot", "pi", "shell",
    "terminal",
)  # fmt: skip
"""The shipped kinds; users may register more by name (``mh.register_agent``), so a tile's
``agent`` is any registered name (a ``str``), not one of a closed set."""

TileState = Literal["idle", "busy", "waiting", "exited", "unknown", "unreachable"]
"""``unreachable``: the tile's remote host cannot be reached now (its ssh link dropped)."""
TILE_STATES: Final[tuple[str, ...]] = get_args(TileState)

HostState = Literal["reachable", "unreachable"]
"""Whether a remote host answers now (``host_state`` events say when it changes)."""

RouteState = Literal["active", "paused", "stopped", "exhausted"]

RoundStatus = Literal["delivered", "shadow", "stopped", "exhausted", "rejected", "error"]
"""``rejected``: an approval route's prompt a person rejected or let expire (nothing typed)."""
ROUND_STATUSES: Final[tuple[str, ...]] = get_args(RoundStatus)

ExtractionMethod = Literal["hook", "jsonl", "rollout", "session", "terminal"]
"""How a round's source output was read: Claude's transcript, Codex's rollout, another agent's
own session record (Gemini, Qwen, Copilot, OpenCode, Pi, Aider), the screen."""
EXTRACTION_METHODS: Final[tuple[str, ...]] = get_args(ExtractionMethod)

TurnSignal = Literal["hook", "status", "transcript", "screen", "quiet"]
"""The evidence a turn's end was told from, strongest first: the agent's own hook, its live
status file, an end-of-turn record in its files, its screen markers, silence."""
TURN_SIGNALS: Final[tuple[str, ...]] = get_args(TurnSignal)

EventKind = Literal[
    "tile_output",
    "tile_state",
    "tile_added",
    "route_state",
    "route_added",
    "round",
    "turn_skipped",
    "host_state",
    "ask",
]

AskKind = Literal["permission", "approval"]
"""What waits for a person: an agent's permission prompt, or a route's prompt to approve."""
AskState = Literal["open", "approved", "rejected", "answered", "expired"]
Decision = Literal["approved", "edited", "rejected", "expired"]
"""What a person (or the clock) decided about an approval route's prompt (log column)."""


@dataclass(frozen=True)
class HubEvent:
    """Something widgets and listeners may want to redraw for.

    ``tile_output`` (tile name, ``data`` = bytes count), ``tile_state`` (name, state),
    ``tile_added`` (name, ``data`` = the tile), ``route_state`` / ``route_added``
    (route id, state, ``data`` = the route), ``round`` (route id, status, ``data`` = the record),
    ``turn_skipped`` (route id, why: ``already routed``, ``not new``, ``no answer``, ``paused``),
    ``host_state`` (host name, ``reachable`` or ``unreachable``, ``data`` = why, or None),
    ``ask`` (ask id, its state, ``data`` = the :class:`~madohub_nb.pipeline.inbox.Ask`).
    """

    kind: EventKind
    name: str = ""
    state: str = ""
    data: Any = field(default=None, compare=False)
