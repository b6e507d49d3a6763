"""Screen text: strip escape codes, remove an agent's TUI chrome, make routed text safe to type.

Pure functions over strings. The agent-specific patterns (rules, footers,
spinners, answer bullets) come from :mod:`madohub_nb.agents.profiles`, the one
table of agent facts; this module only applies them.
"""

from __future__ import annotations

import re
from typing import Protocol

from .. import defaults
from ..errors import MadohubValueError
from .regex import lazy_compile


class ScreenRules(Protocol):
    """The parts of an agent's profile (``agents/profile.py``) that this module applies."""

    @property
    def chrome_patterns(self) -> tuple[re.Pattern[str], ...]: ...
    @property
    def answer_start(self) -> re.Pattern[str] | None: ...
    @property
    def answer_exclude(self) -> re.Pattern[str] | None: ...
    @property
    def tool_output(self) -> re.Pattern[str] | None: ...
    @property
    def input_line(self) -> re.Pattern[str] | None: ...
    @property
    def input_placeholders(self) -> tuple[re.Pattern[str], ...]: ...


# ESC-introduced sequences (ECMA-48), in the order they must be tried.
ESCAPE_SEQUENCE = lazy_compile(
    r"""
      \x1b\[ (?P<params>[0-?]*) [ -/]* (?P<final>[@-~])  # CSI: colours, cursor moves, paste marks
    | \x1b\[ [0-?]* [ -/]* \Z                       # a CSI cut off at the end of a capture
    | \x1b\] [^\x07\x1b]* (?:\x07|\x1b\\|(?=\x1b)|\Z)  # OSC: titles, links, clipboard (BEL or ST)
    | \x1b[PX^_] [\s\S]*? (?:\x1b\\|\x07|\Z)        # DCS, SOS, PM, APC strings up to ST
    | \x1b [ -/]+ [0-~]                             # nF: charset selects ESC ( B, ESC % G, ESC # 8
    | \x1b [0-~]                                    # single-character: ESC 7, ESC =, ESC M, ESC c
    | \x1b                                          # a lone or cut-off ESC
    """,
    re.VERBOSE,
)

# The same sequences introduced by 8-bit C1 controls (CSI 0x9b, OSC 0x9d, DCS 0x90, ...).
_C1_SEQUENCE = lazy_compile(
    r"""
      \x9b [0-?]* [ -/]* [@-~]
    | \x9d [^\x07\x1b\x9c]* (?:\x07|\x9c|\x1b\\|\Z)
    | [\x90\x98\x9e\x9f] [\s\S]*? (?:\x9c|\x1b\\|\Z)
    """,
    re.VERBOSE,
)

# BEL and shift-out/shift-in (charset switching) carry no text.
_STRAY_CONTROLS = lazy_compile(r"[\x07\x0e\x0f]")

# Every control character except newline and tab: C0, DEL and C1.
CONTROL_CHARS = lazy_compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# Bracketed-paste markers whose ESC was removed elsewhere ("[200~" starts a paste, "[201~" ends it).
_PASTE_MARK_REMNANT = lazy_compile(r"\[20[01]~")

_BLANK_RUN = lazy_compile(r"\n{3,}")

# Invisible characters that can steer a model or reorder what a reader sees: Unicode tag
# characters (U+E0000–E007F, "ASCII smuggling") and bidi embeddings, overrides and isolates.
# ZWJ (U+200D) and variation selectors stay: emoji sequences need them.
_INVISIBLE = lazy_compile("[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069]")

# Lone surrogates: not text, and not encodable as UTF-8.
_SURROGATE = lazy_compile("[\ud800-\udfff]")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (CSI, OSC, DCS/SOS/PM/APC, ESC x, charsets); keep the text."""
    # Each pass only where its lead character occurs (a flood of plain lines has none):
    # the checks are single scans in C, far cheaper than a regex tried at every offset.
    if "\x1b" in text:
        text = ESCAPE_SEQUENCE.sub("", text)
    if not text.isascii():
        text = _C1_SEQUENCE.sub("", text)
    if "\x07" in text or "\x0e" in text or "\x0f" in text:
        text = _STRAY_CONTROLS.sub("", text)
    return text


def clean_screen(text: str) -> str:
    """Screen text as a person reads it: no escape codes, no trailing spaces or blank lines."""
    text = strip_ansi(text).replace("\r\n", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _tidy(text: str) -> str:
    """Collapse runs of blank lines to one and trim blank lines at both ends."""
    return _BLANK_RUN.sub("\n\n", text).strip("\n")


def remove_chrome(screen: str, profile: ScreenRules) -> str:
    """The conversation part of a screen: the profile's banners, input box, footers, spinners removed."""
    text = clean_screen(screen)
    for pattern in profile.chrome_patterns:
        text = pattern.sub("", text)
    return _tidy("\n".join(line.rstrip() for line in text.split("\n")))


def _answer_blocks(lines: list[str], start: re.Pattern[str]) -> list[list[str]]:
    """Blocks that begin with an answer bullet and go on with indented or blank lines.

    A "bullet" that is only an indent (OpenCode indents its answers by 5 spaces)
    starts a block only where none is open: every line of the answer has it.
    """
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in lines:
        bullet = start.match(line)
        if bullet and (current is None or bullet.group().strip()):
            current = [line]
            blocks.append(current)
        elif current is not None and (not line or line[0] in " \t"):
            current.append(line)
        else:
            current = None
    return blocks


def _headless_block(lines: list[str], start: re.Pattern[str]) -> list[str]:
    """The first lines that may continue an answer whose bullet is not shown: blank or
    indented at least as deep as the first of them, up to the first bullet."""
    block: list[str] = []
    depth: int | None = None
    for line in lines:
        if start.match(line):
            break
        indent = len(line) - len(line.lstrip(" "))
        if line and depth is None:
            if indent == 0:
                break
            depth = indent
        elif line and depth is not None and indent < depth:
            break
        block.append(line)
    return block if depth is not None else []


def _dedent(block: list[str]) -> str:
    depth = min(len(ln) - len(ln.lstrip(" ")) for ln in block if ln)
    return _tidy("\n".join(ln[depth:] for ln in block))


def _is_answer(block: list[str], profile: ScreenRules) -> bool:
    """False for tool calls and status blocks (by their first line or their tool-output lines)."""
    if profile.answer_exclude is not None and profile.answer_exclude.match(block[0]):
        return False
    tool_output = profile.tool_output
    return tool_output is None or not any(tool_output.match(line) for line in block[1:])


def _block_text(block: list[str], start: re.Pattern[str]) -> str:
    """The block's text: bullet removed, continuation lines dedented by the bullet's width."""
    match = start.match(block[0])
    width = match.end() if match else 0
    lines = [block[0][width:]]
    for line in block[1:]:
        indent = len(line) - len(line.lstrip(" "))
        lines.append(line[min(indent, width) :])
    return _tidy("\n".join(lines))


def terminal_last_response(
    screen: str, profile: ScreenRules, max_lines: int = defaults.FULL_OUTPUT_LINES
) -> str:
    """The agent's last answer as read from the screen ("" when none is visible).

    For agents with answer bullets (Claude ``● ``, Codex ``• ``) it is the last
    bullet block that is not a tool call or status line (or, when no bullet is left
    on screen, the indented lines at its top that continue one); for the others
    (shell, unknown TUIs) the last ``max_lines`` lines of the screen without chrome.
    """
    text = remove_chrome(screen, profile)
    start = profile.answer_start
    if start is None:
        return _tidy("\n".join(text.split("\n")[-max_lines:]))
    lines = text.split("\n")
    answers = [b for b in _answer_blocks(lines, start) if _is_answer(b, profile)]
    if answers:
        return _block_text(answers[-1], start)
    # No bullet left on screen: a long answer's bullet scrolled off (Qwen Code clears the
    # scrollback as it redraws). What is still visible of it is the answer read here.
    rest = _headless_block(lines, start)
    top = clean_screen(screen).lstrip("\n").split("\n", 1)[0]
    off_the_top = any(rest) and next(line for line in rest if line) == top
    tool = profile.tool_output
    if off_the_top and (tool is None or not any(tool.match(line) for line in rest)):
        return _dedent(rest)
    return ""


def input_text(screen: str, profile: ScreenRules) -> str | None:
    """What is typed in the agent's input box: "" when empty, None when no box is recognised.

    Delivery uses it to see whether a prompt really left the input line. A
    placeholder the agent shows in an empty box counts as empty.
    """
    if profile.input_line is None:
        return None
    matches = list(profile.input_line.finditer(clean_screen(screen)))
    if not matches:
        return None
    first, *rest = matches[-1].group("text").split("\n")
    text = "\n".join([first, *(line[2:] if line.startswith("  ") else line for line in rest)])
    text = text.strip()
    if any(p.fullmatch(text) for p in profile.input_placeholders):
        return ""
    return text


def remove_invisible(text: str) -> tuple[str, int]:
    """``text`` without tag characters and bidi override/isolate controls, and how many went."""
    cleaned, removed = _INVISIBLE.subn("", text)
    return cleaned, removed


def sanitize_for_typing(text: str | bytes) -> str:
    """Routed content made safe to type into a pane: only printable text, newlines and tabs.

    Removes escape sequences of every kind (colours, titles, clipboard writes,
    bracketed-paste markers and their ESC-less remnants), C0 and C1 controls
    (^C, ^D, ^Z, ESC, BEL, ...) and DEL; CRLF and CR become LF. Bytes are
    decoded as UTF-8 with invalid sequences replaced; so are lone surrogates
    (a JSON ``\\udc9b``, a ``surrogateescape`` decode), which tmux would
    otherwise type as raw bytes (``\\udc9b`` as the C1 control 0x9b). Unicode
    tag characters and bidi controls go too (:func:`remove_invisible`).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = _SURROGATE.sub("\ufffd", text)
    text = _INVISIBLE.sub("", text)
    text = ESCAPE_SEQUENCE.sub("", text)
    text = _C1_SEQUENCE.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = CONTROL_CHARS.sub("", text)
    # Removing one marker can join the pieces of another ("[20[200~0~"): repeat until none is left.
    previous = None
    while previous != text:
        previous, text = text, _PASTE_MARK_REMNANT.sub("", text)
    return text


def cap_text(text: str, max_chars: int = defaults.MAX_ROUTED_CHARS) -> str:
    """``text`` cut to its first ``max_chars`` characters, with a visible marker when cut."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise MadohubValueError(
            f"max_chars must be a whole number of at least 1, got {max_chars!r}"
        )
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    return f"{text[:max_chars]}\n" + defaults.CUT_MARKER.format(cut=cut)


ANSWER_HISTORY_LINES = 5000
"""Scrollback searched for the last typed input when its row is no longer known."""


def answer_after_input(
    text: str, typed: str, ready_pattern: re.Pattern[str] | None = None, *, last: bool = False
) -> str | None:
    """The output that followed ``typed`` in ``text`` (screen or history), or None if not found.

    The anchor is the first line (``last=True``: the last one) holding the last
    non-blank typed line: the echo of the input (``>>> print(1)``; for ``cat``,
    its own copy follows). A final line matching ``ready_pattern`` (the
    program's prompt back) and trailing blank lines are not part of the answer.
    """
    probe = next((ln.strip() for ln in reversed(typed.splitlines()) if ln.strip()), "")
    if not probe:
        return None
    lines = strip_ansi(text).split("\n")
    hits = [i for i, line in enumerate(lines) if probe in line]
    if not hits:
        return None
    answer = lines[(hits[-1] if last else hits[0]) + 1 :]
    while answer and not answer[-1].strip():
        answer.pop()
    if answer and ready_pattern is not None and ready_pattern.search(answer[-1]):
        answer.pop()
    return "\n".join(line.rstrip() for line in answer).strip("\n")
