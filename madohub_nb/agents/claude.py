"""Claude Code's own files: its config directory and the live ``sessions/<pid>.json``.

Claude Code writes ``<config>/sessions/<PID>.json`` while it runs (deleted on
exit) with its ``sessionId`` and a live ``status`` (idle, busy, waiting). The
config directory is the process's ``CLAUDE_CONFIG_DIR``, else its
``HOME``/.claude (REAL-AGENTS.md). Transcripts are found and parsed in transcripts.py.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..defaults import AGENT_FILE_MAX_BYTES

SESSION_STATUSES: Final = ("idle", "busy", "waiting")
SESSION_FILES_READ_MAX: Final = 256
"""At most this many ``sessions/*.json`` are read to learn whose transcripts are whose."""
CONFIG_ENV: Final = ("CLAUDE_CONFIG_DIR", "HOME")
"""The variables of Claude's environment that say where its config dir is."""


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
    proc_start: str | None = None
    """``procStart``: its process's start time in clock ticks since boot (``/proc/<pid>/stat``
    field 22, as Claude Code writes it): a file whose process died and whose pid was reused
    names another start (:func:`is_for_process`)."""

    def is_for_process(self, start_ticks: int) -> bool:
        """Whether this file was written by the process that started at ``start_ticks``: true
        when it names no start (older versions), else only for that very start."""
        return not self.proc_start or self.proc_start == str(start_ticks)


def claude_config_dir(
    environ: Mapping[str, str] | None, fallback: str | Path | None = None
) -> Path | None:
    """The agent's config dir from its environment (:data:`CONFIG_ENV`): its
    ``CLAUDE_CONFIG_DIR``, its ``HOME``/.claude, ``fallback`` (the hub's setting), or None."""
    env = environ or {}
    if env.get("CLAUDE_CONFIG_DIR"):
        return home_relative(env["CLAUDE_CONFIG_DIR"], env)
    if env.get("HOME"):
        return Path(env["HOME"]) / ".claude"
    if fallback is not None and str(fallback):
        return Path(fallback).expanduser()
    return None


def home_relative(value: str, environ: Mapping[str, str]) -> Path:
    """``value`` with a leading ``~`` meaning the process's own ``HOME`` (if it has one)."""
    if (value == "~" or value.startswith("~/")) and environ.get("HOME"):
        return Path(environ["HOME"] + value[1:])
    return Path(value).expanduser()


def session_file_path(config_dir: str | Path, pid: int) -> Path:
    """``<config_dir>/sessions/<pid>.json``: where Claude says what it is doing."""
    return Path(config_dir) / "sessions" / f"{int(pid)}.json"


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _whole(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_small_regular_file(path: Path, max_bytes: int = AGENT_FILE_MAX_BYTES) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``, else None.

    Agent files are written by whatever runs in the pane: a FIFO there would block
    a plain ``open`` (and the worker thread with it) forever, ``/dev/zero`` would
    read without end. Opened non-blocking, not through a symlink, and checked to
    be a regular file before any read; never waits.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        data = os.read(fd, max_bytes + 1)
        return data if len(data) <= max_bytes else None
    except OSError:
        return None
    finally:
        os.close(fd)


def is_plain_session_id(session_id: str) -> bool:
    """True for a sessionId usable as a file name: no ``/``, no NUL, not ``.`` or ``..``."""
    return (
        0 < len(session_id) <= 255
        and "/" not in session_id
        and "\x00" not in session_id
        and session_id not in (".", "..")
    )


def read_session_file(config_dir: str | Path | None, pid: int) -> ClaudeSession | None:
    """``<config_dir>/sessions/<pid>.json``, or None when missing, half-written, not a
    regular file, too big, or without a usable sessionId."""
    if config_dir is None:
        return None
    path = session_file_path(config_dir, pid)
    return parse_session_file(read_small_regular_file(path), path, pid)


def claimed_session_ids(config_dir: str | Path, except_pid: int) -> set[str]:
    """The session ids other Claude processes name in ``<config_dir>/sessions/*.json`` (all
    but ``except_pid``'s; at most :data:`SESSION_FILES_READ_MAX` files read): transcripts
    that are theirs, not the one of a process whose own file is not there (yet)."""
    claimed: set[str] = set()
    folder = Path(config_dir) / "sessions"
    try:
        names = [e.name for e in os.scandir(folder) if e.name.endswith(".json")]
    except OSError:
        return claimed
    for name in sorted(names)[:SESSION_FILES_READ_MAX]:
        stem = name[: -len(".json")]
        if not stem.isdigit() or int(stem) == except_pid:
            continue
        session = read_session_file(config_dir, int(stem))
        if session is not None:
            claimed.add(session.session_id)
    return claimed


def parse_session_file(raw: bytes | None, path: Path, pid: int) -> ClaudeSession | None:
    """A ``sessions/<pid>.json``'s bytes (read here or on a remote host) parsed, or None."""
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    session_id = _text(data, "sessionId")
    if not session_id or not is_plain_session_id(session_id):
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
        proc_start=_text(data, "procStart"),
    )


def session_status(session: ClaudeSession | None) -> str:
    """``idle``, ``busy`` or ``waiting`` from the session file; ``unknown`` otherwise."""
    if session is None or session.status not in SESSION_STATUSES:
        return "unknown"
    return session.status
