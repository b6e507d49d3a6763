"""A permission prompt as the agent draws it: its question and its choices, read off the screen.

Pure functions over a screen's text. A profile's ``waiting_markers`` say *that*
the agent waits (Claude Code's ``Do you want to proceed?`` over a ``❯ 1. Yes``
menu, fixtures/real/screens/06); this module says *what* it asks and which keys
answer each choice. Every dialog here was captured from the real agent
(tests/fixtures/screens/permission/):

- a numbered menu, answered by its digit: Claude Code and Copilot (``❯ 1.``),
  Codex and Qwen Code (``› 1.``), Gemini CLI (``● 1.``), inside a box or not;
- OpenCode's row of buttons under ``△ Permission required`` (``Allow once   Allow
  always   Reject``), moved along with Right (it wraps round; no key picks a button
  directly) and confirmed with Enter: the selected one is the button drawn on a
  background of its own, so the screen is read with its colours;
- Aider's ``Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:``, a line it
  reads: the letter, then Enter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .profile import AgentProfile, screen_tail
from .regex import lazy_compile
from .screen import strip_ansi

_MENU_LINE: Final = lazy_compile(r"^[ \t│┃]*(?:[❯›>▶●]\s*)?(\d)\.\s+(\S[^\n]*?)[ \t│┃]*$")
_RULE_LINE: Final = lazy_compile(r"^[ \t]*[─━═╭╰┌└]{8,}")
"""The solid rule over a dialog (a dashed ``╌`` one inside 2.1.332's dialog is left out)."""
_DIVIDER_LINE: Final = lazy_compile(r"^[ \t]*[╌┄┈-]{8,}[ \t]*$")
_BOX_ONLY: Final = lazy_compile(r"^[─━═╌┄┈╭╮╰╯┌┐└┘├┤│┃ \t-]+$")
"""A line of a box inside the dialog (Copilot's and Gemini's framed command): left out."""
_BORDER: Final = " \t│┃"
_TOOL_HEADER: Final = lazy_compile(r"^[ \t│┃]*\? \S")
"""The line a Gemini or Qwen dialog starts with (``? Shell  touch x``): nothing above it is kept."""
_YES_NO: Final = lazy_compile(r"\(Y\)es/\(N\)o")
_AIDER_ABOVE_STOP: Final = lazy_compile(r"^(?:Tokens: |─{8,})")
_BUTTONS_TITLE: Final = lazy_compile(r"^[ \t┃│]*△ (Permission required)[ \t]*$")
_BUTTONS_HINT: Final = lazy_compile(r"ctrl\+|⇆|enter |esc ")
_SGR: Final = lazy_compile(r"\x1b\[([0-9;]*)m")
QUESTION_MAX_LINES: Final = 12
"""Lines of the dialog kept above its choices (the tool, its command, the question) when no
rule or tool header above them says where it starts; a cut is marked (:func:`lines_cut_mark`)."""


def lines_cut_mark(hidden: int) -> str:
    """The line that stands for ``hidden`` dialog lines left out above the ones kept."""
    return f"… [{hidden} more line{'s' if hidden != 1 else ''} of the dialog above]"


def chars_cut(text: str, max_chars: int) -> str:
    """``text`` whole, or its first characters and a mark saying how many more there are:
    a cut is never silent (a command's end, ``| sh``, may be what matters)."""
    if len(text) <= max_chars:
        return text
    mark_room = max(0, max_chars - 1)
    return f"{text[:mark_room]}… [{len(text) - mark_room} more characters]"


@dataclass(frozen=True)
class PermissionPrompt:
    """What a waiting agent asks: ``question`` (the dialog's text above its choices),
    ``choices`` (their labels, as shown) and ``keys`` (what answers each one: tmux key
    names, space-separated when it takes several, e.g. ``"y Enter"``)."""

    question: str
    choices: tuple[str, ...]
    keys: tuple[str, ...]
    selected: int | None = field(default=None, compare=False)
    """A button row's selected button (its keys then move from there), else None."""

    def keys_for(self, index: int) -> str:
        """The keys that answer choice ``index`` now (from the selected button, if any)."""
        if self.selected is None:
            return self.keys[index]
        steps = (index - self.selected) % len(self.choices)
        return " ".join([*["Right"] * steps, "Enter"])


def says_no(label: str) -> bool:
    """Whether a choice declines (``No, …``, OpenCode's ``Reject``)."""
    return label.lower().startswith(("no", "reject", "deny"))


def needs_colours(screen: str) -> bool:
    """Whether ``screen``'s dialog shows its selection by colour alone (OpenCode's buttons):
    then :func:`read_permission_prompt` wants the coloured screen as well."""
    return any(_BUTTONS_TITLE.match(line) for line in screen.splitlines()[-40:])


def read_permission_prompt(
    profile: AgentProfile, screen: str, coloured: str | None = None
) -> PermissionPrompt | None:
    """The permission prompt near the bottom of ``screen``, or None when it shows none.

    ``coloured`` is the same screen with its colours (``capture-pane -e``), which a button
    row's selection is read from; ``screen`` itself may keep them too (a fixture)."""
    if "\x1b[" in screen:
        screen, coloured = strip_ansi(screen), coloured or screen
    colour_lines = coloured.splitlines() if coloured is not None else None
    tail = screen_tail(profile, screen)
    if not tail or not any(p.search(tail) for p in profile.waiting_markers):
        return None
    # The marker is looked for near the bottom; the dialog above it may be taller (2.1.332).
    lines = screen.rstrip().splitlines()
    if _YES_NO.search(lines[-1] if lines else ""):
        return _yes_no_prompt(lines)
    return _buttons_prompt(lines, colour_lines) or _menu_prompt(lines)


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


def _buttons_prompt(lines: list[str], coloured: list[str] | None) -> PermissionPrompt | None:
    """OpenCode's ``△ Permission required`` over a row of buttons: a choice is as many
    Rights from the selected button (the first when it opens), then Enter."""
    title = next((i for i in range(len(lines) - 1, -1, -1) if _BUTTONS_TITLE.match(lines[i])), None)
    if title is None:
        return None
    row = next((i for i in range(title + 1, len(lines)) if _BUTTONS_HINT.search(lines[i])), None)
    if row is None:
        return None
    labels: list[str] = []
    for label in re.split(r"\s{2,}", lines[row].strip(_BORDER)):
        if _BUTTONS_HINT.search(label + " "):
            break
        labels.append(label.strip())
    if not labels:
        return None
    body = [ln.strip(_BORDER).strip() for ln in lines[title + 1 : row]]
    question = re.sub(r"\n{3,}", "\n\n", "\n".join(["Permission required", *body]).strip())
    keys = tuple(" ".join([*["Right"] * i, "Enter"]) for i in range(len(labels)))
    row_coloured = _matching_line(coloured, lines[row]) if coloured is not None else None
    selected = _selected_button(row_coloured, labels) if row_coloured is not None else None
    return PermissionPrompt(question, tuple(labels), keys, 0 if selected is None else selected)


def _matching_line(coloured: list[str], plain: str) -> str | None:
    """The coloured line whose text is ``plain`` (the last such line)."""
    found = [line for line in coloured if strip_ansi(line).rstrip() == plain.rstrip()]
    return found[-1] if found else None


def _selected_button(line: str, labels: list[str]) -> int | None:
    """The one label of ``line`` drawn on a background none of the others has, if any."""
    backgrounds: list[str] = []
    text, bg, start = "", "", 0
    for m in [*_SGR.finditer(line), None]:
        end = m.start() if m is not None else len(line)
        chunk = line[start:end]
        for label in labels[len(backgrounds) :]:
            if label in text + chunk and label not in text:
                backgrounds.append(bg)
                break
        text += chunk
        if m is None:
            break
        params = m.group(1).split(";")
        for i, param in enumerate(params):
            if param == "48" and i + 2 < len(params):
                bg = ";".join(params[i : i + 3])
            elif param in ("0", "49", ""):
                bg = ""
        start = m.end()
    if len(backgrounds) != len(labels):
        return None
    unique = [i for i, b in enumerate(backgrounds) if backgrounds.count(b) == 1]
    return unique[0] if len(unique) == 1 else None


def _yes_no_prompt(lines: list[str]) -> PermissionPrompt:
    """Aider's ``Run shell command? (Y)es/(N)o [Yes]:``: the command(s) above it, then the
    question; answered by the letter and Enter (it reads a line)."""
    last = lines[-1]
    question = last[: _YES_NO.search(last).start()].strip()  # type: ignore[union-attr]

    def part_of_it(i: int) -> bool:  # (Aider's commands run up to a blank line or its rule)
        return bool(lines[i].strip()) and not _AIDER_ABOVE_STOP.match(lines[i])

    top = len(lines) - 1
    while top > 0 and len(lines) - 1 - top < QUESTION_MAX_LINES and part_of_it(top - 1):
        top -= 1
    hidden = 0
    while top - hidden > 0 and part_of_it(top - hidden - 1):
        hidden += 1
    kept = [ln.rstrip() for ln in lines[top : len(lines) - 1]]
    above = "\n".join([lines_cut_mark(hidden), *kept] if hidden else kept).strip()
    text = f"{above}\n{question}".strip() if above else question
    return PermissionPrompt(text, ("Yes", "No"), ("y Enter", "n Enter"))


def _question_above(lines: list[str], first_choice: int) -> str:
    """The dialog's text between the rule (or tool header) above it and its first choice: its
    last :data:`QUESTION_MAX_LINES` lines, under a mark saying how many more it has."""
    top = _dialog_top(lines, first_choice, QUESTION_MAX_LINES)
    body = _dialog_text(lines[top:first_choice])
    hidden = _hidden_above(lines, top)
    text = "\n".join(body).strip()
    if hidden and text:
        text = f"{lines_cut_mark(hidden)}\n{text}"
    return re.sub(r"\n{3,}", "\n\n", text)


def _dialog_top(lines: list[str], below: int, max_lines: int | None) -> int:
    """The first line of the dialog above line ``below``: under the rule over it, at its
    tool header, or ``max_lines`` up (None: at most the screen's top)."""
    top = below
    while top > 0 and (max_lines is None or below - top < max_lines):
        line = lines[top - 1]
        if _RULE_LINE.match(line):
            break
        top -= 1
        if _TOOL_HEADER.match(line):
            break
    return top


def _dialog_text(lines: list[str]) -> list[str]:
    """The text of dialog lines: borders, dividers and lines of a box left out."""
    return [
        ln.strip(_BORDER).strip()
        for ln in lines
        if not _DIVIDER_LINE.match(ln) and not (ln.strip() and _BOX_ONLY.match(ln))
    ]


def _hidden_above(lines: list[str], top: int) -> int:
    """How many lines with text the dialog has above line ``top`` (0 when ``top`` is its
    start). Up to the rule or tool header above it when the screen shows one; without one
    (Codex draws none), the lines of text right above, up to a blank line."""
    if top == 0 or _RULE_LINE.match(lines[top - 1]) or _TOOL_HEADER.match(lines[top]):
        return 0
    start = _dialog_top(lines, top, None)
    framed = start > 0 or bool(_TOOL_HEADER.match(lines[0]))
    if not framed:
        start = top
        while start > 0 and lines[start - 1].strip():
            start -= 1
    return sum(1 for ln in _dialog_text(lines[start:top]) if ln)


@dataclass(frozen=True)
class DialogReader:
    """How one kind's permission dialogs are read off its screen (its ``permission``):
    ``read`` the prompt a screen shows (None: none), given the same screen with its colours
    where ``needs_colours`` says the dialog shows its selection by colour alone."""

    read: Callable[[AgentProfile, str, str | None], PermissionPrompt | None]
    needs_colours: Callable[[str], bool]


DIALOGS: Final = DialogReader(read_permission_prompt, needs_colours)
"""The shared reader: every dialog shape above, the kind's ``waiting_markers`` saying when."""


@dataclass(frozen=True)
class ToolRequest:
    """The tool a permission prompt is about, from the agent's own hook (Claude Code's
    ``PermissionRequest``: ``tool_name``, ``tool_input``): ``line`` says it as Claude writes
    a tool call, ``Bash(touch made)``, with the whole command (never cut: the hook's payload
    is bounded by the channel, ``MAX_PAYLOAD_BYTES``), characters that could hide part of
    it written as escapes (:func:`visible`)."""

    tool: str
    input: Mapping[str, Any]
    line: str


_HIDING_CHARS: Final = lazy_compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
    "\U000e0000-\U000e007f]"
)
"""Characters that hide or reorder what a reader sees of a command: controls but the line
break and tab (a carriage return or an escape sequence draws over the text before it),
zero-width characters, bidi controls, Unicode tag characters."""


def visible(text: str) -> str:
    """``text`` with every character that could hide part of it written as an escape
    (``\\r``, ``\\x1b``, ``\\u202e``): what a person approves is what will run."""
    return _HIDING_CHARS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


_TOOL_SUMMARY_KEYS: Final = ("command", "file_path", "path", "url", "pattern", "query")


def tool_request(payload: Mapping[str, Any]) -> ToolRequest | None:
    """The tool named in a ``PermissionRequest`` payload, or None when it names none."""
    tool = payload.get("tool_name")
    if not isinstance(tool, str) or not tool:
        return None
    given = payload.get("tool_input")
    tool_input: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    summary = next(
        (v for k in _TOOL_SUMMARY_KEYS if isinstance(v := tool_input.get(k), str) and v), None
    )
    if summary is None and tool_input:
        summary = json.dumps(dict(tool_input), ensure_ascii=False, sort_keys=True)
    # Whole, however long: the dialog on screen may cut or wrap a command, and what a
    # person approves is the whole of it (its end, ``| sh``, may be what matters).
    line = visible(f"{tool}({summary})" if summary is not None else tool)
    return ToolRequest(tool, dict(tool_input), line)


def with_tool_line(question: str, request: ToolRequest) -> str:
    """``question`` with the tool's line above it, unless it shows the tool's input already
    (2.1.197 shows the command in its dialog; 2.1.332 above it, off the dialog)."""
    summary = request.line[len(request.tool) + 1 : -1] if request.line.endswith(")") else ""
    if summary and summary in question:
        return question
    return f"{request.line}\n{question}"
