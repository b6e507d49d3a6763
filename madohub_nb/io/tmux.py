"""The tmux adapter: every tmux command the toolkit runs goes through here.

Two channels:
- commands (``capture-pane``, ``send-keys``, ``new-window`` …) run as short
  ``tmux -L <socket>`` client processes, synchronously or in a worker thread;
- output is *pushed*: one control-mode client (``tmux -C attach``) per tmux
  session streams ``%output`` events for every pane in it, so watching idle
  panes costs nothing and silence is measured from the bytes themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import MadohubValueError, TmuxError
from ..settings import SECRET_ENV_VARS

PANE_ID_RE = re.compile(r"^%\d+$")
SOCKET_NAME_RE = re.compile(r"^[A-Za-z0-9_.@+-]{1,100}$")
SYNCHRONIZED_REPLY = "madohub-refused-synchronized-panes"
"""What a guarded send prints instead of typing when the window has synchronize-panes on."""
_PLAIN_KEY_RE = re.compile(r"^[A-Za-z0-9-]+$")
TARGET_RE = re.compile(r"^[^:\s]+(:[^.\s]*(\.\d+)?)?$")

_PANE_FORMAT = "\t".join(
    [
        "#{pane_id}",
        "#{pane_pid}",
        "#{pane_dead}",
        "#{pane_current_command}",
        "#{session_name}",
        "#{pane_in_mode}",
        "#{pane_width}",
        "#{pane_height}",
        "#{pane_current_path}",
        "#{pane_dead_status}",
    ]
)


@dataclass(frozen=True)
class PaneInfo:
    """What tmux says about one pane right now."""

    pane_id: str
    pid: int
    dead: bool
    current_command: str
    session: str
    in_mode: bool
    width: int
    height: int
    current_path: str
    dead_status: int | None


def _parse_pane_info(line: str) -> PaneInfo | None:
    parts = line.split("\t")
    if len(parts) != 10 or not parts[1].isdigit():
        return None
    return PaneInfo(
        pane_id=parts[0],
        pid=int(parts[1]),
        dead=parts[2] == "1",
        current_command=parts[3],
        session=parts[4],
        in_mode=parts[5] == "1",
        width=int(parts[6] or 0),
        height=int(parts[7] or 0),
        current_path=parts[8],
        dead_status=int(parts[9]) if parts[9].lstrip("-").isdigit() else None,
    )


class Tmux:
    """One tmux server, addressed by socket name (``tmux -L``); None is the default server."""

    def __init__(self, socket_name: str | None = None) -> None:
        self.socket_name = check_socket_name(socket_name)
        if shutil.which("tmux") is None:
            raise TmuxError("tmux is not installed; install it (e.g. `apt-get install tmux`)")

    def argv(self, *args: str) -> list[str]:
        """The full command line for a tmux command on this server."""
        base = ["tmux"]
        if self.socket_name:
            base += ["-L", self.socket_name]
        return [*base, *args]

    def run(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """Run one tmux command and return its stdout; raise TmuxError when it fails."""
        try:
            proc = subprocess.run(
                self.argv(*args),
                env=client_environment(),
                input=input,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=15,
            )
        except subprocess.TimeoutExpired as exc:
            raise TmuxError(f"tmux {args[0]} did not answer within 15 s") from exc
        if check and proc.returncode != 0:
            raise TmuxError(
                f"tmux {' '.join(args[:3])} failed: {proc.stderr.strip() or proc.returncode}"
            )
        return proc.stdout

    async def arun(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """:meth:`run` in a worker thread, so the event loop never waits on tmux."""
        return await asyncio.to_thread(self.run, *args, input=input, check=check)

    # server and sessions ------------------------------------------------
    def server_pid(self) -> int | None:
        out = self.run("display-message", "-p", "#{pid}", check=False).strip()
        return int(out) if out.isdigit() else None

    def has_session(self, name: str) -> bool:
        proc = subprocess.run(
            self.argv("has-session", "-t", f"={name}"),
            capture_output=True,
            env=client_environment(),
        )
        return proc.returncode == 0

    def new_pane(
        self,
        session: str,
        command: str | None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        window_name: str | None = None,
        width: int = 200,
        height: int = 50,
    ) -> str:
        """Start ``command`` in a new window of ``session`` (created if needed); return its pane id.

        Each tile gets a window of its own so that panes keep a stable size.
        """
        opts: list[str] = ["-P", "-F", "#{pane_id}"]
        if cwd:
            opts += ["-c", cwd]
        for key, value in (env or {}).items():
            opts += ["-e", f"{key}={value}"]
        if window_name:
            opts += ["-n", window_name]
        cmd = [command] if command else []
        if not self.has_session(session):
            # The options go in the same tmux call, so that they apply before a command that
            # exits at once is reaped: its pane then stays, dead, with its exit status.
            out = self.run(
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                str(width),
                "-y",
                str(height),
                *opts,
                *cmd,
                ";",
                "set-option",
                "-t",
                session,
                "remain-on-exit",
                "on",
                ";",
                # remain-on-exit is a window option: later windows get it from this hook,
                # applied before a command that exits at once is reaped (tmux 3.3a).
                "set-hook",
                "-t",
                session,
                "after-new-window",
                "set-option -w remain-on-exit on",
                ";",
                "set-option",
                "-t",
                session,
                "window-size",
                "manual",
                ";",
                "set-option",
                "-t",
                session,
                "status",
                "off",
                ";",
                "set-option",
                "-g",
                "focus-events",
                "on",
            )
            return out.strip()
        out = self.run("new-window", "-d", "-t", f"{session}:", *opts, *cmd)
        pane_id = out.strip()
        self.run("resize-window", "-t", pane_id, "-x", str(width), "-y", str(height), check=False)
        return pane_id

    def kill_session(self, name: str) -> None:
        self.run("kill-session", "-t", f"={name}", check=False)

    def kill_pane(self, pane_id: str) -> None:
        self.run("kill-pane", "-t", pane_id, check=False)

    # panes --------------------------------------------------------------
    def pane_info(self, target: str) -> PaneInfo | None:
        """Facts about a pane (by ``%N`` id or ``session:window.pane`` target); None if gone."""
        out = self.run("display-message", "-p", "-t", target, _PANE_FORMAT, check=False)
        line = out.rstrip("\r\n")
        if not line.strip():
            return None
        info = _parse_pane_info(line)
        if info is None or (PANE_ID_RE.match(target) and info.pane_id != target):
            # display-message falls back to the current pane for unknown ids.
            return None
        return info

    def capture(self, pane_id: str, ansi: bool = False, history_lines: int = 0) -> str:
        """The pane's visible screen (plus ``history_lines`` of scrollback)."""
        args = ["capture-pane", "-p", "-J", "-t", pane_id]
        if ansi:
            args.append("-e")
        if history_lines:
            args += ["-S", str(-history_lines)]
        return self.run(*args)

    def cancel_copy_mode(self, pane_id: str) -> None:
        self.run("send-keys", "-t", pane_id, "-X", "cancel", check=False)

    def paste(self, pane_id: str, text: str, bracketed: bool = True) -> bool:
        """Paste ``text`` through a uniquely named buffer (buffers are server-wide).

        Like :meth:`send_guarded`, nothing is pasted (and False returned) while
        the pane's window has synchronize-panes on.
        """
        name = f"madohub-{uuid.uuid4().hex}"
        self.run("load-buffer", "-b", name, "-", input=text)
        paste = f"paste-buffer {'-p ' if bracketed else ''}-d -b {name} -t {pane_id}"
        try:
            return self.send_guarded(pane_id, [paste])
        finally:
            self.run("delete-buffer", "-b", name, check=False)

    def send_guarded(self, pane_id: str, commands: list[str]) -> bool:
        """Run tmux ``commands`` (strings) only if ``pane_id``'s window is not synchronized.

        With synchronize-panes on, every key sent to one pane is typed into all
        the panes of its window, so nothing is sent and False is returned. The
        check and the sending are one tmux invocation (``if-shell -F``): no
        extra process per line, and no window for the option to change between.
        """
        out = self.run(
            "if-shell",
            "-F",
            "-t",
            pane_id,
            "#{pane_synchronized}",
            f"display-message -p {SYNCHRONIZED_REPLY}",
            " ; ".join(commands),
        )
        return SYNCHRONIZED_REPLY not in out

    async def asend_guarded(self, pane_id: str, commands: list[str]) -> bool:
        """:meth:`send_guarded` in a worker thread."""
        return await asyncio.to_thread(self.send_guarded, pane_id, commands)

    def resolve_pane(self, pane: str) -> PaneInfo:
        """Check an adopted pane reference and return its info, or raise a teaching error."""
        if not isinstance(pane, str) or not (PANE_ID_RE.match(pane) or TARGET_RE.match(pane)):
            raise MadohubValueError(
                f"pane {pane!r} is not a tmux pane reference; use a pane id like '%3' "
                "or a target like 'session:window.pane'"
            )
        info = self.pane_info(pane)
        if info is None:
            where = (
                f"tmux server {self.socket_name!r}"
                if self.socket_name
                else "the default tmux server"
            )
            raise MadohubValueError(
                f"pane {pane!r} does not exist on {where}; list panes with `tmux list-panes -a`"
            )
        return info


_KEY_NAMES = {"\r": "C-m", "\n": "C-j", "\t": "Tab"}


def key_name(key: str) -> str:
    """The tmux key name for a control character profiles use (``\\r`` → ``C-m``)."""
    return _KEY_NAMES.get(key, key)


def hex_keys_command(pane_id: str, text: str) -> str:
    """A ``send-keys -H`` command string that types ``text``'s UTF-8 bytes exactly.

    Hex keys need no quoting inside a tmux command string (no ``;``, quote,
    ``#``, ``~`` or ``$`` is ever seen by tmux's parser); tmux writes each byte
    to the pane as is (``KEYC_LITERAL``), so multi-byte characters arrive whole.
    """
    return f"send-keys -t {pane_id} -H " + " ".join(f"{b:02x}" for b in text.encode("utf-8"))


def key_command(pane_id: str, key: str) -> str:
    """A ``send-keys`` command string pressing one key (a profile key or a control character)."""
    name = key_name(key)
    if _PLAIN_KEY_RE.match(name):
        return f"send-keys -t {pane_id} {name}"
    return hex_keys_command(pane_id, key)


def check_socket_name(socket_name: str | None) -> str | None:
    """``socket_name`` if it is a plain name tmux keeps in its private socket folder.

    ``tmux -L NAME`` puts the socket at ``/tmp/tmux-<uid>/NAME``: a ``/`` or
    ``..`` would put it somewhere else, outside that protected folder.
    """
    if socket_name is None:
        return None
    if (
        not isinstance(socket_name, str)
        or not SOCKET_NAME_RE.match(socket_name)
        or socket_name in (".", "..")
    ):
        raise MadohubValueError(
            f"socket_name {socket_name!r} is not a plain name; use letters, digits and "
            "'_', '-', '.', '@', '+' (at most 100, no '/'), e.g. 'madohub', or None "
            "for the default tmux server"
        )
    return socket_name


def client_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for tmux client processes: ``environ`` without secrets.

    The first tmux client starts the server, whose global environment (and so
    every pane) is a copy of the client's: the hub's API keys would reach every
    agent and shell. A tile that needs one names it in its ``env``.
    """
    env = dict(os.environ if environ is None else environ)
    for name in SECRET_ENV_VARS:
        env.pop(name, None)
    return env


_OCTAL_RE = re.compile(rb"\\([0-7]{3})|\\\\")


def decode_control_output(data: bytes) -> bytes:
    """Undo tmux control mode's octal escaping of ``%output`` data."""

    def repl(m: re.Match[bytes]) -> bytes:
        return bytes([int(m.group(1), 8)]) if m.group(1) else b"\\"

    return _OCTAL_RE.sub(repl, data)


OutputCallback = Callable[[str, bytes], None]


class ControlClient:
    """A ``tmux -C attach`` client for one session: streams ``%output`` events.

    ``on_output(pane_id, data)`` and ``on_exit()`` are called on the event loop.
    The client never sends commands, so it cannot change window sizes.
    """

    def __init__(
        self,
        tmux: Tmux,
        session: str,
        on_output: OutputCallback,
        on_exit: Callable[[], None],
    ) -> None:
        self.tmux = tmux
        self.session = session
        self._on_output = on_output
        self._on_exit = on_exit
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def start(self) -> None:
        argv = self.tmux.argv("-C", "attach-session", "-t", f"={self.session}")
        self._proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**client_environment(), "TMUX": ""},
            limit=16 * 1024 * 1024,
        )
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                if line.startswith(b"%output "):
                    body = line[len(b"%output ") :].rstrip(b"\r\n")
                    pane_id, _, data = body.partition(b" ")
                    self._on_output(pane_id.decode(), decode_control_output(data))
                elif line.startswith(b"%exit"):
                    break
        except asyncio.CancelledError:
            return
        except ValueError:  # a line over the stream limit; the stream is unusable
            pass
        if self._stopping:
            return
        # The server or session is gone: reap the client so its transport closes cleanly.
        proc = self._proc
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            await proc.wait()
        self._on_exit()

    async def stop(self) -> None:
        self._stopping = True
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 2)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
