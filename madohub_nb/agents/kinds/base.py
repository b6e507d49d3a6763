"""What one agent kind is: its profile and everything else the toolkit does differently for it.

An :class:`AgentKind` is declared once, in ``agents/kinds/<kind>.py``, and nothing outside
that module (and the per-format readers of ``io/agent_records/<kind>.py``) tells one kind
from another by its name: the hub asks the kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..launch import LaunchLayer
from ..profile import AgentProfile
from .common import MachineFiles
from .records import AgentPid, RecordReader, RecordSource


class HookLayer(Protocol):
    """The kind's hooks layer: how it is made to call the hook command ``base``, with its
    files in ``folder`` (a private folder of the hub's for this tile)."""

    def __call__(self, base: Sequence[str], folder: str) -> LaunchLayer: ...


class McpLayer(Protocol):
    """The kind's MCP layer: how it starts with the MCP server ``server`` at ``url`` (its
    ``tools`` pre-allowed), calling with ``token`` (read from ``token_env`` where the agent
    can), its files in ``folder``; ``machine``: the machine's own files it stands in for."""

    def __call__(
        self,
        url: str,
        token: str,
        folder: str,
        *,
        server: str,
        tools: Sequence[str],
        token_env: str,
        machine: MachineFiles,
    ) -> LaunchLayer: ...


@dataclass(frozen=True)
class AgentKind:
    """One agent kind: its screen profile, its record reader, its launch layers and its
    opt-in rules.

    A kind a user registers (``mh.register_agent``) has a profile alone.
    """

    profile: AgentProfile
    record: RecordReader | None = None
    """How its own record of the conversation is found and read; None: the screen only."""
    live_status: Callable[[RecordSource, AgentPid], str | None] | None = None
    """A live status file's ``idle`` / ``busy`` / ``waiting`` (Claude's ``sessions/<pid>.json``,
    the profile's ``writes_status_file``); None when it says nothing."""
    hooks: HookLayer | None = None
    """None: the hub knows no hooks of this kind (its turns are told from records or screen)."""
    hooks_opt_in: Callable[[Sequence[str]], str] | None = None
    """What a user adds to opt an adopted pane of this kind in to the hook command ``base``."""
    hook_answer: bool = True
    """Its stop hook's ``last_assistant_message`` is the turn's answer, whole (not Gemini's)."""
    mcp: McpLayer | None = None
    """None: the hub cannot start this kind with its MCP tools."""
    mcp_on_hosts: bool = False
    """Its MCP layer works on a host too (no machine files of its own to stand in for)."""

    @property
    def name(self) -> str:
        """The kind's name, as ``agent=`` takes it (``claude``, ``codex``...)."""
        return self.profile.kind
