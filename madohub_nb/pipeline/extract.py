"""Extract: the source tile's last response, by the best means its agent allows.

The tile's kind says where its agent keeps its record (``agents/kinds/<kind>.py``):
Claude Code: agent pid → its config dir → ``sessions/<pid>.json`` → ``sessionId``
→ ``projects/*/<sessionId>.jsonl`` (falling back to the cwd's project folder).
Codex: the rollout file the process has open, else the newest one for its cwd.
OpenCode, Qwen Code, Aider, Gemini CLI, Copilot CLI and Pi: their own record
of the conversation (``session``; where each keeps it: ``agents/records.py``).
Everything else, and whenever no record can be found: the screen,
ANSI codes and TUI chrome removed. A program without answer markers (a
``terminal`` tile, a shell running a REPL) answers with the output that
followed the last input typed into it (:func:`answer_after_input`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..agents.kinds import KINDS, RECORD_OF_KIND
from ..agents.kinds.records import START_SLACK_S, RecordRef
from ..agents.screen import ANSWER_HISTORY_LINES, answer_after_input

if TYPE_CHECKING:
    from ..agents.detect import AgentProcess
    from ..io.records import Extraction
    from .tile import Tile


def agent_record(tile: Tile, proc: AgentProcess) -> RecordRef | None:
    """The record ``proc``'s agent keeps of its conversation (a path on the tile's machine),
    or None: found as the process's kind finds it, for the kinds that keep their own
    record (``session``: OpenCode, Qwen Code, Aider, Gemini CLI, Copilot CLI, Pi)."""
    if proc.kind not in RECORD_OF_KIND:
        return None
    reader = KINDS[proc.kind].record
    return reader.locate(tile, proc) if reader is not None else None


def transcript_path(tile: Tile) -> Path | None:
    """Where the tile's agent keeps its transcript (a path on the tile's machine), if found."""
    found = tile.transcript_path()
    return Path(found) if found is not None else None


def from_terminal(tile: Tile) -> Extraction | None:
    """The last answer as shown on screen, without ANSI codes and TUI chrome."""
    return tile.screen_answer()


def extract(tile: Tile, terminal_only: bool = False) -> Extraction | None:
    """The tile's last response: transcript or record first (unless ``terminal_only``), then
    the screen."""
    return tile.last_response(terminal_only)


__all__ = [
    "ANSWER_HISTORY_LINES",
    "START_SLACK_S",
    "RecordRef",
    "agent_record",
    "answer_after_input",
    "extract",
    "from_terminal",
    "transcript_path",
]
