"""Extract: the source tile's last response, by the best means its agent allows.

Claude Code: agent pid → its config dir → ``sessions/<pid>.json`` → ``sessionId``
→ ``projects/*/<sessionId>.jsonl`` (falling back to the cwd's project folder).
Codex: the rollout file the process has open, else the newest one for its cwd.
Everything else, and whenever a transcript cannot be resolved: the screen,
ANSI codes and TUI chrome removed. A program without answer markers (a
``terminal`` tile, a shell running a REPL) answers with the output that
followed the last input typed into it.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..agents.codex import ROLLOUT_GLOB, newest_rollout
from ..agents.screen import strip_ansi, terminal_last_response
from ..io.transcripts import Extraction, cwd_to_project_dir, find_codex_rollout

if TYPE_CHECKING:
    from ..agents.detect import AgentProcess
    from .tile import Tile


def claude_transcript(tile: Tile, proc: AgentProcess) -> str | None:
    """The transcript a running Claude Code process writes (a path on its machine), or None."""
    config = tile.claude_config(proc)
    if config is None:
        return None
    projects = config / "projects"
    session = tile.claude_session(proc)
    if session is not None and session.session_id:
        # The session may have no transcript yet (no prompt so far): then there is no answer.
        # Never fall back to the folder here: another agent in the same cwd writes there too.
        return tile.machine.find_file(str(projects), f"{session.session_id}.jsonl")
    if not tile.machine.dir_scans:
        return None
    # No sessions file (older versions, an exited agent): the newest transcript of its cwd.
    cwd = tile.machine.cwd(proc.pid) or (session.cwd if session is not None else None)
    if not cwd:
        return None
    folder = cwd_to_project_dir(cwd, projects)
    if folder is None:
        return None
    found = _newest_regular_file(folder.glob("*.jsonl"))
    return str(found) if found is not None else None


def _newest_regular_file(paths: Iterable[Path]) -> Path | None:
    """The most recently modified regular file of ``paths``, or None.

    Anything else (a dangling or looping link, a directory, a FIFO, a file gone
    since it was listed) is no transcript: an agent's folder is not ours to trust.
    """
    best: tuple[float, Path] | None = None
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and (best is None or st.st_mtime > best[0]):
            best = (st.st_mtime, path)
    return best[1] if best is not None else None


def codex_rollout(tile: Tile, proc: AgentProcess) -> str | None:
    """The rollout file a running Codex process writes (a path on its machine), or None.

    The one Codex (or a descendant: the native child of its ``node``) holds open; where
    directories may be scanned, else the newest rollout of its cwd since it started.
    """
    machine, home = tile.machine, tile.codex_home(proc)
    real_home = os.path.realpath(home) if home is not None and machine.name is None else home
    held = [f.path for f in machine.open_files([proc.pid], ROLLOUT_GLOB)]
    found = newest_rollout(held, home, *([real_home] if real_home else []))
    if found is not None or not machine.dir_scans:
        return found
    cwd, started = machine.cwd(proc.pid), machine.started_at(proc.pid)
    if home is None or cwd is None or started is None:
        return None
    rollout = find_codex_rollout(home, cwd=cwd, started_after=started)
    return str(rollout) if rollout is not None else None


def transcript_path(tile: Tile) -> Path | None:
    """Where the tile's agent keeps its transcript (a path on the tile's machine), if found."""
    found = tile.transcript_path()
    return Path(found) if found is not None else None


ANSWER_HISTORY_LINES = 5000
"""Scrollback searched for the last typed input when its row is no longer known."""


def answer_after_input(
    text: str, typed: str, ready_pattern: re.Pattern[str] | None = None, *, last: bool = False
) -> str | None:
    """The output that followed ``typed`` in ``text`` (screen or history), or None if not found.

    The anchor is the first line (``last=True``: the last one) holding the last
    non-blank typed line: the echo of the input (``>>> print(1)``; for ``cat``,
    its own copy follows). A final line matching ``ready_pattern`` (the
    program's prompt back) and trailing blank lines are not part of the answer.
    """
    probe = next((ln.strip() for ln in reversed(typed.splitlines()) if ln.strip()), "")
    if not probe:
        return None
    lines = strip_ansi(text).split("\n")
    hits = [i for i, line in enumerate(lines) if probe in line]
    if not hits:
        return None
    answer = lines[(hits[-1] if last else hits[0]) + 1 :]
    while answer and not answer[-1].strip():
        answer.pop()
    if answer and ready_pattern is not None and ready_pattern.search(answer[-1]):
        answer.pop()
    return "\n".join(line.rstrip() for line in answer).strip("\n")


def _terminal_answer(tile: Tile) -> str:
    """What the screen shows as the answer, by the rule of the profile that applies now."""
    profile = tile.active_profile
    typed = tile.last_input
    if profile.answer_after_input and typed is not None:
        since = tile.output_since_input()
        found = answer_after_input(since, typed.text, tile.ready_pattern) if since else None
        if found is None:  # scrolled or trimmed: the last echo of the input anywhere
            history = tile.history(ANSWER_HISTORY_LINES)
            found = answer_after_input(history, typed.text, tile.ready_pattern, last=True)
        if found is not None:
            return found
    return terminal_last_response(tile.screen(), profile)


def from_terminal(tile: Tile) -> Extraction | None:
    """The last answer as shown on screen, without ANSI codes and TUI chrome."""
    text = _terminal_answer(tile).strip()
    if not text:
        return None
    key = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
    return Extraction(text=text, method="terminal", path=None, message_id=f"screen:{key}")


def extract(tile: Tile, terminal_only: bool = False) -> Extraction | None:
    """The tile's last response: transcript first (unless ``terminal_only``), then the screen."""
    if not terminal_only and tile.profile.extractor in ("jsonl", "rollout"):
        found = tile.transcript_response()  # (on a host: a bounded tail over ssh)
        if found is not None:
            return found
    return from_terminal(tile)
