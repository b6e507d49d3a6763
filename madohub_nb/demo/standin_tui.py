"""What the two stand-in TUIs share: raw keys, painting, the event loop, turns, markers.

The stand-ins behave like the real full-screen TUIs inside tmux: the terminal
is in raw mode, bracketed paste is on, and the screen is repainted by diff, so
an idle stand-in writes nothing while a busy one writes a little every tick
(REAL-AGENTS.md, "Output stream").
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import ctypes
import errno
import os
import re
import select
import signal
import sys
import termios
import time
import tty
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, Final, Generic, TypeVar

from . import personas

THINK_ENV: Final = "MADOHUB_STANDIN_THINK_S"
READ_LAG_ENV: Final = "MADOHUB_STANDIN_READ_LAG_S"
"""Seconds the stand-in takes to get to input after it arrives, as a TUI on a loaded machine
does: everything typed meanwhile (text and the submit key alike) comes in one read."""
TICK_S: Final = 0.5
"""Busy stand-ins redraw their spinner this often, like the real ones."""

QUIT_HINT_S: Final = 2.0
"""A second Ctrl-C within this time quits (the first one shows a hint)."""

ESCAPE_WAIT_S: Final = 0.05
"""A lone ESC with nothing after it for this long is the Escape key."""

PASTE_START: Final = b"\x1b[200~"
PASTE_END: Final = b"\x1b[201~"

RESET: Final = "\x1b[0m"
CURSOR_BLOCK: Final = "\x1b[7m \x1b[27m"

_SGR_RE: Final = re.compile(r"\x1b\[[0-9;]*m")
_SLEEP_RE: Final = re.compile(r"\[\[sleep\s+(\d+(?:\.\d+)?)\]\]")
_BASH_RE: Final = re.compile(r"\[\[bash\s+(.+?)\]\]", re.DOTALL)

_CONTROL_KEYS: Final = {
    0x0D: "enter",
    0x0A: "newline",
    0x7F: "backspace",
    0x08: "backspace",
    0x03: "ctrl_c",
    0x04: "ctrl_d",
    0x09: "tab",
}
_ESCAPE_KEYS: Final = {
    b"\x1b[A": "up",
    b"\x1b[B": "down",
    b"\x1bOA": "up",
    b"\x1bOB": "down",
    b"\x1b\r": "newline",  # Meta-Enter inserts a newline, like Option-Enter in Claude Code
    b"\x1b\n": "newline",
}


def set_process_name(name: str) -> None:
    """Set this process's command name (``/proc/<pid>/comm``, what psutil's ``name()`` reads)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_name = 15
        libc.prctl(pr_set_name, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the launcher's file name still names the process


def agent_home(env_var: str, dot_dir: str, env: dict[str, str] | None = None) -> Path:
    """Where an agent keeps its files: ``$<env_var>``, else ``$HOME/<dot_dir>``."""
    env = dict(os.environ) if env is None else env
    if env.get(env_var):
        return Path(env[env_var])
    return Path(env.get("HOME") or Path.home()) / dot_dir


def iso_utc(ts: float | None = None) -> str:
    """``ts`` (default now) as the agents stamp records: ``2026-11-29T22:52:49.180Z``."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def style(code: str, text: str) -> str:
    """``text`` in SGR ``code`` (e.g. ``"38;5;246"``), reset after."""
    return f"\x1b[{code}m{text}{RESET}"


# Prompt markers -------------------------------------------------------------


@dataclass(frozen=True)
class TurnPlan:
    """What a prompt asks of the stand-in: ``[[sleep N]]`` and ``[[bash CMD]]``."""

    sleep_s: float | None
    bash: str | None

    def think_s(self, default_s: float) -> float:
        """How long the turn thinks: ``N`` of ``[[sleep N]]``, else ``default_s``."""
        return default_s if self.sleep_s is None else self.sleep_s


def plan_turn(prompt: str) -> TurnPlan:
    """Read the ``[[sleep N]]`` / ``[[bash CMD]]`` markers the fixtures' fake API obeyed."""
    sleep = _SLEEP_RE.search(prompt)
    bash = _BASH_RE.search(prompt)
    return TurnPlan(
        sleep_s=float(sleep.group(1)) if sleep else None,
        bash=bash.group(1).strip() if bash else None,
    )


def think_seconds(option: float | None) -> float:
    """Seconds per turn: the ``--think-s`` option, else ``$MADOHUB_STANDIN_THINK_S``, else 1.0."""
    if option is not None:
        value = option
    else:
        raw = os.environ.get(THINK_ENV, "").strip()
        try:
            value = float(raw) if raw else personas.DEFAULT_THINK_S
        except ValueError:
            raise SystemExit(f"{THINK_ENV} must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise SystemExit(f"think time must be 0 or more seconds, got {value}")
    return value


def build_parser(prog: str = "claude") -> argparse.ArgumentParser:
    """The command line both stand-ins share: ``--persona`` and ``--think-s``."""
    parser = argparse.ArgumentParser(
        prog=prog, description=f"madohub_nb stand-in for the {prog} CLI (no API, no network)."
    )
    parser.add_argument(
        "--persona",
        default=personas.DEFAULT_PERSONA,
        choices=personas.PERSONAS,
        help="who answers (default: %(default)s)",
    )
    parser.add_argument(
        "--think-s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds per turn without [[sleep N]] (default: $MADOHUB_STANDIN_THINK_S or 1.0)",
    )
    return parser


@dataclass(frozen=True)
class Launch:
    """A stand-in's command line, read: who answers, seconds per turn, where it runs."""

    args: argparse.Namespace
    persona: str
    think_s: float
    cwd: str


def launch(
    prog: str, argv: list[str] | None, parser: argparse.ArgumentParser | None = None
) -> Launch:
    """Name this process ``prog`` (what routers look for) and read its command line.

    ``parser`` is ``build_parser(prog)`` unless a stand-in adds options of its own.
    """
    set_process_name(prog)
    args = (parser or build_parser(prog)).parse_args(argv)
    return Launch(args, args.persona, think_seconds(args.think_s), os.path.realpath(os.getcwd()))


# Text width -----------------------------------------------------------------


def char_width(ch: str) -> int:
    """Columns one character takes in the terminal."""
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def visible_width(text: str) -> int:
    """Columns ``text`` takes, colour codes left out."""
    return sum(char_width(c) for c in _SGR_RE.sub("", text))


def fit(text: str, cols: int) -> str:
    """``text`` cut to ``cols`` columns, colour codes kept."""
    out: list[str] = []
    used = 0
    i = 0
    while i < len(text):
        sgr = _SGR_RE.match(text, i)
        if sgr:
            out.append(sgr.group(0))
            i = sgr.end()
            continue
        w = char_width(text[i])
        if used + w > cols:
            break
        out.append(text[i])
        used += w
        i += 1
    return "".join(out)


def printable(text: str) -> str:
    """``text`` safe to show: tabs as spaces, other control characters dropped."""
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    return "".join(c for c in text if c == "\n" or c >= " " and c != "\x7f")


def wrap(text: str, width: int) -> list[str]:
    """Plain ``text`` hard-wrapped to ``width`` columns, one entry per screen row."""
    width = max(width, 1)
    rows: list[str] = []
    for line in printable(text).split("\n"):
        row: list[str] = []
        used = 0
        for ch in line:
            w = char_width(ch)
            if used + w > width:
                rows.append("".join(row))
                row, used = [], 0
            row.append(ch)
            used += w
        rows.append("".join(row))
    return rows


def indent_rows(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` wrapped under a first-row prefix (``"● "``) and a continuation indent."""
    body = wrap(text, width - visible_width(first))
    return [first + body[0], *(rest + row for row in body[1:])]


# Keys -----------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One decoded key press: ``text``/``paste`` carry text; others are named keys."""

    name: str
    text: str = ""


class KeyDecoder:
    """Turns raw terminal bytes into keys: text, pastes, Enter, Ctrl-J, Escape…"""

    def __init__(self) -> None:
        self._buf = b""
        self._paste: bytearray | None = None
        self._escape_since: float | None = None
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes, now: float) -> list[Key]:
        """Keys completed by ``data``; an unfinished escape sequence waits for more."""
        self._buf += data
        keys = self._parse()
        self._escape_since = now if self._waiting_escape() else None
        return keys

    def escape_deadline(self) -> float | None:
        """When a lone ESC becomes the Escape key, if one is waiting."""
        return None if self._escape_since is None else self._escape_since + ESCAPE_WAIT_S

    def flush(self, now: float) -> list[Key]:
        """The Escape key, once a lone ESC has waited long enough."""
        deadline = self.escape_deadline()
        if deadline is None or now < deadline:
            return []
        self._buf = self._buf[1:]
        keys = [Key("escape"), *self._parse()]
        self._escape_since = now if self._waiting_escape() else None
        return keys

    def _waiting_escape(self) -> bool:
        return self._paste is None and self._buf.startswith(b"\x1b")

    def _parse(self) -> list[Key]:
        keys: list[Key] = []
        buf = self._buf
        i = 0
        while i < len(buf):
            if self._paste is not None:
                end = buf.find(PASTE_END, i)
                if end < 0:
                    keep = _partial_suffix(buf[i:], PASTE_END)
                    self._paste += buf[i : len(buf) - keep]
                    i = len(buf) - keep
                    break
                self._paste += buf[i:end]
                text = self._paste.decode("utf-8", "replace")
                # tmux paste-buffer turns LF into CR; a paste keeps its line breaks.
                keys.append(Key("paste", text.replace("\r\n", "\n").replace("\r", "\n")))
                self._paste = None
                i = end + len(PASTE_END)
                continue
            byte = buf[i]
            if byte == 0x1B:
                seq = _escape_sequence(buf, i)
                if seq is None:
                    break
                i += len(seq)
                if seq == PASTE_START:
                    self._paste = bytearray()
                elif seq in _ESCAPE_KEYS:
                    keys.append(Key(_ESCAPE_KEYS[seq]))
                elif len(seq) == 2:
                    keys.append(Key("escape"))
                    i -= 1  # the byte after ESC is a key of its own
                continue
            if byte < 0x20 or byte == 0x7F:
                name = _CONTROL_KEYS.get(byte)
                if name:
                    keys.append(Key(name))
                i += 1
                continue
            j = i
            while j < len(buf) and buf[j] >= 0x20 and buf[j] != 0x7F:
                j += 1
            text = self._utf8.decode(buf[i:j])
            if text:
                if keys and keys[-1].name == "text":
                    keys[-1] = Key("text", keys[-1].text + text)
                else:
                    keys.append(Key("text", text))
            i = j
        self._buf = buf[i:]
        return keys


def _escape_sequence(buf: bytes, i: int) -> bytes | None:
    """The escape sequence starting at ``buf[i]``, or None while it is unfinished."""
    if i + 1 >= len(buf):
        return None
    kind = buf[i + 1]
    if kind == ord("["):
        for j in range(i + 2, len(buf)):
            if 0x40 <= buf[j] <= 0x7E:
                return buf[i : j + 1]
        return buf[i:] if len(buf) - i > 32 else None
    if kind == ord("O"):
        return buf[i : i + 3] if i + 2 < len(buf) else None
    return buf[i : i + 2]


def _partial_suffix(data: bytes, marker: bytes) -> int:
    """Length of the longest end of ``data`` that starts ``marker``."""
    for n in range(min(len(marker) - 1, len(data)), 0, -1):
        if data.endswith(marker[:n]):
            return n
    return 0


# The prompt being typed ---------------------------------------------------


@dataclass
class _Part:
    text: str
    label: str | None = None


@dataclass
class InputLine:
    """The prompt being typed: typed text and pasted chunks (shown by a label, kept whole)."""

    paste_label: Callable[[int, str], str | None] = field(default=lambda n, text: None)
    parts: list[_Part] = field(default_factory=list)
    pastes: int = 0

    @property
    def text(self) -> str:
        """What will be submitted."""
        return "".join(p.text for p in self.parts)

    @property
    def shown(self) -> str:
        """What the input box shows (long pastes as their label)."""
        return "".join(p.label or p.text for p in self.parts)

    def is_blank(self) -> bool:
        return not self.text.strip()

    def insert(self, text: str) -> None:
        if self.parts and self.parts[-1].label is None:
            self.parts[-1].text += text
        else:
            self.parts.append(_Part(text))

    def paste(self, text: str) -> None:
        label = self.paste_label(self.pastes + 1, text)
        if label is None:
            self.insert(text)
            return
        self.pastes += 1
        self.parts.append(_Part(text, label))

    def backspace(self) -> None:
        if not self.parts:
            return
        last = self.parts[-1]
        if last.label is None and len(last.text) > 1:
            last.text = last.text[:-1]
        else:
            self.parts.pop()

    def clear(self) -> None:
        self.parts.clear()
        self.pastes = 0


# Painting -------------------------------------------------------------------


def write_all(fd: int, text: str) -> None:
    """Write ``text`` to ``fd`` completely."""
    data = text.encode("utf-8", "replace")
    while data:
        n = os.write(fd, data)
        data = data[n:]


class Painter:
    """Repaints the screen by rows, writing only rows that changed since last time."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._shown: list[str] = []
        self._size = (0, 0)

    def size(self) -> tuple[int, int]:
        """(columns, lines) of the terminal."""
        try:
            sz = os.get_terminal_size(self.fd)
        except OSError:
            return 80, 24
        return max(sz.columns, 20), max(sz.lines, 5)

    def clear(self) -> None:
        """Blank the screen; the next paint writes every row."""
        write_all(self.fd, "\x1b[H\x1b[2J")
        self._shown = []

    def paint(self, rows: list[str]) -> None:
        """Show ``rows`` from the top (their last screenful when there are more)."""
        cols, lines = self.size()
        if (cols, lines) != self._size:
            self._size = (cols, lines)
            self._shown = []
        rows = rows[-lines:] + [""] * (lines - len(rows))
        fitted = [fit(r, cols) for r in rows]
        out: list[str] = []
        for i, row in enumerate(fitted):
            if i < len(self._shown) and self._shown[i] == row:
                continue
            out.append(f"\x1b[{i + 1};1H{RESET}{row}{RESET}")
            if visible_width(row) < cols:
                out.append("\x1b[K")
        self._shown = fitted
        if out:
            write_all(self.fd, "".join(out))

    def leave(self) -> None:
        """Put the cursor under the last non-blank row, as a TUI does on exit."""
        used = max(
            (i + 1 for i, r in enumerate(self._shown) if _SGR_RE.sub("", r).strip()), default=0
        )
        _, lines = self._size if self._size != (0, 0) else self.size()
        if used >= lines:
            write_all(self.fd, f"\x1b[{lines};1H\r\n")
        else:
            write_all(self.fd, f"\x1b[{used + 1};1H")


# The loop -------------------------------------------------------------------


class _Hangup(Exception):
    """SIGTERM or SIGHUP arrived: leave cleanly."""


class StandinApp:
    """The event loop both stand-ins share: read keys, run timers, repaint.

    Subclasses implement ``start``, ``on_key``, ``on_tick``, ``deadline``,
    ``frame`` and ``stop``; ``stop`` runs on every exit (keys, EOF, signals).
    """

    def __init__(self, fd_in: int = 0, fd_out: int = 1) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.painter = Painter(fd_out)
        self.keys = KeyDecoder()
        self.running = True
        self.quit_hint_until = 0.0
        """While set, the footer says how to quit and another Ctrl-C quits."""
        self.read_lag_s = float(os.environ.get(READ_LAG_ENV) or 0)

    def quit_twice(self, now: float) -> None:
        """Ctrl-C on an empty prompt: quit if pressed again soon, else show the hint."""
        if now < self.quit_hint_until:
            self.running = False
        else:
            self.quit_hint_until = now + QUIT_HINT_S

    # Hooks ---------------------------------------------------------------
    def start(self) -> None:
        """Called once, in raw mode, before the first paint."""

    def on_key(self, key: Key, now: float) -> None:
        """Handle one key press."""

    def on_tick(self, now: float) -> None:
        """Advance timers; called after every wake-up."""

    def deadline(self, now: float) -> float | None:
        """When ``on_tick`` next has work to do, or None to wait for keys."""
        return None

    def frame(self) -> list[str]:
        """The rows to show now."""
        return []

    def final_frame(self) -> list[str]:
        """The rows left on screen after exit (the conversation, no input box)."""
        return self.frame()

    def stop(self) -> None:
        """Clean up files; runs on every exit."""

    def farewell(self) -> str:
        """Text printed after the screen is left (e.g. how to resume)."""
        return ""

    # Loop ----------------------------------------------------------------
    def run(self) -> int:
        """Run until the user quits, stdin closes or SIGTERM/SIGHUP; return the exit code."""
        if not os.isatty(self.fd_in):
            print("the stand-in agent needs a terminal (run it inside tmux)", file=sys.stderr)
            return 2

        def hang_up(signum: int, frame: FrameType | None) -> None:
            raise _Hangup(signum)

        def continued(signum: int, frame: FrameType | None) -> None:
            # Back from Ctrl-Z (``fg``): bash gave the terminal back in its own cooked mode,
            # so raw mode goes on again at once (before any key is read) and the screen is
            # redrawn, as real TUIs do on SIGCONT.
            with contextlib.suppress(OSError, termios.error):
                tty.setraw(self.fd_in, termios.TCSANOW)
                write_all(self.fd_out, "\x1b[?2004h\x1b[?25l")
                self.painter.clear()

        signal.signal(signal.SIGTERM, hang_up)
        signal.signal(signal.SIGHUP, hang_up)
        signal.signal(signal.SIGCONT, continued)
        saved = termios.tcgetattr(self.fd_in)
        try:
            tty.setraw(self.fd_in)
            write_all(self.fd_out, "\x1b[?2004h\x1b[?25l")
            self.painter.clear()
            self.start()
            self._loop()
        except _Hangup:
            pass
        except OSError as e:
            if e.errno not in (errno.EIO, errno.EPIPE, errno.EBADF):
                raise
        finally:
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            signal.signal(signal.SIGCONT, signal.SIG_DFL)
            self.stop()
            self._restore(saved)
        return 0

    def _loop(self) -> None:
        while self.running:
            self.painter.paint(self.frame())
            now = time.monotonic()
            timers = (self.deadline(now), self.keys.escape_deadline(), self.quit_hint_until or None)
            wake = [d for d in timers if d is not None]
            # Wake at least once a second so a terminal resize gets repainted.
            timeout = max(0.0, min([*wake, now + 1.0]) - now)
            ready, _, _ = select.select([self.fd_in], [], [], timeout)
            now = time.monotonic()
            keys: list[Key] = []
            if ready:
                if self.read_lag_s:
                    time.sleep(self.read_lag_s)
                    now = time.monotonic()
                data = os.read(self.fd_in, 65536)
                if not data:
                    return
                keys = self.keys.feed(data, now)
            keys += self.keys.flush(now)
            for key in keys:
                self.on_key(key, now)
                if not self.running:
                    return
            now = time.monotonic()
            if self.quit_hint_until and now >= self.quit_hint_until:
                self.quit_hint_until = 0.0
            self.on_tick(now)

    def _restore(self, saved: list[Any]) -> None:
        try:
            self.painter.paint(self.final_frame())
            self.painter.leave()
            write_all(self.fd_out, RESET + "\x1b[?2004l\x1b[?25h" + self.farewell())
            termios.tcsetattr(self.fd_in, termios.TCSADRAIN, saved)
        except (OSError, termios.error):
            pass  # the terminal is gone (SIGHUP)


# A stand-in agent -------------------------------------------------------------


@dataclass
class Turn:
    """One prompt being answered: when it started and when its think time is up."""

    prompt: str
    started: float
    due: float


TurnT = TypeVar("TurnT", bound=Turn)


class AgentStandin(StandinApp, Generic[TurnT]):
    """What both stand-in agents do alike: a prompt line, one turn at a time, a queue.

    A prompt submitted while a turn runs is queued; Escape (or Ctrl-C) while
    busy interrupts the turn and puts queued prompts back on the prompt line.
    A spinner ticks every ``TICK_S`` while busy. Subclasses implement
    ``on_enter``, ``on_turn_due``, ``conversation_rows`` and ``frame``.
    """

    def __init__(
        self,
        persona: str,
        think_s: float,
        cwd: str,
        paste_label: Callable[[int, str], str | None],
    ) -> None:
        super().__init__()
        self.persona = persona
        self.think_s = think_s
        self.cwd = cwd
        self.state = "idle"
        self.input = InputLine(paste_label=paste_label)
        self.queued: list[str] = []
        self.turn: TurnT | None = None
        self.turns = 0
        self.spin = 0
        self.next_spin = 0.0

    # Hooks ---------------------------------------------------------------
    def on_enter(self, now: float) -> None:
        """Enter on the prompt line: submit it, queue it, or edit it."""

    def on_turn_due(self, now: float) -> None:
        """The current turn's think time is up: answer (or go on to its next step)."""

    def conversation_rows(self, cols: int) -> list[str]:
        """The banner and the conversation so far, ``cols`` wide (no input box)."""
        return []

    # Keys ----------------------------------------------------------------
    def on_key(self, key: Key, now: float) -> None:
        if key.name == "text":
            self.input.insert(key.text)
        elif key.name == "paste":
            self.input.paste(key.text)
        elif key.name == "newline":
            self.input.insert("\n")
        elif key.name == "enter":
            self.on_enter(now)
        elif key.name == "backspace":
            self.input.backspace()
        elif key.name == "escape" and self.state == "busy":
            self.interrupt()
        elif key.name == "ctrl_c":
            if self.state == "busy":
                self.interrupt()
            elif self.input.text:
                self.input.clear()
            else:
                self.quit_twice(now)
        elif key.name == "ctrl_d" and not self.input.text:
            self.running = False

    # Turns ---------------------------------------------------------------
    def begin_turn(self, turn: TurnT, now: float) -> None:
        """Make ``turn`` the current one: busy, spinner from its first frame."""
        self.turn = turn
        self.state = "busy"
        self.spin = 0
        self.next_spin = now + TICK_S

    def take_queued(self) -> str:
        """The queued prompts as one prompt (one per line); the queue is emptied."""
        prompt = "\n".join(self.queued)
        self.queued.clear()
        return prompt

    def interrupt(self) -> None:
        """End the turn without an answer; queued prompts go back on the prompt line."""
        self.turn = None
        self.state = "idle"
        if self.queued:
            self.input.insert(self.take_queued())

    def on_tick(self, now: float) -> None:
        if self.state != "busy" or self.turn is None:
            return
        if now >= self.turn.due:
            self.on_turn_due(now)
        while self.state == "busy" and now >= self.next_spin:
            self.spin += 1
            self.next_spin += TICK_S

    def deadline(self, now: float) -> float | None:
        if self.state == "busy" and self.turn is not None:
            return min(self.turn.due, self.next_spin)
        return None

    # Screen --------------------------------------------------------------
    def final_frame(self) -> list[str]:
        cols, _ = self.painter.size()
        return self.conversation_rows(cols)

    def prompt_rows(self, cols: int, mark: str) -> list[str]:
        """The prompt line wrapped after a two-column ``mark``, a column left for the cursor."""
        body = wrap(self.input.shown, cols - 3)
        return [mark + body[0], *("  " + r for r in body[1:])]
