"""A stand-in for OpenCode in a pane, for the fast tier: its screen (prompts as "┃" blocks,
answers indented 5 spaces, the input box over a "╹▀" edge, "esc interrupt" while busy,
"△ Permission required" while it asks) and, like the real OpenCode 1.18.33, its own API
served by the TUI itself on ``--hostname 127.0.0.1 --port N`` with the password from
``OPENCODE_SERVER_PASSWORD`` (madohub_nb/testing/fake_opencode.py: the same endpoints and
events the real one sends).

Prompts the person types (Enter) run as turns of the session the TUI shows, reported the
same way. ``[[sleep N]]`` thinks N s, ``[[lines N]]`` answers N lines, ``[[ask]]`` asks
permission first, ``[[unheard]]`` is taken (HTTP 204) and never started. Ctrl-K ends the
server while the TUI stays (a server gone); Ctrl-C exits.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import sys
import termios
import threading
import time
import tty
import types
from pathlib import Path
from typing import Any

# Load only the stand-in server's modules: the package __init__ loads the hub (seconds).
_package = types.ModuleType("madohub_nb")
_package.__path__ = [str(Path(__file__).resolve().parents[1] / "madohub_nb")]
sys.modules.setdefault("madohub_nb", _package)

from madohub_nb.testing.fake_anthropic import default_answer  # noqa: E402
from madohub_nb.testing.fake_opencode import FakeOpenCode  # noqa: E402

UNHEARD = "[[unheard]]"
EDGE = "  ╹" + "▀" * 60
PLACEHOLDER = 'Ask anything… "Fix broken tests"'


def reply(prompt: str) -> str:
    m = re.search(r"\[\[lines (\d+)\]\]", prompt)
    if m:
        return "\n".join(f"Line {i} of a long answer" for i in range(1, int(m.group(1)) + 1))
    return default_answer(prompt)


class Screen(FakeOpenCode):
    """The server, whose events the TUI draws (as the real TUI shows its own session)."""

    def __init__(self, password: str, directory: str, port: int) -> None:
        super().__init__(password, directory, reply=reply, port=port)
        self.lock = threading.Lock()
        self.history: list[str] = []
        self.draft = ""
        self.busy = False
        self.asking = False
        self.home = True
        self.dirty = threading.Event()
        self.gone = False
        self._users: set[str] = set()
        """The ids of the user messages (their text is a prompt, not an answer)."""

    def emit(self, kind: str, properties: dict[str, Any]) -> None:
        super().emit(kind, properties)
        with self.lock:
            if kind == "message.part.updated":
                part = properties.get("part") or {}
                if part.get("type") == "text" and part.get("text"):
                    role = "user" if str(part.get("messageID")) in self._users else "assistant"
                    if role == "user":
                        self.history += [f"  ┃  {line}" for line in str(part["text"]).splitlines()]
                    else:
                        self.history += [f"     {line}" for line in str(part["text"]).splitlines()]
                        self.history.append("     ▣  Build · Fake model · 0.3s")
            elif kind == "message.updated":
                info = properties.get("info") or {}
                if info.get("role") == "user":
                    self._users.add(str(info.get("id")))
            elif kind == "session.status":
                self.busy = (properties.get("status") or {}).get("type") == "busy"
            elif kind == "permission.asked":
                self.asking = True
            elif kind == "permission.replied":
                self.asking = False
            elif kind == "tui.session.select":
                self.home = False
        self.dirty.set()

    def _prompt(self, session_id: str, body: dict[str, Any]) -> None:
        if any(UNHEARD in str(p.get("text", "")) for p in body.get("parts", [])):
            return  # taken, never started
        super()._prompt(session_id, body)

    def draw(self) -> None:
        with self.lock:
            lines = self.history[-30:]
            status = ["  ⬝⬝⬝■■■  esc interrupt"] if self.busy else []
            if self.asking:
                status = ["  ┃", "  ┃  △ Permission required", "  ┃    # Shell command"]
            shown = self.draft or (PLACEHOLDER if self.home else "")
            box = ["  ┃", *[f"  ┃  {line}" for line in (shown.split("\n") or [""])], "  ┃",
                   "  ┃  Build · Fake model Fake", EDGE]  # fmt: skip
        sys.stdout.write("\x1b[2J\x1b[H" + "\r\n".join([*lines, "", *status, *box]))
        sys.stdout.flush()

    def typed(self, text: str) -> None:
        """The person pressed Enter on ``text``."""
        if not self.gone:
            self.type_prompt(text)
            return
        with self.lock:  # (no server: the TUI answers on its own screen)
            self.history += [f"  ┃  {line}" for line in text.splitlines()]
            self.history += [f"     {reply(text)}", "     ▣  Build · Fake model · 0.3s"]


def main() -> None:
    parser = argparse.ArgumentParser(prog="opencode")
    parser.add_argument("--hostname", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args, _ = parser.parse_known_args()
    password = os.environ.get("OPENCODE_SERVER_PASSWORD", "")
    screen = Screen(password, os.getcwd(), args.port).start()
    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        screen.draw()
        while True:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if screen.dirty.is_set():
                screen.dirty.clear()
                screen.draw()
            if not ready:
                continue
            for ch in os.read(fd, 4096).decode("utf-8", "replace"):
                if ch == "\r" and screen.draft.strip():
                    with screen.lock:
                        text, screen.draft = screen.draft, ""
                    screen.typed(text)
                elif ch in ("\x7f", "\b"):
                    screen.draft = screen.draft[:-1]
                elif ch == "\x03":
                    return
                elif ch == "\x0b":
                    screen.gone = True
                    screen.kill()
                elif ch == "\n":
                    screen.draft += "\n"
                elif ch.isprintable():
                    screen.draft += ch
            screen.draw()
            time.sleep(0)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
        screen.kill()


if __name__ == "__main__":
    main()
