"""Tiles: tmux panes known by a short name, each running one agent.

A tile answers three questions about its pane, always fresh from tmux and
the agent's own files: what is on screen, what state the agent is in, and
what its last response was.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import html
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .. import defaults
from ..agents.detect import AgentProcess, detect_kind, find_agent, foreground_of, is_shell_name
from ..agents.foreground import (
    DEAD_STATES,
    STOPPED_STATES,
    ProcStat,
    Reader,
    StatsReader,
    expected_reader,
)
from ..agents.kinds import ENV_NAMES
from ..agents.kinds.records import AgentPid, RecordRef
from ..agents.profiles import (
    AgentKind,
    AgentProfile,
    foreground_profile,
    get_profile,
    kind_of,
    known_kinds,
    quiet_state,
    screen_state,
)
from ..agents.regex import lazy_compile
from ..agents.screen import (
    ANSWER_HISTORY_LINES,
    answer_after_input,
    strip_ansi,
    terminal_last_response,
)
from ..errors import MadohubValueError, TileError, TmuxError
from ..io.agent_channels.base import Channel
from ..io.agent_records.base import Extraction
from ..io.git import ChangeTracker, Worktree, default_branch
from ..io.hooks.channel import HookEvent
from ..io.machine import Machine, PaneRef, PaneTmux
from ..io.tmux import PaneInfo
from ..model import TileState

T = TypeVar("T")

EXIT_CHECK_S = 0.5
"""How long a new tile's command is watched for exiting at once."""
NAME_RE = lazy_compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}\Z")
ENV_NAME_RE = lazy_compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


class TileHooks:
    """What a tile knows of its agent's own hooks: its token, what they report, who listens.

    Made by the tile registry for a pane the hub started with hooks; events arrive on
    the engine loop from the hub's hook channel (already checked there: this token,
    this pane, a fresh nonce) and go to every listener (a route of this source).
    """

    def __init__(self, token: str, kinds: tuple[str, ...], folder: str | None) -> None:
        self.token = token
        self.kinds = kinds
        """The hook kinds the agent was set up to report (``stop``, ``notification``, ...)."""
        self.folder = folder
        """The hub's private per-tile folder holding the hook files (None: none needed)."""
        self.live = True
        """False once the channel forgot the token (the hub closed)."""
        self.received = 0
        self.last_event: HookEvent | None = None
        self._listeners: list[Callable[[HookEvent], None]] = []

    @property
    def ends_turns(self) -> bool:
        """The agent reports its end of turn (a ``stop`` hook), and the channel listens."""
        return self.live and "stop" in self.kinds

    def subscribe(self, listener: Callable[[HookEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with each event (engine loop); returns the unsubscribe call."""
        self._listeners = [*self._listeners, listener]

        def unsubscribe() -> None:
            self._listeners = [x for x in self._listeners if x is not listener]

        return unsubscribe

    def deliver(self, event: HookEvent) -> None:
        """One accepted event of this tile's token (engine loop)."""
        if event.token != self.token:
            return
        self.received += 1
        self.last_event = event
        for listener in self._listeners:
            listener(event)


def check_new_tile(
    name: object,
    command: object,
    cwd: str | os.PathLike[str] | None,
    env: object,
    remote: bool = False,
) -> str | None:
    """Validate ``hub.tile(...)`` arguments for a new pane; returns the resolved working dir
    (``remote``: a directory on the tile's host, absolute, not checked here)."""
    check_tile_name(name)
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise MadohubValueError(
            f"command must be a non-empty shell command string, got {command!r}"
        )
    if env is not None and not (
        isinstance(env, Mapping)
        and all(
            isinstance(k, str) and isinstance(v, str) and ENV_NAME_RE.fullmatch(k)
            for k, v in env.items()
        )
    ):
        raise MadohubValueError("env must map variable names (letters, digits, '_') to strings")
    if cwd is None:
        return None
    if remote:
        if not str(cwd).startswith(("/", "~")):
            raise MadohubValueError(f"cwd {str(cwd)!r} on a host must be an absolute path")
        return str(cwd)
    path = Path(os.path.expanduser(str(cwd)))
    if not path.is_dir():
        raise MadohubValueError(f"cwd {str(cwd)!r} is not an existing directory")
    return str(path.resolve())


def worktree_branch(name: str, worktree: object) -> str | None:
    """The branch of ``hub.tile(..., worktree=...)``: True → ``madohub/<name>``, a string →
    itself, None/False → no worktree; anything else is a teaching error."""
    if worktree is None or worktree is False:
        return None
    if worktree is True:
        return default_branch(name)
    if isinstance(worktree, str) and worktree.strip():
        return worktree
    raise MadohubValueError(
        f"worktree must be True (branch madohub/{name}), a branch name, or None; got {worktree!r}"
    )


def check_tile_name(name: object) -> str:
    """``name`` if it is a tile's name, whole (a trailing line break is not one)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        spaced = isinstance(name, str) and name.strip() != name
        raise MadohubValueError(
            f"tile name {name!r} is not allowed"
            f"{' (it has a line break or space at an end)' if spaced else ''}; use a letter "
            "then letters, digits, '-' or '_' (at most 40), e.g. 'writer'"
        )
    return name


def pane_reference(pane: object, socket_name: str | None) -> str:
    """``%3``, ``sess:win.pane``, or a ``libtmux.Pane`` (of the hub's tmux server) → a target."""
    if isinstance(pane, str):
        return pane
    pane_id = getattr(pane, "pane_id", None)
    if not isinstance(pane_id, str):
        raise MadohubValueError(
            f"pane must be a pane id like '%3', a target like 'sess:win.pane' or a libtmux.Pane, "
            f"got {pane!r}"
        )
    server = getattr(pane, "server", None)
    theirs = getattr(server, "socket_name", None)
    if theirs != socket_name:
        raise MadohubValueError(
            f"pane {pane_id} belongs to tmux server {theirs!r}, but this hub uses "
            f"{socket_name!r}; make the hub with Hub(socket_name={theirs!r})"
        )
    return pane_id


@dataclass(frozen=True)
class TypedInput:
    """Text typed into a pane and the absolute row (history + screen) it was typed on."""

    text: str
    row: int | None


class Tile:
    """One named pane on a machine. Created by :meth:`Hub.tile`; do not construct directly.

    Everything that depends on where the pane lives (tmux, processes, files) is
    asked of ``machine`` (:class:`~madohub_nb.io.machine.Machine`): this class is
    the same for a pane here and one on a remote host.
    """

    def __init__(
        self,
        name: str,
        pane_id: str,
        agent: str,
        machine: Machine,
        *,
        session: str,
        created: bool,
        claude_home: Callable[[], str | None] = lambda: None,
        on_state: Callable[[str, str], None] | None = None,
        pane_pid: int | None = None,
        redact: Callable[[str], str] | None = None,
        last_output_mono: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.name = name
        self.pane_id = pane_id
        self.agent = agent
        self.session = session
        self.created = created
        self.machine = machine
        """Where the pane lives: this machine or a remote host."""
        self._claude_home = claude_home
        self._agent_proc: AgentProcess | None = None
        self._seen_agent = False
        self._environs: dict[tuple[int, int], dict[str, str]] = {}
        self.last_state: TileState = "unknown"
        self._on_state = on_state
        self.pane_pid = pane_pid
        """The pid of the pane's own process (its shell, or the agent started as the pane)."""
        self._redact = redact or (lambda text: text)
        """Replaces registered secrets (API keys) in what the tile shows."""
        self.error: str | None = None
        """Why the tile's command could not run (it exited at once: status and output)."""
        self.ready: concurrent.futures.Future[Tile] = concurrent.futures.Future()
        """Resolves to the tile once its command survived start-up (or raises TileError)."""

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
        self.hooks: TileHooks | None = None
        """The agent's own hooks, when the hub started the pane with them (``hooks=``)."""
        self.channel: Channel | None = None
        """The agent's native channel (``channel=``): prompts go in through its protocol and
        its turns come back through it; None: typed into the pane."""
        self.channel_ready: concurrent.futures.Future[None] | None = None
        """Done once the channel the hub opens for this new pane attached or failed (None:
        none is opened); a delivery waits for it, so an early prompt is not typed."""
        self.channel_only: str | None = None
        """Why this pane's prompts cannot be typed without its channel (its TUI is a client
        of the channel's server, e.g. ``codex --remote``), or None: typing is the fallback."""
        self.channel_down: str | None = None
        """Why the channel the hub opened for this pane failed or broke, or None."""
        self.last_signal: str | None = None
        """Which evidence the last state read came from (``status``, ``transcript``,
        ``screen``, ``quiet``); None before the first read."""
        self.git_worktree: Worktree | None = None
        """The tile's own git worktree (``worktree=``): path, branch, the commit it left."""
        self.changes = ChangeTracker(machine, self._work_folder)
        """What each turn changed in the tile's git working tree, per route (blocking: git)."""

    @property
    def worktree(self) -> str | None:
        """The path of the tile's own git worktree (``worktree=``), else None."""
        return self.git_worktree.path if self.git_worktree is not None else None

    def _work_folder(self) -> str | None:
        """Where the tile's turns change files: its worktree, else its pane's folder."""
        return self.worktree or self.pane_path()

    @property
    def tmux(self) -> PaneTmux:
        """The tmux server the pane is on (its machine's)."""
        return self.machine.tmux

    @property
    def ref(self) -> PaneRef:
        """Which pane on which machine (pane ids are unique per tmux server only)."""
        return PaneRef(self.machine.name, self.pane_id)

    def claude_home(self) -> str | None:
        """The hub's fallback Claude config directory (``claude_home`` setting)."""
        return self._claude_home()

    @property
    def turn_signal(self) -> str:
        """The strongest end-of-turn evidence this tile gives now: ``hook`` (its agent's
        own hook), ``status`` (a live status file), ``transcript`` (an end-of-turn record),
        ``screen`` (its profile's markers) or ``quiet`` (silence only); ``channel`` first:
        its live native channel reports each turn's end."""
        if self.channel is not None and self.channel.alive:
            return "channel"
        if self.hooks is not None and self.hooks.ends_turns:
            return "hook"
        profile = self.profile
        if profile.writes_status_file:
            return "status"
        if profile.has_transcript:
            return "transcript"
        if profile.ready_quiet_ms is None:
            return "screen"
        return "quiet"

    @property
    def profile(self) -> AgentProfile:
        """The profile of the tile's agent kind: its markers, submit keys and delays."""
        return get_profile(self.agent)

    @property
    def kind(self) -> AgentKind:
        """The tile's agent kind: its profile, its record reader, its launch layers."""
        return kind_of(self.agent)

    # facts from tmux ----------------------------------------------------
    def pane_info(self) -> PaneInfo | None:
        """What tmux says about the pane now (pid, size, command, path); None once it is gone."""
        try:
            return self.tmux.pane_info(self.pane_id)
        except TmuxError:
            return None

    def screen(self, ansi: bool = False) -> str:
        """The visible screen; ANSI codes stripped unless ``ansi=True``. Empty if the pane is gone."""
        try:
            text = self.tmux.capture(self.pane_id, ansi=ansi)
        except TmuxError:
            return ""
        return self._redact(text if ansi else strip_ansi(text))

    def history(self, lines: int = 200) -> str:
        """Screen plus ``lines`` of scrollback, ANSI stripped (for terminal transforms)."""
        try:
            return self._redact(strip_ansi(self.tmux.capture(self.pane_id, history_lines=lines)))
        except TmuxError:
            return ""

    def scrollback(self, lines: int) -> str:
        """Screen plus ``lines`` of scrollback, wrapped lines joined (``-J``), ANSI stripped."""
        try:
            text = self.tmux.run("capture-pane", "-p", "-J", "-t", self.pane_id, "-S", f"-{lines}")
        except TmuxError:
            return ""
        return self._redact(strip_ansi(text))

    # processes on the machine ----------------------------------------------------------
    def _stats(self, *pids: int) -> dict[int, ProcStat | None]:
        """Stats of processes on the tile's machine; a TmuxError when it did not answer (a
        host): that says nothing about the processes, so nothing is concluded from it."""
        return self.machine.stats(pids)

    def agent_process(self) -> AgentProcess | None:
        """The agent's own process (first match among the pane's processes), if running."""
        try:
            proc = self._running_agent()
            if proc is not None:
                return proc
            info = self.pane_info()
            if info is None or info.dead or not self.profile.runs_as_process:
                return None
            return self._discover(info)
        except TmuxError:  # a host that did not answer: not known now
            return None

    def _discover(self, info: PaneInfo) -> AgentProcess | None:
        found = find_agent(self.machine, info.pid, self.agent)
        if found is not None:
            self._agent_proc, self._seen_agent = found, True
        return found

    def _running_agent(self, stat: ProcStat | None = None) -> AgentProcess | None:
        """The agent process found before, if it still runs (no tmux call; pid reuse detected).
        ``stat``: its stats, read already."""
        proc = self._agent_proc
        if proc is None:
            return None
        st = stat if stat is not None else self._stats(proc.pid).get(proc.pid)
        if st is not None and st.start_ticks == proc.start_ticks and st.state not in DEAD_STATES:
            return proc
        self._agent_proc = None
        return None

    def agent_environ(self, proc: AgentPid, names: tuple[str, ...]) -> dict[str, str]:
        """The agent's variables that locate its files (read once per process, once found).

        A read that finds none of them is not kept: a process caught in an exec shows the
        kernel no environment yet (its new name is set before its new environment), and
        a launcher may exec the agent with its variables under the same pid and start."""
        key = (proc.pid, proc.start_ticks)
        if key not in self._environs:
            try:
                env = self.machine.environ(proc.pid, ENV_NAMES)
            except TmuxError:
                return {}
            if not env:
                return {}
            self._environs = {key: env}
        return {k: v for k, v in self._environs[key].items() if k in names}

    def forget_environ(self) -> None:
        """Read the agent's environment again next time: a launcher may exec the agent with
        other variables under the same pid and start time (the demo's stand-ins do)."""
        self._environs = {}

    def _where(self) -> str:
        """Said after a pid in messages: which machine it is on (nothing for this one)."""
        return f" on {self.machine.name}" if self.machine.name is not None else ""

    def reader(self) -> Reader | str:
        """The process that should read what is typed into this pane, or why there is none.

        An agent tile's reader is its agent process; a shell tile's is the shell
        in the terminal's foreground. Delivery checks the reader before each
        line (:func:`madohub_nb.agents.foreground.check_reader`).
        """
        info = self.pane_info()
        if info is None or info.dead:
            return "the pane has exited" if self.machine.reachable else "the host is unreachable"
        try:
            return self._reader(info)
        except TmuxError as exc:  # the host did not answer: no reader can be pinned now
            return f"its host did not answer ({exc})"

    def _reader(self, info: PaneInfo) -> Reader | str:
        where = self._where()
        # This machine's stats are read on the loop (microseconds); another's in a thread.
        read: StatsReader | None = None if self.machine.name is None else self.machine.stats
        if self.profile.executes_input:
            # The user opted in to typing here: the reader is whoever holds the terminal's
            # foreground, a shell or (terminal tiles, a shell running a REPL or cat) a program.
            leader = self._foreground_leader(info.pid)
            shell = leader is not None and is_shell_name(leader.comm)
            programs_too = self.profile.foreground_kind is not None or not shell_profile(self)
            if leader is None or not (shell or programs_too):
                who = f"{leader.comm!r}" if leader is not None else "no process"
                return f"the shell is not the terminal's foreground process ({who} is)"
            what = "the shell" if shell else "the program"
            label = f"{what} {leader.comm!r} (pid {leader.pid}{where})"
            found = expected_reader(
                info.pid, leader.pid, label, read, argv=self.machine.cmdline(leader.pid)
            )
            return found if found is not None else f"{what} has exited"
        proc = self._running_agent() or self._discover(info)  # (a TmuxError: see reader)
        if proc is None:
            return f"no {self.agent} process runs in the terminal's foreground"
        what = f"agent {self.agent!r} (pid {proc.pid}{where})"
        # Its own program decides whether typed text runs as commands (a bash that a
        # profile's process token matched is still a shell): Reader.runs_commands.
        found = expected_reader(info.pid, proc.pid, what, read, argv=self.machine.cmdline(proc.pid))
        return found if found is not None else f"{what} has exited"

    def _foreground_leader(self, pane_pid: int) -> ProcStat | None:
        fg = foreground_of(self._stats(pane_pid).get(pane_pid))
        return self._stats(fg).get(fg) if fg is not None else None

    @property
    def state(self) -> TileState:
        """``idle`` | ``busy`` | ``waiting`` | ``exited`` | ``unknown`` | ``unreachable``, read fresh."""
        state = self._read_state()
        if state != self.last_state:
            self.last_state = state
            if self._on_state is not None:
                self._on_state(self.name, state)
        return state

    def _read_state(self) -> TileState:
        if not self.machine.reachable:
            return "unreachable"
        try:
            return self._read_machine_state()
        except TmuxError:  # a read the host did not answer: not an exit (issue 22.11)
            return "unreachable"

    def _read_machine_state(self) -> TileState:
        profile = self.profile
        # A live agent process means a live pane: then no tmux call is needed but the screen,
        # and its one stats read (one ssh read on a host) serves the foreground check too.
        cached = self._agent_proc if profile.runs_as_process else None
        st = self._stats(cached.pid).get(cached.pid) if cached is not None else None
        proc = self._running_agent(st) if cached is not None else None
        if proc is None:
            info = self.pane_info()
            if info is None or info.dead:
                return "exited" if self.machine.reachable else "unreachable"
            if not profile.runs_as_process:  # the pane's own program: a shell or any program
                return self._program_state(info)
            proc = self._discover(info)
            if proc is None:
                # The agent was running and is gone (the pane fell back to its shell).
                return "exited" if self._seen_agent else "unknown"
            st = self._stats(proc.pid).get(proc.pid)
        if st is None or st.state in STOPPED_STATES or st.pgrp != st.tpgid:
            # Stopped (Ctrl-Z) or sent to the background: its status file still says what it
            # said before, but typed text would go to whoever is in the foreground now.
            return "unknown"
        live_status = self.kind.live_status
        if profile.writes_status_file and live_status is not None:
            status = live_status(self, proc)
            if status is not None:
                self.last_signal = "status"
                return status  # type: ignore[return-value]  # idle, busy or waiting
        return self._screen_state(profile)

    # the agent's own files on its machine ----------------------------------------------
    def record(self) -> RecordRef | None:
        """The agent's own record of its conversation (a path on its machine, and what
        narrows it to the agent's session), as its kind finds it; None: none found."""
        reader = self.kind.record
        proc = self.agent_process() if reader is not None else None
        if reader is None or proc is None:
            return None
        try:
            return reader.locate(self, proc)
        except TmuxError:  # a host that stopped answering: no record now
            return None

    def transcript_path(self) -> str | None:
        """Where the agent keeps its transcript (a path on its machine), if it can be found."""
        found = self.record()
        return found.path if found is not None else None

    def pane_path(self) -> str | None:
        """The pane's working directory as tmux reports it (its foreground process's)."""
        info = self.pane_info()
        return info.current_path if info is not None and info.current_path else None

    # programs without markers: terminal tiles, a shell running a REPL or cat ------------
    @property
    def active_profile(self) -> AgentProfile:
        """The profile that applied at the last state read (a shell running python: terminal)."""
        return self._active_profile or self.profile

    def _program_state(self, info: PaneInfo) -> TileState:
        profile = foreground_profile(self.profile, info.current_command)
        if profile is self.profile and profile.foreground_kind and self._shell_runs_program(info):
            profile = get_profile(profile.foreground_kind)  # ``sh -c 'cat > f'``: no prompt
        self._active_profile = profile
        return self._screen_state(profile, info.current_command)

    def _shell_runs_program(self, info: PaneInfo) -> bool:
        """The foreground shell runs a program in the shell's own process group: a ``sh -c``
        (how tmux starts a pane's command) or a script, which never shows a prompt.

        An interactive shell runs each command in a group of its own (and tmux names
        that program); a shell without job control keeps its children in its group.
        (On a host the pane's processes read are its own and its foreground leader's
        only, so this never holds there.)
        """
        try:
            fg = foreground_of(self._stats(info.pid).get(info.pid))
            procs = self.machine.pane_processes(fg) if fg is not None else []
        except TmuxError:
            return False
        return any(st.pid != fg and st.pgrp == fg and not is_shell_name(st.comm) for st in procs)

    def _screen_state(self, profile: AgentProfile, current_command: str | None = None) -> TileState:
        """By the profile's screen markers, or, for a program without them, by quiet time."""
        screen = self.screen()
        if profile.ready_quiet_ms is None:
            title = ""
            if profile.title_busy_markers:  # Amp: a spinner in the pane title
                info = self.pane_info()
                title = info.title if info is not None else ""
            state = screen_state(profile, screen, current_command=current_command, pane_title=title)
            self.last_signal = "screen"
            if state == "unknown" and profile.has_transcript and self.turn_finished() is True:
                # No marker on screen: the agent's own end-of-turn record decides
                # (Claude's turn_duration, Codex's task_complete).
                self.last_signal = "transcript"
                return "idle"
            return state
        self.last_signal = "quiet"
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

    def turn_finished(self) -> bool | None:
        """Does the agent's transcript end with a finished turn? None: no transcript found."""
        reader, rec = self.kind.record, self.record()
        if reader is None or rec is None:
            return None
        return self._parse(rec.path, lambda p: reader.turn_finished(p, rec))

    def transcript_response(self) -> Extraction | None:
        """The last answer in the agent's transcript, rollout or record, if one can be found."""
        reader, rec = self.kind.record, self.record()
        if reader is None or rec is None:
            return None
        found = self._parse(rec.path, lambda p: reader.read(p, rec))
        if found is not None and self.machine.name is not None:  # (parsed from a local copy)
            return dataclasses.replace(found, path=Path(rec.path))
        return found

    def _parse(self, path: str, parse: Callable[[Path], T]) -> T | None:
        try:
            return self.machine.with_file(path, parse)
        except TmuxError:
            return None

    def detect_kind(self, info: PaneInfo) -> str:
        """Which agent runs in the pane now (its processes; see agents/detect.py)."""
        try:
            return detect_kind(self.machine, info.pid, info.current_command)
        except TmuxError:
            return "unknown"

    def note_input(self, text: str) -> None:
        """Remember what is about to be typed and the screen row it starts on."""
        out = self.tmux.run(
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
            size = self.tmux.run("display-message", "-p", "-t", self.pane_id, "#{history_size}")
            start = typed.row - int(size.strip() or 0)
            return strip_ansi(
                self.tmux.run("capture-pane", "-p", "-J", "-t", self.pane_id, "-S", str(start))
            )
        except (TmuxError, ValueError):
            return None

    def last_response(self, terminal_only: bool = False) -> Extraction | None:
        """The agent's last answer: its transcript or record first (unless ``terminal_only``),
        then the screen."""
        if not terminal_only and self.profile.has_transcript:
            found = self.transcript_response()  # (on a host: a bounded tail over ssh)
            if found is not None:
                return found
        return self.screen_answer()

    def _terminal_answer(self) -> str:
        """What the screen shows as the answer, by the rule of the profile that applies now."""
        profile = self.active_profile
        typed = self.last_input
        if profile.answer_after_input and typed is not None:
            since = self.output_since_input()
            found = answer_after_input(since, typed.text, self.ready_pattern) if since else None
            if found is None:  # scrolled or trimmed: the last echo of the input anywhere
                history = self.history(ANSWER_HISTORY_LINES)
                found = answer_after_input(history, typed.text, self.ready_pattern, last=True)
            if found is not None:
                return found
        if profile.answer_in_scrollback:
            # A long answer scrolled off: the last answer in the scrollback holds all of it.
            history = self.scrollback(ANSWER_HISTORY_LINES)
            found = terminal_last_response(history, profile, max_lines=ANSWER_HISTORY_LINES)
            if found:
                return found
        return terminal_last_response(self.screen(), profile)

    def screen_answer(self) -> Extraction | None:
        """The last answer as shown on screen, without ANSI codes and TUI chrome."""
        import hashlib

        text = self._terminal_answer().strip()
        if not text:
            return None
        key = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
        return Extraction(text=text, method="terminal", path=None, message_id=f"screen:{key}")

    async def astate(self) -> TileState:
        """:attr:`state`, read in a worker thread so the caller's event loop never waits on it."""
        return await asyncio.to_thread(lambda: self.state)

    # display ------------------------------------------------------------
    def __repr__(self) -> str:
        host = f" host={self.machine.name}" if self.machine.name is not None else ""
        return (
            f"<Tile {self.name!r} agent={self.agent}{host} pane={self.pane_id} "
            f"state={self.last_state}>"
        )

    html_view: ClassVar[Callable[[Tile], str] | None] = None
    """Draws a tile for Jupyter; attached by the notebook layer (madohub_nb.notebook.display,
    with madohub_nb.render's), so the tile itself imports no HTML."""

    def _repr_html_(self) -> str:
        draw = Tile.html_view
        return draw(self) if draw is not None else f"<pre>{html.escape(repr(self))}</pre>"

    def exit_note(self) -> str:
        """`` (why it exited)`` when the tile's command failed at start-up, else ``""``."""
        return f" ({self.error})" if self.error else ""


async def watch_start(tile: Tile, command: str | None, *, detect: bool) -> Tile:
    """Watch a new tile's command for :data:`EXIT_CHECK_S`; then, if asked, detect its agent.

    A command that exits at once is an error the user must see: its exit status
    and last lines of output go into ``tile.error`` and the raised ``TileError``,
    and any round aimed at the tile says the same.
    """
    deadline = time.monotonic() + EXIT_CHECK_S
    while time.monotonic() < deadline:
        info = await asyncio.to_thread(tile.pane_info)
        if info is None:  # killed from outside (kill-pane, the server died): not its command
            raise TileError(f"the pane of tile {tile.name!r} was closed while it started")
        if info.dead:
            tile.error = await _exit_report(tile, info, command)
            tile.last_state = "exited"
            raise TileError(tile.error)
        await asyncio.sleep(0.05)
    if detect:
        info = await asyncio.to_thread(tile.pane_info)
        if info is not None:
            found = await asyncio.to_thread(tile.detect_kind, info)
            if found in known_kinds():
                tile.agent = found
    return tile


EXIT_STATUS_WAIT_S = 6.0
"""How long a start-up failure's report waits for tmux to record the exit status."""
EXIT_STATUS_NUDGE_S = 0.4
"""How long a dead pane may lack its exit status before the tmux server is told to reap."""


def _nudge_reaper(tmux: PaneTmux) -> None:
    """Make the tmux server reap its exited children (a SIGCHLD to itself, ``#{pid}``)."""
    tmux.run("run-shell", "-b", "kill -s CHLD #{pid}", check=False)


async def _exit_report(tile: Tile, info: PaneInfo, command: str | None) -> str:
    # tmux marks the pane dead at the pty's EOF and records the exit status only when it
    # reaps the child. tmux 3.3a under load can miss that SIGCHLD: the shell stayed a zombie,
    # unreaped, for longer than 6 s (seen in CI, and with six such tests at once here). A
    # SIGCHLD sent to the server (by itself, with run-shell: local or on a host) makes it
    # run its reaping loop again.
    deadline = time.monotonic() + EXIT_STATUS_WAIT_S
    nudge_at = time.monotonic() + EXIT_STATUS_NUDGE_S
    while time.monotonic() < deadline:
        if info.dead_status is not None:
            break
        if time.monotonic() >= nudge_at:
            await asyncio.to_thread(_nudge_reaper, tile.tmux)
            nudge_at = time.monotonic() + EXIT_STATUS_NUDGE_S
        await asyncio.sleep(0.03)
        fresh = await asyncio.to_thread(tile.pane_info)
        info = fresh or info
    try:
        screen = await asyncio.to_thread(tile.tmux.capture, tile.pane_id, False, 50)
    except TmuxError:
        screen = ""
    await asyncio.to_thread(tile.tmux.kill_pane, tile.pane_id)
    status = info.dead_status
    if status is None:  # tmux also writes it into the pane: "Pane is dead (status 3, …)"
        found = re.search(r"Pane is dead \(status (\d+)", screen)
        status = int(found.group(1)) if found else None
    printed = [ln for ln in screen.splitlines() if ln.strip() and not ln.startswith("Pane is dead")]
    tail = " | ".join(printed[-3:])
    return (
        f"command {command!r} for tile {tile.name!r} exited at once"
        + (f" with status {status}" if status is not None else "")
        + (f"; it printed: {tail}" if tail else "")
    )


def shell_profile(tile: Tile) -> bool:
    """Is the tile's own profile a plain shell's (a prompt, idle commands), not any program?"""
    return bool(tile.profile.idle_commands)


def tile_options(
    ready_quiet_ms: int | None, ready_pattern: str | None, completion_pattern: str | None
) -> tuple[int | None, re.Pattern[str] | None, re.Pattern[str] | None]:
    """Check ``hub.tile``'s readiness keywords; one-line errors name the parameter."""
    if ready_quiet_ms is not None:
        defaults.check_range("ready_quiet_ms", ready_quiet_ms, defaults.READY_QUIET_MS_RANGE, " ms")
    return (
        ready_quiet_ms,
        defaults.check_regex("ready_pattern", ready_pattern) if ready_pattern is not None else None,
        defaults.check_regex("completion_pattern", completion_pattern)
        if completion_pattern is not None
        else None,
    )


@dataclass(frozen=True)
class McpLimits:
    """One MCP caller's loop protection: calls per pair within a conversation and the least
    ms between two (None: the hub's ``mcp_max_rounds`` / ``mcp_cooldown_ms``)."""

    max_rounds: int | None = None
    cooldown_ms: int | None = None


def check_mcp_limits(reach: bool | list[str], max_rounds: Any, cooldown_ms: Any) -> McpLimits:
    """``mcp_max_rounds=`` / ``mcp_cooldown_ms=`` of ``hub.tile``: None (the hub's setting)
    or a value in the setting's range; only with ``mcp=``."""
    if reach is False and (max_rounds is not None or cooldown_ms is not None):
        raise MadohubValueError(
            "mcp_max_rounds= and mcp_cooldown_ms= limit the MCP calls of a tile started with "
            "mcp=; give mcp=True (or a list of names) too, or leave them out"
        )
    rounds, cooldown = None, None
    if max_rounds is not None:
        rounds = defaults.check_range("mcp_max_rounds", max_rounds, defaults.MAX_ROUNDS_RANGE)
    if cooldown_ms is not None:
        cooldown = defaults.check_range(
            "mcp_cooldown_ms", cooldown_ms, defaults.COOLDOWN_MS_RANGE, " ms"
        )
    return McpLimits(rounds, cooldown)


def check_mcp_option(mcp: object) -> bool | list[str]:
    """``mcp=``: False/None (off), True (every agent tile) or a list of tile names."""
    if mcp is None or mcp is False:
        return False
    if mcp is True:
        return True
    if isinstance(mcp, (list, tuple)) and mcp and all(isinstance(n, str) and n for n in mcp):
        return list(mcp)
    raise MadohubValueError(
        f"mcp must be True (reach every agent tile), a non-empty list of tile names "
        f"(e.g. ['reviewer']) or False, got {mcp!r}"
    )
