"""Gemini CLI: its screen profile."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final

from .. import records
from ..launch import LaunchLayer, SystemLayers
from ..profile import RULE as _RULE
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind
from .common import (
    NOTIFICATION,
    SESSION_START,
    STOP,
    MachineFiles,
    gemini_like_files,
    shell_command,
)
from .records import (
    AgentPid,
    RecordReader,
    RecordRef,
    RecordSource,
    newest_since_start,
    read_session_record,
    session_turn_finished,
)

# --- Gemini CLI (observed 0.61.0, npm @google/gemini-cli, tests/fixtures/screens/gemini/) -----
# Screens (100 columns): the logo banner, "Tips for getting started:", then the conversation:
# prompts " > text", answers "✦ text" with continuation lines indented 2. Below it a line
# "? for shortcuts" (right-aligned), a rule, " Shift+Tab to accept edits", the input box
# " >   Type your message or @path/to/file" (no rule below it) and a two-line footer
# (workspace, sandbox, model). Busy: " ⠧ Thinking... (esc to cancel, 1s)" on the line above
# the rule; the pane title says "✦  Working… (proj)" while busy, "◇  Ready (proj)" when idle.
# An Enter right after typed text is taken as part of a paste (the text stays in the box);
# 300 ms later it submits. Ctrl-J adds a draft line. Its own record is its chat file.
_GEMINI_BOX = rf"^{_RULE}\n(?:[^\n]*\n){{0,2}}? > "

PROFILE: Final = AgentProfile(
    kind="gemini",
    process_tokens=("gemini",),  # node running .../bin/gemini, which re-executes a child node
    # The spinner line sits right above the rule (blank lines are not in the marker tail).
    busy_markers=(_rx(rf"^[^\n]*\(esc to cancel, \d[^\n]*\n{_RULE}"),),
    idle_markers=(_rx(_GEMINI_BOX),),
    # A box: "? Shell  touch x", the command framed, "Allow execution of [Shell]?" over
    # "● 1. Allow once" (screens/permission/gemini.txt).
    waiting_markers=(
        _rx(
            r"^[│ \t]*(?:Allow |Do you want |Apply this change)[^\n]*\?[│ \t]*\n"
            r"(?:[^\n]*\n){0,3}?[│ \t]*● \d+\. "
        ),
    ),
    title_busy_markers=(lazy_compile(r"Working…"),),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(rf"[^\n]*\? for shortcuts|{_RULE}"),  # input box and footer
        _line(r"[ \t]*[\u2580-\u259f]+(?:[ \t]+[^\n]*)?"),  # logo, version, auth line
        lazy_compile(r"^Tips for getting started:\n(?:\d\. [^\n]*\n?)*", re.MULTILINE),
        lazy_compile(r"^⚠ [^\n]*(?:\n {3}\S[^\n]*)*\n?", re.MULTILINE),  # "⚠  Warning: True color…"
        lazy_compile(r"\A[\s\S]*^ > [^\n]*\n?", re.MULTILINE),  # up to the last prompt
    ),
    answer_start=_rx(r"^✦ "),
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(rf"^{_RULE}\n(?:[^\n]*\n){{0,2}}? > ?(?P<text>[^\n]*(?:\n {{3}}\S[^\n]*)*)"),
    input_placeholders=(_rx(r"Type your message or @path/to/file"),),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=500,  # observed: an Enter at once is swallowed, 300 ms later it submits
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # Tab completes; Shift+Tab switches the edit mode
    uses_bracketed_paste=True,  # not observed for Gemini (it is for Copilot and Pi)
    executes_input=False,
    extractor="session",  # ~/.gemini/tmp/<project>/chats/session-*.jsonl
)

# --- launch layers ----------------------------------------------------------------------
SETTINGS_ENV: Final = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
DEFAULTS_ENV: Final = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH"
LAYERS: Final = SystemLayers(SETTINGS_ENV, DEFAULTS_ENV, "/etc/gemini-cli/settings.json")


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """Its system-defaults layer (the lowest, under the user's settings) holds the hooks."""
    path = f"{folder.rstrip('/')}/gemini-system-defaults.json"
    hooks = {
        "AfterAgent": [{"hooks": [{"type": "command", "command": shell_command(base, STOP)}]}],
        "Notification": [
            {"hooks": [{"type": "command", "command": shell_command(base, NOTIFICATION)}]}
        ],
        "SessionStart": [
            {"hooks": [{"type": "command", "command": shell_command(base, SESSION_START)}]}
        ],
    }
    return LaunchLayer(
        PROFILE.kind,
        (STOP, NOTIFICATION, SESSION_START),
        env={DEFAULTS_ENV: path},
        files={path: json.dumps({"hooks": hooks}, indent=2)},
        secure_dir=True,
        how=(
            "Gemini CLI reads its system-defaults layer (the lowest, under the user's "
            "settings) from GEMINI_CLI_SYSTEM_DEFAULTS_PATH: the hub's file holds the hooks"
        ),
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The ``AfterAgent`` hook for ``~/.gemini/settings.json``."""
    hooks = {"AfterAgent": [{"hooks": [{"type": "command", "command": shell_command(base, STOP)}]}]}
    return f"Merge into ~/.gemini/settings.json:\n{json.dumps({'hooks': hooks}, indent=2)}\n"


def mcp(
    url: str, token: str, folder: str, *, server: str, tools: Sequence[str], token_env: str,
    machine: MachineFiles,
) -> LaunchLayer:  # fmt: skip
    """Its system settings layer, in place of the machine's (carried over)."""
    files = gemini_like_files(folder.rstrip("/"), url, server, tools, token_env, machine)
    return LaunchLayer(
        PROFILE.kind,
        env={SETTINGS_ENV: next(iter(files)), token_env: token},
        files=files,
        secure_dir=True,
        tool_names=tuple(f"mcp_{server}_{t}" for t in tools),
        system_layers=LAYERS,
        how=(
            "Gemini CLI reads its system settings layer from GEMINI_CLI_SYSTEM_SETTINGS_PATH "
            "(mcpServers merged with the user's by name; the machine's own system files "
            "carried over; the system-defaults layer holds the hub's hooks); trust: true "
            "skips its confirmation"
        ),
    )


# --- its record: the newest chat file of its project since it started -------------------
def locate_chat(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """Gemini's ``~/.gemini/tmp/<project>/chats/session-*.jsonl`` written since it started."""
    machine = source.machine
    env = source.agent_environ(proc, records.ENV_NAMES)
    cwd = machine.cwd(proc.pid) or source.pane_path()
    pointer = records.gemini_projects_file(env)
    raw = machine.read_head(pointer) if pointer is not None and cwd else None
    name = records.gemini_project_name(raw, cwd) if cwd else None
    folder = records.gemini_chats(env, cwd, name)
    return newest_since_start(source, proc, folder, records.GEMINI_CHAT_GLOB, PROFILE.kind)


RECORD: Final = RecordReader(
    locate=locate_chat,
    read=read_session_record,
    turn_finished=session_turn_finished,
    env_names=records.ENV_NAMES,
)


KIND: Final = AgentKind(
    PROFILE, hooks=hooks, hooks_opt_in=hooks_opt_in, hook_answer=False, mcp=mcp, record=RECORD
)
