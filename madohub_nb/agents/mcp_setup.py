"""What each agent needs so that it starts with the hub's MCP tools, and no prompt for them.

Pure data and functions (no I/O), as :mod:`~madohub_nb.agents.hooks` is for hooks: the
hub passes the result on the agent's command line, in the pane's environment, or in files
it writes (mode 0600) into a private folder of its own, so a user's own settings files are
never touched. Wherever the agent can read a variable into its configuration, the bearer
token stays in the pane's environment (``token_env``) and the file holds only its name;
the token is never on a command line. Each kind's MCP layer is its own module's
(``agents/kinds/<kind>.py``, ``mcp`` of its
:class:`~madohub_nb.agents.kinds.base.AgentKind`); this module asks the kind. Each setup
was run here with the real agent in tmux, offline (tests/real_agents/test_real_mcp.py,
test_real_mcp_agents.py): Claude Code 2.1.197 and 2.1.332, Codex 0.171.0, Gemini CLI
0.61.0, Qwen Code 0.24.4, Copilot CLI 1.0.102 and OpenCode 1.18.33.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .kinds import BY_LAYERS_AGE, KINDS
from .kinds import gemini as _gemini_kind
from .kinds import opencode as _opencode_kind
from .kinds import qwen as _qwen_kind
from .kinds.common import http_server
from .launch import SYSTEM_DEFAULTS_NAME, LaunchLayer, SystemLayers

McpSetup = LaunchLayer
"""How one agent kind is started with the hub's MCP server: its MCP layer. ``tool_names``:
what the agent's model calls the three tools; ``system_layers``: the machine's system files
the hub's file stands in for (Gemini CLI, Qwen Code)."""

GEMINI_SETTINGS_ENV: Final = _gemini_kind.SETTINGS_ENV
QWEN_SETTINGS_ENV: Final = _qwen_kind.SETTINGS_ENV
QWEN_SETTINGS_VERSION: Final = _qwen_kind.SETTINGS_VERSION
OPENCODE_CONFIG_ENV: Final = _opencode_kind.CONFIG_ENV
GEMINI_LAYERS: Final = _gemini_kind.LAYERS
QWEN_LAYERS: Final = _qwen_kind.LAYERS


def mcp_setup(
    agent: str,
    url: str,
    token: str,
    private_dir: str,
    *,
    server: str,
    tools: Sequence[str],
    token_env: str,
    machine: tuple[Mapping[str, Any] | None, str | None] = (None, None),
) -> McpSetup | None:
    """How to start ``agent`` with the MCP server ``server`` at ``url`` (its ``tools``
    pre-allowed), calling with ``token``; None for an agent the hub cannot configure.

    ``private_dir`` is a folder the hub owns (it writes ``files`` there, one set per tile).
    ``machine``: for an agent with ``system_layers``, the machine's own system settings
    (parsed) and system defaults (text) that the hub's files stand in for.
    """
    shipped = KINDS.get(agent)
    if shipped is None or shipped.mcp is None:
        return None
    return shipped.mcp(
        url, token, private_dir.rstrip("/"),
        server=server, tools=tools, token_env=token_env, machine=machine,
    )  # fmt: skip


MCP_AGENTS: Final = tuple(k.name for k in BY_LAYERS_AGE if k.mcp is not None)
"""Agent kinds :func:`mcp_setup` knows (those whose kind has an MCP layer)."""

HOST_MCP_AGENTS: Final = tuple(k.name for k in BY_LAYERS_AGE if k.mcp_on_hosts)
"""Agent kinds whose MCP layer works on a host too."""

__all__ = [
    "GEMINI_LAYERS", "GEMINI_SETTINGS_ENV", "HOST_MCP_AGENTS", "MCP_AGENTS", "OPENCODE_CONFIG_ENV",
    "QWEN_LAYERS", "QWEN_SETTINGS_ENV", "QWEN_SETTINGS_VERSION", "SYSTEM_DEFAULTS_NAME",
    "McpSetup", "SystemLayers", "http_server", "mcp_setup",
]  # fmt: skip
