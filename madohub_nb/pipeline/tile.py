"""Tiles: tmux panes known by a short name, each running one agent.

A tile answers three questions about its pane, always fresh from tmux and
the agent's own files: what is on screen, what state the agent is in, and
what its last response was.
"""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from .. import settings
from ..agents.claude import claude_config_dir, read_session_file
from ..agents.detect import find_agent_process
from ..agents.profiles import (
    AgentProfile,
    foreground_profile,
    get_profile,
    quiet_state,
    screen_state,
)
from ..agents.screen import strip_ansi
from ..errors import TmuxError
from ..io.tmux import PaneInfo, Tmux
from . import extract as extraction

if TYPE_CHECKING:
    from ..io.transcripts import Extraction


@dataclass(frozen=True)
class TypedInput:
    """Text typed into a pane and the absolute row (history + screen) it was typed on."""

    text: str
    row: int | None


class Tile:
    """One named pane. Created by :meth:`Hub.tile`; do not construct directly."""

    def __init__(
        self,
        name: str,
        pane_id: str,
        agent: str,
        tmux: Tmux,
        *,
        session: str,
        created: bool,
        claude_home: Callable[[], str | None] = lambda: None,
        on_state: Callable[[str, str], None] | None = None,
        pane_pid: int | None = None,
        last_output_mono: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.name = name
        self.pane_id = pane_id
        self.agent = agent
        self.session = session
        self.created = created
        self._tmux = tmux
        self._claude_home = claude_home
        self._agent_proc: psutil.Process | None = None
        self._seen_agent = False
        self.last_state = "unknown"
        self._on_state = on_state
        self.pane_pid = pane_pid
        """The pid of the pane's own process (its shell, or the agent started as the pane)."""
        self._last_output_mono = last_output_mono
        self._started_mono = time.monotonic()
        self._active_profile: AgentProfile | None = None
        self.ready_quiet_ms: int | None = None
        """Quiet time before a terminal program reads idle (None: its profile's default)."""
        self.ready_pattern: re.Pattern[str] | None = None
        """What a terminal program's last screen line shows when it is ready (``>>> $``)."""
        self.completion_pattern: re.Pattern[str] | None = None
        """Output that says this tile's turn is over; on-idle routes wait for it, then silence."""
        self.last_input: TypedInput | None = None
        """What was typed into the pane last, and where (for answer_after_input extraction)."""

    @property
    def profile(self) -> AgentProfile:
        return get_profile(self.agent)

    # facts from tmux ----------------------------------------------------
    def pane_info(self) -> PaneInfo | None:
        try:
            return self._tmux.pane_info(self.pane_id)
        except TmuxError:
            return None

    def screen(self, ansi: bool = False) -> str:
        """The visible screen; ANSI codes stripped unless ``ansi=True``. Empty if the pane is gone."""
        try:
            text = self._tmux.capture(self.pane_id, ansi=ansi)
        except TmuxError:
            return ""
        return text if ansi else strip_ansi(text)

    def history(self, lines: int = 200) -> str:
        """Screen plus ``lines`` of scrollback, ANSI stripped (for terminal transforms)."""
        try:
            return strip_ansi(self._tmux.capture(self.pane_id, history_lines=lines))
        except TmuxError:
            return ""

    def agent_process(self) -> psutil.Process | None:
        """The agent's own process (first match breadth-first from the pane's pid), if running."""
        proc = self._running_agent()
        if proc is not None:
            return proc
        info = self.pane_info()
        if info is None or info.dead or not self.profile.process_tokens:
            return None
        found = find_agent_process(info.pid)
        if found is None:
            return None
        _, proc = found
        self._agent_proc = proc
        self._seen_agent = True
        return proc

    def _running_agent(self) -> psutil.Process | None:
        """The agent process found before, if it still runs (no tmux call; pid reuse detected)."""
        proc = self._agent_proc
        if proc is None:
            return None
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except psutil.Error:
            pass
        self._agent_proc = None
        return None

    @property
    def state(self) -> str:
        """``idle`` | ``busy`` | ``waiting`` | ``exited`` | ``unknown``, read fresh."""
        state = self._read_state()
        if state != self.last_state:
            self.last_state = state
            if self._on_state is not None:
                self._on_state(self.name, state)
        return state

    def _read_state(self) -> str:
        profile = self.profile
        # A live agent process means a live pane: then no tmux call is needed but the screen.
        proc = self._running_agent() if profile.process_tokens else None
        if proc is None:
            info = self.pane_info()
            if info is None or info.dead:
                return "exited"
            if not profile.process_tokens:  # the pane's own program: a shell or any program
                return self._program_state(info)
            proc = self.agent_process()
            if proc is None:
                # The agent was running and is gone (the pane fell back to its shell).
                return "exited" if self._seen_agent else "unknown"
        if profile.kind == "claude":
            session = read_session_file(claude_config_dir(proc, self._claude_home()), proc.pid)
            if session is not None and session.status in ("idle", "busy", "waiting"):
                return session.status
        return self._screen_state(profile)

    # programs without markers: terminal tiles, a shell running a REPL or cat ------------
    @property
    def active_profile(self) -> AgentProfile:
        """The profile that applied at the last state read (a shell running python: terminal)."""
        return self._active_profile or self.profile

    def _program_state(self, info: PaneInfo) -> str:
        profile = foreground_profile(self.profile, info.current_command)
        self._active_profile = profile
        return self._screen_state(profile, info.current_command)

    def _screen_state(self, profile: AgentProfile, current_command: str | None = None) -> str:
        """By the profile's screen markers, or, for a program without them, by quiet time."""
        screen = self.screen()
        if profile.ready_quiet_ms is None:
            return screen_state(profile, screen, current_command=current_command)
        last = self._last_output_mono()
        since = max(last, self._started_mono) if last is not None else self._started_mono
        return quiet_state(
            screen,
            quiet_for_ms=(time.monotonic() - since) * 1000,
            ready_quiet_ms=self.ready_quiet_ms
            if self.ready_quiet_ms is not None
            else profile.ready_quiet_ms,
            ready_pattern=self.ready_pattern,
        )

    def note_input(self, text: str) -> None:
        """Remember what is about to be typed and the screen row it starts on."""
        out = self._tmux.run(
            "display-message", "-p", "-t", self.pane_id, "#{history_size} #{cursor_y}", check=False
        ).split()
        row = int(out[0]) + int(out[1]) if len(out) == 2 and all(x.isdigit() for x in out) else None
        self.last_input = TypedInput(text, row)

    def output_since_input(self) -> str | None:
        """The pane's text from the row the last input was typed on, ANSI stripped; None: unknown."""
        typed = self.last_input
        if typed is None or typed.row is None:
            return None
        try:
            size = self._tmux.run("display-message", "-p", "-t", self.pane_id, "#{history_size}")
            start = typed.row - int(size.strip() or 0)
            return strip_ansi(
                self._tmux.run("capture-pane", "-p", "-J", "-t", self.pane_id, "-S", str(start))
            )
        except (TmuxError, ValueError):
            return None

    def last_response(self) -> Extraction | None:
        """The agent's last answer: from its transcript where possible, else from the screen."""
        return extraction.extract(self)

    async def astate(self) -> str:
        return await asyncio.to_thread(lambda: self.state)

    # display ------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"<Tile {self.name!r} agent={self.agent} pane={self.pane_id} state={self.last_state}>"
        )

    def _repr_html_(self) -> str:
        screen = html.escape(self.screen())
        return (
            f"<div><b>{html.escape(self.name)}</b> · {self.agent} · {self.pane_id} · "
            f"<i>{self.last_state}</i><pre style='font-size:11px;max-height:24em;overflow:auto'>"
            f"{screen}</pre></div>"
        )


def tile_options(
    ready_quiet_ms: int | None, ready_pattern: str | None, completion_pattern: str | None
) -> tuple[int | None, re.Pattern[str] | None, re.Pattern[str] | None]:
    """Check ``hub.tile``'s readiness keywords; one-line errors name the parameter."""
    if ready_quiet_ms is not None:
        settings.check_range("ready_quiet_ms", ready_quiet_ms, settings.READY_QUIET_MS_RANGE, " ms")
    return (
        ready_quiet_ms,
        settings.check_regex("ready_pattern", ready_pattern) if ready_pattern is not None else None,
        settings.check_regex("completion_pattern", completion_pattern)
        if completion_pattern is not None
        else None,
    )
