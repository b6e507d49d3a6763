"""Which agent runs in a pane: the first of the pane's processes that names an agent.

The agent is the first process, in the order its machine lists the pane's
processes (here its whole tree breadth-first; on a host the pane's own process
and its terminal's foreground leader), whose command name holds a profile's
process token as a word (``claude``, ``claude.exe``, ``codex-x86_64-…``,
``node …/codex.js``). Everything here takes plain data (a process's stat and
argv), so a tile on any machine is detected by the same code. Processes may
exit while we look: that is never an error here.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final, Protocol

from ..errors import MadohubValueError
from .foreground import ProcStat
from .profiles import PROFILES, SHELL_COMMANDS

UNKNOWN_KIND: Final = "unknown"
"""What :func:`detect_kind` answers for a pane that runs neither an agent nor a shell."""

# Launchers whose first argument is the real program (``node /usr/lib/…/codex.js``).
_INTERPRETERS: Final = ("node", "nodejs", "bun", "deno", "python", "python3", "ruby", "perl")


@cache
def _token_pattern(token: str) -> re.Pattern[str]:
    """``token`` as a word: ``amp`` matches ``amp``, ``amp.js``, ``amp-1``; not ``sample``, ``amp_x``."""
    return re.compile(rf"(?<![a-z0-9_]){re.escape(token)}(?![a-z_])")


@dataclass(frozen=True)
class AgentProcess:
    """An agent's process on its machine, pinned by its start time (a reused pid is not it)."""

    kind: str
    pid: int
    start_ticks: int
    comm: str


class PaneProcesses(Protocol):
    """What detection reads about a pane's processes (a :class:`~madohub_nb.io.machine.Machine`)."""

    def pane_processes(self, pane_pid: int) -> list[ProcStat]: ...
    def cmdline(self, pid: int) -> list[str]: ...


def process_names(comm: str, argv: Sequence[str]) -> list[str]:
    """Lower-cased names a process goes by: its command name, argv[0], and a launched script."""
    names = [comm.lower()]
    if argv:
        first = os.path.basename(argv[0]).lower()
        names.append(first)
        interpreter = re.sub(r"[\d.]+$", "", first)
        if interpreter in _INTERPRETERS and len(argv) > 1:
            names.append(os.path.basename(argv[1]).lower())
    return names


def agent_kind_of(comm: str, argv: Sequence[str]) -> str | None:
    """The agent kind whose process token names a process (its comm and argv), or None."""
    names = process_names(comm, argv)
    for profile in PROFILES.values():
        for token in profile.process_tokens:
            if any(_token_pattern(token).search(name) for name in names):
                return profile.kind
    return None


def find_agent_among(
    procs: Iterable[ProcStat],
    argv_of: Callable[[int], Sequence[str]],
    foreground: int | None,
    kind: str | None = None,
) -> AgentProcess | None:
    """The first of ``procs`` that names an agent (of ``kind``, if given) and is in the
    terminal's ``foreground`` process group (None: unknown, any group).

    A background job (``amp-proxy &``) or a suspended agent does not read what is
    typed, so it does not make the pane an agent.
    """
    for st in procs:
        found = agent_kind_of(st.comm, argv_of(st.pid))
        if found is None or (kind is not None and found != kind):
            continue
        if foreground is None or st.pgrp == foreground:
            return AgentProcess(found, st.pid, st.start_ticks, st.comm)
    return None


def foreground_of(pane: ProcStat | None) -> int | None:
    """The foreground process group of the terminal a pane's process runs on, or None."""
    if pane is None or pane.tty_nr == 0 or pane.tpgid <= 0:
        return None
    return pane.tpgid


def find_agent(
    machine: PaneProcesses, pane_pid: int, kind: str | None = None
) -> AgentProcess | None:
    """The agent among a pane's processes on ``machine`` (see :func:`find_agent_among`)."""
    procs = machine.pane_processes(_check_pid(pane_pid))
    pane = next((st for st in procs if st.pid == pane_pid), None)
    return find_agent_among(procs, machine.cmdline, foreground_of(pane), kind)


def _check_pid(pane_pid: int) -> int:
    if isinstance(pane_pid, bool) or not isinstance(pane_pid, int) or pane_pid < 1:
        raise MadohubValueError(
            f"pane_pid must be a process id (a whole number >= 1), got {pane_pid!r}"
        )
    return pane_pid


def is_shell_name(name: str | None) -> bool:
    """True for a shell's command name (``bash``, ``-zsh``, ``/bin/sh``)."""
    return name is not None and name.strip().rsplit("/", 1)[-1].lstrip("-") in SHELL_COMMANDS


def detect_kind(
    machine: PaneProcesses, pane_pid: int, pane_current_command: str | None = None
) -> str:
    """The agent kind running in a pane; ``shell`` for a shell without an agent; else ``unknown``.

    ``unknown`` (a pane running vim, a REPL, or a pane whose process is gone)
    is not a profile: the caller asks the user to name the agent.
    """
    procs = machine.pane_processes(_check_pid(pane_pid))
    pane = next((st for st in procs if st.pid == pane_pid), None)
    found = find_agent_among(procs, machine.cmdline, foreground_of(pane))
    if found is not None:
        return found.kind
    if is_shell_name(pane.comm if pane is not None else None) or is_shell_name(
        pane_current_command
    ):
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
