"""Claude Code: its screen profile, launch layers and record.

Claude Code writes ``<config>/sessions/<PID>.json`` while it runs (deleted on
exit) with its ``sessionId`` and a live ``status`` (idle, busy, waiting). The
config directory is the process's ``CLAUDE_CONFIG_DIR``, else its
``HOME``/.claude (REAL-AGENTS.md). Transcripts are parsed in ``io/agent_records/claude.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ...errors import TmuxError
from ...io.agent_records import read_last_response, turn_finished
from ...io.agent_records.claude import cwd_to_project_dir
from ..launch import LaunchLayer
from ..profile import RULE as _RULE
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind
from .common import (
    NOTIFICATION,
    PERMISSION_REQUEST,
    SESSION_START,
    STOP,
    MachineFiles,
    claude_like_hooks,
    http_server,
    shell_command,
)
from .records import (
    START_SLACK_S,
    AgentPid,
    RecordReader,
    RecordRef,
    RecordSource,
    home_relative,
    newest_regular_file,
    read_small_regular_file,
)

# --- Claude Code ------------------------------------------------------------
# Screens: fixtures/real/screens/0*.txt (2.1.197; 08 is 2.1.332).
_CLAUDE_GLYPHS = "·✢✳✶✻✽"
_CLAUDE_BULLET = "[●⏺]"
_CLAUDE_MENU_QUESTION = r"(?:Do you want to|Do you trust|Would you like to)"
# The logo banner: "▐▛███▜▌   Claude Code v2.1.197" and the two logo lines below it (model,
# cwd). The logo is animated at start-up (2.1.332): a frame may show other glyphs, or none.
_CLAUDE_BANNER = lazy_compile(
    r"^[^\w\n]{0,16}Claude Code v\d[^\n]*(?:\n(?![●⏺❯])[^\w\n]{1,16}[^\n]*){0,2}\n?",
    re.MULTILINE,
)

PROFILE: Final = AgentProfile(
    kind="claude",
    process_tokens=("claude",),
    busy_markers=(
        # "esc to interrupt" in the footer, i.e. below the last rule (02, 04, 05).
        _rx(rf"^[ \t]*esc to interrupt\b(?![\s\S]*^{_RULE})"),
        # Present-tense spinner "✽ Moseying…"; the past-tense "✻ Crunched for 6s" has no "…".
        _rx(rf"^[{_CLAUDE_GLYPHS}] [^\n…]{{1,80}}…"),
    ),
    idle_markers=(
        # The ❯ input line between two rules; the footer differs by version (01, 03, 07, 08).
        _rx(rf"^{_RULE}\n❯[^\n]*(?:\n(?!{_RULE})[^\n]*)*?\n{_RULE}"),
    ),
    waiting_markers=(
        # "Do you want to proceed?" over a "❯ 1. Yes" menu, in place of the input box (06):
        # nothing below it is a rule, so a reply quoting the dialog does not count.
        _rx(
            rf"^[ \t]*{_CLAUDE_MENU_QUESTION}[^\n]*\?[ \t]*\n(?:[^\n]*\n){{0,3}}?[ \t]*❯ \d+\. "
            rf"(?![\s\S]*^{_RULE})"
        ),
    ),
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=20,
    chrome_patterns=(
        _from_line_to_end(_RULE),  # input box, footers (any version), permission dialog
        _CLAUDE_BANNER,
        _line(r"▎[^\n]*"),  # notices under the banner (08)
        _line(rf"[{_CLAUDE_GLYPHS}] [^\n]*"),  # spinner and "✻ Crunched for 6s"
        _line(r"[ \t]+⎿[^\S\n]+Tip: [^\n]*"),  # tips under the spinner (04, 05; an NBSP follows ⎿)
        _line(r"[^\n]*· /effort"),  # effort indicator above the box (08)
    ),
    answer_start=_rx(rf"^{_CLAUDE_BULLET} "),
    # "● Bash(…)", "● mcp - tool (MCP)(…)", "● Read 2 files (ctrl+o to expand)".
    answer_exclude=_rx(
        rf"^{_CLAUDE_BULLET} (?:[\w.:-]+(?: - [^\n(]+)?(?: \(MCP\))?\(|[^\n]*\(ctrl\+o to expand\))"
    ),
    tool_output=_rx(r"^[ \t]+⎿"),
    input_line=_rx(rf"^{_RULE}\n❯[ \xa0]?(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(_rx(r"Press up to edit queued messages"), _rx(r'Try "[^\n]*"')),
    paste_labels=(_rx(r"\[Pasted text #\d+(?: \+\d+ lines)?\]"),),  # REAL-AGENTS.md, "Input"
    submit_keys=("\r", "\r"),
    pre_submit_delay_ms=500,
    between_submit_keys_ms=0,
    newline_key="C-j",
    typed_tab="    ",  # typed: swallowed; pasted: Claude turns it into 4 spaces
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="jsonl",
    records_turn_ms=True,
    writes_status_file=True,
    command_submit_keys=("\r",),
)

# --- launch layers ----------------------------------------------------------------------
HOOK_TIMEOUT_S: Final = 10
"""Claude's ``timeout`` for a command hook, in seconds (the command ends in < 3 s)."""


def claude_settings(base: Sequence[str]) -> dict[str, Any]:
    """Claude Code's ``--settings`` value: Stop, Notification, SessionStart and
    PermissionRequest command hooks (the last prints nothing, so the dialog is shown)."""
    hooks = claude_like_hooks(base, HOOK_TIMEOUT_S)
    command = {"type": "command", "command": shell_command(base, PERMISSION_REQUEST)}
    hooks["PermissionRequest"] = [{"hooks": [{**command, "timeout": HOOK_TIMEOUT_S}]}]
    return {"hooks": hooks}


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """``claude --settings JSON``: hooks for this process only, no file."""
    return LaunchLayer(
        PROFILE.kind,
        (STOP, NOTIFICATION, SESSION_START, PERMISSION_REQUEST),
        args=("--settings", json.dumps(claude_settings(base), separators=(",", ":"))),
        how="claude --settings JSON adds hooks for this process only (observed 2.1.197, 2.1.332)",
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The hook entries for ``~/.claude/settings.json``, or the ``--settings`` to start with."""
    settings = claude_settings(base)
    return (
        f'Merge into the "hooks" of ~/.claude/settings.json:\n{json.dumps(settings, indent=2)}\n'
        "(or, with no file changed, start it as: claude --settings "
        f"{shlex.quote(json.dumps(settings, separators=(',', ':')))})\n"
    )


def mcp(
    url: str, token: str, folder: str, *, server: str, tools: Sequence[str], token_env: str,
    machine: MachineFiles,
) -> LaunchLayer:  # fmt: skip
    """``claude --mcp-config FILE --allowedTools ...``."""
    path = f"{folder.rstrip('/')}/claude-mcp.json"
    allowed = ",".join(f"mcp__{server}__{t}" for t in tools)
    return LaunchLayer(
        PROFILE.kind,
        args=("--mcp-config", path, "--allowedTools", allowed),
        files={path: json.dumps({"mcpServers": {server: http_server(url, token)}})},
        tool_names=tuple(f"mcp__{server}__{t}" for t in tools),
        how=(
            "claude --mcp-config FILE (the URL and the token) and --allowedTools for the "
            "three tools: 2.1.332's auto mode refuses MCP calls offline unless pre-allowed"
        ),
    )


# --- its files: the config dir and the live sessions/<pid>.json ------------------------
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


def session_file_path(config_dir: str | Path, pid: int) -> Path:
    """``<config_dir>/sessions/<pid>.json``: where Claude says what it is doing."""
    return Path(config_dir) / "sessions" / f"{int(pid)}.json"


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _whole(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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


# --- its record: sessions/<pid>.json, then projects/*/<sessionId>.jsonl ----------------
def config_dir(source: RecordSource, proc: AgentPid) -> Path | None:
    """Claude's config dir: from its environment, else the hub's ``claude_home``."""
    return claude_config_dir(source.agent_environ(proc, CONFIG_ENV), source.claude_home())


def read_session(source: RecordSource, proc: AgentPid) -> tuple[ClaudeSession | None, bool]:
    """Claude's ``sessions/<pid>.json`` on the tile's machine (its session id and live
    status), or None when there is none (yet) or it cannot be read; and whether the file
    found for ``proc``'s pid was another process's (stale: its ``procStart`` is not
    ``proc``'s start)."""
    config = config_dir(source, proc)
    if config is None:
        return None, False
    path = session_file_path(config, proc.pid)
    try:
        raw = source.machine.read_head(str(path))
    except TmuxError:
        raw = None
    session = parse_session_file(raw, path, proc.pid)
    stale = session is not None and not session.is_for_process(proc.start_ticks)
    if stale:
        # A Claude killed before it could remove its file, whose pid another process got
        # (pids wrap at 32,768 here): that file names someone else's session.
        session = None
    if session is None:
        # Read its environment again next time: a launcher may exec the agent with
        # another config dir under the same pid and start time (the demo's stand-ins do).
        source.forget_environ()
    return session, stale


def live_status(source: RecordSource, proc: AgentPid) -> str | None:
    """``idle``, ``busy`` or ``waiting`` as its sessions file says; None: it says nothing."""
    session = read_session(source, proc)[0]
    if session is not None and session.status in ("idle", "busy", "waiting"):
        return session.status
    return None


def locate_transcript(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """The transcript a running Claude Code process writes (a path on its machine), or None."""
    config = config_dir(source, proc)
    if config is None:
        return None
    machine = source.machine
    projects = config / "projects"
    session, stale = read_session(source, proc)
    if stale:
        # Its pid's sessions file is another (dead) process's: it writes its own soon; the
        # folder's newest transcript may be anyone's.
        return None
    if session is not None and session.session_id:
        # The session may have no transcript yet (no prompt so far): then there is no answer.
        # Never fall back to the folder here: another agent in the same cwd writes there too.
        found = machine.find_file(str(projects), f"{session.session_id}.jsonl")
        return RecordRef(found, PROFILE.kind) if found is not None else None
    if not machine.dir_scans:
        return None
    # No sessions file (older versions, or one not written yet): the newest transcript of its
    # cwd that can be its own. Other Claudes of the same cwd and config dir write there too
    # (an experiment's runs, the kernel's own tiles): a transcript older than this process,
    # or one another process's sessions file names, is theirs. (Read as the agent's, a
    # fresh agent looked idle before it could take input, and its kickoff was lost.)
    cwd = machine.cwd(proc.pid) or (session.cwd if session is not None else None)
    if not cwd:
        return None
    folder = cwd_to_project_dir(cwd, projects)
    if folder is None:
        return None
    others = claimed_session_ids(config, proc.pid)
    started = machine.started_at(proc.pid)
    newest = newest_regular_file(
        (p for p in folder.glob("*.jsonl") if p.stem not in others),
        since=started - START_SLACK_S if started is not None else None,
    )
    return RecordRef(str(newest), PROFILE.kind) if newest is not None else None


RECORD: Final = RecordReader(
    locate=locate_transcript,
    read=lambda path, ref: read_last_response(path, usage=True),
    turn_finished=lambda path, ref: turn_finished(path),
    env_names=CONFIG_ENV,
)


KIND: Final = AgentKind(
    PROFILE,
    hooks=hooks,
    hooks_opt_in=hooks_opt_in,
    mcp=mcp,
    mcp_on_hosts=True,
    record=RECORD,
    live_status=live_status,
    order=10,
    layers_order=10,
)
