"""Claude Code: its screen profile."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any, Final

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


KIND: Final = AgentKind(PROFILE, hooks=hooks, hooks_opt_in=hooks_opt_in, mcp=mcp, mcp_on_hosts=True)
