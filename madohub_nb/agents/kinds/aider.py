"""Aider: its screen profile."""

from __future__ import annotations

import re
from typing import Final

from .. import records
from ..profile import RULE as _RULE
from ..profile import AgentProfile
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind
from .records import (
    AgentPid,
    RecordReader,
    RecordRef,
    RecordSource,
    is_regular_file,
    read_session_record,
    session_turn_finished,
)

# --- Aider (observed 0.86.2, PyPI aider-chat, OpenAI-compatible fake API) ------------
# Screens (120 columns): a rule, then the prompt "> " (an edit mode prefixes it: "ask> ",
# "architect> ", "multi> "); a draft's later lines start "> " too. Busy: a "░█" scanner and
# "Waiting for openai/fake-model" under the submitted prompt, then the answer streams in as
# plain lines (no bullet), then "Tokens: 568 sent, 4 received." (and "Cost: …" when priced),
# a rule and the prompt again. Questions end "(Y)es/(N)o [Yes]:". Enter submits (Ctrl-J too);
# Alt-Enter adds a draft line; a bracketed paste inserts lines. Its history is markdown in
# the cwd (.aider.chat.history.md, .aider.input.history): the answer is read from the screen.
_AIDER_PROMPT = r"(?:[\w-]+(?: multi)?)?>"
_AIDER_LAST_RULE = rf"^{_RULE}$(?![\s\S]*^{_RULE}$)"

PROFILE: Final = AgentProfile(
    kind="aider",
    process_tokens=("aider",),
    # The scanner line, below the last rule (an answer quoting it sits above a rule).
    busy_markers=(_rx(rf"^[ \t]*[░█#=]+[ \t]+Waiting for \S[^\n]*$(?![\s\S]*^{_RULE}$)"),),
    # A rule, then nothing but prompt lines to the bottom (an empty prompt or a draft).
    idle_markers=(
        _rx(rf"{_AIDER_LAST_RULE}\n{_AIDER_PROMPT}(?: [^\n]*)?(?:\n{_AIDER_PROMPT} [^\n]*)*\Z"),
    ),
    waiting_markers=(_rx(r"\(Y\)es/\(N\)o[^\n]*\[[^\]\n]*\]: ?[^\n]*\Z"),),
    title_busy_markers=(),
    no_marker_state="busy",  # streaming an answer or starting up: no prompt at the bottom
    idle_commands=(),
    marker_tail_lines=20,
    chrome_patterns=(
        lazy_compile(rf"{_AIDER_LAST_RULE}[\s\S]*\Z", re.MULTILINE),  # the prompt at the bottom
        # Up to the last submitted input: prompt lines under a rule (an answer's own "> "
        # quote lines are not under one).
        lazy_compile(
            rf"\A[\s\S]*^{_RULE}\n{_AIDER_PROMPT} [^\n]*\n(?:{_AIDER_PROMPT} [^\n]*\n)*",
            re.MULTILINE,
        ),
        _line(r"(?:Tokens|Cost): [^\n]*"),
        _line(r"(?:Aider v\d|Model: |Git repo: |Repo-map: |Analytics have been )[^\n]*"),
        _line(_RULE),
    ),
    answer_start=None,  # what is left is the answer: plain lines
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(
        rf"{_AIDER_LAST_RULE}\n{_AIDER_PROMPT} ?(?P<text>[^\n]*(?:\n{_AIDER_PROMPT} [^\n]*)*)\Z"
    ),
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=200,
    between_submit_keys_ms=0,
    newline_key="M-Enter",  # observed: Alt-Enter adds a line; Ctrl-J submits
    typed_tab="    ",  # Tab completes file names and commands
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="session",  # its own record (agents/records.py), else the screen
    answer_in_scrollback=True,
)


# --- its record: <cwd>/.aider.chat.history.md (or the one its options name) ------------
def locate_history(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """Aider's chat history: its cwd's, else its git root's (where folders may be looked at)."""
    machine = source.machine
    env = source.agent_environ(proc, records.ENV_NAMES)
    cwd = machine.cwd(proc.pid) or source.pane_path()
    candidates = records.aider_history_candidates(cwd, machine.cmdline(proc.pid), env)
    # On a host each look is an ssh read: its cwd's only (not the folders above).
    for path in candidates if machine.dir_scans else candidates[:1]:
        # (here a stat; on a host a bounded tail read, None when there is no such file)
        if machine.with_file(path, is_regular_file):
            return RecordRef(path, PROFILE.kind)
    return None


RECORD: Final = RecordReader(
    locate=locate_history,
    read=read_session_record,
    turn_finished=session_turn_finished,
    env_names=records.ENV_NAMES,
)


KIND: Final = AgentKind(PROFILE, record=RECORD)
