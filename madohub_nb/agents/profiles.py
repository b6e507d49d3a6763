"""Agent profiles: the one table of what the toolkit knows about each kind of agent.

Each shipped kind's profile is declared in its own module (``agents/kinds/<kind>.py``,
the :class:`~madohub_nb.agents.kinds.base.AgentKind`); this table is built from them, and
users add kinds to it by name (``mh.register_agent``). The type is
:class:`~madohub_nb.agents.profile.AgentProfile`. Nothing else in the package should branch
on an agent's kind: read the profile (or ask the kind) instead.
"""

from __future__ import annotations

from typing import Final

from ..errors import MadohubValueError
from .kinds import KINDS, RECORD_BY_EXTRACTOR, AgentKind
from .profile import (
    COMMAND_READERS,
    EXTRACTORS,
    RULE,
    SCREEN_STATES,
    SHELL_COMMANDS,
    AgentProfile,
    Pattern,
    ScreenState,
    command_name,
    is_command_reader,
    screen_tail,
)
from .screen import strip_ansi

CLAUDE: Final = KINDS["claude"].profile
CODEX: Final = KINDS["codex"].profile
AMP: Final = KINDS["amp"].profile
OPENCODE: Final = KINDS["opencode"].profile
QWEN: Final = KINDS["qwen"].profile
AIDER: Final = KINDS["aider"].profile
GEMINI: Final = KINDS["gemini"].profile
COPILOT: Final = KINDS["copilot"].profile
PI: Final = KINDS["pi"].profile
SHELL: Final = KINDS["shell"].profile
TERMINAL: Final = KINDS["terminal"].profile

PROFILES: Final[dict[str, AgentProfile]] = {name: kind.profile for name, kind in KINDS.items()}
"""The one table of agent profiles, by kind: the shipped kinds' and registered ones."""


def kind_of(name: str) -> AgentKind:
    """The kind called ``name``: a shipped one, or one a user registered (its profile, and
    the record reader its ``extractor`` names: no hooks or MCP layers of its own); a
    teaching error for an unknown name."""
    shipped = KINDS.get(name) if isinstance(name, str) else None
    if shipped is not None:
        return shipped
    profile = get_profile(name)
    return AgentKind(profile, record=RECORD_BY_EXTRACTOR.get(profile.extractor))


def is_slash_command(text: str) -> bool:
    """One line whose first non-blank character is ``/`` (``/clear``, ``/model x``)."""
    stripped = text.strip()
    return stripped.startswith("/") and "\n" not in stripped


def submit_keys_for(profile: AgentProfile, text: str) -> tuple[str, ...]:
    """The keys that submit ``text``: the profile's command keys for a slash command."""
    if profile.command_submit_keys is not None and is_slash_command(text):
        return profile.command_submit_keys
    return profile.submit_keys


def known_kinds() -> tuple[str, ...]:
    """Every agent kind ``agent=`` accepts: the shipped ones, then those users registered."""
    return tuple(PROFILES)


def get_profile(kind: str) -> AgentProfile:
    """The profile of ``kind``; a teaching error for an unknown kind."""
    profile = PROFILES.get(kind) if isinstance(kind, str) else None
    if profile is None:
        raise MadohubValueError(
            f"unknown agent kind {kind!r}; allowed: {', '.join(known_kinds())} "
            "(or describe a new one with mh.register_agent)"
        )
    return profile


def foreground_profile(profile: AgentProfile, current_command: str | None) -> AgentProfile:
    """The profile that applies now: a shell running another program acts as that program."""
    if (
        profile.foreground_kind is None
        or current_command is None
        or _command_name(current_command) in profile.idle_commands
    ):
        return profile
    return get_profile(profile.foreground_kind)


def last_line(screen: str) -> str:
    """The last non-blank line of the screen, ANSI stripped, trailing spaces kept (``>>> ``)."""
    lines = [line for line in strip_ansi(screen).split("\n") if line.strip()]
    return lines[-1] if lines else ""


def quiet_state(
    screen: str, *, quiet_for_ms: float, ready_quiet_ms: int, ready_pattern: Pattern | None
) -> ScreenState:
    """``idle`` or ``busy`` for a program without markers (a ``terminal`` tile).

    Idle once its output has been quiet for ``ready_quiet_ms`` and, when a
    ``ready_pattern`` is given, its last non-blank screen line matches it.
    """
    if quiet_for_ms < ready_quiet_ms:
        return "busy"
    if ready_pattern is not None and not ready_pattern.search(last_line(screen)):
        return "busy"
    return "idle"


def _command_name(command: str) -> str:
    """``-bash`` (a login shell) and ``/bin/bash`` both read as ``bash``."""
    return command.strip().rsplit("/", 1)[-1].lstrip("-")


def screen_state(
    profile: AgentProfile,
    screen: str,
    *,
    current_command: str | None = None,
    pane_title: str | None = None,
) -> ScreenState:
    """``busy``, ``waiting``, ``idle`` or ``unknown`` as the screen shows it.

    Waiting beats busy beats idle: a permission prompt needs an answer whatever
    else is drawn, and Claude keeps its input box visible while busy. Markers
    are looked for only near the bottom of the screen, so a prompt or answer
    higher up that quotes them does not count. ``current_command`` (tmux
    ``#{pane_current_command}``) and ``pane_title`` refine the answer for
    profiles that use them (the shell; Amp's title spinner).
    """
    tail = screen_tail(profile, screen)
    if not tail:
        return "unknown"
    if any(p.search(tail) for p in profile.waiting_markers):
        return "waiting"
    if any(p.search(tail) for p in profile.busy_markers):
        return "busy"
    if pane_title and any(p.search(pane_title) for p in profile.title_busy_markers):
        return "busy"
    if (
        profile.idle_commands
        and current_command is not None
        and _command_name(current_command) not in profile.idle_commands
    ):
        return "busy"
    if any(p.search(tail) for p in profile.idle_markers):
        return "idle"
    return profile.no_marker_state


__all__ = [
    "AMP", "AIDER", "CLAUDE", "CODEX", "COMMAND_READERS", "COPILOT", "EXTRACTORS", "GEMINI",
    "OPENCODE", "PI", "PROFILES", "QWEN", "RULE", "SCREEN_STATES", "SHELL", "SHELL_COMMANDS",
    "TERMINAL", "AgentKind", "AgentProfile", "Pattern", "ScreenState", "command_name",
    "foreground_profile", "get_profile", "is_command_reader", "is_slash_command", "kind_of",
    "known_kinds", "last_line", "quiet_state", "screen_state", "screen_tail", "submit_keys_for",
]  # fmt: skip
