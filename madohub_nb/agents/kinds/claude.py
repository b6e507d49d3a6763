"""Claude Code: its screen profile."""

from __future__ import annotations

import re
from typing import Final

from ..profile import RULE as _RULE
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind

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

KIND: Final = AgentKind(PROFILE)
