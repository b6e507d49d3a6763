"""The words of the system, defined once: states, statuses, events (the agent kinds are
the modules of agents/kinds/).

Every state a tile, route or round can be in is a ``Literal`` type here, used
where its values are (``Tile.state``, ``Route.state``, ``RoundRecord.status``,
an event's ``kind``), with the tuple of its values where something validates them. Nothing in this module
does I/O or imports the rest of the package.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

TileState = Literal["idle", "busy", "waiting", "exited", "unknown", "unreachable"]
"""``unreachable``: the tile's remote host cannot be reached now (its ssh link dropped)."""
TILE_STATES: Final[tuple[str, ...]] = get_args(TileState)

HostState = Literal["reachable", "unreachable"]
"""Whether a remote host answers now (``host_state`` events say when it changes)."""

RouteState = Literal["active", "paused", "stopped", "exhausted"]

RoundStatus = Literal["delivered", "shadow", "stopped", "exhausted", "rejected", "error"]
"""``rejected``: an approval route's prompt a person rejected or let expire (nothing typed)."""
ROUND_STATUSES: Final[tuple[str, ...]] = get_args(RoundStatus)

ExtractionMethod = Literal["channel", "hook", "jsonl", "rollout", "session", "terminal"]
"""How a round's source output was read, strongest first (a gather takes its answers'
weakest): the agent's native channel (its turn's whole answer as it reported it), its hook,
Claude's transcript, Codex's rollout, another agent's own session record (Gemini, Qwen,
Copilot, OpenCode, Pi, Aider), the screen."""
EXTRACTION_METHODS: Final[tuple[str, ...]] = get_args(ExtractionMethod)

TurnSignal = Literal["channel", "hook", "status", "transcript", "screen", "quiet"]
"""The evidence a turn's end was told from, strongest first: the agent's native channel, its
own hook, its live status file, an end-of-turn record in its files, its screen markers,
silence."""
TURN_SIGNALS: Final[tuple[str, ...]] = get_args(TurnSignal)

EventKind = Literal[  # (the string each event class of pipeline/events.py keeps as ``kind``)
    "tile_output",
    "tile_state",
    "tile_added",
    "route_state",
    "route_added",
    "round",
    "turn_skipped",
    "host_state",
    "ask",
    "channel",
]

AskKind = Literal["permission", "approval"]
"""What waits for a person: an agent's permission prompt, or a route's prompt to approve."""
AskState = Literal["open", "approved", "rejected", "answered", "expired"]
Decision = Literal["approved", "edited", "rejected", "expired"]
"""What a person (or the clock) decided about an approval route's prompt (log column)."""
