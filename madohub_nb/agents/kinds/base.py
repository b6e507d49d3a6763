"""What one agent kind is: its profile and everything else the toolkit does differently for it.

An :class:`AgentKind` is declared once, in ``agents/kinds/<kind>.py``, and nothing outside
that module (and the per-format readers of ``io/agent_records/<kind>.py``) tells one kind
from another by its name: the hub asks the kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ...io.agent_channels.base import Channel, ChannelEndpoint, ChannelServer
from ..launch import LaunchLayer
from ..permission import DIALOGS, DialogReader
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
class ChannelPlan:
    """A tile's native channel: what the agent's start gains (``layer``: its arguments, its
    environment, its files), a server the hub starts first (None: the agent's TUI serves
    the protocol itself), and how the hub opens the channel once the agent is up
    (``open(server_pid)``: the pid of ``server`` as started, to end it by)."""

    layer: LaunchLayer
    server: ChannelServer | None
    open: Callable[[int | None], Channel]


class ChannelLayer(Protocol):
    """The kind's native channel at ``endpoint`` (a private folder, socket or port, password)."""

    def __call__(self, endpoint: ChannelEndpoint) -> ChannelPlan: ...


@dataclass(frozen=True)
class AgentKind:
    """One agent kind: its screen profile, its record reader, its launch layers, its
    permission-dialog reader and its opt-in rules.

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
    channel: ChannelLayer | None = None
    """None: prompts are typed into its TUI (it has no protocol the hub speaks)."""
    mcp_on_hosts: bool = False
    """Its MCP layer works on a host too (no machine files of its own to stand in for)."""
    permission: DialogReader | None = DIALOGS
    """How its permission dialogs are read off its screen (the shared reader knows every
    shipped agent's, told by the profile's ``waiting_markers``); None: it never asks (a
    shell, a terminal program), so the inbox does not watch it."""
    order: int = 500
    """Where ``agent=`` and the kind lists name it (shipped agents 10-90, shell and terminal
    900-910: a new kind goes before those two; a tie goes by name)."""
    layers_order: int = 500
    """Where messages name it among the kinds with hooks or an MCP layer (the order the hub
    learned their launch layers)."""

    @property
    def name(self) -> str:
        """The kind's name, as ``agent=`` takes it (``claude``, ``codex``...)."""
        return self.profile.kind
