"""What each agent needs so that it calls the hub's hook command, and what its payload says.

Pure data and functions (no I/O): the hub passes the result on the agent's command
line, in the pane's environment, or in files it writes into a private folder of its
own, so a user's own settings files are never touched. Each setup was run here with
the real agent in tmux, offline (tests/real_agents/test_real_hooks.py): Claude Code
2.1.332, Codex 0.171.0, Gemini CLI 0.61.0, Qwen Code 0.24.4, Copilot CLI 1.0.102,
OpenCode 1.18.33, Pi 0.73.1 and Amp 0.0.1790142911 (against a fake of its backend).

Each kind's hooks layer is its own module's (``agents/kinds/<kind>.py``, ``hooks`` and
``hooks_opt_in`` of its :class:`~madohub_nb.agents.kinds.base.AgentKind`); this module asks
the kind. The hook command is an argv prefix (``io/hookcall.py``'s :func:`command_argv`);
each hook appends one of :data:`HOOK_KINDS`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .kinds import BY_LAYERS_AGE, KINDS
from .kinds.claude import HOOK_TIMEOUT_S as CLAUDE_HOOK_TIMEOUT_S
from .kinds.common import (
    HOOK_KINDS,
    NOTIFICATION,
    PERMISSION_REQUEST,
    SESSION_START,
    STOP,
    shell_command,
)
from .launch import LaunchLayer

HookSetup = LaunchLayer
"""How one agent kind is told to call the hook command: its hooks layer."""


@dataclass(frozen=True)
class HookFacts:
    """What a hook's payload tells, agent by agent: the answer and the record it came from."""

    answer: str | None = None
    message: str | None = None
    session_id: str | None = None
    transcript_path: str | None = None
    turn_id: str | None = None


def hook_setup(agent: str, base: Sequence[str], private_dir: str) -> HookSetup | None:
    """How to make ``agent`` call the hook command ``base``; None for an agent without hooks.

    ``private_dir`` is a folder the hub owns for this tile (it writes ``files`` there).
    """
    shipped = KINDS.get(agent)
    if shipped is None or shipped.hooks is None:
        return None
    return shipped.hooks(base, private_dir.rstrip("/"))


HOOK_AGENTS: Final = tuple(k.name for k in BY_LAYERS_AGE if k.hooks is not None)
"""Agent kinds :func:`hook_setup` knows (those whose kind has a hooks layer)."""


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
    shipped = KINDS.get(agent)
    if kind == STOP and (shipped is None or shipped.hook_answer):
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
    shipped = KINDS.get(agent)
    if shipped is not None and shipped.hooks_opt_in is not None:
        return shipped.hooks_opt_in(base) + restart
    return (
        f"{agent!r} has no hooks madohub_nb knows; known: {', '.join(HOOK_AGENTS)}. "
        "Its turns are told from its records or its screen.\n"
    )


__all__ = [
    "CLAUDE_HOOK_TIMEOUT_S", "HOOK_AGENTS", "HOOK_KINDS", "NOTIFICATION", "PERMISSION_REQUEST",
    "SESSION_START", "STOP", "HookFacts", "HookSetup", "describe", "hook_setup", "opt_in_snippet",
    "shell_command",
]  # fmt: skip
