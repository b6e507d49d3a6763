"""Gemini CLI, Copilot CLI and Pi profiles, read against their real screens.

The screens in ``tests/fixtures/screens/<kind>/`` were captured from the real agents
(README.md there); every one has an expected state, input-box text and screen answer here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from madohub_nb.agents.detect import agent_kind_of
from madohub_nb.agents.profiles import get_profile, screen_state
from madohub_nb.agents.screen import input_text, terminal_last_response

SCREENS = Path(__file__).parent / "fixtures" / "screens"
KINDS = ("gemini", "copilot", "pi", "amp")

MULTI_ANSWER = {
    # The fake's 12-line markdown answer, as each agent's renderer draws it.
    "gemini": (
        "First answer line MULTI-START\n\nA second paragraph with bold text.\n\n"
        " - item one\n - item two\n\n 1 code line\n\nLast answer line MULTI-END"
    ),
    "copilot": (
        "First answer line MULTI-START\n\nA second paragraph with bold text.\n\n"
        "• item one\n• item two\n\ncode line\n\nLast answer line MULTI-END"
    ),
    "pi": (
        "First answer line MULTI-START\n\nA second paragraph with bold text.\n\n"
        "- item one\n- item two\n\n```\n  code line\n```\n\nLast answer line MULTI-END"
    ),
}

# (state, text in the input box (None: no box), answer read from the screen) per capture.
EXPECTED: dict[str, tuple[str, str | None, str]] = {
    "gemini/01_idle_startup.txt": ("idle", "", ""),
    "gemini/02_busy.txt": ("busy", "", ""),
    "gemini/03_idle_after_answer.txt": ("idle", "", "Done: Hello gemini [[sleep 4]]"),
    "gemini/04_idle_multiline_draft.txt": (
        "idle", "first line\n second line", "Done: Hello gemini [[sleep 4]]",
    ),
    # The Enter came at once after the text: swallowed, the prompt still in the box.
    "gemini/05_idle_enter_swallowed.txt": (
        "idle", "quick enter test", "Done: first line\\nsecond line",
    ),
    "gemini/06_idle_after_two_multiline_answers.txt": ("idle", "", MULTI_ANSWER["gemini"]),
    "copilot/01_waiting_folder_trust.txt": ("waiting", None, ""),
    "copilot/02_idle_startup.txt": ("idle", "", ""),
    "copilot/03_busy.txt": ("busy", "", ""),
    # Copilot's prompt starts with its <current_datetime>: the fake's answer quotes that.
    "copilot/04_idle_after_answer.txt": ("idle", "", "Done: 2026-12-01T18:28:39.70"),
    "copilot/05_idle_multiline_draft.txt": (
        "idle", "first line\nsecond line", "Done: 2026-12-01T18:28:39.70",
    ),
    "copilot/06_idle_after_two_multiline_answers.txt": ("idle", "", MULTI_ANSWER["copilot"]),
    "pi/01_idle_startup.txt": ("idle", "", ""),
    "pi/02_busy.txt": ("busy", "", ""),
    "pi/03_idle_after_answer.txt": ("idle", "", "Done: Hello pi [[sleep 4]]"),
    "pi/04_idle_multiline_draft.txt": ("idle", "first line\nsecond line", "Done: Hello pi [[sleep 4]]"),
    "pi/05_idle_after_two_multiline_answers.txt": ("idle", "", MULTI_ANSWER["pi"]),
    # Amp's input box is not read (input_line None): no box text.
    "amp/01_idle_startup.txt": ("idle", None, ""),
    "amp/02_busy.txt": ("busy", None, ""),
    "amp/03_idle_after_answer.txt": ("idle", None, "Done: Hello amp [[sleep 4]]"),
    "amp/04_idle_multiline_draft.txt": ("idle", None, "Done: Hello amp [[sleep 4]]"),
    "amp/05_idle_after_three_answers.txt": ("idle", None, "Done: paste one\\npaste two"),
}  # fmt: skip


def _cases() -> list[tuple[str, str]]:
    """Every expected capture, plain and (where kept) with its colours."""
    cases = []
    for name in sorted(EXPECTED):
        cases.append((name, name))
        ansi = name.replace(".txt", ".ansi.txt")
        if (SCREENS / ansi).exists():
            cases.append((ansi, name))
    return cases


def test_every_captured_screen_has_an_expectation() -> None:
    plain = {
        f"{p.parent.name}/{p.name}"
        for kind in KINDS
        for p in (SCREENS / kind).glob("*.txt")
        if not p.name.endswith(".ansi.txt")
    }
    assert plain == set(EXPECTED)


@pytest.mark.parametrize(("name", "expected"), _cases())
def test_state_input_box_and_answer_of_real_captures(name: str, expected: str) -> None:
    profile = get_profile(name.split("/")[0])
    screen = (SCREENS / name).read_text()
    state, box, answer = EXPECTED[expected]
    assert screen_state(profile, screen) == state
    assert input_text(screen, profile) == box
    assert terminal_last_response(screen, profile) == answer


@pytest.mark.parametrize(
    ("name", "title"), sorted(json.loads((SCREENS / "titles.json").read_text()).items())
)
def test_state_with_the_real_pane_title(name: str, title: str) -> None:
    profile = get_profile(name.split("/")[0])
    screen = (SCREENS / name).read_text()
    assert screen_state(profile, screen, pane_title=title) == EXPECTED[name][0]


def test_amp_title_spinner_alone_reads_busy() -> None:
    # Amp's Braille spinner in the title says busy even before "≋ Waiting" is drawn.
    idle = (SCREENS / "amp/03_idle_after_answer.txt").read_text()
    assert screen_state(get_profile("amp"), idle, pane_title="⠭ amp - ~/proj") == "busy"
    assert screen_state(get_profile("amp"), idle, pane_title="") == "idle"


def test_amp_delivery_facts() -> None:
    p = get_profile("amp")
    assert p.process_tokens == ("amp",) and p.submit_keys == ("\r",)
    assert p.newline_key == "C-j" and p.uses_bracketed_paste
    assert p.extractor == "terminal" and not p.has_transcript  # its answers live in its backend
    assert agent_kind_of("amp", ["/c/amp-0.0.1790142911-g7618fb/node_modules/.bin/amp"]) == "amp"


def test_gemini_title_spinner_alone_reads_busy() -> None:
    # Gemini's title says "Working…" for the whole turn, also when the spinner line is not drawn.
    idle = (SCREENS / "gemini/03_idle_after_answer.txt").read_text()
    assert screen_state(get_profile("gemini"), idle, pane_title="✦  Working… (proj)") == "busy"
    assert screen_state(get_profile("gemini"), idle, pane_title="◇  Ready (proj)") == "idle"


@pytest.mark.parametrize(
    ("kind", "keys", "pre_ms", "newline", "paste"),
    [
        ("gemini", ("\r",), 500, "C-j", True),
        ("copilot", ("\r",), 200, "C-j", True),
        ("pi", ("\r",), 200, "C-j", True),
    ],
)
def test_delivery_facts(
    kind: str, keys: tuple[str, ...], pre_ms: int, newline: str, paste: bool
) -> None:
    p = get_profile(kind)
    assert p.process_tokens == (kind,)
    assert p.submit_keys == keys and p.command_submit_keys is None
    assert (p.pre_submit_delay_ms, p.between_submit_keys_ms) == (pre_ms, 0)
    assert p.newline_key == newline and not p.submits_each_line
    assert p.uses_bracketed_paste is paste
    assert p.typed_tab == "    "  # Tab completes or switches tabs in all three
    assert p.extractor == "session" and p.has_transcript
    assert not p.executes_input and p.runs_as_process


# The processes seen in each agent's pane (psutil, 2026-12-01): (comm, argv) in tree order.
REAL_TREES = {
    "gemini": [  # node re-executes itself with a bigger heap: two node processes
        ("node", ["node", "/c/gemini-0.61.0/node_modules/.bin/gemini", "--model", "gemini-2.5-flash"]),
        ("node", ["/usr/bin/node", "--max-old-space-size=12052", "/c/gemini-0.61.0/node_modules/.bin/gemini"]),
    ],
    "copilot": [  # a node launcher, then the native binary (its main thread names the process)
        ("node", ["node", "/c/copilot-1.0.102/node_modules/.bin/copilot"]),
        ("MainThread", ["/c/copilot-1.0.102/node_modules/@github/copilot-linux-x64/copilot"]),
    ],
    "pi": [("pi", ["pi"])],  # node renames its process "pi"
}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS[:3])
def test_every_process_of_the_real_tree_but_a_node_option_names_the_agent(kind: str) -> None:
    kinds = [agent_kind_of(comm, argv) for comm, argv in REAL_TREES[kind]]
    assert kinds[0] == kind  # the first process found is the agent
    assert set(kinds) <= {kind, None}


@pytest.mark.parametrize(
    "comm", ["pip", "api", "pico", "spin", "pi_x", "copilots", "geminix", "python3"]
)
def test_process_tokens_are_whole_words(comm: str) -> None:
    assert agent_kind_of(comm, [comm]) is None


# --- made-up screens: marker words quoted in the conversation do not count ----------

RULE = "─" * 60


def test_gemini_busy_words_in_an_answer_do_not_make_it_busy() -> None:
    screen = (
        " > what does the spinner say?\n\n✦ It says: Thinking... (esc to cancel, 1s)\n  and more.\n\n"
        f"{' ' * 40}? for shortcuts\n{RULE}\n Shift+Tab to accept edits\n\n"
        " >   Type your message or @path/to/file\n\n workspace\n ~/proj\n"
    )
    assert screen_state(get_profile("gemini"), screen) == "idle"


def test_copilot_working_quoted_above_the_box_is_not_busy() -> None:
    screen = (
        " ❯ quote it\n\n ● The footer shows:\n    ◎ Working esc esc edit prompt\n\n ~/proj\n"
        f"{RULE}\n❯\n{RULE}\n ← open sidebar · Interactive · Manual Approval\n"
    )
    profile = get_profile("copilot")
    assert screen_state(profile, screen) == "idle"
    assert (
        terminal_last_response(screen, profile)
        == "The footer shows:\n ◎ Working esc esc edit prompt"
    )


def test_pi_spinner_quoted_in_an_answer_is_not_busy() -> None:
    screen = (
        f"\n\n ask\n\n\n ⠇ Working... is its spinner\n\n done\n\n{RULE}\n\n{RULE}\n~/proj\n0.0%\n"
    )
    profile = get_profile("pi")
    assert screen_state(profile, screen) == "idle"
    # The quoted spinner line is chrome to the screen reader (a known limit of the fallback).
    assert terminal_last_response(screen, profile) == "done"
