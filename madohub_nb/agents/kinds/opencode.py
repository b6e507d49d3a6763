"""OpenCode: its screen profile, hooks, MCP setup, native channel and record."""

from __future__ import annotations

import json
import posixpath
import re
import time
from collections.abc import Mapping, Sequence
from typing import Final

from ...errors import MadohubValueError
from ...io.agent_channels.base import ChannelEndpoint
from ...io.agent_channels.opencode import PASSWORD_ENV, OpenCodeChannel
from ..launch import LaunchLayer
from ..profile import AgentProfile
from ..profile import from_line_to_end as _from_line_to_end
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind, ChannelPlan
from .common import NOTIFICATION, STOP, MachineFiles, script
from .records import (
    AgentPid,
    RecordReader,
    RecordRef,
    RecordSource,
    home_dir,
    read_session_record,
    session_turn_finished,
)

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
    extractor="session",  # its own record (RECORD below), else the screen
)

# --- launch layers ----------------------------------------------------------------------
CONFIG_ENV: Final = "OPENCODE_CONFIG"

PLUGIN: Final = """\
// madohub: report OpenCode's end of turn (session.idle) to the hub. Written by madohub_nb.
import { spawn } from "node:child_process";
const HOOK = __HOOK__;
function send(kind, payload) {
  try {
    const child = spawn(HOOK[0], [...HOOK.slice(1), kind], { stdio: ["pipe", "ignore", "ignore"] });
    child.on("error", () => {});
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  } catch (e) {}
}
export const MadohubHooks = async () => ({
  event: async ({ event }) => {
    const sessionID = event?.properties?.sessionID ?? null;
    if (event?.type === "session.idle") {
      send("stop", { hook_event_name: "session.idle", session_id: sessionID });
    } else if (event?.type === "permission.updated" || event?.type === "permission.asked") {
      send("notification", { hook_event_name: event.type, session_id: sessionID,
        message: String(event?.properties?.title ?? "permission requested") });
    }
  },
});
"""


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """Inline config (``OPENCODE_CONFIG_CONTENT``) naming the hub's plugin file."""
    path = f"{folder.rstrip('/')}/opencode/madohub.js"
    return LaunchLayer(
        PROFILE.kind,
        (STOP, NOTIFICATION),
        env={"OPENCODE_CONFIG_CONTENT": json.dumps({"plugin": [f"file://{path}"]})},
        files={path: script(PLUGIN, base)},
        how=(
            "OPENCODE_CONFIG_CONTENT (inline config, merged over the user's) lists the "
            "hub's plugin file, which runs the hook command on session.idle; no config "
            "folder is added (OpenCode installs @opencode-ai/plugin into each one it loads)"
        ),
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The plugin, as ``~/.config/opencode/plugins/madohub.js``."""
    return "Save as ~/.config/opencode/plugins/madohub.js:\n" + script(PLUGIN, base)


def mcp(
    url: str, token: str, folder: str, *, server: str, tools: Sequence[str], token_env: str,
    machine: MachineFiles,
) -> LaunchLayer:  # fmt: skip
    """One more config file (``OPENCODE_CONFIG``), merged over the user's."""
    path = f"{folder.rstrip('/')}/opencode-mcp.json"
    config = {
        "mcp": {
            server: {
                "type": "remote",
                "url": url,
                "headers": {"Authorization": f"Bearer {{env:{token_env}}}"},
                "enabled": True,
                "oauth": False,
            }
        },
        "permission": {f"{server}_{t}": "allow" for t in tools},
    }
    return LaunchLayer(
        PROFILE.kind,
        env={CONFIG_ENV: path, token_env: token},
        files={path: json.dumps(config, indent=2)},
        tool_names=tuple(f"{server}_{t}" for t in tools),
        how=(
            "OPENCODE_CONFIG names one more config file, merged over the user's (the hub's "
            "hooks use OPENCODE_CONFIG_CONTENT); {env:NAME} reads the token"
        ),
    )


HOST: Final = "127.0.0.1"


def channel_layer(endpoint: ChannelEndpoint) -> ChannelPlan:
    """The TUI serves its own API (``opencode --port N``), the password in its environment.

    Observed (1.18.33): a plain ``opencode --port N`` serves the same API as ``opencode
    serve`` while its TUI stays live in the pane, so no second server runs and nothing
    outlives the pane; the password (basic auth) is read from OPENCODE_SERVER_PASSWORD,
    never a word of the command line. (``serve`` + ``attach`` works too, with two
    processes to end.) The channel learns the TUI's folder from ``GET /path``.
    """
    if endpoint.port is None or not endpoint.password:
        raise MadohubValueError(
            f"OpenCode's channel needs a port and a password on 127.0.0.1, not {endpoint!r}: "
            "give the endpoint both"
        )
    port, password = endpoint.port, endpoint.password
    since = time.time()  # before the TUI starts: a session it makes later is its own
    return ChannelPlan(
        layer=LaunchLayer(
            PROFILE.kind,
            args=("--hostname", HOST, "--port", str(port)),  # (its default host, said)
            env={PASSWORD_ENV: password},
            how=f"its TUI serves its API on 127.0.0.1:{port}, the password from {PASSWORD_ENV}",
        ),
        server=None,
        open=lambda _server_pid: OpenCodeChannel(port, password, since=since, host=HOST),
    )


# --- where its record is: one SQLite database per user ------------------------------------
ENV_NAMES: Final = ("HOME", "XDG_DATA_HOME")
"""The variables of its environment that move its record."""


def opencode_database(env: Mapping[str, str]) -> str | None:
    """OpenCode's database for the user whose environment this is:
    ``$XDG_DATA_HOME/opencode/opencode.db`` (``~/.local/share``)."""
    data = env.get("XDG_DATA_HOME", "")
    if data.startswith("/"):
        return posixpath.join(data, "opencode", "opencode.db")
    home = home_dir(env)
    return posixpath.join(home, ".local", "share", "opencode", "opencode.db") if home else None


# --- its record: the SQLite database it shares with every OpenCode of the user ----------
def locate_database(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """OpenCode's database, narrowed to the newest session run in the agent's folder."""
    env = source.agent_environ(proc, ENV_NAMES)
    cwd = source.machine.cwd(proc.pid) or source.pane_path()
    db = opencode_database(env)
    return RecordRef(db, PROFILE.kind, cwd=cwd) if db is not None and cwd else None


RECORD: Final = RecordReader(
    locate=locate_database,
    read=read_session_record,
    turn_finished=session_turn_finished,
    env_names=ENV_NAMES,
)


KIND: Final = AgentKind(
    PROFILE,
    hooks=hooks,
    hooks_opt_in=hooks_opt_in,
    mcp=mcp,
    channel=channel_layer,
    record=RECORD,
    order=40,
    layers_order=60,
)
