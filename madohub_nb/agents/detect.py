"""Which agent runs in a pane: a breadth-first walk of the pane's process tree.

The agent is the first process, starting with the pane's own, whose command
name holds a profile's process token as a word (``claude``, ``claude.exe``,
``codex-x86_64-…``, ``node …/codex.js``). Processes may exit while we look:
that is never an error here.
"""

from __future__ import annotations

import os
import re
import shlex
from collections import deque
from functools import cache
from typing import Final

import psutil

from ..errors import MadohubValueError
from .foreground import foreground_pgrp, process_group
from .profiles import PROFILES, SHELL_COMMANDS

UNKNOWN_KIND: Final = "unknown"
"""What :func:`detect_kind` answers for a pane that runs neither an agent nor a shell."""

# Launchers whose first argument is the real program (``node /usr/lib/…/codex.js``).
_INTERPRETERS: Final = ("node", "nodejs", "bun", "deno", "python", "python3", "ruby", "perl")


@cache
def _token_pattern(token: str) -> re.Pattern[str]:
    """``token`` as a word: ``amp`` matches ``amp``, ``amp.js``, ``amp-1``; not ``sample``, ``amp_x``."""
    return re.compile(rf"(?<![a-z0-9_]){re.escape(token)}(?![a-z_])")


def _check_pid(pane_pid: int) -> int:
    if isinstance(pane_pid, bool) or not isinstance(pane_pid, int) or pane_pid < 1:
        raise MadohubValueError(
            f"pane_pid must be a process id (a whole number >= 1), got {pane_pid!r}"
        )
    return pane_pid


def process_names(proc: psutil.Process) -> list[str]:
    """Lower-cased names a process goes by: its command name, argv[0], and a launched script."""
    names: list[str] = []
    try:
        names.append(proc.name().lower())
        argv = proc.cmdline()
    except psutil.Error:
        return names
    if argv:
        first = os.path.basename(argv[0]).lower()
        names.append(first)
        interpreter = re.sub(r"[\d.]+$", "", first)
        if interpreter in _INTERPRETERS and len(argv) > 1:
            names.append(os.path.basename(argv[1]).lower())
    return names


def process_environ(proc: psutil.Process | None) -> dict[str, str]:
    """A process's environment, or {} when it is gone or not ours to read."""
    if proc is None:
        return {}
    try:
        return dict(proc.environ())
    except psutil.Error:
        return {}


def agent_kind_of(proc: psutil.Process) -> str | None:
    """The agent kind whose process token names ``proc``, or None."""
    names = process_names(proc)
    for profile in PROFILES.values():
        for token in profile.process_tokens:
            if any(_token_pattern(token).search(name) for name in names):
                return profile.kind
    return None


def find_agent_process(pane_pid: int) -> tuple[str, psutil.Process] | None:
    """``(kind, process)`` of the first agent breadth-first from the pane's process, or None.

    Only processes in the terminal's foreground process group count: a
    background job (``amp-proxy &``) or a suspended agent does not read what is
    typed, so it does not make the pane an agent.
    """
    try:
        root = psutil.Process(_check_pid(pane_pid))
    except psutil.Error:
        return None
    foreground = foreground_pgrp(pane_pid)
    queue: deque[psutil.Process] = deque([root])
    seen: set[int] = set()
    while queue:
        proc = queue.popleft()
        if proc.pid in seen:
            continue
        seen.add(proc.pid)
        kind = agent_kind_of(proc)
        if kind is not None and (foreground is None or process_group(proc.pid) == foreground):
            return kind, proc
        try:
            queue.extend(sorted(proc.children(), key=lambda child: child.pid))
        except psutil.Error:
            continue
    return None


def is_shell_name(name: str | None) -> bool:
    """True for a shell's command name (``bash``, ``-zsh``, ``/bin/sh``)."""
    return name is not None and name.strip().rsplit("/", 1)[-1].lstrip("-") in SHELL_COMMANDS


def detect_kind(pane_pid: int, pane_current_command: str | None = None) -> str:
    """The agent kind running in a pane; ``shell`` for a shell without an agent; else ``unknown``.

    ``unknown`` (a pane running vim, a REPL, or a pane whose process is gone)
    is not a profile: the caller asks the user to name the agent.
    """
    found = find_agent_process(pane_pid)
    if found is not None:
        return found[0]
    try:
        root_name: str | None = psutil.Process(pane_pid).name()
    except psutil.Error:
        root_name = None
    if is_shell_name(root_name) or is_shell_name(pane_current_command):
        return "shell"
    return UNKNOWN_KIND


def kind_from_command(command: str | None) -> str | None:
    """The agent kind a command's program names as a word (``claude``, ``/x/codex``), if any.

    Whole words only, like process detection: ``sample-server`` is not ``amp``.
    """
    if not command or not command.strip():
        return None
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: the shell will say so; guess from the raw text
        words = command.split()
    if not words:
        return None
    first = os.path.basename(words[0]).lower()
    for profile in PROFILES.values():
        if any(_token_pattern(token).search(first) for token in profile.process_tokens):
            return profile.kind
    return None
