"""Agent profiles: what the toolkit knows about each kind of agent, in one table.

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

from .. import settings
from ..errors import MadohubValueError
from ..model import EXTRACTION_METHODS, ExtractionMethod
from .regex import lazy_compile
from .screen import clean_screen, input_text, strip_ansi

Pattern = re.Pattern[str]

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

    @property
    def has_transcript(self) -> bool:
        """True when the agent writes a transcript file the extractor can read."""
        return self.extractor != "terminal"

    @property
    def records_turn_ms(self) -> bool:
        """The record ends each turn with its duration (Claude's ``turn_duration``, Codex's
        ``task_complete``), which may land after the end-of-turn hook has fired."""
        return self.extractor in ("jsonl", "rollout")

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


def _rx(pattern: str, flags: int = 0) -> Pattern:
    """A marker regex: ``^`` and ``$`` work per line."""
    return lazy_compile(pattern, re.MULTILINE | flags)


def _line(pattern: str) -> Pattern:
    """Chrome that is one whole line matching ``pattern``; the line goes with its newline."""
    return lazy_compile(rf"^(?:{pattern})$\n?", re.MULTILINE)


def _from_line_to_end(pattern: str) -> Pattern:
    """Chrome from the first line matching ``pattern`` down to the bottom of the screen."""
    return lazy_compile(rf"^(?:{pattern})[\s\S]*\Z", re.MULTILINE)


# --- Claude Code ------------------------------------------------------------
# Screens: fixtures/real/screens/0*.txt (2.1.197; 08 is 2.1.332).
_RULE = r"─{4,}"
_CLAUDE_GLYPHS = "·✢✳✶✻✽"
_CLAUDE_BULLET = "[●⏺]"
_CLAUDE_MENU_QUESTION = r"(?:Do you want to|Do you trust|Would you like to)"
# The logo banner: "▐▛███▜▌   Claude Code v2.1.197" and the two logo lines below it (model, cwd).
_CLAUDE_BANNER = lazy_compile(
    r"^ ?[\u2580-\u259f][^\n]*Claude Code v\d[^\n]*(?:\n {0,2}[\u2580-\u259f][^\n]*){0,2}\n?",
    re.MULTILINE,
)

CLAUDE: Final = AgentProfile(
    kind="claude",
    process_tokens=("claude",),
    busy_markers=(
        # "esc to interrupt" in the footer, i.e. below the last rule (02, 04, 05).
        _rx(rf"^[ \t]*esc to interrupt\b(?![\s\S]*^{_RULE})"),
        # Present-tense spinner "✽ Moseying…"; the past-tense "✻ Crunched for 6s" has no "…".
        _rx(rf"^[{_CLAUDE_GLYPHS}] [^\n…]{{1,80}}…"),
    ),
    idle_markers=(
        # The ❯ input line between two rules; the footer differs by version (01, 03, 07, 08).
        _rx(rf"^{_RULE}\n❯[^\n]*(?:\n(?!{_RULE})[^\n]*)*?\n{_RULE}"),
    ),
    waiting_markers=(
        # "Do you want to proceed?" over a "❯ 1. Yes" menu, in place of the input box (06):
        # nothing below it is a rule, so a reply quoting the dialog does not count.
        _rx(
            rf"^[ \t]*{_CLAUDE_MENU_QUESTION}[^\n]*\?[ \t]*\n(?:[^\n]*\n){{0,3}}?[ \t]*❯ \d+\. "
            rf"(?![\s\S]*^{_RULE})"
        ),
    ),
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=20,
    chrome_patterns=(
        _from_line_to_end(_RULE),  # input box, footers (any version), permission dialog
        _CLAUDE_BANNER,
        _line(r"▎[^\n]*"),  # notices under the banner (08)
        _line(rf"[{_CLAUDE_GLYPHS}] [^\n]*"),  # spinner and "✻ Crunched for 6s"
        _line(r"[ \t]+⎿[^\S\n]+Tip: [^\n]*"),  # tips under the spinner (04, 05; an NBSP follows ⎿)
        _line(r"[^\n]*· /effort"),  # effort indicator above the box (08)
    ),
    answer_start=_rx(rf"^{_CLAUDE_BULLET} "),
    # "● Bash(…)", "● mcp - tool (MCP)(…)", "● Read 2 files (ctrl+o to expand)".
    answer_exclude=_rx(
        rf"^{_CLAUDE_BULLET} (?:[\w.:-]+(?: - [^\n(]+)?(?: \(MCP\))?\(|[^\n]*\(ctrl\+o to expand\))"
    ),
    tool_output=_rx(r"^[ \t]+⎿"),
    input_line=_rx(rf"^{_RULE}\n❯[ \xa0]?(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(_rx(r"Press up to edit queued messages"), _rx(r'Try "[^\n]*"')),
    paste_labels=(_rx(r"\[Pasted text #\d+(?: \+\d+ lines)?\]"),),  # REAL-AGENTS.md, "Input"
    submit_keys=("\r", "\r"),
    pre_submit_delay_ms=500,
    between_submit_keys_ms=0,
    newline_key="C-j",
    typed_tab="    ",  # typed: swallowed; pasted: Claude turns it into 4 spaces
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="jsonl",
    writes_status_file=True,
    command_submit_keys=("\r",),
)

# --- Codex CLI --------------------------------------------------------------
# Screens: fixtures/real/screens/codex_*.txt (0.171.0).
_CODEX_PROMPT = "[›»]"
# The composer is the last prompt line with no reply bullet below it: only the footer follows.
_CODEX_COMPOSER_TO_END = rf"^{_CODEX_PROMPT} [^\n]*(?:\n(?!• )[^\n]*)*\Z"
# Ready: a status line with " · " under the composer ("fake-model default · /cwd",
# "← for agents · ? for shortcuts"). For ~4 s after start-up (while its app-server daemon
# starts) Codex 0.171.0 shows the composer over a bare "? for shortcuts", or over nothing once
# a draft is typed, and takes no submit: text typed then stays in the composer (observed).
_CODEX_READY_COMPOSER = (
    rf"^{_CODEX_PROMPT} [^\n]*(?:\n(?!• )[^\n]*)*?\n[^\n]* · [^\n]*(?:\n(?!• )[^\n]*)*\Z"
)
# "• Working (2s • esc to interrupt)", or a reasoning header in its place.
_CODEX_STATUS = r"• [^\n]*\(\d[^\n]*esc to interrupt\)"

CODEX: Final = AgentProfile(
    kind="codex",
    process_tokens=("codex",),
    busy_markers=(_rx(rf"^{_CODEX_STATUS}"),),
    # Not "? for shortcuts": it stays visible while busy (codex_03). The placeholder text
    # rotates between versions and runs, and a draft replaces it (codex_01), so the
    # composer is recognised by its place above the footer.
    idle_markers=(_rx(_CODEX_READY_COMPOSER),),
    waiting_markers=(
        _rx(
            r"^[ \t]*(?:Would you like to|Do you want to|Do you trust|Allow )[^\n]*\?[ \t]*\n"
            rf"(?:[^\n]*\n){{0,8}}?[ \t]*{_CODEX_PROMPT} \d+\. "
        ),
    ),
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        lazy_compile(_CODEX_COMPOSER_TO_END, re.MULTILINE),  # composer, model line, footer
        lazy_compile(r"^[ \t]*>_ OpenAI Codex[^\n]*(?:\n[ \t]{3,}\S[^\n]*)?\n?", re.MULTILINE),
        _line(r"[╭╰│][^\n]*"),  # boxed session header of other versions
        _line(_CODEX_STATUS),
        _line(r"[ \t]*Worked for \S+ • \d{1,2}:\d{2}[^\n]*|─+ Worked for [^\n]*"),
    ),
    answer_start=_rx(r"^• "),
    answer_exclude=_rx(r"^• Working\b"),
    tool_output=_rx(r"^[ \t]+└"),  # "• Ran ls" / "  └ a b"
    input_line=_rx(rf"^{_CODEX_PROMPT} (?P<text>[^\n]*(?:\n[ \t]+\S[^\n]*)*)(?:\n(?!• )[^\n]*)*\Z"),
    input_placeholders=tuple(
        _rx(re.escape(text))
        for text in (
            "Ask Codex to do anything",
            "Explain this codebase",
            "Summarize recent commits",
            "Implement {feature}",
            "Find and fix a bug in @filename",
            "Write tests for @filename",
            "Improve documentation in @filename",
            "Run /review on my current changes",
            "Use /skills to list available skills",
        )
    ),
    paste_labels=(_rx(r"\[Pasted Content \d+ chars\]"),),  # codex-rs, a paste over 1,000 chars
    submit_keys=("\r", "\r"),
    # An Enter right after typed text is swallowed as part of a paste burst (REAL-AGENTS.md).
    pre_submit_delay_ms=800,
    between_submit_keys_ms=200,
    newline_key="C-j",
    typed_tab="    ",  # typed: swallowed (pasted tabs arrive)
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="rollout",
)

# --- Amp (observed 0.0.1790142911-g7618fb, npm @ampcode/cli, tests/fixtures/screens/amp/) ----
# Screens (100 columns), offline against madohub_nb.testing.fake_amp: at start the dotted logo
# with "Welcome to Amp" and "ctrl+o for commands · ? for shortcuts" beside it; then the
# conversation: a prompt " ┃ text" (one "┃" line per prompt line), the answer as plain text one
# space in. At the bottom a rounded input box "╭── … medium ─╮" (mode in the top border, cwd in
# the bottom one), a draft in it as "│ text │" rows. Busy: "∼ Connecting" or "≋ Waiting" at
# the box's lower-left border, and the pane title a Braille spinner ("⠪ amp - <cwd>"), empty
# once idle. An Enter right after typed text submits; Ctrl-J adds a draft line; a bracketed
# paste inserts lines. Its answers live in its backend only: the screen is the only record.
_AMP_BOX_TOP = r"╭─[^\n]*╮"

AMP: Final = AgentProfile(
    kind="amp",
    process_tokens=("amp",),  # one native process named "amp"
    busy_markers=(_rx(r"^╰ [∼≋] \S"), _rx(r"esc to cancel", re.IGNORECASE)),
    idle_markers=(_rx(rf"^{_AMP_BOX_TOP}\n(?:│[^\n]*│\n)+╰─[^\n]*╯"),),
    waiting_markers=(_rx(r"waiting for approval", re.IGNORECASE),),  # (not observed: no tools)
    title_busy_markers=(lazy_compile("[\u2801-\u28ff]"),),  # Braille spinner in the pane title
    # A screen without its box (a stand-in, a cut-off pane) is idle once the busy signs are gone.
    no_marker_state="idle",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(_AMP_BOX_TOP),  # the input box
        _line(r"[ •●:·.]*[•●:·.][ •●:·.]*(?:(?:Welcome to Amp|ctrl\+o for commands)[^\n]*)?"),
        lazy_compile(r"\A[\s\S]*^ ┃ [^\n]*\n?", re.MULTILINE),  # up to the last prompt line
        lazy_compile(r"^ ", re.MULTILINE),  # every answer line is one space in
    ),
    answer_start=None,  # what is left is the answer: plain lines
    answer_exclude=None,
    tool_output=None,
    input_line=None,  # the box's "│ … │" rows: not read (delivery checks the bottom lines)
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),  # observed: one Enter right after the text submits
    pre_submit_delay_ms=200,  # a margin for slow panes
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="\t",  # not observed
    uses_bracketed_paste=True,  # observed: a bracketed paste inserts lines, not submitted
    executes_input=False,
    extractor="terminal",  # no local record of answers (only prompts in history.jsonl)
)

# --- OpenCode (observed 1.18.33, npm opencode-ai) ----------------------------
# Screens (100 columns): the input box is a run of "┃" lines over a "╹▀▀▀" edge; its last "┃"
# line names the agent and model ("┃  Build · Fake model Fake"). The home screen shows the
# placeholder 'Ask anything… "Fix broken tests"' in it; in a session the empty box has none.
# Busy: "⬝⬝⬝■■■  esc interrupt" in the footer. Prompts are "┃" blocks, answers are indented
# 5 spaces and end with "▣  Build · Fake model · 3.3s". A wide pane (160 columns; not 100) gets
# a sidebar beside the conversation, which terminal extraction may then read too.
_OPENCODE_BOX_EDGE = r"[ \t]*╹▀"
_OPENCODE_BOX_LINE = r"[ \t]*┃[^\n]*\n"

OPENCODE: Final = AgentProfile(
    kind="opencode",
    process_tokens=("opencode",),
    busy_markers=(_rx(r"esc interrupt"),),
    # The box's bottom edge, which is drawn whenever the TUI takes input (busy is checked first).
    idle_markers=(_rx(rf"^{_OPENCODE_BOX_EDGE}"),),
    waiting_markers=(_rx(r"△ Permission required"),),  # screens/permission/opencode.txt
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(rf"{_OPENCODE_BOX_LINE}(?:{_OPENCODE_BOX_LINE})*{_OPENCODE_BOX_EDGE}"),
        lazy_compile(r"\A[\s\S]*^[ \t]*┃[^\n]*\n?", re.MULTILINE),  # up to the last prompt
        _line(r"[ \t]*▣ [^\n]*"),  # "▣  Build · Fake model · 3.3s"
    ),
    answer_start=_rx(r"^ {5}(?=\S)"),
    answer_exclude=None,
    tool_output=None,
    # Only the box's last draft line is captured: enough to see a prompt still sitting there.
    input_line=_rx(
        rf"^[ \t]*┃[ \t]*\n(?:{_OPENCODE_BOX_LINE})*?[ \t]*┃[ \t]?[ \t]?(?P<text>[^\n]*)\n"
        rf"[ \t]*┃[ \t]*\n[ \t]*┃  \S[^\n]*\n{_OPENCODE_BOX_EDGE}"
    ),
    input_placeholders=(_rx(r"Ask anything…[^\n]*"),),
    paste_labels=(),
    submit_keys=("\r", "\r"),
    pre_submit_delay_ms=500,
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # the footer says "tab agents": Tab switches the agent
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="session",  # its own record (agents/records.py), else the screen
)

# --- Qwen Code (observed 0.24.4, npm @qwen-code/qwen-code, OpenAI-compatible fake API) ----
# Screens (100 columns): an input box "> " between two rules, "  Type your message or
# @path/to/file" in it when empty; busy: "  .. Distracting you… (1s · esc to cancel)" above the
# box; prompts "  > text", answers "  ◆︎ text" (U+25C6 U+FE0E). Ctrl-J adds a draft line; a
# multi-line draft's lines end with a zero-width space.
_QWEN_BOX = rf"^{_RULE}\n>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?\n{_RULE}"

QWEN: Final = AgentProfile(
    kind="qwen",
    process_tokens=("qwen",),
    busy_markers=(_rx(r"esc to cancel\)"),),
    idle_markers=(_rx(_QWEN_BOX),),
    # "Allow execution of: 'touch'?" over "› 1. Yes, allow once", then "Waiting for user
    # confirmation..." (screens/permission/qwen*.txt: --approval-mode default, and auto mode
    # when its classifier cannot decide).
    waiting_markers=(
        _rx(
            r"^[ \t]*(?:Allow |Do you want |Apply this change)[^\n]*\?[ \t]*\n"
            r"(?:[^\n]*\n){0,3}?[ \t]*› \d+\. "
        ),
    ),
    title_busy_markers=(),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(_RULE),  # input box and footer
        _line(r"[^\n]*[│┌└┐┘╭╮╰╯][^\n]*"),  # logo box, notices in boxes
        _line(r"[ \t]*[▄█╔╗║╚╝═▀ ]+"),  # the logo's last line
    ),
    answer_start=_rx("^  \u25c6\ufe0e? "),
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(rf"^{_RULE}\n> ?(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(_rx(r"Type your message or @path/to/file"),),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=300,
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # Shift+Tab cycles modes; Tab completes
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="session",  # its own record (agents/records.py), else the screen
)

# --- Aider (observed 0.86.2, PyPI aider-chat, OpenAI-compatible fake API) ------------
# Screens (120 columns): a rule, then the prompt "> " (an edit mode prefixes it: "ask> ",
# "architect> ", "multi> "); a draft's later lines start "> " too. Busy: a "░█" scanner and
# "Waiting for openai/fake-model" under the submitted prompt, then the answer streams in as
# plain lines (no bullet), then "Tokens: 568 sent, 4 received." (and "Cost: …" when priced),
# a rule and the prompt again. Questions end "(Y)es/(N)o [Yes]:". Enter submits (Ctrl-J too);
# Alt-Enter adds a draft line; a bracketed paste inserts lines. Its history is markdown in
# the cwd (.aider.chat.history.md, .aider.input.history): the answer is read from the screen.
_AIDER_PROMPT = r"(?:[\w-]+(?: multi)?)?>"
_AIDER_LAST_RULE = rf"^{_RULE}$(?![\s\S]*^{_RULE}$)"

AIDER: Final = AgentProfile(
    kind="aider",
    process_tokens=("aider",),
    # The scanner line, below the last rule (an answer quoting it sits above a rule).
    busy_markers=(_rx(rf"^[ \t]*[░█#=]+[ \t]+Waiting for \S[^\n]*$(?![\s\S]*^{_RULE}$)"),),
    # A rule, then nothing but prompt lines to the bottom (an empty prompt or a draft).
    idle_markers=(
        _rx(rf"{_AIDER_LAST_RULE}\n{_AIDER_PROMPT}(?: [^\n]*)?(?:\n{_AIDER_PROMPT} [^\n]*)*\Z"),
    ),
    waiting_markers=(_rx(r"\(Y\)es/\(N\)o[^\n]*\[[^\]\n]*\]: ?[^\n]*\Z"),),
    title_busy_markers=(),
    no_marker_state="busy",  # streaming an answer or starting up: no prompt at the bottom
    idle_commands=(),
    marker_tail_lines=20,
    chrome_patterns=(
        lazy_compile(rf"{_AIDER_LAST_RULE}[\s\S]*\Z", re.MULTILINE),  # the prompt at the bottom
        # Up to the last submitted input: prompt lines under a rule (an answer's own "> "
        # quote lines are not under one).
        lazy_compile(
            rf"\A[\s\S]*^{_RULE}\n{_AIDER_PROMPT} [^\n]*\n(?:{_AIDER_PROMPT} [^\n]*\n)*",
            re.MULTILINE,
        ),
        _line(r"(?:Tokens|Cost): [^\n]*"),
        _line(r"(?:Aider v\d|Model: |Git repo: |Repo-map: |Analytics have been )[^\n]*"),
        _line(_RULE),
    ),
    answer_start=None,  # what is left is the answer: plain lines
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(
        rf"{_AIDER_LAST_RULE}\n{_AIDER_PROMPT} ?(?P<text>[^\n]*(?:\n{_AIDER_PROMPT} [^\n]*)*)\Z"
    ),
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=200,
    between_submit_keys_ms=0,
    newline_key="M-Enter",  # observed: Alt-Enter adds a line; Ctrl-J submits
    typed_tab="    ",  # Tab completes file names and commands
    uses_bracketed_paste=True,
    executes_input=False,
    extractor="session",  # its own record (agents/records.py), else the screen
    answer_in_scrollback=True,
)

# --- Gemini CLI (observed 0.61.0, npm @google/gemini-cli, tests/fixtures/screens/gemini/) -----
# Screens (100 columns): the logo banner, "Tips for getting started:", then the conversation:
# prompts " > text", answers "✦ text" with continuation lines indented 2. Below it a line
# "? for shortcuts" (right-aligned), a rule, " Shift+Tab to accept edits", the input box
# " >   Type your message or @path/to/file" (no rule below it) and a two-line footer
# (workspace, sandbox, model). Busy: " ⠧ Thinking... (esc to cancel, 1s)" on the line above
# the rule; the pane title says "✦  Working… (proj)" while busy, "◇  Ready (proj)" when idle.
# An Enter right after typed text is taken as part of a paste (the text stays in the box);
# 300 ms later it submits. Ctrl-J adds a draft line. Its own record is its chat file.
_GEMINI_BOX = rf"^{_RULE}\n(?:[^\n]*\n){{0,2}}? > "

GEMINI: Final = AgentProfile(
    kind="gemini",
    process_tokens=("gemini",),  # node running .../bin/gemini, which re-executes a child node
    # The spinner line sits right above the rule (blank lines are not in the marker tail).
    busy_markers=(_rx(rf"^[^\n]*\(esc to cancel, \d[^\n]*\n{_RULE}"),),
    idle_markers=(_rx(_GEMINI_BOX),),
    # A box: "? Shell  touch x", the command framed, "Allow execution of [Shell]?" over
    # "● 1. Allow once" (screens/permission/gemini.txt).
    waiting_markers=(
        _rx(
            r"^[│ \t]*(?:Allow |Do you want |Apply this change)[^\n]*\?[│ \t]*\n"
            r"(?:[^\n]*\n){0,3}?[│ \t]*● \d+\. "
        ),
    ),
    title_busy_markers=(lazy_compile(r"Working…"),),
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(rf"[^\n]*\? for shortcuts|{_RULE}"),  # input box and footer
        _line(r"[ \t]*[\u2580-\u259f]+(?:[ \t]+[^\n]*)?"),  # logo, version, auth line
        lazy_compile(r"^Tips for getting started:\n(?:\d\. [^\n]*\n?)*", re.MULTILINE),
        lazy_compile(r"^⚠ [^\n]*(?:\n {3}\S[^\n]*)*\n?", re.MULTILINE),  # "⚠  Warning: True color…"
        lazy_compile(r"\A[\s\S]*^ > [^\n]*\n?", re.MULTILINE),  # up to the last prompt
    ),
    answer_start=_rx(r"^✦ "),
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(rf"^{_RULE}\n(?:[^\n]*\n){{0,2}}? > ?(?P<text>[^\n]*(?:\n {{3}}\S[^\n]*)*)"),
    input_placeholders=(_rx(r"Type your message or @path/to/file"),),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=500,  # observed: an Enter at once is swallowed, 300 ms later it submits
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # Tab completes; Shift+Tab switches the edit mode
    uses_bracketed_paste=True,  # not observed for Gemini (it is for Copilot and Pi)
    executes_input=False,
    extractor="session",  # ~/.gemini/tmp/<project>/chats/session-*.jsonl
)

# --- GitHub Copilot CLI (observed 1.0.102, npm @github/copilot, tests/fixtures/screens/copilot/)
# Screens (100 columns): a tab bar " [Current]  Sessions …", the logo, " ● Tip: …" notices;
# prompts " ❯ text   18:30" (with the time), answers " ● text" with continuation lines indented
# 3; once the conversation overflows, a scrollbar "┃" in the last column. Then the cwd line
# " ~/proj", the input box "❯ " between two rules and a footer ("… Interactive · Manual
# Approval …"). Busy: the footer starts " ◎ Working" (the glyph turns). First run in a folder:
# a boxed "Confirm folder trust" dialog, "Do you trust the files in this folder?" over
# "❯ 1. Yes". An Enter right after typed text submits; Ctrl-J adds a draft line; a bracketed
# paste inserts lines. Tab switches tabs. Its own record is events.jsonl.
_COPILOT_BOX = rf"^{_RULE}\n❯[^\n]*(?:\n(?!{_RULE})[^\n]*)*?\n{_RULE}"

COPILOT: Final = AgentProfile(
    kind="copilot",
    process_tokens=("copilot",),  # node launcher .bin/copilot, then the native .../copilot
    busy_markers=(_rx(rf"^ \S Working\b(?![\s\S]*^{_RULE})"),),  # in the footer
    idle_markers=(_rx(_COPILOT_BOX),),
    waiting_markers=(
        _rx(
            r"^[│ \t]*(?:Do you (?:trust|want)|Would you like|Allow )[^\n]*\?[│ \t]*\n"
            r"(?:[^\n]*\n){0,3}?[│ \t]*❯ \d+\. "
        ),
    ),
    title_busy_markers=(),  # the title is the session's name, busy or not
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=20,  # the trust dialog is 20 lines high
    chrome_patterns=(
        _from_line_to_end(rf"[ \t]*[~/][^\n]*\n{_RULE}"),  # cwd line, input box, footer
        _from_line_to_end(_RULE),
        lazy_compile(r"[ \t]*┃$", re.MULTILINE),  # the scrollbar in the last column
        _line(r" \[Current\][^\n]*"),  # the tab bar
        _line(r"[ \t]*(?:╭─╮╭─╮|╰─╯╰─╯|█ ▘▝ █|▔▔▔▔)[^\n]*"),  # the logo and its two lines
        lazy_compile(r"\A[\s\S]*^ ❯ [^\n]*\n?", re.MULTILINE),  # up to the last prompt
    ),
    answer_start=_rx(r"^ ● "),
    answer_exclude=_rx(r"^ ● (?:Tip: |MCP Servers |Response was interrupted)"),
    tool_output=_rx(r"^[ \t]+└"),
    input_line=_rx(rf"^{_RULE}\n❯ ?(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=200,  # observed: an Enter at once submits; a margin for slow panes
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # the footer says "tab next tab"
    uses_bracketed_paste=True,  # observed: a bracketed paste inserts lines, not submitted
    executes_input=False,
    extractor="session",  # ~/.copilot/session-state/<uuid>/events.jsonl
)

# --- Pi (observed 0.73.1, npm @mariozechner/pi-coding-agent, tests/fixtures/screens/pi/) ----
# Screens (100 columns): "fd not found…"/"ripgrep not found…" (PI_OFFLINE), " pi v0.73.1" and
# two help lines; the conversation: a prompt is one space in, on a grey background, with two
# blank lines above and below it; the answer follows as plain text one space in (paragraphs
# one blank line apart). Then the editor between two rules (empty: a blank line; a draft at
# column 0) and a two-line footer (cwd; tokens, context and model). Busy: " ⠇ Working..."
# (or " ⠦ Retrying (3/3) in 8s... (escape to cancel)") right above the editor. No first-run
# screens and no permission prompts. Enter submits at once, Ctrl-J adds a line, a bracketed
# paste inserts lines. Its own record is its session tree.
_PI_EDITOR = rf"^{_RULE}\n(?:(?!{_RULE})[^\n]*\n)*?{_RULE}$"

PI: Final = AgentProfile(
    kind="pi",
    process_tokens=("pi",),  # its node process names itself "pi"
    busy_markers=(_rx(rf"^ [\u2801-\u28ff] \S[^\n]*\n{_RULE}"),),
    idle_markers=(_rx(_PI_EDITOR),),
    waiting_markers=(),  # Pi asks no permissions
    title_busy_markers=(),  # "π - proj", busy or not
    no_marker_state="unknown",
    idle_commands=(),
    marker_tail_lines=12,
    chrome_patterns=(
        _from_line_to_end(_RULE),  # editor and footer
        _line(r"(?:fd|ripgrep) not found\.[^\n]*"),
        _line(r" pi v\d[^\n]*| escape interrupt · [^\n]*| Press ctrl\+o [^\n]*"),
        _line(r" Pi can explain its own features[^\n]*"),
        _line(r" [\u2801-\u28ff] [^\n]*"),  # the spinner line
        # Up to the last prompt: the lines with two blank lines above and below them
        # (the last one may have no answer below it yet).
        lazy_compile(r"\A(?:[\s\S]*\n)?\n\n(?:[^\n]+\n)+?\n\n\s*"),
        lazy_compile(r"^ ", re.MULTILINE),  # every line is one space in
    ),
    answer_start=None,  # what is left is the answer: plain lines
    answer_exclude=None,
    tool_output=None,
    input_line=_rx(rf"^{_RULE}\n(?P<text>[^\n]*(?:\n(?!{_RULE})[^\n]*)*?)\n{_RULE}"),
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=200,  # observed: an Enter at once submits; a margin for slow panes
    between_submit_keys_ms=0,
    newline_key="C-j",  # observed: Ctrl-J adds a line to the draft
    typed_tab="    ",  # Tab completes paths
    uses_bracketed_paste=True,  # observed: a bracketed paste inserts lines, not submitted
    executes_input=False,
    extractor="session",  # ~/.pi/agent/sessions/<encoded cwd>/<time>_<uuid>.jsonl
)

# --- A plain shell ------------------------------------------------------------
SHELL: Final = AgentProfile(
    kind="shell",
    process_tokens=(),
    busy_markers=(),
    # The last line ends with a prompt ("$ ", "# ", "% ", "> "; trailing spaces are stripped).
    idle_markers=(lazy_compile(r"[$#%>❯»]\Z"),),
    waiting_markers=(),
    title_busy_markers=(),
    no_marker_state="busy",
    idle_commands=SHELL_COMMANDS,
    marker_tail_lines=1,
    chrome_patterns=(),
    answer_start=None,
    answer_exclude=None,
    tool_output=None,
    input_line=None,
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\n",),
    pre_submit_delay_ms=0,
    between_submit_keys_ms=0,
    newline_key=None,
    typed_tab="    ",  # readline completes on Tab: lost, or a file name
    uses_bracketed_paste=False,  # depends on the shell and its readline settings
    executes_input=True,
    extractor="terminal",
    foreground_kind="terminal",  # a REPL, cat or psql started from the shell
)

# --- Any terminal program (a REPL, psql, cat, an agent without a profile) ----------
TERMINAL: Final = AgentProfile(
    kind="terminal",
    process_tokens=(),
    busy_markers=(),
    idle_markers=(),
    waiting_markers=(),
    title_busy_markers=(),
    # No markers: ready once quiet for ready_quiet_ms (and the tile's ready_pattern matches).
    no_marker_state="idle",
    idle_commands=(),
    marker_tail_lines=1,
    chrome_patterns=(),
    answer_start=None,
    answer_exclude=None,
    tool_output=None,
    input_line=None,
    input_placeholders=(),
    paste_labels=(),
    submit_keys=("\r",),
    pre_submit_delay_ms=0,
    between_submit_keys_ms=0,
    newline_key=None,
    typed_tab="    ",  # REPLs and readline complete on Tab
    uses_bracketed_paste=False,
    executes_input=True,  # it runs what it is typed: routes must opt in
    extractor="terminal",
    ready_quiet_ms=settings.READY_QUIET_MS,
    answer_after_input=True,
)

PROFILES: Final[dict[str, AgentProfile]] = {
    p.kind: p
    for p in (CLAUDE, CODEX, AMP, OPENCODE, QWEN, AIDER, GEMINI, COPILOT, PI, SHELL, TERMINAL)
}
"""The one table of agent profiles, by kind: ``model.AGENT_KINDS`` and registered ones."""


def is_slash_command(text: str) -> bool:
    """One line whose first non-blank character is ``/`` (``/clear``, ``/model x``)."""
    stripped = text.strip()
    return stripped.startswith("/") and "\n" not in stripped


def submit_keys_for(profile: AgentProfile, text: str) -> tuple[str, ...]:
    """The keys that submit ``text``: the profile's command keys for a slash command."""
    if profile.command_submit_keys is not None and is_slash_command(text):
        return profile.command_submit_keys
    return profile.submit_keys


def known_kinds() -> tuple[str, ...]:
    """Every agent kind ``agent=`` accepts: the shipped ones, then those users registered."""
    return tuple(PROFILES)


def get_profile(kind: str) -> AgentProfile:
    """The profile of ``kind``; a teaching error for an unknown kind."""
    profile = PROFILES.get(kind) if isinstance(kind, str) else None
    if profile is None:
        raise MadohubValueError(
            f"unknown agent kind {kind!r}; allowed: {', '.join(known_kinds())} "
            "(or describe a new one with mh.register_agent)"
        )
    return profile


def foreground_profile(profile: AgentProfile, current_command: str | None) -> AgentProfile:
    """The profile that applies now: a shell running another program acts as that program."""
    if (
        profile.foreground_kind is None
        or current_command is None
        or _command_name(current_command) in profile.idle_commands
    ):
        return profile
    return get_profile(profile.foreground_kind)


def last_line(screen: str) -> str:
    """The last non-blank line of the screen, ANSI stripped, trailing spaces kept (``>>> ``)."""
    lines = [line for line in strip_ansi(screen).split("\n") if line.strip()]
    return lines[-1] if lines else ""


def quiet_state(
    screen: str, *, quiet_for_ms: float, ready_quiet_ms: int, ready_pattern: Pattern | None
) -> ScreenState:
    """``idle`` or ``busy`` for a program without markers (a ``terminal`` tile).

    Idle once its output has been quiet for ``ready_quiet_ms`` and, when a
    ``ready_pattern`` is given, its last non-blank screen line matches it.
    """
    if quiet_for_ms < ready_quiet_ms:
        return "busy"
    if ready_pattern is not None and not ready_pattern.search(last_line(screen)):
        return "busy"
    return "idle"


def screen_tail(profile: AgentProfile, screen: str) -> str:
    """The last ``profile.marker_tail_lines`` non-blank lines of the cleaned screen."""
    lines = [line for line in clean_screen(screen).split("\n") if line.strip()]
    return "\n".join(lines[-profile.marker_tail_lines :])


def _command_name(command: str) -> str:
    """``-bash`` (a login shell) and ``/bin/bash`` both read as ``bash``."""
    return command.strip().rsplit("/", 1)[-1].lstrip("-")


def screen_state(
    profile: AgentProfile,
    screen: str,
    *,
    current_command: str | None = None,
    pane_title: str | None = None,
) -> ScreenState:
    """``busy``, ``waiting``, ``idle`` or ``unknown`` as the screen shows it.

    Waiting beats busy beats idle: a permission prompt needs an answer whatever
    else is drawn, and Claude keeps its input box visible while busy. Markers
    are looked for only near the bottom of the screen, so a prompt or answer
    higher up that quotes them does not count. ``current_command`` (tmux
    ``#{pane_current_command}``) and ``pane_title`` refine the answer for
    profiles that use them (the shell; Amp's title spinner).
    """
    tail = screen_tail(profile, screen)
    if not tail:
        return "unknown"
    if any(p.search(tail) for p in profile.waiting_markers):
        return "waiting"
    if any(p.search(tail) for p in profile.busy_markers):
        return "busy"
    if pane_title and any(p.search(pane_title) for p in profile.title_busy_markers):
        return "busy"
    if (
        profile.idle_commands
        and current_command is not None
        and _command_name(current_command) not in profile.idle_commands
    ):
        return "busy"
    if any(p.search(tail) for p in profile.idle_markers):
        return "idle"
    return profile.no_marker_state
