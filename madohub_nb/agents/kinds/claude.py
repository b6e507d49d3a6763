"""Claude Code: its screen profile."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ...errors import TmuxError
from ...io.transcripts import cwd_to_project_dir, read_last_response, turn_finished
from ..claude import (
    CONFIG_ENV,
    ClaudeSession,
    claimed_session_ids,
    claude_config_dir,
    parse_session_file,
    session_file_path,
)
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
    newest_regular_file,
)

# --- Claude Code ------------------------------------------------------------
# Screens: fixtures/real/screens/0*.txt (2.1.197; 08 is 2.1.332).
_CLAUDE_GLYPHS = "·✢✳✶✻✽"
_CLAUDE_BULLET = "[●⏺]"
_CLAUDE_MENU_QUESTION = r"(?:Do you want to|Do you trust|Would you like to)"
# The logo banner: "▐▛███▜▌   Claude Code v2.1.197" and the two logo lines below it (model, cwd).
_CLAUDE_BANNER = lazy_compile(
    r"^ ?[\u2580-\u259f][^\n]*Claude Code v\d[^\n]*(?:\n {0,2}[\u2580-\u259f][^\n]*){0,2}\n?",
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
)
