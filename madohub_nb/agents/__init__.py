"""What the toolkit knows about agents: profiles, process detection, Claude and Codex files."""

from __future__ import annotations

from .claude import (
    ClaudeSession,
    claude_config_dir,
    read_session_file,
    session_status,
)
from .codex import codex_home, open_rollout_file
from .detect import (
    UNKNOWN_KIND,
    agent_kind_of,
    detect_kind,
    find_agent_process,
    process_environ,
)
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
    "AgentProfile",
    "ClaudeSession",
    "agent_kind_of",
    "claude_config_dir",
    "codex_home",
    "detect_kind",
    "find_agent_process",
    "get_profile",
    "open_rollout_file",
    "process_environ",
    "read_session_file",
    "screen_state",
    "session_status",
]
