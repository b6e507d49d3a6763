"""What each agent needs so that it starts with the hub's MCP tools, and no prompt for them.

Pure data and functions (no I/O), as :mod:`~madohub_nb.agents.hooks` is for hooks: the
hub passes the result on the agent's command line, in the pane's environment, or in files
it writes (mode 0600) into a private folder of its own, so a user's own settings files are
never touched. Wherever the agent can read a variable into its configuration, the bearer
token stays in the pane's environment (``token_env``) and the file holds only its name;
the token is never on a command line. Each setup was run here with the real agent in tmux,
offline (tests/real_agents/test_real_mcp.py, test_real_mcp_agents.py): Claude Code 2.1.197
and 2.1.332, Codex 0.171.0, Gemini CLI 0.61.0, Qwen Code 0.24.4, Copilot CLI 1.0.102 and
OpenCode 1.18.33.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GEMINI_SETTINGS_ENV = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
QWEN_SETTINGS_ENV = "QWEN_CODE_SYSTEM_SETTINGS_PATH"
QWEN_SETTINGS_VERSION = 4
"""Qwen Code 0.24.4 rewrites a settings file without this ``$version`` (it migrates it)."""
OPENCODE_CONFIG_ENV = "OPENCODE_CONFIG"
SYSTEM_DEFAULTS_NAME = "system-defaults.json"


@dataclass(frozen=True)
class SystemLayers:
    """The two system settings files of Gemini CLI or Qwen Code: the hub's MCP settings
    take the place of the *system settings* one for the pane, so it carries the machine's
    own over (merged); and the *system defaults* one, found beside the system settings
    unless its variable names it, is copied beside the hub's file."""

    settings_env: str
    defaults_env: str
    settings_path: str
    """Where the agent looks for its system settings on Linux when the variable is unset."""

    def paths(self, environ: Mapping[str, str]) -> tuple[str, str]:
        """The machine's system settings and system defaults files the agent would read."""
        settings = environ.get(self.settings_env) or self.settings_path
        defaults = environ.get(self.defaults_env) or posixpath.join(
            posixpath.dirname(settings), SYSTEM_DEFAULTS_NAME
        )
        return settings, defaults


GEMINI_LAYERS = SystemLayers(
    GEMINI_SETTINGS_ENV, "GEMINI_CLI_SYSTEM_DEFAULTS_PATH", "/etc/gemini-cli/settings.json"
)
QWEN_LAYERS = SystemLayers(
    QWEN_SETTINGS_ENV, "QWEN_CODE_SYSTEM_DEFAULTS_PATH", "/etc/qwen-code/settings.json"
)


@dataclass(frozen=True)
class McpSetup:
    """How one agent kind is started with the hub's MCP server.

    ``args`` go on the agent's command line; ``env`` into the pane's environment (the
    token among it where the agent reads it from there); ``files`` maps absolute paths
    (inside the private folder passed in) to their text, for the hub to write, mode 0600,
    before the agent starts. ``secure_dir``: the agent skips the file unless no folder
    above it is writable by group or others (Gemini CLI), so the folder must not be under
    ``/tmp``. ``tool_names``: what the agent's model calls the three tools.
    """

    agent: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    secure_dir: bool = False
    tool_names: tuple[str, ...] = ()
    system_layers: SystemLayers | None = None
    """Gemini CLI, Qwen Code: the machine's system files the hub's file stands in for."""
    how: str = ""


def http_server(url: str, token: str) -> dict[str, Any]:
    """The ``mcpServers`` entry of a streamable-HTTP server with a bearer token (Claude's form)."""
    return {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}


def _gemini_like(
    d: str,
    url: str,
    server: str,
    tools: Sequence[str],
    token_env: str,
    machine: tuple[Mapping[str, Any] | None, str | None],
    **extra: Any,
) -> dict[str, str]:
    """Gemini CLI's (and Qwen Code's) files: system settings holding the server, trusted
    (no confirmation), the token read from ``token_env`` when the settings load, over the
    machine's own system settings; beside it, the machine's system defaults, if any."""
    entry = {
        "httpUrl": url,
        "headers": {"Authorization": f"Bearer ${{{token_env}}}"},
        "trust": True,
        "includeTools": list(tools),
    }
    own, defaults = machine
    base = dict(own or {})
    servers = base.get("mcpServers")
    servers = {**servers} if isinstance(servers, dict) else {}
    settings = {**extra, **base, "mcpServers": {**servers, server: entry}}
    files = {f"{d}/system-settings.json": json.dumps(settings, indent=2)}
    if defaults is not None:
        files[f"{d}/{SYSTEM_DEFAULTS_NAME}"] = defaults
    return files


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
    d = private_dir.rstrip("/")
    if agent == "claude":
        path = f"{d}/claude-mcp.json"
        allowed = ",".join(f"mcp__{server}__{t}" for t in tools)
        return McpSetup(
            agent,
            args=("--mcp-config", path, "--allowedTools", allowed),
            files={path: json.dumps({"mcpServers": {server: http_server(url, token)}})},
            tool_names=tuple(f"mcp__{server}__{t}" for t in tools),
            how=(
                "claude --mcp-config FILE (the URL and the token) and --allowedTools for the "
                "three tools: 2.1.332's auto mode refuses MCP calls offline unless pre-allowed"
            ),
        )
    if agent == "codex":
        prefix = f"mcp_servers.{server}"
        options = {
            "url": url,
            "bearer_token_env_var": token_env,
            "default_tools_approval_mode": "approve",
        }
        words = [w for k, v in options.items() for w in ("-c", f"{prefix}.{k}={json.dumps(v)}")]
        return McpSetup(
            agent,
            args=tuple(words),
            env={token_env: token},
            tool_names=tuple(f"mcp__{server}.{t}" for t in tools),
            how=(
                "codex -c mcp_servers.NAME.url/bearer_token_env_var/default_tools_approval_mode"
                '="approve" (without it Codex asks before every call)'
            ),
        )
    if agent == "gemini":
        files = _gemini_like(d, url, server, tools, token_env, machine)
        return McpSetup(
            agent,
            env={GEMINI_SETTINGS_ENV: next(iter(files)), token_env: token},
            files=files,
            secure_dir=True,
            tool_names=tuple(f"mcp_{server}_{t}" for t in tools),
            system_layers=GEMINI_LAYERS,
            how=(
                "Gemini CLI reads its system settings layer from GEMINI_CLI_SYSTEM_SETTINGS_PATH "
                "(mcpServers merged with the user's by name; the machine's own system files "
                "carried over; the system-defaults layer holds the hub's hooks); trust: true "
                "skips its confirmation"
            ),
        )
    if agent == "qwen":
        version = {"$version": QWEN_SETTINGS_VERSION}
        files = _gemini_like(d, url, server, tools, token_env, machine, **version)
        return McpSetup(
            agent,
            env={QWEN_SETTINGS_ENV: next(iter(files)), token_env: token},
            files=files,
            tool_names=tuple(f"mcp__{server}__{t}" for t in tools),
            system_layers=QWEN_LAYERS,
            how=(
                "Qwen Code reads its system settings layer from QWEN_CODE_SYSTEM_SETTINGS_PATH "
                "(mcpServers merged by name; the machine's own system files carried over); "
                "trust: true skips its confirmation, in its auto mode too"
            ),
        )
    if agent == "copilot":
        path = f"{d}/copilot-mcp.json"
        entry = {**http_server(url, "${" + token_env + "}"), "tools": list(tools)}
        return McpSetup(
            agent,
            env={token_env: token},
            args=("--additional-mcp-config", f"@{path}", "--allow-tool", server),
            files={path: json.dumps({"mcpServers": {server: entry}})},
            tool_names=tuple(f"{server}-{t}" for t in tools),
            how=(
                "copilot --additional-mcp-config @FILE adds servers for this run (beside "
                "~/.copilot/mcp-config.json; ${NAME} in a header is read from the environment); "
                "--allow-tool NAME allows that server's tools"
            ),
        )
    if agent == "opencode":
        path = f"{d}/opencode-mcp.json"
        config = {
            "mcp": {
                server: {
                    "type": "remote",
                    "url": url,
                    "headers": {"Authorization": f"Bearer {{env:{token_env}}}"},
                    "enabled": True,
                    "oauth": False,
                }
            },
            "permission": {f"{server}_{t}": "allow" for t in tools},
        }
        return McpSetup(
            agent,
            env={OPENCODE_CONFIG_ENV: path, token_env: token},
            files={path: json.dumps(config, indent=2)},
            tool_names=tuple(f"{server}_{t}" for t in tools),
            how=(
                "OPENCODE_CONFIG names one more config file, merged over the user's (the hub's "
                "hooks use OPENCODE_CONFIG_CONTENT); {env:NAME} reads the token"
            ),
        )
    return None


MCP_AGENTS = ("claude", "codex", "gemini", "qwen", "copilot", "opencode")
"""Agent kinds :func:`mcp_setup` knows."""
