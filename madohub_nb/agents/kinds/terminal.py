"""Any terminal program (a REPL, psql, cat, an agent without a profile): its profile."""

from __future__ import annotations

from typing import Final

from ... import defaults
from ..profile import AgentProfile
from .base import AgentKind

# --- Any terminal program (a REPL, psql, cat, an agent without a profile) ----------
PROFILE: Final = AgentProfile(
    kind="terminal",
    process_tokens=(),
    busy_markers=(),
    idle_markers=(),
    waiting_markers=(),
    title_busy_markers=(),
    # No markers: ready once quiet for ready_quiet_ms (and the tile's ready_pattern matches).
    no_marker_state="idle",
    idle_commands=(),
    marker_tail_lines=1,
    chrome_patterns=(),
    answer_start=None,
    answer_exclude=None,
    tool_output=None,
    input_line=None,
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=0,
    between_submit_keys_ms=0,
    newline_key=None,
    typed_tab="    ",  # REPLs and readline complete on Tab
    uses_bracketed_paste=False,
    executes_input=True,  # it runs what it is typed: routes must opt in
    extractor="terminal",
    ready_quiet_ms=defaults.READY_QUIET_MS,
    answer_after_input=True,
)

KIND: Final = AgentKind(PROFILE)
