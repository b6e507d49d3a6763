"""Codex CLI's own files: its home directory and the rollout file a running Codex writes.

Codex writes ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``
(``CODEX_HOME`` defaults to ``~/.codex``). The TUI is ``node`` with a native
``codex`` child, so the open rollout is looked for in the process and all its
descendants (REAL-AGENTS.md).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from .claude import home_relative

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


def newest_rollout(open_paths: Sequence[str]) -> str | None:
    """The newest (last) of the files a Codex process tree holds open that is a
    ``rollout-*.jsonl``, or None (no prompt yet: no rollout)."""
    rollouts = [p for p in open_paths if fnmatch.fnmatch(os.path.basename(p), ROLLOUT_GLOB)]
    return rollouts[-1] if rollouts else None
