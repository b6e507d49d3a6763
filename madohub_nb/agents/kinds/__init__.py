"""The shipped agent kinds, one module each: the registry every kind list is derived from.

A new kind is one module here (its :class:`~.base.AgentKind`), one line below, its
fixtures and its docs page.
"""

from __future__ import annotations

from typing import Final

from . import aider, amp, claude, codex, copilot, gemini, opencode, pi, qwen, shell, terminal
from .base import AgentKind
from .records import RecordReader, read_session_record

KINDS: Final[dict[str, AgentKind]] = {
    k.name: k
    for k in (
        claude.KIND, codex.KIND, amp.KIND, opencode.KIND, qwen.KIND, aider.KIND, gemini.KIND,
        copilot.KIND, pi.KIND, shell.KIND, terminal.KIND,
    )
}  # fmt: skip
"""Every shipped kind by name, in the order ``agent=`` lists them."""

SHIPPED_KINDS: Final[tuple[str, ...]] = tuple(KINDS)
"""The names of the shipped kinds (``model.AGENT_KINDS`` says the same, checked by a test)."""

BY_LAYERS_AGE: Final[tuple[AgentKind, ...]] = (
    claude.KIND, codex.KIND, gemini.KIND, qwen.KIND, copilot.KIND, opencode.KIND, pi.KIND,
    amp.KIND, aider.KIND, shell.KIND, terminal.KIND,
)  # fmt: skip
"""The kinds in the order the hub learned their launch layers: how messages list the kinds
that have hooks or an MCP layer (``agents/hooks.py``, ``agents/mcp_setup.py``)."""

RECORD_OF_KIND: Final[dict[str, str]] = {
    name: name
    for name, kind in KINDS.items()
    if kind.record is not None and kind.record.read is read_session_record
}
"""Agent kind → the format of its own record (``madohub_nb.io.agent_records``) for the kinds
whose record is read there (Claude's and Codex's are ``io/transcripts.py``'s)."""

RECORD_BY_EXTRACTOR: Final[dict[str, RecordReader]] = {
    "jsonl": claude.RECORD,
    "rollout": codex.RECORD,
}
"""The reader a registered kind gets by its ``extractor`` (``session`` names no format)."""

ENV_NAMES: Final[tuple[str, ...]] = tuple(
    dict.fromkeys(n for kind in KINDS.values() if kind.record for n in kind.record.env_names)
)
"""Every variable of an agent's environment that locates its files, for one read of it."""

__all__ = [
    "BY_LAYERS_AGE", "ENV_NAMES", "KINDS", "RECORD_BY_EXTRACTOR", "RECORD_OF_KIND",
    "SHIPPED_KINDS", "AgentKind",
]  # fmt: skip
