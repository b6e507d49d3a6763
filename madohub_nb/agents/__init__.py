"""What the toolkit knows about agents: profiles, process detection, each kind's files."""

from __future__ import annotations

from .detect import (
    UNKNOWN_KIND,
    AgentProcess,
    agent_kind_of,
    detect_kind,
    find_agent,
)
from .kinds.claude import (
    ClaudeSession,
    claude_config_dir,
    read_session_file,
    session_status,
)
from .kinds.codex import codex_home, newest_rollout
from .profiles import (
    PROFILES,
    SCREEN_STATES,
    SHELL_COMMANDS,
    AgentProfile,
    get_profile,
    screen_state,
)

__all__ = [
    "PROFILES",
    "SCREEN_STATES",
    "SHELL_COMMANDS",
    "UNKNOWN_KIND",
    "AgentProcess",
    "AgentProfile",
    "ClaudeSession",
    "agent_kind_of",
    "claude_config_dir",
    "codex_home",
    "detect_kind",
    "find_agent",
    "get_profile",
    "newest_rollout",
    "read_session_file",
    "screen_state",
    "session_status",
]
