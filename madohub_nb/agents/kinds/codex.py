"""Codex CLI: its screen profile, launch layers and record.

Codex writes ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``
(``CODEX_HOME`` defaults to ``~/.codex``). The TUI is ``node`` with a native
``codex`` child, so the open rollout is looked for in the process and all its
descendants (REAL-AGENTS.md).
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from ...io.agent_channels.base import ChannelEndpoint, ChannelServer
from ...io.agent_channels.codex import CodexChannel
from ...io.agent_records import read_last_response, turn_finished
from ...io.agent_records.codex import find_codex_rollout
from ..launch import LaunchLayer
from ..profile import AgentProfile
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind, ChannelPlan
from .common import STOP, MachineFiles
from .records import AgentPid, RecordReader, RecordRef, RecordSource, home_relative

# --- Codex CLI --------------------------------------------------------------
# Screens: fixtures/real/screens/codex_*.txt (0.171.0).
_CODEX_PROMPT = "[›»]"
# The composer is the last prompt line with no reply bullet below it: only the footer follows.
_CODEX_COMPOSER_TO_END = rf"^{_CODEX_PROMPT} [^\n]*(?:\n(?!• )[^\n]*)*\Z"
# Ready: a status line with " · " under the composer ("fake-model default · /cwd",
# "← for agents · ? for shortcuts"). For ~4 s after start-up (while its app-server daemon
# starts) Codex 0.171.0 shows the composer over a bare "? for shortcuts", or over nothing once
# a draft is typed, and takes no submit: text typed then stays in the composer (observed).
_CODEX_READY_COMPOSER = (
    rf"^{_CODEX_PROMPT} [^\n]*(?:\n(?!• )[^\n]*)*?\n[^\n]* · [^\n]*(?:\n(?!• )[^\n]*)*\Z"
)
# "• Working (2s • esc to interrupt)", or a reasoning header in its place.
_CODEX_STATUS = r"• [^\n]*\(\d[^\n]*esc to interrupt\)"

PROFILE: Final = AgentProfile(
    kind="codex",
    process_tokens=("codex",),
    busy_markers=(_rx(rf"^{_CODEX_STATUS}"),),
    # Not "? for shortcuts": it stays visible while busy (codex_03). The placeholder text
    # rotates between versions and runs, and a draft replaces it (codex_01), so the
    # composer is recognised by its place above the footer.
    idle_markers=(_rx(_CODEX_READY_COMPOSER),),
    waiting_markers=(
        _rx(
            r"^[ \t]*(?:Would you like to|Do you want to|Do you trust|Allow )[^\n]*\?[ \t]*\n"
            rf"(?:[^\n]*\n){{0,8}}?[ \t]*{_CODEX_PROMPT} \d+\. "
        ),
    ),
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        lazy_compile(_CODEX_COMPOSER_TO_END, re.MULTILINE),  # composer, model line, footer
        lazy_compile(r"^[ \t]*>_ OpenAI Codex[^\n]*(?:\n[ \t]{3,}\S[^\n]*)?\n?", re.MULTILINE),
        _line(r"[╭╰│][^\n]*"),  # boxed session header of other versions
        _line(_CODEX_STATUS),
        _line(r"[ \t]*Worked for \S+ • \d{1,2}:\d{2}[^\n]*|─+ Worked for [^\n]*"),
    ),
    answer_start=_rx(r"^• "),
    answer_exclude=_rx(r"^• Working\b"),
    tool_output=_rx(r"^[ \t]+└"),  # "• Ran ls" / "  └ a b"
    input_line=_rx(rf"^{_CODEX_PROMPT} (?P<text>[^\n]*(?:\n[ \t]+\S[^\n]*)*)(?:\n(?!• )[^\n]*)*\Z"),
    input_placeholders=tuple(
        _rx(re.escape(text))
        for text in (
            "Ask Codex to do anything",
            "Explain this codebase",
            "Summarize recent commits",
            "Implement {feature}",
            "Find and fix a bug in @filename",
            "Write tests for @filename",
            "Improve documentation in @filename",
            "Run /review on my current changes",
            "Use /skills to list available skills",
        )
    ),
    paste_labels=(_rx(r"\[Pasted Content \d+ chars\]"),),  # codex-rs, a paste over 1,000 chars
    submit_keys=("\r", "\r"),
    # An Enter right after typed text is swallowed as part of a paste burst (REAL-AGENTS.md).
    pre_submit_delay_ms=800,
    between_submit_keys_ms=200,
    newline_key="C-j",
    typed_tab="    ",  # typed: swallowed (pasted tabs arrive)
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="rollout",
    records_turn_ms=True,
)


# --- launch layers ----------------------------------------------------------------------
def notify(base: Sequence[str]) -> str:
    """Codex's ``-c`` override: ``notify=[...]`` (a TOML array; JSON strings are TOML strings).

    Codex runs it once per finished turn with its JSON as the last argument.
    """
    return "notify=" + json.dumps([*base, STOP])


def hooks(base: Sequence[str], folder: str) -> LaunchLayer:
    """``codex -c notify=[...]``."""
    return LaunchLayer(
        PROFILE.kind,
        (STOP,),
        args=("-c", notify(base)),
        how="codex -c notify=[...]: runs once per turn, payload JSON as the last argument",
    )


def hooks_opt_in(base: Sequence[str]) -> str:
    """The ``notify`` line for ``~/.codex/config.toml``, or the ``-c`` to start with."""
    return (
        "Add to ~/.codex/config.toml (top level):\n"
        f"  {notify(base).replace('=', ' = ', 1)}\n"
        f"(or start it as: codex -c {shlex.quote(notify(base))})\n"
    )


def mcp(
    url: str, token: str, folder: str, *, server: str, tools: Sequence[str], token_env: str,
    machine: MachineFiles,
) -> LaunchLayer:  # fmt: skip
    """``codex -c mcp_servers.NAME...``: the token stays in the pane's environment."""
    prefix = f"mcp_servers.{server}"
    options = {
        "url": url,
        "bearer_token_env_var": token_env,
        "default_tools_approval_mode": "approve",
    }
    words = [w for k, v in options.items() for w in ("-c", f"{prefix}.{k}={json.dumps(v)}")]
    return LaunchLayer(
        PROFILE.kind,
        args=tuple(words),
        env={token_env: token},
        tool_names=tuple(f"mcp__{server}.{t}" for t in tools),
        how=(
            "codex -c mcp_servers.NAME.url/bearer_token_env_var/default_tools_approval_mode"
            '="approve" (without it Codex asks before every call)'
        ),
    )


# --- its native channel: app-server + remote TUI -----------------------------------------
CHANNEL_SOCKET: Final = "codex-app-server.sock"
NO_DAEMON: Final = ("-c", "features.daemon_auto_start=false")
"""Plain ``codex`` starts an app-server daemon of its own that outlives the TUI
(REAL-AGENTS.md): off, for the server the hub starts and for the remote TUI alike."""


def channel(endpoint: ChannelEndpoint) -> ChannelPlan:
    """The hub starts ``codex app-server --listen unix://SOCKET`` (in the tile's private
    0700 folder); the pane runs ``codex --remote unix://SOCKET``; the hub's
    :class:`CodexChannel` is a second client of that server and ends it by pid.

    The server's ``argv[0]`` is ``codex``: the hub starts it with the pane's environment
    (PATH, ``CODEX_HOME``); a tile whose command names another executable gets that one.
    """
    socket = endpoint.socket_path or posixpath.join(endpoint.folder, CHANNEL_SOCKET)
    url = f"unix://{socket}"
    return ChannelPlan(
        layer=LaunchLayer(
            PROFILE.kind,
            args=("--remote", url, *NO_DAEMON),
            how=f"codex --remote {url}: the TUI of the hub's codex app-server",
        ),
        server=ChannelServer(
            ("codex", "app-server", "--listen", url, *NO_DAEMON), takes_layer_args=True
        ),
        open=lambda server_pid: CodexChannel(socket, server_pid=server_pid),
    )


# --- its files: its home and the rollouts it holds open -------------------------------
ROLLOUT_GLOB: Final = "rollout-*.jsonl"
HOME_ENV: Final = ("CODEX_HOME", "HOME")
"""The variables of Codex's environment that say where its home is."""


def codex_home(
    environ: Mapping[str, str] | None, fallback: str | Path | None = None
) -> Path | None:
    """The agent's Codex home from its environment (:data:`HOME_ENV`): its ``CODEX_HOME``,
    its ``HOME``/.codex, ``fallback``, or None."""
    env = environ or {}
    if env.get("CODEX_HOME"):
        return home_relative(env["CODEX_HOME"], env)
    if env.get("HOME"):
        return Path(env["HOME"]) / ".codex"
    if fallback is not None and str(fallback):
        return Path(fallback).expanduser()
    return None


def newest_rollout(
    open_paths: Sequence[str], home: str | Path | None, *also: str | Path
) -> str | None:
    """The newest rollout among the files a Codex process tree holds open, or None.

    Only a ``rollout-*.jsonl`` under the agent's own ``<home>/sessions/`` counts (``also``:
    other spellings of that home, e.g. its real path): any program Codex runs is in its
    tree and could hold open a file of that name anywhere, whose text would then be
    routed as Codex's answer. The newest is told by the name (``rollout-<time>-<id>``),
    never by the folder it is in.
    """
    if home is None:
        return None
    roots = {posixpath.normpath(str(h)).rstrip("/") + "/sessions/" for h in (home, *also)}
    rollouts = [
        p for p in open_paths
        if fnmatch.fnmatch(posixpath.basename(p), ROLLOUT_GLOB)
        and any(posixpath.normpath(p).startswith(root) for root in roots)
    ]  # fmt: skip
    return max(rollouts, key=posixpath.basename) if rollouts else None


# --- its record: the rollout file --------------------------------------------------------
def home(source: RecordSource, proc: AgentPid) -> Path | None:
    """Codex's home on the tile's machine (its ``CODEX_HOME``, else ``HOME``/.codex)."""
    return codex_home(source.agent_environ(proc, HOME_ENV))


def locate_rollout(source: RecordSource, proc: AgentPid) -> RecordRef | None:
    """The rollout file a running Codex process writes (a path on its machine), or None.

    The one Codex (or a descendant: the native child of its ``node``) holds open; where
    directories may be scanned, else the newest rollout of its cwd since it started.
    """
    machine, codex = source.machine, home(source, proc)
    real_home = os.path.realpath(codex) if codex is not None and machine.name is None else codex
    held = [f.path for f in machine.open_files([proc.pid], ROLLOUT_GLOB)]
    found = newest_rollout(held, codex, *([real_home] if real_home else []))
    if found is not None:
        return RecordRef(found, PROFILE.kind)
    if not machine.dir_scans:
        return None
    cwd, started = machine.cwd(proc.pid), machine.started_at(proc.pid)
    if codex is None or cwd is None or started is None:
        return None
    rollout = find_codex_rollout(codex, cwd=cwd, started_after=started)
    return RecordRef(str(rollout), PROFILE.kind) if rollout is not None else None


RECORD: Final = RecordReader(
    locate=locate_rollout,
    read=lambda path, ref: read_last_response(path, usage=True),
    turn_finished=lambda path, ref: turn_finished(path),
    env_names=HOME_ENV,
)


KIND: Final = AgentKind(
    PROFILE,
    hooks=hooks,
    hooks_opt_in=hooks_opt_in,
    mcp=mcp,
    mcp_on_hosts=True,
    record=RECORD,
    channel=channel,
    order=20,
    layers_order=20,
)
