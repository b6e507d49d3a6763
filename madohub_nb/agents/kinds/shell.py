"""A plain shell: its screen profile."""

from __future__ import annotations

from typing import Final

from ..profile import SHELL_COMMANDS, AgentProfile
from ..regex import lazy_compile
from .base import AgentKind

# --- A plain shell ------------------------------------------------------------
PROFILE: Final = AgentProfile(
    kind="shell",
    process_tokens=(),
    busy_markers=(),
    # The last line ends with a prompt ("$ ", "# ", "% ", "> "; trailing spaces are stripped).
    idle_markers=(lazy_compile(r"[$#%>❯»]\Z"),),
    waiting_markers=(),
    title_busy_markers=(),
    no_marker_state="busy",
    idle_commands=SHELL_COMMANDS,
    marker_tail_lines=1,
    chrome_patterns=(),
    answer_start=None,
    answer_exclude=None,
    tool_output=None,
    input_line=None,
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\n",),
    pre_submit_delay_ms=0,
    between_submit_keys_ms=0,
    newline_key=None,
    typed_tab="    ",  # readline completes on Tab: lost, or a file name
    uses_bracketed_paste=False,  # depends on the shell and its readline settings
    executes_input=True,
    extractor="terminal",
    foreground_kind="terminal",  # a REPL, cat or psql started from the shell
)

KIND: Final = AgentKind(PROFILE)
