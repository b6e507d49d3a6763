"""What one agent kind is: its profile and everything else the toolkit does differently for it.

An :class:`AgentKind` is declared once, in ``agents/kinds/<kind>.py``, and nothing outside
that module (and the per-format readers of ``io/agent_records/<kind>.py``) tells one kind
from another by its name: the hub asks the kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..profile import AgentProfile


@dataclass(frozen=True)
class AgentKind:
    """One shipped agent kind: its screen profile (more to come: records, launch layers)."""

    profile: AgentProfile

    @property
    def name(self) -> str:
        """The kind's name, as ``agent=`` takes it (``claude``, ``codex``...)."""
        return self.profile.kind
