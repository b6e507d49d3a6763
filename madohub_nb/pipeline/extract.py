"""Extract: the source tile's last response, by the best means its agent allows.

Claude Code: agent pid → its config dir → ``sessions/<pid>.json`` → ``sessionId``
→ ``projects/*/<sessionId>.jsonl`` (falling back to the cwd's project folder).
Codex: the rollout file the process has open, else the newest one for its cwd.
Everything else, and whenever a transcript cannot be resolved: the screen,
ANSI codes and TUI chrome removed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from ..agents.claude import claude_config_dir, read_session_file
from ..agents.codex import codex_home, open_rollout_file
from ..agents.screen import terminal_last_response
from ..io.transcripts import (
    Extraction,
    cwd_to_project_dir,
    find_claude_transcript,
    find_codex_rollout,
    read_last_response,
)

if TYPE_CHECKING:
    from .tile import Tile


def claude_transcript_path(proc: psutil.Process, claude_home: str | None) -> Path | None:
    """The transcript a running Claude Code process writes, or None."""
    config = claude_config_dir(proc, claude_home)
    if config is None:
        return None
    projects = config / "projects"
    session = read_session_file(config, proc.pid)
    if session is not None and session.session_id:
        # The session may have no transcript yet (no prompt so far): then there is no answer.
        # Never fall back to the folder here: another agent in the same cwd writes there too.
        return find_claude_transcript(projects, session.session_id)
    # No sessions file (older versions, an exited agent): the newest transcript of its cwd.
    cwd: str | None
    try:
        cwd = proc.cwd()
    except psutil.Error:
        cwd = session.cwd if session is not None else None
    if not cwd:
        return None
    folder = cwd_to_project_dir(cwd, projects)
    if folder is None:
        return None
    candidates = sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    return candidates[0] if candidates else None


def codex_rollout_path(proc: psutil.Process) -> Path | None:
    """The rollout file a running Codex process writes, or None."""
    path = open_rollout_file(proc)
    if path is not None:
        return path
    home = codex_home(proc)
    if home is None:
        return None
    try:
        cwd, started = proc.cwd(), proc.create_time()
    except psutil.Error:
        return None
    return find_codex_rollout(home, cwd=cwd, started_after=started)


def transcript_path(tile: Tile) -> Path | None:
    """Where the tile's agent keeps its transcript, if it has one we can find."""
    proc = tile.agent_process()
    if proc is None:
        return None
    extractor = tile.profile.extractor
    if extractor == "jsonl":
        return claude_transcript_path(proc, tile.claude_home())
    if extractor == "rollout":
        return codex_rollout_path(proc)
    return None


def from_terminal(tile: Tile) -> Extraction | None:
    """The last answer as shown on screen, without ANSI codes and TUI chrome."""
    text = terminal_last_response(tile.screen(), tile.profile).strip()
    if not text:
        return None
    key = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
    return Extraction(text=text, method="terminal", path=None, message_id=f"screen:{key}")


def extract(tile: Tile, terminal_only: bool = False) -> Extraction | None:
    """The tile's last response: transcript first (unless ``terminal_only``), then the screen."""
    if not terminal_only and tile.profile.extractor in ("jsonl", "rollout"):
        path = transcript_path(tile)
        if path is not None:
            found = read_last_response(path, usage=True)
            if found is not None:
                return found
    return from_terminal(tile)
