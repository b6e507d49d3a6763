"""Screen text: escape stripping, chrome removal, last answer from the screen, safe typing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES

from madohub_nb.agents.profiles import get_profile
from madohub_nb.agents.screen import (
    cap_text,
    clean_screen,
    input_text,
    remove_chrome,
    sanitize_for_typing,
    strip_ansi,
    terminal_last_response,
)
from madohub_nb.errors import MadohubValueError


@pytest.fixture
def screens(fixtures_dir: Path) -> Path:
    return fixtures_dir / "real" / "screens"


def _kind(name: str) -> str:
    return "codex" if name.startswith("codex") else "claude"


# --- strip_ansi / clean_screen ---------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("\x1b[38;5;174mred\x1b[0m plain", "red plain"),
        ("\x1b[1;2m›\x1b[0m \x1b[2mAsk\x1b[0m", "› Ask"),
        ("a\x1b]0;window title\x07b", "ab"),
        ("a\x1b]8;;http://127.0.0.1/\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
        ("a\x1bP1$r0m\x1b\\b", "ab"),  # DCS
        ("a\x1b_apc payload\x1b\\b", "ab"),  # APC
        ("a\x1b^pm\x1b\\b\x1bXsos\x1b\\c", "abc"),  # PM, SOS
        ("\x1b(Bascii\x1b(0q\x1b(B", "asciiq"),  # charset selects
        ("\x1b7saved\x1b8\x1b=\x1b>", "saved"),  # single-character sequences
        ("\x1b%Gutf8\x1b#8", "utf8"),
        ("keep [[sleep 6]] and ✻ · ❯ ─", "keep [[sleep 6]] and ✻ · ❯ ─"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("cut off\x1b[", "cut off"),
    ],
)
def test_strip_ansi_removes_escape_sequences_and_keeps_text(raw: str, text: str) -> None:
    assert strip_ansi(raw) == text


ANSI_CAPTURES = sorted(p.name for p in (FIXTURES / "real" / "screens").glob("*.ansi.txt"))


def test_there_are_ansi_captures_beside_the_plain_ones() -> None:
    assert len(ANSI_CAPTURES) >= 10


@pytest.mark.parametrize("name", ANSI_CAPTURES)
def test_ansi_captures_clean_to_the_same_text_as_plain_captures(screens: Path, name: str) -> None:
    ansi = screens / name
    plain = screens / name.replace(".ansi.txt", ".txt")
    assert "\x1b" in ansi.read_text()
    assert clean_screen(ansi.read_text()) == clean_screen(plain.read_text()), ansi.name


def test_clean_screen_strips_line_ends_and_trailing_blank_lines_only() -> None:
    raw = "\n\x1b[1m  title  \x1b[0m\ntext   \n\n  \n\n"
    assert clean_screen(raw) == "\n  title\ntext"


# --- remove_chrome ------------------------------------------------------------


def test_claude_chrome_is_removed_and_the_conversation_kept(screens: Path) -> None:
    text = remove_chrome(
        (screens / "03_idle_after_reply.ansi.txt").read_text(), get_profile("claude")
    )
    assert "❯ Test one: please reply [[sleep 6]]" in text
    assert "● Done: Test one: please reply [[sleep 6]]" in text
    for chrome in ("────", "? for shortcuts", "Crunched for", "Claude Code v", "Opus 4.8", "▐▛"):
        assert chrome not in text
    assert not text.endswith("❯")


def test_claude_2_1_332_chrome_is_removed(screens: Path) -> None:
    text = remove_chrome(
        (screens / "08_v2.1.332_idle_after_reply.txt").read_text(), get_profile("claude")
    )
    assert text == "❯ Latest version check [[sleep 1]]\n\n● Done: Latest version check [[sleep 1]]"


def test_claude_busy_chrome_drops_spinner_and_tip(screens: Path) -> None:
    text = remove_chrome((screens / "05_busy_12s.txt").read_text(), get_profile("claude"))
    assert "Flambéing" not in text and "Tip:" not in text and "esc to interrupt" not in text
    assert text.endswith("❯ Long one [[sleep 14]]")


def test_codex_chrome_is_removed_and_the_conversation_kept(screens: Path) -> None:
    text = remove_chrome(
        (screens / "codex_02_after_reply.ansi.txt").read_text(), get_profile("codex")
    )
    assert text == "› Codex prompt one\n\n• Done: Codex prompt one"


def test_codex_working_status_is_chrome(screens: Path) -> None:
    text = remove_chrome((screens / "codex_03_busy.txt").read_text(), get_profile("codex"))
    assert "Working" not in text and "Worked for" not in text and "Ask Codex" not in text
    assert text.endswith("› Slow codex [[sleep 5]]")


def test_shell_has_no_chrome() -> None:
    screen = "$ echo hi\nhi\n$ "
    assert remove_chrome(screen, get_profile("shell")) == "$ echo hi\nhi\n$"


# --- terminal_last_response -----------------------------------------------------

LAST_RESPONSES = {
    "01_idle_startup.txt": "",
    "02_busy_waiting.txt": "",
    "03_idle_after_reply.txt": "Done: Test one: please reply [[sleep 6]]",
    "04_busy_with_queued_prompt.txt": "Done: Plain paste two",
    "05_busy_12s.txt": "Done: Queued while busy",
    # The newest bullet is a tool call waiting for permission; the text before it is the answer.
    "06_waiting_permission_prompt.txt": "Running it.",
    # Claude shows the prompt's line break as a literal "\n" in its reply (fake API echo).
    "07_after_tool_and_multiline.txt": "Done: Multi-line final prompt\\nsecond line [[sl",
    "08_v2.1.332_idle_after_reply.txt": "Done: Latest version check [[sleep 1]]",
    "codex_01_right_after_enter.txt": "",
    "codex_02_after_reply.txt": "Done: Codex prompt one",
    "codex_03_busy.txt": "Done: Busy capture prompt with several words t",
}


def _with_ansi_variants(expected: dict[str, str]) -> list[tuple[str, str]]:
    """Each plain capture, plus its ``.ansi.txt`` twin where one was captured."""
    cases = []
    for name, value in sorted(expected.items()):
        cases.append((name, value))
        ansi = name.replace(".txt", ".ansi.txt")
        if (FIXTURES / "real" / "screens" / ansi).exists():
            cases.append((ansi, value))
    return cases


def test_every_real_screen_has_an_expected_last_response(screens: Path) -> None:
    plain = {p.name for p in screens.glob("*.txt") if not p.name.endswith(".ansi.txt")}
    assert plain - {"00_firstrun_without_config.txt"} == set(LAST_RESPONSES)


@pytest.mark.parametrize(("name", "expected"), _with_ansi_variants(LAST_RESPONSES))
def test_terminal_last_response_of_real_screens(screens: Path, name: str, expected: str) -> None:
    text = (screens / name).read_text()
    assert terminal_last_response(text, get_profile(_kind(name))) == expected


CLAUDE_SCREEN = """\
❯ explain

● First paragraph of the answer,
  wrapped onto a second line.

  - a list item
      indented code

● Bash(ls)
  ⎿  a.txt

● Read 2 files (ctrl+o to expand)

✻ Worked for 3s

────────────────────────────────────────
❯\u00a0
────────────────────────────────────────
  ? for shortcuts
"""


def test_claude_answer_spans_paragraphs_and_skips_later_tool_calls() -> None:
    assert terminal_last_response(CLAUDE_SCREEN, get_profile("claude")) == (
        "First paragraph of the answer,\nwrapped onto a second line.\n\n- a list item\n    indented code"
    )


def test_claude_answer_quoting_banner_and_footer_words_is_kept() -> None:
    rule = "─" * 30
    screen = (
        " ▐▛███▜▌   Claude Code v2.1.197\n▝▜█████▛▘  Opus\n  ▘▘ ▝▝    /tmp\n\n❯ which version?\n\n"
        "● You run Claude Code v2.1.197.\n  Its footer says ? for shortcuts.\n  esc to interrupt it.\n\n"
        f"{rule}\n❯ \n{rule}\n  ? for shortcuts\n"
    )
    assert terminal_last_response(screen, get_profile("claude")) == (
        "You run Claude Code v2.1.197.\nIts footer says ? for shortcuts.\nesc to interrupt it."
    )
    assert "Opus" not in remove_chrome(screen, get_profile("claude"))


@pytest.mark.parametrize("logo", ["▐▛███▛█", "       ", "* ▗ ▗ *"], ids=["drawn", "blank", "frame"])
def test_claude_start_up_banner_is_no_answer_whatever_its_logo_shows(logo: str) -> None:
    """Claude Code 2.1.332 animates its logo at start-up: a frame without the block glyphs
    left the banner as a "scrolled-off answer", and a real Claude's start-up screen was routed
    as its first turn (a loaded machine, its status idle before its kickoff was submitted)."""
    rule = "─" * 30
    screen = (
        f"\n{logo}   Claude Code v2.1.332\n{logo[:-1]}   Opus 5.5 · API Usage Billing\n"
        f" {logo[:-2]}    /tmp/repo.worktrees/writer-told-1-9e0947\n\n"
        f"{rule}\n❯ \n{rule}\n  ⏵⏵ accept edits on (shift+tab to cycle)\n"
    )
    assert terminal_last_response(screen, get_profile("claude")) == ""


def test_claude_screen_without_answer_gives_empty_text() -> None:
    screen = "❯ hi\n\n● Bash(ls)\n  ⎿  a.txt\n"
    assert terminal_last_response(screen, get_profile("claude")) == ""


def test_codex_tool_blocks_are_not_answers() -> None:
    screen = (
        "› list files\n\n• I will look.\n\n• Ran ls\n  └ a.txt\n    b.txt\n\n"
        "  Worked for 2s • 10:00\n\n› Ask Codex to do anything\n\n  model · /tmp\n"
    )
    assert terminal_last_response(screen, get_profile("codex")) == "I will look."


def test_shell_last_response_is_the_last_lines_of_the_screen() -> None:
    screen = "\n".join(f"line {i}" for i in range(50)) + "\n$ \n\n"
    text = terminal_last_response(screen, get_profile("shell"), max_lines=3)
    assert text == "line 48\nline 49\n$"


def test_default_last_lines_follow_settings() -> None:
    from madohub_nb import defaults

    screen = "\n".join(f"l{i}" for i in range(100))
    text = terminal_last_response(screen, get_profile("amp"))
    assert text.split("\n") == [f"l{i}" for i in range(100 - defaults.FULL_OUTPUT_LINES, 100)]


# --- input_text -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("01_idle_startup.txt", ""),
        ("03_idle_after_reply.ansi.txt", ""),
        ("04_busy_with_queued_prompt.txt", ""),  # "Press up to edit queued messages" is a hint
        ("06_waiting_permission_prompt.txt", None),  # the dialog replaces the input box
        ("codex_01_right_after_enter.txt", "Codex prompt one"),  # typed, not (yet) submitted
        ("codex_02_after_reply.txt", ""),
        ("codex_03_busy.ansi.txt", ""),
    ],
)
def test_input_text_of_real_screens(screens: Path, name: str, expected: str | None) -> None:
    assert input_text((screens / name).read_text(), get_profile(_kind(name))) == expected


def test_input_text_reads_a_multi_line_claude_draft() -> None:
    rule = "─" * 30
    screen = f"● Done\n\n{rule}\n❯ first line\n  second line\n{rule}\n  ? for shortcuts\n"
    assert input_text(screen, get_profile("claude")) == "first line\nsecond line"


def test_input_text_is_none_for_agents_without_a_known_input_box() -> None:
    assert input_text("anything\n> ", get_profile("amp")) is None
    assert input_text("$ ls", get_profile("shell")) is None


# --- sanitize_for_typing / cap_text -----------------------------------------------


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("plain text\n\twith tab", "plain text\n\twith tab"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("a\x1b]52;c;ZXZpbA==\x07b", "ab"),  # clipboard write (OSC 52)
        ("a\x1b]0;evil title\x1b\\b", "ab"),
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),  # DCS (sixel)
        ("a\x1b_Gf=100;data\x1b\\b", "ab"),  # APC (kitty graphics)
        ("a\x1b^pm\x1b\\b\x1bXsos\x1b\\c", "abc"),
        ("stop\x03 eof\x04 susp\x1a bell\x07 del\x7f nul\x00", "stop eof susp bell del nul"),
        ("c1 \x9b31mcsi \x9d0;t\x9cosc \x85nel \x90dcs\x9c", "c1 csi osc nel "),
        ("\x1b[200~pasted\x1b[201~", "pasted"),
        ("[200~remnant[201~", "remnant"),
        ("nested [20[200~0~ marker", "nested  marker"),
        ("\x1b\x00[201~ split", " split"),
        ("crlf\r\nand cr\rend", "crlf\nand cr\nend"),
        ("\x1b", ""),
    ],
)
def test_sanitize_for_typing_removes_controls_and_escapes(raw: str, safe: str) -> None:
    assert sanitize_for_typing(raw) == safe


EVERY_CONTROL = "".join(chr(c) for c in range(0x00, 0xA0))
ONE_BY_ONE = "ok".join(chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)])


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(EVERY_CONTROL + "\x1b[200~x\x1b[201~ ✓ ❯", id="every-control-and-paste-marks"),
        pytest.param(ONE_BY_ONE, id="controls-one-by-one-between-text"),
        pytest.param(
            (FIXTURES / "real" / "screens" / "06_waiting_permission_prompt.ansi.txt").read_text(),
            id="real-permission-prompt-screen",
        ),
    ],
)
def test_sanitize_for_typing_leaves_no_control_character(text: str) -> None:
    out = sanitize_for_typing(text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    assert "[200~" not in out and "[201~" not in out


def test_sanitize_for_typing_keeps_the_text_between_controls() -> None:
    assert "okok" in sanitize_for_typing(ONE_BY_ONE)


def test_sanitize_for_typing_decodes_bytes_with_replacement() -> None:
    assert sanitize_for_typing(b"caf\xc3\xa9 \xff\xfe end\x1b[0m") == "café \ufffd\ufffd end"


def test_cap_text_keeps_short_text_as_is() -> None:
    assert cap_text("short", 5) == "short"


def test_cap_text_cuts_long_text_with_a_visible_marker() -> None:
    text = "x" * 1000 + "TAIL"
    capped = cap_text(text, 100)
    assert capped.startswith("x" * 100)
    assert "TAIL" not in capped
    assert capped.endswith("\n[… madohub_nb: cut 904 characters …]")


@pytest.mark.parametrize("bad", [0, -5, True, 2.5, "10"])
def test_cap_text_refuses_a_bad_limit(bad: object) -> None:
    with pytest.raises(MadohubValueError, match="max_chars"):
        cap_text("text", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("y\r\ny\r\n", "y\r\ny\r\n"),  # a flood's plain lines: every pass skipped, nothing lost
        ("bell\x07 only", "bell only"),  # a stray control with no escape sequence before it
        ("c1 \x9b31mcsi only", "c1 csi only"),  # an 8-bit CSI with no ESC in the text
        ("é \x0e\x0fshift", "é shift"),  # non-ASCII text and shifts, no escape
        ("\x1b[1mbold\x1b[0m", "bold"),
    ],
)
def test_strip_ansi_runs_each_pass_when_its_lead_character_occurs(raw: str, text: str) -> None:
    assert strip_ansi(raw) == text
