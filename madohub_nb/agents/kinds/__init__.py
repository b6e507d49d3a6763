"""The agent kinds, one module each: the registry every kind list is derived from.

Every module of this package that exports ``KIND`` (an :class:`~.base.AgentKind`) is a
kind, found when the package is imported: a new kind is one module here, named for the
kind, plus its fixtures and its docs page (docs/development.md, "Add an agent in ten
minutes"). ``base``, ``common`` and ``records`` hold what the kinds share.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections import Counter
from typing import Final

from ...errors import MadohubError
from .base import AgentKind
from .records import RecordReader, read_session_record


def discover() -> dict[str, AgentKind]:
    """The kinds of this package's modules (each exporting ``KIND``), by name, in their
    ``order``; a module whose ``KIND`` is not named for it is an error."""
    found: list[AgentKind] = []
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if kind is None:
            continue
        if not isinstance(kind, AgentKind) or kind.name != info.name:
            raise MadohubError(
                f"agents/kinds/{info.name}.py: KIND must be the AgentKind of a kind named "
                f"{info.name!r} (the module's name), got {kind!r:.80}; rename the module or "
                "the profile's kind"
            )
        found.append(kind)
    found.sort(key=lambda k: (k.order, k.name))
    return {k.name: k for k in found}


KINDS: Final[dict[str, AgentKind]] = discover()
"""Every shipped kind by name, in the order ``agent=`` lists them."""

SHIPPED_KINDS: Final[tuple[str, ...]] = tuple(KINDS)
"""The names of the shipped kinds, in their order (``claude``, ``codex``, ... ``terminal``)."""

BY_LAYERS_AGE: Final[tuple[AgentKind, ...]] = tuple(
    sorted(KINDS.values(), key=lambda k: (k.layers_order, k.name))
)
"""The kinds in the order the hub learned their launch layers: how messages list the kinds
that have hooks or an MCP layer (``agents/hooks.py``, ``agents/mcp_setup.py``)."""

RECORD_OF_KIND: Final[dict[str, str]] = {
    name: name
    for name, kind in KINDS.items()
    if kind.record is not None and kind.record.read is read_session_record
}
"""Agent kind → the format of its own record (``madohub_nb.io.agent_records``) for the kinds
whose record is read there (Claude's and Codex's are ``io/transcripts.py``'s)."""

_KINDS_PER_EXTRACTOR: Final = Counter(k.profile.extractor for k in KINDS.values())
RECORD_BY_EXTRACTOR: Final[dict[str, RecordReader]] = {
    kind.profile.extractor: kind.record
    for kind in KINDS.values()
    if kind.record is not None and _KINDS_PER_EXTRACTOR[kind.profile.extractor] == 1
}
"""The reader a registered kind gets by its ``extractor``: the one kind's whose own format it
names (``jsonl``: Claude's, ``rollout``: Codex's; ``session`` names no one format)."""

ENV_NAMES: Final[tuple[str, ...]] = tuple(
    dict.fromkeys(n for kind in KINDS.values() if kind.record for n in kind.record.env_names)
)
"""Every variable of an agent's environment that locates its files, for one read of it."""

__all__ = [
    "BY_LAYERS_AGE", "ENV_NAMES", "KINDS", "RECORD_BY_EXTRACTOR", "RECORD_OF_KIND",
    "SHIPPED_KINDS", "AgentKind", "discover",
]  # fmt: skip
