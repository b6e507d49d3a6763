"""OpenCode: its screen profile."""

from __future__ import annotations

import re
from typing import Final

from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind

# --- OpenCode (observed 1.18.33, npm opencode-ai) ----------------------------
# Screens (100 columns): the input box is a run of "┃" lines over a "╹▀▀▀" edge; its last "┃"
# line names the agent and model ("┃  Build · Fake model Fake"). The home screen shows the
# placeholder 'Ask anything… "Fix broken tests"' in it; in a session the empty box has none.
# Busy: "⬝⬝⬝■■■  esc interrupt" in the footer. Prompts are "┃" blocks, answers are indented
# 5 spaces and end with "▣  Build · Fake model · 3.3s". A wide pane (160 columns; not 100) gets
# a sidebar beside the conversation, which terminal extraction may then read too.
_OPENCODE_BOX_EDGE = r"[ \t]*╹▀"
_OPENCODE_BOX_LINE = r"[ \t]*┃[^\n]*\n"

PROFILE: Final = AgentProfile(
    kind="opencode",
    process_tokens=("opencode",),
    busy_markers=(_rx(r"esc interrupt"),),
    # The box's bottom edge, which is drawn whenever the TUI takes input (busy is checked first).
    idle_markers=(_rx(rf"^{_OPENCODE_BOX_EDGE}"),),
    waiting_markers=(_rx(r"△ Permission required"),),  # screens/permission/opencode.txt
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(rf"{_OPENCODE_BOX_LINE}(?:{_OPENCODE_BOX_LINE})*{_OPENCODE_BOX_EDGE}"),
        lazy_compile(r"\A[\s\S]*^[ \t]*┃[^\n]*\n?", re.MULTILINE),  # up to the last prompt
        _line(r"[ \t]*▣ [^\n]*"),  # "▣  Build · Fake model · 3.3s"
    ),
    answer_start=_rx(r"^ {5}(?=\S)"),
    answer_exclude=None,
    tool_output=None,
    # Only the box's last draft line is captured: enough to see a prompt still sitting there.
    input_line=_rx(
        rf"^[ \t]*┃[ \t]*\n(?:{_OPENCODE_BOX_LINE})*?[ \t]*┃[ \t]?[ \t]?(?P<text>[^\n]*)\n"
        rf"[ \t]*┃[ \t]*\n[ \t]*┃  \S[^\n]*\n{_OPENCODE_BOX_EDGE}"
    ),
    input_placeholders=(_rx(r"Ask anything…[^\n]*"),),
    paste_labels=(),
    submit_keys=("\r", "\r"),
    pre_submit_delay_ms=500,
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # the footer says "tab agents": Tab switches the agent
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="session",  # its own record (agents/records.py), else the screen
)

KIND: Final = AgentKind(PROFILE)
