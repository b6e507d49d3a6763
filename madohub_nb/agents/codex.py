"""Codex CLI's own files: its home directory and the rollout file a running Codex writes.

Codex writes ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``
(``CODEX_HOME`` defaults to ``~/.codex``). The TUI is ``node`` with a native
``codex`` child, so the open rollout is looked for in the process and all its
descendants (REAL-AGENTS.md).
"""

from __future__ import annotations

import fnmatch
import posixpath
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
