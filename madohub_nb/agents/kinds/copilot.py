"""GitHub Copilot CLI: its screen profile."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from .. import records
from ..launch import LaunchLayer
from ..profile import RULE as _RULE
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind
from .common import SESSION_START, STOP, MachineFiles, http_server, shell_command
from .records import (
    AgentPid,
    RecordReader,
    RecordRef,
    RecordSource,
    descendants,
    read_session_record,
    session_turn_finished,
)

# --- GitHub Copilot CLI (observed 1.0.102, npm @github/copilot, tests/fixtures/screens/copilot/)
# Screens (100 columns): a tab bar " [Current]  Sessions …", the logo, " ● Tip: …" notices;
# prompts " ❯ text   18:30" (with the time), answers " ● text" with continuation lines indented
# 3; once the conversation overflows, a scrollbar "┃" in the last column. Then the cwd line
# " ~/proj", the input box "❯ " between two rules and a footer ("… Interactive · Manual
# Approval …"). Busy: the footer starts " ◎ Working" (the glyph turns). First run in a folder:
# a boxed "Confirm folder trust" dialog, "Do you trust the files in this folder?" over
# "❯ 1. Yes". An Enter right after typed text submits; Ctrl-J adds a draft line; a bracketed
# paste inserts lines. Tab switches tabs. Its own record is events.jsonl.
_COPILOT_BOX = rf"^{_RULE}\n❯[^\n]*(?:\n(?!{_RULE})[^\n]*)*?\n{_RULE}"

PROFILE: Final = AgentProfile(
    kind="copilot",
    process_tokens=("copilot",),  # node launcher .bin/copilot, then the native .../copilot
    busy_markers=(_rx(rf"^ \S Working\b(?![\s\S]*^{_RULE})"),),  # in the footer
    idle_markers=(_rx(_COPILOT_BOX),),
    waiting_markers=(
        _rx(
            r"^[│ \t]*(?:Do you (?:trust|want)|Would you like|Allow )[^\n]*\?[│ \t]*\n"
            r"(?:[^\n]*\n){0,3}?[│ \t]*❯ \d+\. "
        ),
    ),
    title_busy_markers=(),  # the title is the session's name, busy or not
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=20,  # the trust dialog is 20 lines high
    chrome_patterns=(
        _from_line_to_end(rf"[ \t]*[~/][^\n]*\n{_RULE}"),  # cwd line, input box, footer
        _from_line_to_end(_RULE),
        lazy_compile(r"[ \t]*┃$", re.MULTILINE),  # the scrollbar in the last column
        _line(r" \[Current\][^\n]*"),  # the tab bar
        _line(r"[ \t]*(?:╭─╮╭─╮|╰─╯╰─╯|█ ▘▝ █|▔▔▔▔)[^\n]*"),  # the logo and its two lines
        lazy_compile(r"\A[\s\S]*^ ❯ [^\n]*\n?", re.MULTILINE),  # up to the last prompt
    ),
    answer_start=_rx(r"^ ● "),
    answer_exclude=_rx(r"^ ● (?:Tip: |MCP Servers |Response was interrupted)"),
    tool_output=_rx(r"^[ \t]+└"),
    input_line=_rx(rf"^{_RULE}\n❯ ?(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=200,  # observed: an Enter at once submits; a margin for slow panes
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # the footer says "tab next tab"
    uses_bracketed_paste=True,  # observed: a bracketed paste inserts lines, not submitted
    executes_input=False,
    extractor="session",  # ~/.copilot/session-state/<uuid>/events.jsonl
)


# --- launch layers ----------------------------------------------------------------------
def _hooks_config(base: Sequence[str], kinds: Sequence[str]) -> dict[str, Any]:
    names = {STOP: "agentStop", SESSION_START: "sessionStart"}
    entries = {
        names[kind]: [{"type": "command", "bash": shell_command(base, kind), "timeoutSec": 10}]
        for kind in kinds
    }
    return {"version": 1, "hooks": entries}


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """A private ``COPILOT_HOME`` holding ``hooks/madohub.json``."""
    home = f"{folder.rstrip('/')}/copilot-home"
    path = f"{home}/hooks/madohub.json"
    return LaunchLayer(
        PROFILE.kind,
        (STOP, SESSION_START),
        env={"COPILOT_HOME": home},
        files={path: json.dumps(_hooks_config(base, (STOP, SESSION_START)), indent=2)},
        private_home=True,
        how=(
            "Copilot CLI has no per-run hooks option: user-level hooks are "
            "$COPILOT_HOME/hooks/*.json, so the pane gets a private COPILOT_HOME "
            "(without the user's login there; fine with COPILOT_PROVIDER_* or offline)"
        ),
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The ``agentStop`` hook as ``~/.copilot/hooks/madohub.json``."""
    config = _hooks_config(base, (STOP,))
    return f"Save as ~/.copilot/hooks/madohub.json:\n{json.dumps(config, indent=2)}\n"


def mcp(
    url: str, token: str, folder: str, *, server: str, tools: Sequence[str], token_env: str,
    machine: MachineFiles,
) -> LaunchLayer:  # fmt: skip
    """``copilot --additional-mcp-config @FILE --allow-tool NAME``."""
    path = f"{folder.rstrip('/')}/copilot-mcp.json"
    entry = {**http_server(url, "${" + token_env + "}"), "tools": list(tools)}
    return LaunchLayer(
        PROFILE.kind,
        env={token_env: token},
        args=("--additional-mcp-config", f"@{path}", "--allow-tool", server),
        files={path: json.dumps({"mcpServers": {server: entry}})},
        tool_names=tuple(f"{server}-{t}" for t in tools),
        how=(
            "copilot --additional-mcp-config @FILE adds servers for this run (beside "
            "~/.copilot/mcp-config.json; ${NAME} in a header is read from the environment); "
            "--allow-tool NAME allows that server's tools"
        ),
    )


# --- its record: events.jsonl beside the inuse.<pid>.lock of its process ----------------
def locate_events(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """Copilot's ``events.jsonl`` beside the ``inuse.<pid>.lock`` of its process: the agent's
    own, or (the launcher's native child holds it) one of its descendants'."""
    machine = source.machine
    folder = records.copilot_session_state(source.agent_environ(proc, records.ENV_NAMES))
    if folder is None:
        return None
    for pid in descendants(source, proc):
        lock = machine.find_file(folder, records.copilot_lock_name(pid))
        if lock is not None:
            return RecordRef(records.copilot_events(lock), PROFILE.kind)
    return None


RECORD: Final = RecordReader(
    locate=locate_events,
    read=read_session_record,
    turn_finished=session_turn_finished,
    env_names=records.ENV_NAMES,
)


KIND: Final = AgentKind(PROFILE, hooks=hooks, hooks_opt_in=hooks_opt_in, mcp=mcp, record=RECORD)
