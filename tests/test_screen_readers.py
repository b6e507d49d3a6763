"""Reading an answer off the screen when the agent keeps no record (issue 23.5).

Against screens of the real agents (``tests/fixtures/screens``): OpenCode's
multi-line answer whole, not its last line; Qwen Code's long answer after its
``◆`` scrolled off; Aider's whole long answer from tmux's scrollback.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from conftest import wait_until

import madohub_nb as mh
from madohub_nb.agents.profiles import get_profile
from madohub_nb.agents.screen import terminal_last_response

SCREENS = Path(__file__).parent / "fixtures" / "screens"
MULTI = (
    "MULTI-FIRST: a multi-line answer, fully on screen.\n\n"
    "Its second paragraph has two lines:\nline two of it, and then a list:\n\n"
    "- one\n- two\n\nMULTI-LAST: the end of the answer."
)
FIRST = "FIRST-LINE-5c1e: the whole answer must arrive."
LAST = "LAST-LINE-9d2b: nothing was lost."


def screen(name: str) -> str:
    return (SCREENS / name).read_text()


def test_a_multi_line_opencode_answer_is_read_whole() -> None:
    oc = get_profile("opencode")
    assert terminal_last_response(screen("opencode_multiline_answer.txt"), oc) == MULTI


def test_a_long_opencode_answer_is_read_as_far_as_the_screen_shows_it() -> None:
    got = terminal_last_response(screen("opencode_long_answer.txt"), get_profile("opencode"))
    lines = got.splitlines()
    assert lines[0] == "Paragraph line 29: ordinary prose, with a trailing period."
    assert lines[-1] == LAST and len(lines) == 35


def test_qwen_answers_are_read_with_or_without_their_bullet_on_screen() -> None:
    qwen = get_profile("qwen")
    assert terminal_last_response(screen("qwen_multiline_answer.txt"), qwen) == MULTI
    got = terminal_last_response(screen("qwen_long_answer.txt"), qwen).splitlines()
    assert got[0] == "Paragraph line 25: ordinary prose, with a trailing period."
    assert got[-1] == LAST
    assert "Paragraph line 54: ordinary prose, with a trailing period." in got


def test_a_screen_without_an_answer_still_reads_empty() -> None:
    qwen = get_profile("qwen")
    started = screen("qwen_multiline_answer.txt").split("  > MULTIANSWER")[0]
    assert terminal_last_response(started, qwen) == ""


def test_aider_reads_its_whole_answer_from_the_scrollback() -> None:
    aider = get_profile("aider")
    text = screen("aider_long_answer.scrollback.txt")
    got = terminal_last_response(text, aider, max_lines=5000).splitlines()
    assert got[0] == FIRST and got[-1] == LAST
    assert not any(line.startswith(("Tokens:", "> LONGANSWER")) for line in got)
    # The indented code block, rendered by rich without its indent:
    assert sum(line.startswith("step_") for line in got) == 30


def test_an_aider_tile_without_its_record_answers_from_the_scrollback(
    hub: mh.Hub, tmp_path: Path
) -> None:
    """The pane really holds the screen and scrollback Aider printed; no Aider runs, so
    there is no record to read and the screen reader answers."""
    shown = SCREENS / "aider_long_answer.scrollback.txt"
    command = f"cat {shlex.quote(str(shown))}; exec sleep 600"
    tile = hub.tile("aider", agent="aider", command=command)
    wait_until(lambda: LAST in tile.screen(), 10, what="the screen printed")
    got = tile.last_response()
    assert got is not None and got.method == "terminal"
    lines = got.text.splitlines()
    assert lines[0] == FIRST and lines[-1] == LAST
    assert "step_01 = compute(1, 'ß')  # line 1 of 30" in lines
