"""Extract: the source tile's last response, by the best means its agent allows.

Claude Code: agent pid → its config dir → ``sessions/<pid>.json`` → ``sessionId``
→ ``projects/*/<sessionId>.jsonl`` (falling back to the cwd's project folder).
Codex: the rollout file the process has open, else the newest one for its cwd.
OpenCode, Qwen Code, Aider, Gemini CLI, Copilot CLI and Pi: their own record
of the conversation (``session``; where each keeps it: ``agents/records.py``).
Everything else, and whenever no record can be found: the screen,
ANSI codes and TUI chrome removed. A program without answer markers (a
``terminal`` tile, a shell running a REPL) answers with the output that
followed the last input typed into it.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..agents import records as agent_records
from ..agents.claude import claimed_session_ids
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
    session, stale = tile.read_claude_session(proc)
    if stale:
        # Its pid's sessions file is another (dead) process's: it writes its own soon; the
        # folder's newest transcript may be anyone's.
        return None
    if session is not None and session.session_id:
        # The session may have no transcript yet (no prompt so far): then there is no answer.
        # Never fall back to the folder here: another agent in the same cwd writes there too.
        return tile.machine.find_file(str(projects), f"{session.session_id}.jsonl")
    if not tile.machine.dir_scans:
        return None
    # No sessions file (older versions, or one not written yet): the newest transcript of its
    # cwd that can be its own. Other Claudes of the same cwd and config dir write there too
    # (an experiment's runs, the kernel's own tiles): a transcript older than this process,
    # or one another process's sessions file names, is theirs. (Read as the agent's, a
    # fresh agent looked idle before it could take input, and its kickoff was lost.)
    cwd = tile.machine.cwd(proc.pid) or (session.cwd if session is not None else None)
    if not cwd:
        return None
    folder = cwd_to_project_dir(cwd, projects)
    if folder is None:
        return None
    others = claimed_session_ids(config, proc.pid)
    started = tile.machine.started_at(proc.pid)
    found = _newest_regular_file(
        (p for p in folder.glob("*.jsonl") if p.stem not in others),
        since=started - START_SLACK_S if started is not None else None,
    )
    return str(found) if found is not None else None


START_SLACK_S = 1.0
"""A record modified up to this long before its agent's start may still be its own
(clocks and mtimes are coarse); an older one is another session's."""


def _newest_regular_file(paths: Iterable[Path], since: float | None = None) -> Path | None:
    """The most recently modified regular file of ``paths`` (modified at ``since`` or
    later, when given), or None.

    Anything else (a dangling or looping link, a directory, a FIFO, a file gone
    since it was listed) is no transcript: an agent's folder is not ours to trust.
    """
    best: tuple[float, Path] | None = None
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or (since is not None and st.st_mtime < since):
            continue
        if best is None or st.st_mtime > best[0]:
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


@dataclass(frozen=True)
class RecordRef:
    """An agent's own record on the tile's machine, and what narrows it to the agent's session."""

    path: str
    fmt: str
    """Its format (``madohub_nb.io.agent_records``): ``opencode``, ``qwen``, ``aider``..."""
    session_id: str | None = None
    cwd: str | None = None
    """OpenCode: its database serves every OpenCode of the user; the agent's session is the
    newest one run in this folder."""


def agent_record(tile: Tile, proc: AgentProcess) -> RecordRef | None:
    """The record the tile's agent keeps of its conversation (a path on its machine), or None.

    Every look-up is bounded: a few file reads or one listing of one folder
    (listings only where the machine allows them).
    """
    fmt = agent_records.record_format(proc.kind)
    if fmt is None:
        return None
    env = tile.record_environ(proc)
    machine = tile.machine
    cwd = machine.cwd(proc.pid) or tile.pane_path()
    if fmt == "opencode":
        db = agent_records.opencode_database(env)
        return RecordRef(db, fmt, cwd=cwd) if db is not None and cwd else None
    if fmt == "aider":
        argv = machine.cmdline(proc.pid)
        candidates = agent_records.aider_history_candidates(cwd, argv, env)
        # On a host each look is an ssh read: its cwd's only (not the folders above).
        for path in candidates if machine.dir_scans else candidates[:1]:
            # (here a stat; on a host a bounded tail read, None when there is no such file)
            if machine.with_file(path, _is_regular_file):
                return RecordRef(path, fmt)
        return None
    if fmt == "qwen":
        return _qwen_chat(tile, proc, env)
    if fmt == "copilot":
        return _copilot_events(tile, proc, env)
    if fmt == "gemini":
        pointer = agent_records.gemini_projects_file(env)
        raw = machine.read_head(pointer) if pointer is not None and cwd else None
        name = agent_records.gemini_project_name(raw, cwd) if cwd else None
        folder = agent_records.gemini_chats(env, cwd, name)
        return _newest_since_start(tile, proc, folder, agent_records.GEMINI_CHAT_GLOB, fmt)
    if fmt == "pi":
        folder = agent_records.pi_sessions(env, cwd)
        return _newest_since_start(tile, proc, folder, agent_records.PI_SESSION_GLOB, fmt)
    return None


def _copilot_events(tile: Tile, proc: AgentProcess, env: dict[str, str]) -> RecordRef | None:
    """Copilot's ``events.jsonl`` beside the ``inuse.<pid>.lock`` of its process: the agent's
    own, or (the launcher's native child holds it) one of its descendants'."""
    machine = tile.machine
    folder = agent_records.copilot_session_state(env)
    if folder is None:
        return None
    pids = [proc.pid, *(st.pid for st in machine.pane_processes(proc.pid) if st.pid != proc.pid)]
    for pid in pids:
        lock = machine.find_file(folder, agent_records.copilot_lock_name(pid))
        if lock is not None:
            return RecordRef(agent_records.copilot_events(lock), "copilot")
    return None


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _qwen_chat(tile: Tile, proc: AgentProcess, env: dict[str, str]) -> RecordRef | None:
    """Qwen's chat file of the session its process (or a descendant) names in ``sessions/``."""
    machine = tile.machine
    projects = agent_records.qwen_projects(env)
    if projects is None:
        return None
    pids = [proc.pid, *(st.pid for st in machine.pane_processes(proc.pid) if st.pid != proc.pid)]
    for pid, pointer in zip(pids, agent_records.qwen_pointer_files(env, pids), strict=True):
        session = agent_records.qwen_session(machine.read_head(pointer), pid)
        if session is not None:
            found = machine.find_file(projects, agent_records.qwen_chat_name(session))
            return RecordRef(found, "qwen", session_id=session) if found is not None else None
    return None


def _newest_since_start(
    tile: Tile, proc: AgentProcess, folder: str | None, pattern: str, fmt: str
) -> RecordRef | None:
    """The newest record in ``folder`` written since the agent started (where folders may be
    listed): the agent writes one file per session there and holds none open."""
    machine = tile.machine
    if folder is None or not machine.dir_scans:
        return None
    started = machine.started_at(proc.pid)
    # (an older session's record is not this agent's: it has written nothing yet)
    since = started - START_SLACK_S if started is not None else None
    found = _newest_regular_file(Path(folder).glob(pattern), since=since)
    if found is None:
        return None
    return RecordRef(posixpath.normpath(str(found)), fmt)


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
    if profile.answer_in_scrollback:
        # A long answer scrolled off: the last answer in the scrollback holds all of it.
        history = tile.scrollback(ANSWER_HISTORY_LINES)
        found = terminal_last_response(history, profile, max_lines=ANSWER_HISTORY_LINES)
        if found:
            return found
    return terminal_last_response(tile.screen(), profile)


def from_terminal(tile: Tile) -> Extraction | None:
    """The last answer as shown on screen, without ANSI codes and TUI chrome."""
    import hashlib

    text = _terminal_answer(tile).strip()
    if not text:
        return None
    key = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
    return Extraction(text=text, method="terminal", path=None, message_id=f"screen:{key}")


def extract(tile: Tile, terminal_only: bool = False) -> Extraction | None:
    """The tile's last response: transcript or record first (unless ``terminal_only``), then
    the screen."""
    if not terminal_only and tile.profile.has_transcript:
        found = tile.transcript_response()  # (on a host: a bounded tail over ssh)
        if found is not None:
            return found
    return from_terminal(tile)
