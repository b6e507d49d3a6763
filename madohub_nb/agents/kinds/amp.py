"""Amp: its screen profile."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from ..launch import LaunchLayer
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind
from .common import JS_SEND_AND_LAST_ANSWER, STOP, script

# --- Amp (observed 0.0.1790142911-g7618fb, npm @ampcode/cli, tests/fixtures/screens/amp/) ----
# Screens (100 columns), offline against madohub_nb.testing.fake_amp: at start the dotted logo
# with "Welcome to Amp" and "ctrl+o for commands · ? for shortcuts" beside it; then the
# conversation: a prompt " ┃ text" (one "┃" line per prompt line), the answer as plain text one
# space in. At the bottom a rounded input box "╭── … medium ─╮" (mode in the top border, cwd in
# the bottom one), a draft in it as "│ text │" rows. Busy: "∼ Connecting" or "≋ Waiting" at
# the box's lower-left border, and the pane title a Braille spinner ("⠪ amp - <cwd>"), empty
# once idle. An Enter right after typed text submits; Ctrl-J adds a draft line; a bracketed
# paste inserts lines. Its answers live in its backend only: the screen is the only record.
_AMP_BOX_TOP = r"╭─[^\n]*╮"

PROFILE: Final = AgentProfile(
    kind="amp",
    process_tokens=("amp",),  # one native process named "amp"
    busy_markers=(_rx(r"^╰ [∼≋] \S"), _rx(r"esc to cancel", re.IGNORECASE)),
    idle_markers=(_rx(rf"^{_AMP_BOX_TOP}\n(?:│[^\n]*│\n)+╰─[^\n]*╯"),),
    waiting_markers=(_rx(r"waiting for approval", re.IGNORECASE),),  # (not observed: no tools)
    title_busy_markers=(lazy_compile("[\u2801-\u28ff]"),),  # Braille spinner in the pane title
    # A screen without its box (a stand-in, a cut-off pane) is idle once the busy signs are gone.
    no_marker_state="idle",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(_AMP_BOX_TOP),  # the input box
        _line(r"[ •●:·.]*[•●:·.][ •●:·.]*(?:(?:Welcome to Amp|ctrl\+o for commands)[^\n]*)?"),
        lazy_compile(r"\A[\s\S]*^ ┃ [^\n]*\n?", re.MULTILINE),  # up to the last prompt line
        lazy_compile(r"^ ", re.MULTILINE),  # every answer line is one space in
    ),
    answer_start=None,  # what is left is the answer: plain lines
    answer_exclude=None,
    tool_output=None,
    input_line=None,  # the box's "│ … │" rows: not read (delivery checks the bottom lines)
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),  # observed: one Enter right after the text submits
    pre_submit_delay_ms=200,  # a margin for slow panes
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="\t",  # not observed
    uses_bracketed_paste=True,  # observed: a bracketed paste inserts lines, not submitted
    executes_input=False,
    extractor="terminal",  # no local record of answers (only prompts in history.jsonl)
)

# --- launch layers ----------------------------------------------------------------------
PLUGIN: Final = (
    """\
// madohub: report Amp's end of turn (agent.end) and its answer to the hub. Written by madohub_nb.
"""
    + JS_SEND_AND_LAST_ANSWER
    + """\
export default function (amp) {
  amp.on("agent.end", async (event, ctx) => {
    send("stop", { hook_event_name: "agent.end", session_id: event?.thread?.id ?? null,
      turn_id: event?.id ?? null, status: event?.status ?? null,
      last_assistant_message: lastAnswer(event?.messages) });
    return { action: "done" };
  });
}
"""
)


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """A private ``XDG_CONFIG_HOME`` holding ``amp/plugins/madohub.ts``."""
    config_home = f"{folder.rstrip('/')}/amp-config"
    return LaunchLayer(
        PROFILE.kind,
        (STOP,),
        env={"XDG_CONFIG_HOME": config_home},
        files={f"{config_home}/amp/plugins/madohub.ts": script(PLUGIN, base)},
        private_home=True,
        how=(
            "Amp has no per-run plugin option: it loads $XDG_CONFIG_HOME/amp/plugins/*.ts, "
            "so the pane gets a private XDG_CONFIG_HOME (without the user's "
            "~/.config/amp/settings.json: give its backend as AMP_URL); the plugin reports "
            "agent.end (its backend's end-of-turn request) with the turn's answer"
        ),
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The plugin, as ``~/.config/amp/plugins/madohub.ts``."""
    return "Save as ~/.config/amp/plugins/madohub.ts:\n" + script(PLUGIN, base)


KIND: Final = AgentKind(PROFILE, hooks=hooks, hooks_opt_in=hooks_opt_in)
