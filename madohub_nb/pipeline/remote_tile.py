"""Tiles on a remote host: the same questions, answered over ssh with bounded reads.

The pane is on the host's tmux (commands go over its control connection). What
a local tile reads from this machine's ``/proc`` and files, a remote tile reads
on the host: ``/proc/<pid>/stat`` of several processes in one ssh call (the
foreground checks), a process's ``cmdline`` and two variables of its
``environ`` (its config dir), Claude's ``sessions/<pid>.json`` (``head -c``),
the rollout Codex holds open (``readlink`` of its process tree's fds) and the
last megabyte of the transcript or rollout (``tail -c``), parsed here. While the
host cannot be reached the tile reads ``unreachable``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..agents.claude import is_plain_session_id, parse_session_file
from ..agents.codex import ROLLOUT_GLOB
from ..agents.detect import is_shell_name
from ..agents.foreground import STOPPED_STATES, ProcStat, StatsReader
from ..agents.profiles import PROFILES
from ..errors import TmuxError
from ..io.remote import SshHost
from ..io.tmux import PaneInfo
from ..io.transcripts import Extraction, read_last_response, turn_finished
from ..model import TileState
from .tile import Tile

_INTERPRETERS = ("node", "nodejs", "bun", "deno", "python", "python3", "ruby", "perl")


@dataclass(frozen=True)
class RemoteProcess:
    """A process on the host, pinned by its start time (what ``psutil.Process`` is locally)."""

    pid: int
    start_ticks: int
    comm: str


def _token(token: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![a-z0-9_]){re.escape(token)}(?![a-z_])")


def names_of(comm: str, argv: list[str]) -> list[str]:
    """Lower-cased names a process goes by (as agents/detect.py's ``process_names``)."""
    names = [comm.lower()]
    if argv:
        first = os.path.basename(argv[0]).lower()
        names.append(first)
        if re.sub(r"[\d.]+$", "", first) in _INTERPRETERS and len(argv) > 1:
            names.append(os.path.basename(argv[1]).lower())
    return names


class RemoteTile(Tile):
    """A pane on a remote host. Made by ``hub.tile(name, host=...)``."""

    def __init__(
        self, *args: Any, host: SshHost, reachable: Callable[[], bool], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.host = host
        self._reachable = reachable
        self._remote_agent: RemoteProcess | None = None
        self._config_dirs: dict[tuple[int, int], str | None] = {}

    @property
    def host_name(self) -> str:
        return self.host.host

    # processes on the host --------------------------------------------------------------
    def _stats(self, *pids: int) -> dict[int, ProcStat | None]:
        try:
            return self.host.read_stats(pids)
        except TmuxError:
            return dict.fromkeys(pids)

    def _kind_of(self, st: ProcStat) -> str | None:
        names = names_of(st.comm, self.host.read_cmdline(st.pid))
        for profile in PROFILES.values():
            for token in profile.process_tokens:
                if any(_token(token).search(n) for n in names):
                    return profile.kind
        return None

    def _find_agent(self, info: PaneInfo, kind: str | None) -> tuple[str, RemoteProcess] | None:
        """The agent among the pane's process and its terminal's foreground group leader."""
        pane = self._stats(info.pid).get(info.pid)
        if pane is None:
            return None
        candidates = [pane]
        if pane.tpgid > 0 and pane.tpgid != pane.pid:
            leader = self._stats(pane.tpgid).get(pane.tpgid)
            if leader is not None:
                candidates.append(leader)
        for st in candidates:
            found = self._kind_of(st)
            if found is not None and (kind is None or found == kind):
                if st.pgrp == pane.tpgid or pane.tpgid <= 0:
                    return found, RemoteProcess(st.pid, st.start_ticks, st.comm)
        return None

    def detect_kind(self, info: PaneInfo) -> str:
        found = self._find_agent(info, None)
        if found is not None:
            return found[0]
        return "shell" if is_shell_name(info.current_command) else "unknown"

    def agent_process(self) -> Any:
        """The agent's process on the host (a :class:`RemoteProcess`), if running."""
        proc = self._running_remote()
        if proc is not None:
            return proc
        info = self.pane_info()
        if info is None or info.dead or not self.profile.runs_as_process:
            return None
        found = self._find_agent(info, self.agent)
        if found is None:
            return None
        self._remote_agent, self._seen_agent = found[1], True
        return found[1]

    def _running_remote(self, stat: ProcStat | None = None) -> RemoteProcess | None:
        proc = self._remote_agent
        if proc is None:
            return None
        st = stat if stat is not None else self._stats(proc.pid).get(proc.pid)
        if st is not None and st.start_ticks == proc.start_ticks and st.state not in "ZXx":
            return proc
        self._remote_agent = None
        return None

    def _pane_gone(self) -> str:
        return "the pane has exited" if self._reachable() else "the host is unreachable"

    def _where(self) -> str:
        return f" on {self.host_name}"

    def _stats_reader(self) -> StatsReader:
        return self._reader_stats

    def _argv(self, pid: int) -> list[str]:
        return self.host.read_cmdline(pid)

    def _foreground_leader(self, pane_pid: int) -> ProcStat | None:
        pane = self._stats(pane_pid).get(pane_pid)
        fg = pane.tpgid if pane is not None and pane.tty_nr and pane.tpgid > 0 else None
        return self._stats(fg).get(fg) if fg is not None else None

    def _reading_agent(self) -> Any:
        return self.agent_process()

    def _reader_stats(self, pids: Any) -> dict[int, ProcStat | None]:
        return self.host.read_stats(pids)  # a TmuxError here stops the typing (host gone)

    # state -----------------------------------------------------------------------------
    def _read_state(self) -> TileState:
        if not self._reachable():
            return "unreachable"
        profile = self.profile
        info = self.pane_info()
        if info is None or info.dead:
            return "exited" if self._reachable() else "unreachable"
        if not profile.runs_as_process:
            return self._program_state(info)
        cached = self._remote_agent
        stats = self._stats(*([cached.pid] if cached else []), info.pid)
        proc = self._running_remote(stats.get(cached.pid)) if cached else None
        if proc is None:
            found = self._find_agent(info, self.agent)
            if found is None:
                return "exited" if self._seen_agent else "unknown"
            proc = self._remote_agent = found[1]
            self._seen_agent = True
            stats = self._stats(proc.pid)
        st = stats.get(proc.pid)
        if st is None or st.state in STOPPED_STATES or st.pgrp != st.tpgid:
            return "unknown"
        if profile.writes_status_file:
            session = self._session(proc)
            if session is not None and session.status in ("idle", "busy", "waiting"):
                return session.status
        return self._screen_state(profile)

    # the agent's files on the host ---------------------------------------------------
    def _config_dir(self, proc: RemoteProcess) -> str | None:
        key = (proc.pid, proc.start_ticks)
        if key not in self._config_dirs:
            env = self.host.read_environ(proc.pid, ("CLAUDE_CONFIG_DIR", "HOME"))
            if env.get("CLAUDE_CONFIG_DIR"):
                found: str | None = env["CLAUDE_CONFIG_DIR"]
            elif env.get("HOME"):
                found = str(PurePosixPath(env["HOME"]) / ".claude")
            else:
                found = self.claude_home()
            self._config_dirs = {key: found}
        return self._config_dirs[key]

    def _session(self, proc: RemoteProcess) -> Any:
        config = self._config_dir(proc)
        if config is None:
            return None
        path = f"{config}/sessions/{proc.pid}.json"
        return parse_session_file(self.host.read_head(path), Path(path), proc.pid)

    def _transcript_tail(self) -> tuple[str, bytes] | None:
        """(remote path, its last bytes as whole lines) of the agent's transcript, or None."""
        proc: RemoteProcess | None = self.agent_process()
        if proc is None:
            return None
        if self.profile.extractor == "rollout":
            pattern = self._rollout_path(proc)
        elif self.profile.extractor == "jsonl":
            pattern = self._claude_transcript_glob(proc)
        else:
            return None
        got = self.host.read_tail(pattern) if pattern is not None else None
        if got is None:
            return None
        path, data, whole = got
        if not whole:
            data = data.partition(b"\n")[2]  # the first line is cut: drop it
        return path, data

    def _claude_transcript_glob(self, proc: RemoteProcess) -> str | None:
        """``<config>/projects/*/<sessionId>.jsonl``, quoted for the host's shell."""
        session = self._session(proc)
        config = self._config_dir(proc)
        if session is None or config is None or not is_plain_session_id(session.session_id):
            return None
        return f"{shlex.quote(config + '/projects')}/*/{shlex.quote(session.session_id + '.jsonl')}"

    def _rollout_path(self, proc: RemoteProcess) -> str | None:
        """The ``rollout-*.jsonl`` Codex (or a descendant: the native child of its ``node``)
        holds open, quoted; found by one ``readlink`` read of the tree's fds on the host.

        Several open: the newest by name (a rollout's name starts with its start time).
        None open (no prompt yet): no rollout; the screen answers. The local fallback, the
        newest rollout of the cwd, would list ``$CODEX_HOME/sessions`` and read every
        candidate's first line: no bounded read, so it is not done on a host.
        """
        try:
            found = self.host.read_open_files([proc.pid], f"*/{ROLLOUT_GLOB}")
        except TmuxError:
            return None
        paths = sorted(
            path for _, path in found if fnmatch.fnmatch(PurePosixPath(path).name, ROLLOUT_GLOB)
        )
        return shlex.quote(paths[-1]) if paths else None

    def _with_tail(self, parse: Callable[[Path], Any]) -> tuple[str, Any] | None:
        got = self._transcript_tail()
        if got is None:
            return None
        remote_path, data = got
        fd, name = tempfile.mkstemp(prefix="madohub-tail-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return remote_path, parse(Path(name))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)

    def turn_finished(self) -> bool | None:
        got = self._with_tail(turn_finished)
        return got[1] if got is not None else None

    def transcript_response(self) -> Extraction | None:
        got = self._with_tail(lambda p: read_last_response(p, usage=True))
        if got is None or got[1] is None:
            return None
        return dataclasses.replace(got[1], path=PurePosixPath(got[0]))

    def __repr__(self) -> str:
        return (
            f"<Tile {self.name!r} agent={self.agent} host={self.host_name} pane={self.pane_id} "
            f"state={self.last_state}>"
        )
