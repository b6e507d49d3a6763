"""Codex CLI's own files: its home directory and the rollout file a running Codex writes.

Codex writes ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``
(``CODEX_HOME`` defaults to ``~/.codex``). The TUI is ``node`` with a native
``codex`` child, so the open rollout is looked for in the process and all its
descendants (REAL-AGENTS.md).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Final

import psutil

from .detect import process_environ

ROLLOUT_GLOB: Final = "rollout-*.jsonl"


def codex_home(proc: psutil.Process | None, fallback: str | Path | None = None) -> Path | None:
    """The agent's Codex home: its ``CODEX_HOME``, its ``HOME``/.codex, ``fallback``, or None."""
    env = process_environ(proc)
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"]).expanduser()
    if env.get("HOME"):
        return Path(env["HOME"]) / ".codex"
    if fallback is not None and str(fallback):
        return Path(fallback).expanduser()
    return None


def open_rollout_file(proc: psutil.Process | None) -> Path | None:
    """The ``rollout-*.jsonl`` that ``proc`` or a descendant holds open (the newest), or None."""
    if proc is None:
        return None
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        procs = [proc]
    found: dict[str, float] = {}
    for p in procs:
        try:
            files = p.open_files()
        except psutil.Error:
            continue
        for f in files:
            if fnmatch.fnmatch(os.path.basename(f.path), ROLLOUT_GLOB):
                try:
                    found[f.path] = os.stat(f.path).st_mtime
                except OSError:
                    continue
    if not found:
        return None
    return Path(max(found, key=lambda path: (found[path], path)))
