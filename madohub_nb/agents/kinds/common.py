"""What several kinds' launch layers share: the hook command's words and the MCP entries.

Pure data and functions (no I/O). The hook command is an argv prefix (``io/hookcall.py``'s
:func:`command_argv`); each hook appends one of :data:`HOOK_KINDS`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..launch import SYSTEM_DEFAULTS_NAME

STOP: Final = "stop"
NOTIFICATION: Final = "notification"
SESSION_START: Final = "session_start"
PERMISSION_REQUEST: Final = "permission_request"
HOOK_KINDS: Final = (STOP, NOTIFICATION, SESSION_START, PERMISSION_REQUEST)
"""What a hook can report: a turn ended; the agent asks for a person (a permission
prompt); a session (re)started, with the path of its record; the tool a permission
prompt is about, with its input (Claude Code's ``PermissionRequest``)."""

MachineFiles = tuple[Mapping[str, Any] | None, str | None]
"""A machine's own system settings (parsed) and system defaults (text), for MCP layers
that stand in for them (Gemini CLI, Qwen Code)."""


def shell_command(base: Sequence[str], kind: str) -> str:
    """The hook command as one shell line (for agents that run hooks through a shell)."""
    return shlex.join([*base, kind])


def claude_like_hooks(base: Sequence[str], timeout: int | None) -> dict[str, Any]:
    """``{"Stop": [...], "Notification": [...], "SessionStart": [...]}`` of command hooks."""

    def entry(kind: str) -> list[dict[str, Any]]:
        hook: dict[str, Any] = {"type": "command", "command": shell_command(base, kind)}
        if timeout is not None:
            hook["timeout"] = timeout
        return [{"hooks": [hook]}]

    return {
        "Stop": entry(STOP),
        "Notification": entry(NOTIFICATION),
        "SessionStart": entry(SESSION_START),
    }


JS_SEND_AND_LAST_ANSWER: Final = """\
import { spawn } from "node:child_process";
const HOOK = __HOOK__;
function send(kind, payload) {
  try {
    const child = spawn(HOOK[0], [...HOOK.slice(1), kind], { stdio: ["pipe", "ignore", "ignore"] });
    child.on("error", () => {});
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  } catch (e) {}
}
function lastAnswer(messages) {
  for (let i = (messages ?? []).length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m?.role !== "assistant") continue;
    const content = typeof m.content === "string" ? [{ type: "text", text: m.content }] : (m.content ?? []);
    const text = content.filter((b) => b?.type === "text").map((b) => b.text).join("");
    if (text.trim()) return text;
  }
  return null;
}
"""
"""What Pi's extension and Amp's plugin share: ``send`` runs the hook command with the
payload on its stdin (never failing the agent), ``lastAnswer`` the last assistant text."""


def script(template: str, base: Sequence[str]) -> str:
    """A plugin's source with the hook command (a JSON array) in place of ``__HOOK__``."""
    return template.replace("__HOOK__", json.dumps(list(base)))


def http_server(url: str, token: str) -> dict[str, Any]:
    """The ``mcpServers`` entry of a streamable-HTTP server with a bearer token (Claude's form)."""
    return {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}


def gemini_like_files(
    d: str,
    url: str,
    server: str,
    tools: Sequence[str],
    token_env: str,
    machine: MachineFiles,
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
