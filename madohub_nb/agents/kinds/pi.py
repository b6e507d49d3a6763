"""Pi: its screen profile."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from .. import records
from ..launch import LaunchLayer
from ..profile import RULE as _RULE
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind
from .common import JS_SEND_AND_LAST_ANSWER, SESSION_START, STOP, script
from .records import (
    AgentPid,
    RecordReader,
    RecordRef,
    RecordSource,
    newest_since_start,
    read_session_record,
    session_turn_finished,
)

# --- Pi (observed 0.73.1, npm @mariozechner/pi-coding-agent, tests/fixtures/screens/pi/) ----
# Screens (100 columns): "fd not found…"/"ripgrep not found…" (PI_OFFLINE), " pi v0.73.1" and
# two help lines; the conversation: a prompt is one space in, on a grey background, with two
# blank lines above and below it; the answer follows as plain text one space in (paragraphs
# one blank line apart). Then the editor between two rules (empty: a blank line; a draft at
# column 0) and a two-line footer (cwd; tokens, context and model). Busy: " ⠇ Working..."
# (or " ⠦ Retrying (3/3) in 8s... (escape to cancel)") right above the editor. No first-run
# screens and no permission prompts. Enter submits at once, Ctrl-J adds a line, a bracketed
# paste inserts lines. Its own record is its session tree.
_PI_EDITOR = rf"^{_RULE}\n(?:(?!{_RULE})[^\n]*\n)*?{_RULE}$"

PROFILE: Final = AgentProfile(
    kind="pi",
    process_tokens=("pi",),  # its node process names itself "pi"
    busy_markers=(_rx(rf"^ [\u2801-\u28ff] \S[^\n]*\n{_RULE}"),),
    idle_markers=(_rx(_PI_EDITOR),),
    waiting_markers=(),  # Pi asks no permissions
    title_busy_markers=(),  # "π - proj", busy or not
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(_RULE),  # editor and footer
        _line(r"(?:fd|ripgrep) not found\.[^\n]*"),
        _line(r" pi v\d[^\n]*| escape interrupt · [^\n]*| Press ctrl\+o [^\n]*"),
        _line(r" Pi can explain its own features[^\n]*"),
        _line(r" [\u2801-\u28ff] [^\n]*"),  # the spinner line
        # Up to the last prompt: the lines with two blank lines above and below them
        # (the last one may have no answer below it yet).
        lazy_compile(r"\A(?:[\s\S]*\n)?\n\n(?:[^\n]+\n)+?\n\n\s*"),
        lazy_compile(r"^ ", re.MULTILINE),  # every line is one space in
    ),
    answer_start=None,  # what is left is the answer: plain lines
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(rf"^{_RULE}\n(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=200,  # observed: an Enter at once submits; a margin for slow panes
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # Tab completes paths
    uses_bracketed_paste=True,  # observed: a bracketed paste inserts lines, not submitted
    executes_input=False,
    extractor="session",  # ~/.pi/agent/sessions/<encoded cwd>/<time>_<uuid>.jsonl
)

# --- launch layers ----------------------------------------------------------------------
EXTENSION: Final = (
    """\
// madohub: report Pi's end of turn (agent_end) and its answer to the hub. Written by madohub_nb.
"""
    + JS_SEND_AND_LAST_ANSWER
    + """\
function sessionFile(ctx) {
  try { return ctx?.sessionManager?.getSessionFile?.() ?? null; } catch (e) { return null; }
}
export default function (pi) {
  pi.on("agent_end", async (event, ctx) => {
    send("stop", { hook_event_name: "agent_end", last_assistant_message: lastAnswer(event?.messages),
      session_file: sessionFile(ctx) });
  });
  pi.on("session_start", async (event, ctx) => {
    send("session_start", { hook_event_name: "session_start", session_file: sessionFile(ctx) });
  });
}
"""
)


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """``pi -e FILE``: an extension for this run."""
    path = f"{folder.rstrip('/')}/pi/madohub.ts"
    return LaunchLayer(
        PROFILE.kind,
        (STOP, SESSION_START),
        args=("-e", path),
        files={path: script(EXTENSION, base)},
        how="pi -e FILE loads an extension for this run; it reports agent_end with the answer",
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The extension, as ``~/.pi/agent/extensions/madohub.ts``."""
    return "Save as ~/.pi/agent/extensions/madohub.ts:\n" + script(EXTENSION, base)


# --- its record: the newest session file of its folder since it started -----------------
def locate_session(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """Pi's ``~/.pi/agent/sessions/<encoded cwd>/*.jsonl`` written since it started."""
    env = source.agent_environ(proc, records.ENV_NAMES)
    cwd = source.machine.cwd(proc.pid) or source.pane_path()
    folder = records.pi_sessions(env, cwd)
    return newest_since_start(source, proc, folder, records.PI_SESSION_GLOB, PROFILE.kind)


RECORD: Final = RecordReader(
    locate=locate_session,
    read=read_session_record,
    turn_finished=session_turn_finished,
    env_names=records.ENV_NAMES,
)


KIND: Final = AgentKind(PROFILE, hooks=hooks, hooks_opt_in=hooks_opt_in, record=RECORD)
