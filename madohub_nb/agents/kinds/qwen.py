"""Qwen Code: its screen profile, hooks, MCP setup and record."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Final

from ...io.agent_channels.base import ChannelEndpoint
from ...io.agent_channels.qwen import IN_NAME, QwenChannel, qwen_args
from ..launch import LaunchLayer, SystemLayers
from ..profile import RULE as _RULE
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from .base import AgentKind, ChannelPlan
from .common import (
    NOTIFICATION,
    SESSION_START,
    STOP,
    MachineFiles,
    claude_like_hooks,
    gemini_like_files,
)
from .records import (
    AgentPid,
    RecordReader,
    RecordRef,
    RecordSource,
    descendants,
    home_dir,
    plain_name,
    read_session_record,
    session_turn_finished,
)

# --- Qwen Code (observed 0.24.4, npm @qwen-code/qwen-code, OpenAI-compatible fake API) ----
# Screens (100 columns): an input box "> " between two rules, "  Type your message or
# @path/to/file" in it when empty; busy: "  .. Distracting you… (1s · esc to cancel)" above the
# box; prompts "  > text", answers "  ◆︎ text" (U+25C6 U+FE0E). Ctrl-J adds a draft line; a
# multi-line draft's lines end with a zero-width space.
_QWEN_BOX = rf"^{_RULE}\n>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?\n{_RULE}"

PROFILE: Final = AgentProfile(
    kind="qwen",
    process_tokens=("qwen",),
    busy_markers=(_rx(r"esc to cancel\)"),),
    idle_markers=(_rx(_QWEN_BOX),),
    # "Allow execution of: 'touch'?" over "› 1. Yes, allow once", then "Waiting for user
    # confirmation..." (screens/permission/qwen*.txt: --approval-mode default, and auto mode
    # when its classifier cannot decide).
    waiting_markers=(
        _rx(
            r"^[ \t]*(?:Allow |Do you want |Apply this change)[^\n]*\?[ \t]*\n"
            r"(?:[^\n]*\n){0,3}?[ \t]*› \d+\. "
        ),
    ),
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(_RULE),  # input box and footer
        _line(r"[^\n]*[│┌└┐┘╭╮╰╯][^\n]*"),  # logo box, notices in boxes
        _line(r"[ \t]*[▄█╔╗║╚╝═▀ ]+"),  # the logo's last line
    ),
    answer_start=_rx("^  \u25c6\ufe0e? "),
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(rf"^{_RULE}\n> ?(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(_rx(r"Type your message or @path/to/file"),),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=300,
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # Shift+Tab cycles modes; Tab completes
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="session",  # its own record (RECORD below), else the screen
)

# --- launch layers ----------------------------------------------------------------------
SETTINGS_ENV: Final = "QWEN_CODE_SYSTEM_SETTINGS_PATH"
DEFAULTS_ENV: Final = "QWEN_CODE_SYSTEM_DEFAULTS_PATH"
LAYERS: Final = SystemLayers(SETTINGS_ENV, DEFAULTS_ENV, "/etc/qwen-code/settings.json")
SETTINGS_VERSION: Final = 4
"""Qwen Code 0.24.4 rewrites a settings file without this ``$version`` (it migrates it)."""


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """Claude-style hooks in its system-defaults layer."""
    path = f"{folder.rstrip('/')}/qwen-system-defaults.json"
    return LaunchLayer(
        PROFILE.kind,
        (STOP, NOTIFICATION, SESSION_START),
        env={DEFAULTS_ENV: path},
        files={path: json.dumps({"hooks": claude_like_hooks(base, None)}, indent=2)},
        how=(
            "Qwen Code has Claude-style hooks (Stop, Notification, SessionStart) in its "
            "settings; its system-defaults layer comes from QWEN_CODE_SYSTEM_DEFAULTS_PATH"
        ),
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The hook entries for ``~/.qwen/settings.json``."""
    hooks = {"hooks": claude_like_hooks(base, None)}
    return f'Merge into the "hooks" of ~/.qwen/settings.json:\n{json.dumps(hooks, indent=2)}\n'


def mcp(
    url: str, token: str, folder: str, *, server: str, tools: Sequence[str], token_env: str,
    machine: MachineFiles,
) -> LaunchLayer:  # fmt: skip
    """Its system settings layer, in place of the machine's (carried over)."""
    version = {"$version": SETTINGS_VERSION}
    files = gemini_like_files(folder.rstrip("/"), url, server, tools, token_env, machine, **version)
    return LaunchLayer(
        PROFILE.kind,
        env={SETTINGS_ENV: next(iter(files)), token_env: token},
        files=files,
        tool_names=tuple(f"mcp__{server}__{t}" for t in tools),
        system_layers=LAYERS,
        how=(
            "Qwen Code reads its system settings layer from QWEN_CODE_SYSTEM_SETTINGS_PATH "
            "(mcpServers merged by name; the machine's own system files carried over); "
            "trust: true skips its confirmation, in its auto mode too"
        ),
    )


def channel(endpoint: ChannelEndpoint) -> ChannelPlan:
    """Its file channel (``--input-file``/``--json-file`` in the tile's private folder):
    no server; the hub follows the JSON file once the agent is up."""
    folder = endpoint.folder
    layer = LaunchLayer(
        PROFILE.kind,
        args=qwen_args(folder),
        files={posixpath.join(folder, IN_NAME): ""},
        how="Qwen Code takes prompts from --input-file and reports its turns in --json-file",
    )
    return ChannelPlan(layer, None, lambda _pid: QwenChannel(folder))


# --- where its record is: sessions/<pid>.json names the chat of the process ------------
ENV_NAMES: Final = ("HOME",)
"""The variables of its environment that move its record."""
POINTER_MAX_BYTES: Final = 64 * 1024


def qwen_pointer_files(env: Mapping[str, str], pids: Sequence[int]) -> list[str]:
    """``~/.qwen/sessions/<pid>.json`` for each pid (the agent's and its descendants'): the
    process (its innermost ``node``) names its ``sessionId`` there."""
    home = home_dir(env)
    if home is None:
        return []
    return [posixpath.join(home, ".qwen", "sessions", f"{pid}.json") for pid in pids]


def qwen_session(raw: bytes | None, pid: int) -> str | None:
    """The ``sessionId`` in a Qwen ``sessions/<pid>.json``, if it is this pid's and readable."""
    if not raw or len(raw) > POINTER_MAX_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("pid") not in (pid, None):
        return None
    sid = data.get("sessionId")
    return sid if isinstance(sid, str) and plain_name(sid) else None


def qwen_projects(env: Mapping[str, str]) -> str | None:
    """The folder of Qwen's per-project folders (each holding ``chats/<session>.jsonl``;
    the project named for the cwd)."""
    home = home_dir(env)
    return posixpath.join(home, ".qwen", "projects") if home else None


def qwen_chat_name(session_id: str) -> str:
    """The chat file of a session, relative to its project folder."""
    return f"chats/{session_id}.jsonl"


# --- its record: the chat file of the session its process names in sessions/ ----------
def locate_chat(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """Qwen's chat file of the session its process (or a descendant) names in ``sessions/``."""
    machine = source.machine
    env = source.agent_environ(proc, ENV_NAMES)
    projects = qwen_projects(env)
    if projects is None:
        return None
    pids = descendants(source, proc)
    for pid, pointer in zip(pids, qwen_pointer_files(env, pids), strict=True):
        session = qwen_session(machine.read_head(pointer), pid)
        if session is not None:
            found = machine.find_file(projects, qwen_chat_name(session))
            return RecordRef(found, PROFILE.kind, session_id=session) if found is not None else None
    return None


RECORD: Final = RecordReader(
    locate=locate_chat,
    read=read_session_record,
    turn_finished=session_turn_finished,
    env_names=ENV_NAMES,
)


KIND: Final = AgentKind(
    PROFILE,
    hooks=hooks,
    hooks_opt_in=hooks_opt_in,
    mcp=mcp,
    channel=channel,
    record=RECORD,
    order=50,
    layers_order=40,
)
