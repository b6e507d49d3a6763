"""What each agent needs so that it calls the hub's hook command, and what its payload says.

Pure data and functions (no I/O): the hub passes the result on the agent's command
line, in the pane's environment, or in files it writes into a private folder of its
own, so a user's own settings files are never touched. Each setup was run here with
the real agent in tmux, offline (tests/real_agents/test_real_hooks.py): Claude Code
2.1.332, Codex 0.171.0, Gemini CLI 0.61.0, Qwen Code 0.24.4, Copilot CLI 1.0.102,
OpenCode 1.18.33, Pi 0.73.1 and Amp 0.0.1790142911 (against a fake of its backend).

The hook command is an argv prefix (``io/hookcall.py``'s :func:`command_argv`); each
hook appends one of :data:`HOOK_KINDS`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STOP = "stop"
NOTIFICATION = "notification"
SESSION_START = "session_start"
PERMISSION_REQUEST = "permission_request"
HOOK_KINDS = (STOP, NOTIFICATION, SESSION_START, PERMISSION_REQUEST)
"""What a hook can report: a turn ended; the agent asks for a person (a permission
prompt); a session (re)started, with the path of its record; the tool a permission
prompt is about, with its input (Claude Code's ``PermissionRequest``)."""

CLAUDE_HOOK_TIMEOUT_S = 10
"""Claude's ``timeout`` for a command hook, in seconds (the command ends in < 3 s)."""


@dataclass(frozen=True)
class HookSetup:
    """How one agent kind is told to call the hook command.

    ``args`` go on the agent's command line; ``env`` into the pane's environment
    (beside the token and socket variables); ``files`` maps absolute paths (inside the
    private folder passed in) to their text, for the hub to write before the agent
    starts. ``private_home`` says the setup replaces the agent's own config home
    (Copilot), which also hides the user's login there. ``secure_dir`` says the agent
    refuses the files unless no folder above them is writable by group or others
    (Gemini CLI 0.61.0 skips such a settings file: "Parent directory '/tmp' is
    insecure"), so the private folder must not be under ``/tmp``.
    """

    agent: str
    kinds: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    private_home: bool = False
    secure_dir: bool = False
    how: str = ""


@dataclass(frozen=True)
class HookFacts:
    """What a hook's payload tells, agent by agent: the answer and the record it came from."""

    answer: str | None = None
    message: str | None = None
    session_id: str | None = None
    transcript_path: str | None = None
    turn_id: str | None = None


def shell_command(base: Sequence[str], kind: str) -> str:
    """The hook command as one shell line (for agents that run hooks through a shell)."""
    return shlex.join([*base, kind])


def _claude_like_hooks(base: Sequence[str], timeout: int | None) -> dict[str, Any]:
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


def claude_settings(base: Sequence[str]) -> dict[str, Any]:
    """Claude Code's ``--settings`` value: Stop, Notification, SessionStart and
    PermissionRequest command hooks (the last prints nothing, so the dialog is shown)."""
    hooks = _claude_like_hooks(base, CLAUDE_HOOK_TIMEOUT_S)
    command = {"type": "command", "command": shell_command(base, PERMISSION_REQUEST)}
    hooks["PermissionRequest"] = [{"hooks": [{**command, "timeout": CLAUDE_HOOK_TIMEOUT_S}]}]
    return {"hooks": hooks}


def codex_notify(base: Sequence[str]) -> str:
    """Codex's ``-c`` override: ``notify=[...]`` (a TOML array; JSON strings are TOML strings).

    Codex runs it once per finished turn with its JSON as the last argument.
    """
    return "notify=" + json.dumps([*base, STOP])


OPENCODE_PLUGIN = """\
// madohub: report OpenCode's end of turn (session.idle) to the hub. Written by madohub_nb.
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
export const MadohubHooks = async () => ({
  event: async ({ event }) => {
    const sessionID = event?.properties?.sessionID ?? null;
    if (event?.type === "session.idle") {
      send("stop", { hook_event_name: "session.idle", session_id: sessionID });
    } else if (event?.type === "permission.updated" || event?.type === "permission.asked") {
      send("notification", { hook_event_name: event.type, session_id: sessionID,
        message: String(event?.properties?.title ?? "permission requested") });
    }
  },
});
"""

_JS_SEND_AND_LAST_ANSWER = """\
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

PI_EXTENSION = (
    """\
// madohub: report Pi's end of turn (agent_end) and its answer to the hub. Written by madohub_nb.
"""
    + _JS_SEND_AND_LAST_ANSWER
    + """\
function sessionFile(ctx) {
  try { return ctx?.sessionManager?.getSessionFile?.() ?? null; } catch (e) { return null; }
}
export default function (pi) {
  pi.on("agent_end", async (event, ctx) => {
    send("stop", { hook_event_name: "agent_end", last_assistant_message: lastAnswer(event?.messages),
      session_file: sessionFile(ctx) });
  });
  pi.on("session_start", async (event, ctx) => {
    send("session_start", { hook_event_name: "session_start", session_file: sessionFile(ctx) });
  });
}
"""
)


AMP_PLUGIN = (
    """\
// madohub: report Amp's end of turn (agent.end) and its answer to the hub. Written by madohub_nb.
"""
    + _JS_SEND_AND_LAST_ANSWER
    + """\
export default function (amp) {
  amp.on("agent.end", async (event, ctx) => {
    send("stop", { hook_event_name: "agent.end", session_id: event?.thread?.id ?? null,
      turn_id: event?.id ?? null, status: event?.status ?? null,
      last_assistant_message: lastAnswer(event?.messages) });
    return { action: "done" };
  });
}
"""
)


def _script(template: str, base: Sequence[str]) -> str:
    return template.replace("__HOOK__", json.dumps(list(base)))


def hook_setup(agent: str, base: Sequence[str], private_dir: str) -> HookSetup | None:
    """How to make ``agent`` call the hook command ``base``; None for an agent without hooks.

    ``private_dir`` is a folder the hub owns for this tile (it writes ``files`` there).
    """
    d = private_dir.rstrip("/")
    if agent == "claude":
        return HookSetup(
            agent,
            (STOP, NOTIFICATION, SESSION_START, PERMISSION_REQUEST),
            args=("--settings", json.dumps(claude_settings(base), separators=(",", ":"))),
            how="claude --settings JSON adds hooks for this process only (observed 2.1.197, 2.1.332)",
        )
    if agent == "codex":
        return HookSetup(
            agent,
            (STOP,),
            args=("-c", codex_notify(base)),
            how="codex -c notify=[...]: runs once per turn, payload JSON as the last argument",
        )
    if agent == "gemini":
        path = f"{d}/gemini-system-defaults.json"
        hooks = {
            "AfterAgent": [{"hooks": [{"type": "command", "command": shell_command(base, STOP)}]}],
            "Notification": [
                {"hooks": [{"type": "command", "command": shell_command(base, NOTIFICATION)}]}
            ],
            "SessionStart": [
                {"hooks": [{"type": "command", "command": shell_command(base, SESSION_START)}]}
            ],
        }
        return HookSetup(
            agent,
            (STOP, NOTIFICATION, SESSION_START),
            env={"GEMINI_CLI_SYSTEM_DEFAULTS_PATH": path},
            files={path: json.dumps({"hooks": hooks}, indent=2)},
            secure_dir=True,
            how=(
                "Gemini CLI reads its system-defaults layer (the lowest, under the user's "
                "settings) from GEMINI_CLI_SYSTEM_DEFAULTS_PATH: the hub's file holds the hooks"
            ),
        )
    if agent == "qwen":
        path = f"{d}/qwen-system-defaults.json"
        return HookSetup(
            agent,
            (STOP, NOTIFICATION, SESSION_START),
            env={"QWEN_CODE_SYSTEM_DEFAULTS_PATH": path},
            files={path: json.dumps({"hooks": _claude_like_hooks(base, None)}, indent=2)},
            how=(
                "Qwen Code has Claude-style hooks (Stop, Notification, SessionStart) in its "
                "settings; its system-defaults layer comes from QWEN_CODE_SYSTEM_DEFAULTS_PATH"
            ),
        )
    if agent == "copilot":
        home = f"{d}/copilot-home"
        path = f"{home}/hooks/madohub.json"

        def entry(kind: str) -> list[dict[str, Any]]:
            return [{"type": "command", "bash": shell_command(base, kind), "timeoutSec": 10}]

        config = {
            "version": 1,
            "hooks": {"agentStop": entry(STOP), "sessionStart": entry(SESSION_START)},
        }
        return HookSetup(
            agent,
            (STOP, SESSION_START),
            env={"COPILOT_HOME": home},
            files={path: json.dumps(config, indent=2)},
            private_home=True,
            how=(
                "Copilot CLI has no per-run hooks option: user-level hooks are "
                "$COPILOT_HOME/hooks/*.json, so the pane gets a private COPILOT_HOME "
                "(without the user's login there; fine with COPILOT_PROVIDER_* or offline)"
            ),
        )
    if agent == "opencode":
        path = f"{d}/opencode/madohub.js"
        return HookSetup(
            agent,
            (STOP, NOTIFICATION),
            env={"OPENCODE_CONFIG_CONTENT": json.dumps({"plugin": [f"file://{path}"]})},
            files={path: _script(OPENCODE_PLUGIN, base)},
            how=(
                "OPENCODE_CONFIG_CONTENT (inline config, merged over the user's) lists the "
                "hub's plugin file, which runs the hook command on session.idle; no config "
                "folder is added (OpenCode installs @opencode-ai/plugin into each one it loads)"
            ),
        )
    if agent == "pi":
        path = f"{d}/pi/madohub.ts"
        return HookSetup(
            agent,
            (STOP, SESSION_START),
            args=("-e", path),
            files={path: _script(PI_EXTENSION, base)},
            how="pi -e FILE loads an extension for this run; it reports agent_end with the answer",
        )
    if agent == "amp":
        config_home = f"{d}/amp-config"
        return HookSetup(
            agent,
            (STOP,),
            env={"XDG_CONFIG_HOME": config_home},
            files={f"{config_home}/amp/plugins/madohub.ts": _script(AMP_PLUGIN, base)},
            private_home=True,
            how=(
                "Amp has no per-run plugin option: it loads $XDG_CONFIG_HOME/amp/plugins/*.ts, "
                "so the pane gets a private XDG_CONFIG_HOME (without the user's "
                "~/.config/amp/settings.json: give its backend as AMP_URL); the plugin reports "
                "agent.end (its backend's end-of-turn request) with the turn's answer"
            ),
        )
    return None


HOOK_AGENTS = ("claude", "codex", "gemini", "qwen", "copilot", "opencode", "pi", "amp")
"""Agent kinds :func:`hook_setup` knows."""


def _str(payload: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def describe(agent: str, kind: str, payload: Mapping[str, Any]) -> HookFacts:
    """What ``payload`` (an agent's hook JSON) says: the answer where the agent gives it.

    Gemini's ``prompt_response`` is not taken: observed here, it joined streamed chunks
    with spaces and repeated the last one (REAL-AGENTS.md); its ``transcript_path`` is.
    """
    session = _str(payload, "session_id", "sessionId", "thread-id")
    record = _str(payload, "transcript_path", "transcriptPath", "session_file")
    turn = _str(payload, "prompt_id", "turn-id", "turn_id")
    answer = None
    if kind == STOP and agent != "gemini":
        answer = _str(payload, "last_assistant_message", "last-assistant-message")
    message = _str(payload, "message") if kind == NOTIFICATION else None
    return HookFacts(
        answer=answer, message=message, session_id=session, transcript_path=record, turn_id=turn
    )


def opt_in_snippet(agent: str, base: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The text ``%madohub hooks AGENT`` prints: what a user adds to opt an adopted pane in.

    The hook entries are the same for every session; the command does nothing in a
    pane without the two variables, so they can stay in the user's settings. ``env``
    (the pane's token and socket, from the hub) is what to export before starting the
    agent again in that pane.
    """
    exports = ""
    if env:
        exports = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    restart = (
        f"Then start {agent} again in that pane, after:\n  {exports}\n"
        if exports
        else f"Then start {agent} again in that pane with the hub's MADOHUB_HOOK_TOKEN and "
        "MADOHUB_HOOK_SOCKET exported (the hub prints them for the pane).\n"
    )
    if agent in ("claude", "qwen"):
        where = "~/.claude/settings.json" if agent == "claude" else "~/.qwen/settings.json"
        hooks = (
            claude_settings(base)
            if agent == "claude"
            else {"hooks": _claude_like_hooks(base, None)}
        )
        text = f'Merge into the "hooks" of {where}:\n{json.dumps(hooks, indent=2)}\n'
        if agent == "claude":
            text += (
                "(or, with no file changed, start it as: claude --settings "
                f"{shlex.quote(json.dumps(claude_settings(base), separators=(',', ':')))})\n"
            )
        return text + restart
    if agent == "codex":
        return (
            "Add to ~/.codex/config.toml (top level):\n"
            f"  {codex_notify(base).replace('=', ' = ', 1)}\n"
            f"(or start it as: codex -c {shlex.quote(codex_notify(base))})\n" + restart
        )
    if agent == "gemini":
        hooks = {
            "AfterAgent": [{"hooks": [{"type": "command", "command": shell_command(base, STOP)}]}]
        }
        return (
            f"Merge into ~/.gemini/settings.json:\n{json.dumps({'hooks': hooks}, indent=2)}\n"
            + restart
        )
    if agent == "copilot":
        config = {
            "version": 1,
            "hooks": {
                "agentStop": [
                    {"type": "command", "bash": shell_command(base, STOP), "timeoutSec": 10}
                ]
            },
        }
        return f"Save as ~/.copilot/hooks/madohub.json:\n{json.dumps(config, indent=2)}\n" + restart
    if agent == "opencode":
        return (
            "Save as ~/.config/opencode/plugins/madohub.js:\n"
            + _script(OPENCODE_PLUGIN, base)
            + restart
        )
    if agent == "pi":
        return (
            "Save as ~/.pi/agent/extensions/madohub.ts:\n" + _script(PI_EXTENSION, base) + restart
        )
    if agent == "amp":
        return "Save as ~/.config/amp/plugins/madohub.ts:\n" + _script(AMP_PLUGIN, base) + restart
    return (
        f"{agent!r} has no hooks madohub_nb knows; known: {', '.join(HOOK_AGENTS)}. "
        "Its turns are told from its records or its screen.\n"
    )
