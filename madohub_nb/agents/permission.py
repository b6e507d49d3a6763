"""A permission prompt as the agent draws it: its question and its choices, read off the screen.

Pure functions over a screen's text. A profile's ``waiting_markers`` say *that*
the agent waits (Claude Code's ``Do you want to proceed?`` over a ``❯ 1. Yes``
menu, fixtures/real/screens/06); this module says *what* it asks and which key
answers each choice: the digit of a numbered menu (Claude, Codex, Copilot,
Qwen, Gemini), ``y`` / ``n`` for Aider's ``(Y)es/(N)o``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .profiles import AgentProfile, screen_tail

_MENU_LINE: Final = re.compile(r"^[ \t│┃]*(?:[❯›>▶]\s*)?(\d)\.\s+(\S[^\n]*?)[ \t│┃]*$")
_RULE_LINE: Final = re.compile(r"^[ \t]*[─━═╭╰┌└]{8,}")
"""The solid rule over a dialog (a dashed ``╌`` one inside 2.1.332's dialog is left out)."""
_DIVIDER_LINE: Final = re.compile(r"^[ \t]*[╌┄┈-]{8,}[ \t]*$")
_YES_NO: Final = re.compile(r"\(Y\)es/\(N\)o")
QUESTION_MAX_LINES: Final = 12
"""Lines of the dialog kept above its choices (the tool, its command, the question)."""


@dataclass(frozen=True)
class PermissionPrompt:
    """What a waiting agent asks: ``question`` (the dialog's text above its choices),
    ``choices`` (their labels, as shown) and ``keys`` (the key that answers each one)."""

    question: str
    choices: tuple[str, ...]
    keys: tuple[str, ...]


def read_permission_prompt(profile: AgentProfile, screen: str) -> PermissionPrompt | None:
    """The permission prompt near the bottom of ``screen``, or None when it shows none."""
    tail = screen_tail(profile, screen)
    if not tail or not any(p.search(tail) for p in profile.waiting_markers):
        return None
    # The marker is looked for near the bottom; the dialog above it may be taller (2.1.332).
    lines = screen.rstrip().splitlines()
    if _YES_NO.search(lines[-1] if lines else ""):
        return _yes_no_prompt(lines)
    return _menu_prompt(lines)


def _menu_prompt(lines: list[str]) -> PermissionPrompt | None:
    """A numbered menu: the last run of ``N. label`` lines and the dialog above it."""
    end = next((i for i in range(len(lines) - 1, -1, -1) if _MENU_LINE.match(lines[i])), None)
    if end is None:
        return None
    start = end
    while start > 0 and (_MENU_LINE.match(lines[start - 1]) or not lines[start - 1].strip()):
        start -= 1
    while not _MENU_LINE.match(lines[start]):
        start += 1
    menu = [m for line in lines[start : end + 1] if (m := _MENU_LINE.match(line))]
    keys = tuple(m.group(1) for m in menu)
    labels = tuple(m.group(2).strip() for m in menu)
    return PermissionPrompt(_question_above(lines, start), labels, keys)


def _yes_no_prompt(lines: list[str]) -> PermissionPrompt:
    """Aider's ``Run shell command? (Y)es/(N)o [Yes]:``: the question is the line itself."""
    last = lines[-1]
    question = last[: _YES_NO.search(last).start()].strip()  # type: ignore[union-attr]
    above = _question_above(lines, len(lines) - 1)
    text = f"{above}\n{question}".strip() if above and not question else question or above
    return PermissionPrompt(text, ("Yes", "No"), ("y", "n"))


def _question_above(lines: list[str], first_choice: int) -> str:
    """The dialog's text between the rule (or blank gap) above it and its first choice."""
    top = first_choice
    while top > 0 and first_choice - top < QUESTION_MAX_LINES:
        line = lines[top - 1]
        if _RULE_LINE.match(line):
            break
        top -= 1
    body = [
        ln.strip(" \t│┃").strip() for ln in lines[top:first_choice] if not _DIVIDER_LINE.match(ln)
    ]
    text = "\n".join(body).strip()
    return re.sub(r"\n{3,}", "\n\n", text)
