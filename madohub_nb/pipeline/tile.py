"""Tiles: tmux panes known by a short name, each running one agent.

A tile answers three questions about its pane, always fresh from tmux and
the agent's own files: what is on screen, what state the agent is in, and
what its last response was.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from typing import TYPE_CHECKING

import psutil

from ..agents.claude import claude_config_dir, read_session_file
from ..agents.detect import find_agent_process, is_shell_name
from ..agents.foreground import Reader, expected_reader, foreground_pgrp, read_stat
from ..agents.profiles import AgentProfile, get_profile, screen_state
from ..agents.screen import strip_ansi
from ..errors import TmuxError
from ..io.tmux import PaneInfo, Tmux
from . import extract as extraction

if TYPE_CHECKING:
    from ..io.transcripts import Extraction


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
        redact: Callable[[str], str] | None = None,
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
        self._redact = redact or (lambda text: text)
        """Replaces registered secrets (API keys) in what the tile shows."""

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
        return self._redact(text if ansi else strip_ansi(text))

    def history(self, lines: int = 200) -> str:
        """Screen plus ``lines`` of scrollback, ANSI stripped (for terminal transforms)."""
        try:
            return self._redact(strip_ansi(self._tmux.capture(self.pane_id, history_lines=lines)))
        except TmuxError:
            return ""

    def agent_process(self) -> psutil.Process | None:
        """The agent's own process (first match breadth-first from the pane's pid), if running."""
        proc = self._running_agent()
        if proc is not None:
            return proc
        info = self.pane_info()
        if info is None or info.dead or self.agent == "shell":
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

    def reader(self) -> Reader | str:
        """The process that should read what is typed into this pane, or why there is none.

        An agent tile's reader is its agent process; a shell tile's is the shell
        in the terminal's foreground. Delivery checks the reader before each
        line (:func:`madohub_nb.agents.foreground.check_reader`).
        """
        info = self.pane_info()
        if info is None or info.dead:
            return "the pane has exited"
        if self.profile.executes_input:
            fg = foreground_pgrp(info.pid)
            leader = read_stat(fg) if fg is not None else None
            if leader is None or not is_shell_name(leader.comm):
                who = f"{leader.comm!r}" if leader is not None else "no process"
                return f"the shell is not the terminal's foreground process ({who} is)"
            found = expected_reader(
                info.pid, leader.pid, f"the shell {leader.comm!r} (pid {leader.pid})"
            )
            return found if found is not None else "the shell has exited"
        proc = self._running_agent() or self.agent_process()
        if proc is None:
            return f"no {self.agent} process runs in the terminal's foreground"
        found = expected_reader(info.pid, proc.pid, f"agent {self.agent!r} (pid {proc.pid})")
        return found if found is not None else f"agent {self.agent!r} (pid {proc.pid}) has exited"

    def _in_foreground(self, proc: psutil.Process) -> bool:
        """True when ``proc`` runs (not stopped) in its terminal's foreground process group."""
        st = read_stat(proc.pid)
        return st is not None and st.state not in "Tt" and st.pgrp == st.tpgid

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
        proc = self._running_agent() if self.agent != "shell" else None
        if proc is None:
            info = self.pane_info()
            if info is None or info.dead:
                return "exited"
            if self.agent == "shell":
                return screen_state(profile, self.screen(), current_command=info.current_command)
            proc = self.agent_process()
            if proc is None:
                # The agent was running and is gone (the pane fell back to its shell).
                return "exited" if self._seen_agent else "unknown"
        if not self._in_foreground(proc):
            # Stopped (Ctrl-Z) or sent to the background: its status file still says what it
            # said before, but typed text would go to whoever is in the foreground now.
            return "unknown"
        if profile.kind == "claude":
            session = read_session_file(claude_config_dir(proc, self._claude_home()), proc.pid)
            if session is not None and session.status in ("idle", "busy", "waiting"):
                return session.status
        return screen_state(profile, self.screen())

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
