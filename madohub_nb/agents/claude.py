"""Claude Code's own files: its config directory and the live ``sessions/<pid>.json``.

Claude Code writes ``<config>/sessions/<PID>.json`` while it runs (deleted on
exit) with its ``sessionId`` and a live ``status`` (idle, busy, waiting). The
config directory is the process's ``CLAUDE_CONFIG_DIR``, else its
``HOME``/.claude (REAL-AGENTS.md). Transcripts are found and parsed in transcripts.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psutil

from .detect import process_environ

SESSION_STATUSES: Final = ("idle", "busy", "waiting")


@dataclass(frozen=True)
class ClaudeSession:
    """One ``sessions/<pid>.json``: which session a Claude process runs and what it is doing."""

    pid: int
    session_id: str
    path: Path
    cwd: str | None = None
    status: str | None = None
    waiting_for: str | None = None
    version: str | None = None
    kind: str | None = None
    name: str | None = None
    tmux: str | None = None
    """``"<session>:@<window>.%<pane>"`` in newer versions."""
    updated_at_ms: int | None = None


def claude_config_dir(
    proc: psutil.Process | None, fallback: str | Path | None = None
) -> Path | None:
    """The agent's config dir: its ``CLAUDE_CONFIG_DIR``, its ``HOME``/.claude, ``fallback``, or None."""
    env = process_environ(proc)
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser()
    if env.get("HOME"):
        return Path(env["HOME"]) / ".claude"
    if fallback is not None and str(fallback):
        return Path(fallback).expanduser()
    return None


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _whole(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_session_file(config_dir: str | Path | None, pid: int) -> ClaudeSession | None:
    """``<config_dir>/sessions/<pid>.json``, or None when missing, half-written or without a sessionId."""
    if config_dir is None:
        return None
    path = Path(config_dir) / "sessions" / f"{int(pid)}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    session_id = _text(data, "sessionId")
    if not session_id:
        return None
    return ClaudeSession(
        pid=_whole(data, "pid") or int(pid),
        session_id=session_id,
        path=path,
        cwd=_text(data, "cwd"),
        status=_text(data, "status"),
        waiting_for=_text(data, "waitingFor"),
        version=_text(data, "version"),
        kind=_text(data, "kind"),
        name=_text(data, "name"),
        tmux=_text(data, "tmux"),
        updated_at_ms=_whole(data, "statusUpdatedAt") or _whole(data, "updatedAt"),
    )


def session_status(session: ClaudeSession | None) -> str:
    """``idle``, ``busy`` or ``waiting`` from the session file; ``unknown`` otherwise."""
    if session is None or session.status not in SESSION_STATUSES:
        return "unknown"
    return session.status
