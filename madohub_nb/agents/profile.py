"""The agent profile: what the toolkit knows about how an agent looks and takes input.

How to recognise the agent's process, what its screen looks like when it is
busy, idle or waiting for a permission, which parts of the screen are chrome,
and how it wants input submitted. The facts come from REAL-AGENTS.md and the
captured screens in ``fixtures/real/screens/``; OpenCode's from its real 1.18.33
TUI (tests/real_agents); Gemini CLI's, Copilot CLI's and Pi's from their real screens in
``tests/fixtures/screens/<kind>/``, Amp's too (offline against ``testing.fake_amp``). Nothing
else in the package should branch on an agent's kind: read the profile instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, get_args

from ..model import EXTRACTION_METHODS, ExtractionMethod
from .regex import lazy_compile
from .screen import clean_screen, input_text

Pattern = re.Pattern[str]

RULE: Final = r"─{4,}"
"""A horizontal rule of box-drawing dashes, as most agents draw around their input box."""

ScreenState = Literal["busy", "waiting", "idle", "unknown"]
SCREEN_STATES: Final[tuple[str, ...]] = get_args(ScreenState)
"""What :func:`screen_state` can answer (a subset of ``model.TILE_STATES``)."""

EXTRACTORS: Final = EXTRACTION_METHODS

SHELL_COMMANDS: Final = ("bash", "zsh", "sh", "fish", "dash", "ksh", "mksh", "tcsh", "csh", "ash")
"""Command names of interactive shells (``#{pane_current_command}``, process names)."""
COMMAND_READERS: Final = (
    *SHELL_COMMANDS,
    *("pwsh", "nu", "xonsh", "elvish", "yash", "oksh", "busybox"),  # more shells
    *("node", "nodejs", "bun", "deno", "python", "pypy", "ipython", "ruby", "irb", "perl"),
    *("php", "lua", "luajit", "tclsh", "julia", "ghci", "guile", "racket", "sbcl", "erl", "iex"),
)
"""Programs that run what is typed at their prompt as commands: shells and interpreters
(names without a version: ``python3.12`` is ``python``). As a pane's reader they always
need the user's opt-in (``allow_shell``), whatever profile a tile has."""


def command_name(name: str) -> str:
    """A program's name as :data:`COMMAND_READERS` spells it: ``/usr/bin/python3.12`` is
    ``python``, ``-bash`` (a login shell) is ``bash``."""
    return re.sub(r"[\d.]+$", "", name.strip().rsplit("/", 1)[-1].lower().lstrip("-"))


def is_command_reader(name: str) -> bool:
    """True for the name of a shell or an interpreter (:data:`COMMAND_READERS`)."""
    return command_name(name) in COMMAND_READERS


@dataclass(frozen=True)
class AgentProfile:
    """Everything agent-specific: process names, screen markers, chrome, submit keys, extractor.

    Screen markers are regexes (``re.MULTILINE``) over the last
    ``marker_tail_lines`` non-blank lines of the ANSI-stripped screen, joined
    by newlines. Chrome patterns are substituted away, in order, over the
    whole cleaned screen (blank lines kept).
    """

    kind: str
    process_tokens: tuple[str, ...]
    """Words that identify the agent's process by its command name (``claude``, ``codex``…)."""
    busy_markers: tuple[Pattern, ...]
    idle_markers: tuple[Pattern, ...]
    waiting_markers: tuple[Pattern, ...]
    """A permission or choice prompt that needs a person (or a route) to answer."""
    title_busy_markers: tuple[Pattern, ...]
    """Busy signs in the pane title (``#{pane_title}``), e.g. Amp's Braille spinner."""
    no_marker_state: ScreenState
    """The state when no marker matches a non-empty screen."""
    idle_commands: tuple[str, ...]
    """If not empty: idle only while the pane's foreground command is one of these."""
    marker_tail_lines: int
    """How many non-blank lines from the bottom the markers look at."""
    chrome_patterns: tuple[Pattern, ...]
    answer_start: Pattern | None
    """First line of an answer block on screen (the reply bullet); None: no bullets."""
    answer_exclude: Pattern | None
    """First lines of bullet blocks that are tool calls or status, not answers."""
    tool_output: Pattern | None
    """Lines that mark a bullet block as a tool call (its output lines)."""
    input_line: Pattern | None
    """The input box over the cleaned screen; group ``text`` holds what is typed in it."""
    input_placeholders: tuple[Pattern, ...]
    """Texts shown in an empty input box (full match)."""
    paste_labels: tuple[Pattern, ...]
    """How the box shows a long paste instead of its text (searched for): the agent has
    read the prompt, so delivery presses submit without waiting for the text to show."""
    submit_keys: tuple[str, ...]
    """Keys for ``tmux send-keys`` after the content: ``\\r`` is Enter, ``\\n`` is Ctrl-J."""
    pre_submit_delay_ms: int
    """Pause between the last typed line and the first submit key."""
    between_submit_keys_ms: int
    newline_key: str | None
    """tmux key that inserts a line break without submitting; None: every line is submitted."""
    typed_tab: str
    """What a tab in typed content is sent as. Where the Tab key is a command (completion, a
    mode switch) a typed tab never reaches the prompt, so it is sent as spaces."""
    uses_bracketed_paste: bool
    """``paste-buffer -p`` inserts multi-line text without submitting it."""
    executes_input: bool
    """Typed text runs as commands (a shell): routes must opt in."""
    extractor: ExtractionMethod
    """How the last response is read: ``jsonl`` (Claude), ``rollout`` (Codex), ``session`` (the
    agent's own record: agents/records.py), ``terminal``."""
    writes_status_file: bool = False
    """Keeps a live status file (Claude's ``sessions/<pid>.json``): idle, busy, waiting."""

    @property
    def runs_as_process(self) -> bool:
        """True for agents found by their process; False for a plain shell (the pane itself)."""
        return bool(self.process_tokens)

    ready_quiet_ms: int | None = None
    """Ready only after this long without output (a program without markers); None: markers."""
    answer_after_input: bool = False
    """The answer is the output that followed the last typed input (not the bottom lines)."""
    command_submit_keys: tuple[str, ...] | None = None
    """Submit keys for a slash command (one line starting with ``/``); None: ``submit_keys``.
    Claude Code runs a command picked from its ``/`` menu on the first Enter and queues the
    second, running the command twice (observed with 2.1.197, tests/real_agents)."""
    foreground_kind: str | None = None
    """The profile that applies while the pane's foreground command is not one of
    ``idle_commands`` (a shell running a REPL, ``cat`` or ``psql``: ``terminal``)."""
    answer_in_scrollback: bool = False
    """The agent prints its conversation into the terminal's scrollback (no full-screen
    TUI): a screen answer is read from the scrollback too, so a long one is whole."""
    records_turn_ms: bool = False
    """The record ends each turn with its duration (Claude's ``turn_duration``, Codex's
    ``task_complete``), which may land after the end-of-turn hook has fired."""

    @property
    def has_transcript(self) -> bool:
        """True when the agent writes a transcript file the extractor can read."""
        return self.extractor != "terminal"

    def input_area(self, screen: str) -> str:
        """The text in the input box, or the bottom lines of the screen when no box is known.

        For checking that a typed prompt left the input line: search it for the
        end of the prompt. A placeholder in an empty box reads as "".
        """
        text = input_text(screen, self)
        return text if text is not None else screen_tail(self, screen)

    @property
    def submits_each_line(self) -> bool:
        """True when a line break in typed text submits that line (no newline key)."""
        return self.newline_key is None


def rx(pattern: str, flags: int = 0) -> Pattern:
    """A marker regex: ``^`` and ``$`` work per line."""
    return lazy_compile(pattern, re.MULTILINE | flags)


def line(pattern: str) -> Pattern:
    """Chrome that is one whole line matching ``pattern``; the line goes with its newline."""
    return lazy_compile(rf"^(?:{pattern})$\n?", re.MULTILINE)


def from_line_to_end(pattern: str) -> Pattern:
    """Chrome from the first line matching ``pattern`` down to the bottom of the screen."""
    return lazy_compile(rf"^(?:{pattern})[\s\S]*\Z", re.MULTILINE)


def screen_tail(profile: AgentProfile, screen: str) -> str:
    """The last ``profile.marker_tail_lines`` non-blank lines of the cleaned screen."""
    lines = [line for line in clean_screen(screen).split("\n") if line.strip()]
    return "\n".join(lines[-profile.marker_tail_lines :])
