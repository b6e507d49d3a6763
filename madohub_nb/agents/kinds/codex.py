"""Codex CLI: its screen profile."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ...io.transcripts import find_codex_rollout, read_last_response, turn_finished
from ..codex import HOME_ENV, ROLLOUT_GLOB, codex_home, newest_rollout
from ..launch import LaunchLayer
from ..profile import AgentProfile
from ..profile import line as _line
from ..profile import rx as _rx
from ..regex import lazy_compile
from .base import AgentKind
from .common import STOP, MachineFiles
from .records import AgentPid, RecordReader, RecordRef, RecordSource

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
    PROFILE, hooks=hooks, hooks_opt_in=hooks_opt_in, mcp=mcp, mcp_on_hosts=True, record=RECORD
)
