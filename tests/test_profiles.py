"""Agent profiles: the one table of agent facts, and screen states read from real captures."""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES

from madohub_nb import model
from madohub_nb.agents.kinds import SHIPPED_KINDS
from madohub_nb.agents.profiles import (
    PROFILES,
    SCREEN_STATES,
    AgentProfile,
    get_profile,
    screen_state,
)
from madohub_nb.agents.regex import compiled
from madohub_nb.agents.screen import terminal_last_response
from madohub_nb.errors import MadohubValueError

SCREEN_DIR = FIXTURES / "real" / "screens"

# Every capture in fixtures/real/screens/, by what a person sees in it.
EXPECTED_STATES = {
    # Claude exited at once (no network on first run) and bash is back: no Claude marker.
    "00_firstrun_without_config.txt": "unknown",
    "01_idle_startup.txt": "idle",
    "02_busy_waiting.txt": "busy",
    "03_idle_after_reply.txt": "idle",  # "✻ Crunched for 6s" stays after the turn
    "04_busy_with_queued_prompt.txt": "busy",
    "05_busy_12s.txt": "busy",
    "06_waiting_permission_prompt.txt": "waiting",
    "07_after_tool_and_multiline.txt": "idle",
    "08_v2.1.332_idle_after_reply.txt": "idle",  # footer "⏵⏵ auto mode on", not "? for shortcuts"
    # The prompt still sits in the composer, no Working line: Codex is not working
    # (an Enter swallowed as a paste burst looks like this); delivery must press Enter again.
    "codex_01_right_after_enter.txt": "idle",
    "codex_02_after_reply.txt": "idle",
    "codex_03_busy.txt": "busy",  # "? for shortcuts" and the composer are visible while busy
}


def _screen_cases() -> list[tuple[str, str]]:
    cases = []
    for name, state in sorted(EXPECTED_STATES.items()):
        cases.append((name, state))
        ansi = name.replace(".txt", ".ansi.txt")
        if (SCREEN_DIR / ansi).exists():
            cases.append((ansi, state))
    return cases


def _profile_for(name: str) -> AgentProfile:
    return get_profile("codex" if name.startswith("codex") else "claude")


def test_every_real_screen_has_an_expected_state() -> None:
    plain = {p.name for p in SCREEN_DIR.glob("*.txt") if not p.name.endswith(".ansi.txt")}
    assert plain == set(EXPECTED_STATES)


@pytest.mark.parametrize(("name", "expected"), _screen_cases())
def test_screen_state_of_real_captures(name: str, expected: str) -> None:
    assert screen_state(_profile_for(name), (SCREEN_DIR / name).read_text()) == expected


# --- the table ------------------------------------------------------------------


def test_there_is_one_profile_per_agent_kind() -> None:
    assert tuple(PROFILES) == SHIPPED_KINDS
    assert all(PROFILES[kind].kind == kind for kind in SHIPPED_KINDS)
    assert set(SCREEN_STATES) <= set(model.TILE_STATES)


@pytest.mark.parametrize("kind", SHIPPED_KINDS)
def test_get_profile_returns_the_table_entry(kind: str) -> None:
    assert get_profile(kind) is PROFILES[kind]


@pytest.mark.parametrize("bad", ["Claude", "cline", "", None, 3])
def test_get_profile_refuses_unknown_kinds_and_lists_the_allowed_ones(bad: object) -> None:
    with pytest.raises(MadohubValueError) as err:
        get_profile(bad)  # type: ignore[arg-type]
    message = str(err.value)
    assert repr(bad) in message
    assert all(kind in message for kind in SHIPPED_KINDS)
    assert isinstance(err.value, ValueError)


def test_profiles_are_frozen() -> None:
    with pytest.raises(AttributeError):
        get_profile("claude").pre_submit_delay_ms = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kind", "tokens", "keys", "pre_ms", "between_ms", "newline", "extractor"),
    [
        ("claude", ("claude",), ("\r", "\r"), 500, 0, "C-j", "jsonl"),
        ("codex", ("codex",), ("\r", "\r"), 800, 200, "C-j", "rollout"),
        ("amp", ("amp",), ("\r",), 200, 0, "C-j", "terminal"),
        ("opencode", ("opencode",), ("\r", "\r"), 500, 0, "C-j", "session"),
        ("shell", (), ("\n",), 0, 0, None, "terminal"),
    ],
)
def test_delivery_facts_per_kind(
    kind: str,
    tokens: tuple[str, ...],
    keys: tuple[str, ...],
    pre_ms: int,
    between_ms: int,
    newline: str | None,
    extractor: str,
) -> None:
    p = get_profile(kind)
    assert p.process_tokens == tokens
    assert p.submit_keys == keys
    assert (p.pre_submit_delay_ms, p.between_submit_keys_ms) == (pre_ms, between_ms)
    assert p.newline_key == newline
    assert p.submits_each_line == (newline is None)
    assert p.extractor == extractor
    assert p.has_transcript == (extractor != "terminal")
    assert p.executes_input == (kind == "shell")


def test_marker_fields_hold_regexes_that_compile() -> None:
    # The table's patterns compile on first use (agents/regex.py): compile every one here,
    # so a typo in a pattern fails the suite, not a user's first screen.
    for p in PROFILES.values():
        for group in (p.busy_markers, p.idle_markers, p.waiting_markers, p.chrome_patterns):
            assert all(isinstance(compiled(rx), re.Pattern) for rx in group), p.kind
        assert p.no_marker_state in SCREEN_STATES
        assert p.marker_tail_lines >= 1


# --- screen_state on made-up screens ---------------------------------------------

RULE = "─" * 40


def _claude(body: str, box: str = "❯ ", footer: str = "  ? for shortcuts") -> str:
    return f"{body}\n\n{RULE}\n{box}\n{RULE}\n{footer}\n"


def test_empty_screen_is_unknown_for_every_kind() -> None:
    for p in PROFILES.values():
        assert screen_state(p, "") == "unknown"
        assert screen_state(p, "\n\n   \n\x1b[0m\n") == "unknown"


def test_claude_marker_words_quoted_in_the_conversation_do_not_count() -> None:
    body = (
        "❯ Why does the footer say esc to interrupt? And what is ✽ Moseying…\n\n"
        "● The footer shows:\n  esc to interrupt · ← for agents\n"
        "  ✽ Moseying… is the spinner.\n  Do you want to proceed?\n  ❯ 1. Yes"
    )
    assert screen_state(get_profile("claude"), _claude(body)) == "idle"


def test_claude_text_typed_in_the_box_does_not_make_it_busy() -> None:
    screen = _claude("● Done", box="❯ tell me about\n  esc to interrupt")
    assert screen_state(get_profile("claude"), screen) == "idle"


def test_claude_busy_footer_or_spinner_alone_is_busy() -> None:
    claude = get_profile("claude")
    assert screen_state(claude, _claude("● Done", footer="  esc to interrupt")) == "busy"
    assert screen_state(claude, _claude("✶ Churning… (3s)", footer="  ⏵⏵ auto mode on")) == "busy"


def test_claude_past_tense_line_is_not_busy() -> None:
    screen = _claude("● Done\n\n✻ Churned for 1s · done 11:07 PM", footer="  ⏵⏵ auto mode on")
    assert screen_state(get_profile("claude"), screen) == "idle"


def test_claude_permission_prompt_beats_busy_signs() -> None:
    screen = (
        "✽ Moseying…\n"
        f"{RULE}\n Do you want to make this edit to a.py?\n ❯ 1. Yes\n   2. No\n\n"
        "  esc to interrupt\n"
    )
    assert screen_state(get_profile("claude"), screen) == "waiting"


def test_claude_without_its_input_box_is_unknown() -> None:
    assert screen_state(get_profile("claude"), "some program output\n$ ") == "unknown"


def test_codex_working_line_far_up_in_the_history_does_not_count() -> None:
    history = "• Working (2s • esc to interrupt) is what the status line says.\n" + "\n".join(
        f"  line {i}" for i in range(30)
    )
    screen = f"{history}\n\n› Ask Codex to do anything\n\n  model · /tmp\n"
    assert screen_state(get_profile("codex"), screen) == "idle"


def test_codex_reasoning_header_in_the_status_line_is_busy() -> None:
    screen = "› do it\n\n• Analyzing (0s • esc to interrupt)\n\n› Implement {feature}\n\n  model\n"
    assert screen_state(get_profile("codex"), screen) == "busy"


def test_codex_approval_prompt_is_waiting() -> None:
    screen = (
        "› run it\n\n  Would you like to run the following command?\n\n  $ touch x\n\n"
        "› 1. Yes, proceed (y)\n  2. No, and tell Codex what to do differently (esc)\n"
    )
    assert screen_state(get_profile("codex"), screen) == "waiting"


def test_codex_reply_below_the_last_prompt_without_composer_is_unknown() -> None:
    assert screen_state(get_profile("codex"), "› hi\n\n• Done: hi\n") == "unknown"


def test_shell_prompt_at_the_bottom_is_idle() -> None:
    shell = get_profile("shell")
    for prompt in ("$ ", "root@host:~# ", "% ", "> ", "user ❯ "):
        assert screen_state(shell, f"$ echo hi\nhi\n{prompt}\n\n") == "idle", prompt


def test_shell_running_a_command_is_busy() -> None:
    shell = get_profile("shell")
    assert screen_state(shell, "$ make\ncompiling a.c") == "busy"
    assert screen_state(shell, "$ python\n>>> ", current_command="python3") == "busy"
    assert screen_state(shell, "$ ls\nx\n$ ", current_command="bash") == "idle"
    assert screen_state(shell, "$ ls\nx\n$ ", current_command="-zsh") == "idle"


def test_shell_reads_the_real_first_run_screen_as_idle() -> None:
    screen = (SCREEN_DIR / "00_firstrun_without_config.txt").read_text()
    assert screen_state(get_profile("shell"), screen) == "idle"


# OpenCode 1.18.33 in a 100-column pane (tests/real_agents/test_real_routing.py), shortened.
OC_EDGE = "  ╹" + "▀" * 80
OC_HOME = (
    '             ┃\n             ┃  Ask anything… "Fix broken tests"\n             ┃\n'
    f"             ┃  Build · Fake model Fake\n           {OC_EDGE}\n"
    "                                            tab agents  ctrl+p commands\n"
    "  /tmp/proj                                                        1.18.33\n"
)
OC_SESSION = (
    "\n  ┃\n  ┃  Hello opencode [[sleep 3]]\n  ┃\n\n     Done: Hello opencode [sleep 3]\n\n"
    "     ▣  Build · Fake model · 3.3s\n\n  ┃\n  ┃  Second line one\n  ┃  second line two\n  ┃\n\n"
    "     Done: Second line one\\nsecond line two\n\n     ▣  Build · Fake model · 162ms\n\n\n\n"
    f"  ┃\n  ┃\n  ┃\n  ┃  Build · Fake model Fake\n{OC_EDGE}\n"
    "   /tmp/proj                                               12  ctrl+p commands\n\n"
)
OC_BUSY = OC_SESSION.replace("   /tmp/proj          ", "   ⬝⬝⬝⬝⬝■■■  esc interrupt").replace(
    "12  ctrl+p", "tab agents  ctrl+p"
)
OC_DRAFT = OC_SESSION.replace(
    "  ┃\n  ┃\n  ┃\n  ┃  Build", "  ┃\n  ┃  draft one\n  ┃  draft two\n  ┃\n  ┃  Build"
)


def test_opencode_markers_on_its_real_screens() -> None:
    oc = get_profile("opencode")
    assert screen_state(oc, OC_HOME) == "idle"
    assert screen_state(oc, OC_SESSION) == "idle"  # no "Ask anything" once a session runs
    assert screen_state(oc, OC_BUSY) == "busy"
    assert screen_state(oc, OC_DRAFT) == "idle"
    assert screen_state(oc, "△ Permission required\n  Allow once") == "waiting"
    assert screen_state(oc, "loading") == "unknown"


def test_opencode_input_box_and_last_answer_on_its_real_screens() -> None:
    oc = get_profile("opencode")
    assert oc.input_area(OC_HOME) == ""  # the placeholder
    assert oc.input_area(OC_SESSION) == ""
    assert oc.input_area(OC_DRAFT) == "draft two"  # the box's last line
    assert terminal_last_response(OC_SESSION, oc) == "Done: Second line one\\nsecond line two"
    assert terminal_last_response(OC_HOME, oc) == ""


def test_amp_is_idle_once_its_busy_signs_are_gone() -> None:
    amp = get_profile("amp")
    assert screen_state(amp, "thinking\n  Esc to cancel") == "busy"
    assert screen_state(amp, "Run rm?\n  Waiting for approval") == "waiting"
    assert screen_state(amp, "All done.\n>") == "idle"
    assert screen_state(amp, "All done.\n>", pane_title="⠋ amp") == "busy"
    assert screen_state(amp, "All done.\n>", pane_title="amp - project") == "idle"


# --- input_area (for delivery's "did the prompt leave the input line?") -----------


def test_input_area_is_the_box_text_when_the_box_is_known() -> None:
    claude = get_profile("claude")
    assert claude.input_area(_claude("● Done", box="❯ half typed")) == "half typed"
    assert claude.input_area(_claude("● Done")) == ""
    codex_01 = (SCREEN_DIR / "codex_01_right_after_enter.txt").read_text()
    assert get_profile("codex").input_area(codex_01) == "Codex prompt one"


def test_input_area_falls_back_to_the_bottom_of_the_screen() -> None:
    amp = get_profile("amp")
    screen = "\n".join(f"l{i}" for i in range(40)) + "\n> my prompt\n\n"
    area = amp.input_area(screen)
    assert area.endswith("> my prompt") and "l0\n" not in area


def test_claude_input_box_cut_off_by_the_screen_edge_is_not_idle() -> None:
    cut = f"● Done\n\n{RULE}\n❯ \n"
    assert screen_state(get_profile("claude"), cut) == "unknown"


# Codex 0.171.0 right after start-up, while its app-server daemon starts (~4 s): the composer is
# drawn but a submit is not taken yet. Captured in tests/real_agents (test_real_routing).
CODEX_STARTING = "  >_ OpenAI Codex (v0.171.0)\n     /tmp/proj\n\n\n› Ask Codex to do anything\n\n  ? for shortcuts\n"
CODEX_STARTING_WITH_DRAFT = "  >_ OpenAI Codex (v0.171.0)\n     /tmp/proj\n\n\n› draft one\n"
CODEX_READY = (
    "  >_ OpenAI Codex (v0.171.0)\n     /tmp/proj\n\n\n› Ask Codex to do anything\n\n"
    "  fake-model default · /tmp/proj\n  ← for agents · ? for shortcuts"
    + " " * 100
    + "⚠ 1 warning\n"
)
CODEX_READY_WITH_DRAFT = (
    "› line a\n  line b\n\n  fake-model default · /tmp/proj\n"
    + " " * 130
    + "⚠ 1 warning · f2 to view\n"
)


def test_codex_is_not_idle_before_its_status_line_shows() -> None:
    codex = get_profile("codex")
    assert screen_state(codex, CODEX_STARTING) == "unknown"
    assert screen_state(codex, CODEX_STARTING_WITH_DRAFT) == "unknown"
    assert screen_state(codex, CODEX_READY) == "idle"
    assert screen_state(codex, CODEX_READY_WITH_DRAFT) == "idle"
    assert codex.input_area(CODEX_READY_WITH_DRAFT) == "line a\nline b"


@pytest.mark.parametrize(
    ("kind", "tab"),
    [("claude", "    "), ("codex", "    "), ("shell", "    "), ("amp", "\t"), ("opencode", "    ")],
)
def test_typed_tab_is_spaces_where_the_tab_key_is_a_command(kind: str, tab: str) -> None:
    # Observed: a typed tab never reaches Claude Code's or Codex's prompt, bash completes on it,
    # OpenCode switches its agent.
    assert get_profile(kind).typed_tab == tab


# Qwen Code 0.24.4, captured at 100 columns (tests/real_agents runs it against fake_openai).
QWEN_RULE = "─" * 100
QWEN_BOX_EMPTY = (
    f"{QWEN_RULE}\n>   Type your message or @path/to/file\n{QWEN_RULE}\n  ➜ proj · fake-model\n"
)
QWEN_BUSY = (
    "  > Say hello [[sleep 3]]\n\n"
    "  .. Distracting you with this witty phrase... (1s · esc to cancel)\n"
    + QWEN_BOX_EMPTY
    + "  Enter to steer · Ctrl+Q to queue · Auto mode (shift + tab to cycle)\n"
)
QWEN_IDLE = (
    "  > first line\n    second line\n\n  \u25c6\ufe0e Done: first line\\nsecond line\n\n"
    + QWEN_BOX_EMPTY
    + "  Auto mode (shift + tab to cycle)\n"
)
QWEN_DRAFT = (
    f"{QWEN_RULE}\n> first line\n  second line \u200b\n{QWEN_RULE}\n  ➜ proj · fake-model\n"
)


def test_qwen_code_screens_read_busy_idle_and_its_answer() -> None:
    from madohub_nb.agents.profiles import get_profile as profile_of
    from madohub_nb.agents.screen import input_text, terminal_last_response

    qwen = profile_of("qwen")
    assert screen_state(qwen, QWEN_BUSY) == "busy"
    assert screen_state(qwen, QWEN_IDLE) == "idle"
    assert terminal_last_response(QWEN_IDLE, qwen) == "Done: first line\\nsecond line"
    assert input_text(QWEN_IDLE, qwen) == ""  # the placeholder
    assert input_text(QWEN_DRAFT, qwen) == "first line\nsecond line \u200b".strip()


# Aider 0.86.2, captured at 120 columns (tests/real_agents runs it against fake_openai).
AIDER_RULE = "─" * 120
AIDER_BANNER = (
    f"{AIDER_RULE}\nAider v0.86.2\nModel: openai/fake-model with whole edit format\n"
    f"Git repo: none\nRepo-map: disabled\n"
)
AIDER_EARLIER = (
    f"{AIDER_RULE}\n> pasted one\n> pasted two\nDone: pasted one\\npasted two\n"
    "Tokens: 605 sent, 9 received.\n"
)
AIDER_STARTED = f"{AIDER_BANNER}{AIDER_RULE}\n>\n\n\n"
AIDER_BUSY = (
    f"{AIDER_BANNER}{AIDER_EARLIER}{AIDER_RULE}\n> Slow one [[sleep 3]]\n"
    "  ░█       Waiting for openai/fake-model\n\n\n"
)
AIDER_STREAMING = f"{AIDER_BANNER}{AIDER_EARLIER}{AIDER_RULE}\n> Slow one [[sleep 3]]\nDone: Slow"
AIDER_IDLE = (
    f"{AIDER_BANNER}{AIDER_EARLIER}{AIDER_RULE}\n> Slow one [[sleep 3]]\n"
    f"Done: Slow one [[sleep 3]]\nsecond line of it\nTokens: 629 sent, 9 received.\n{AIDER_RULE}\n>\n"
)
AIDER_DRAFT = AIDER_IDLE.removesuffix(">\n") + "> draft a\n> draft b\n"
AIDER_QUESTION = (
    f"{AIDER_BANNER}\nhttps://aider.chat/HISTORY.html#release-notes\n"
    "Would you like to see what's new in this version? (Y)es/(N)o [Yes]:\n\n"
)


def test_aider_screens_read_busy_idle_waiting_and_its_answer() -> None:
    from madohub_nb.agents.screen import input_text, terminal_last_response

    aider = get_profile("aider")
    assert screen_state(aider, AIDER_STARTED) == "idle"
    assert screen_state(aider, AIDER_BUSY) == "busy"
    assert screen_state(aider, AIDER_STREAMING) == "busy"  # no prompt at the bottom
    assert screen_state(aider, AIDER_IDLE) == "idle"
    assert screen_state(aider, AIDER_DRAFT) == "idle"
    assert screen_state(aider, AIDER_QUESTION) == "waiting"
    # The answer: the lines after the last input, without the token count and the prompt.
    answer = "Done: Slow one [[sleep 3]]\nsecond line of it"
    assert terminal_last_response(AIDER_IDLE, aider) == answer
    assert terminal_last_response(AIDER_DRAFT, aider) == answer
    assert terminal_last_response(AIDER_STARTED, aider) == ""
    assert input_text(AIDER_IDLE, aider) == ""
    assert input_text(AIDER_DRAFT, aider) == "draft a\n> draft b"
    assert input_text(AIDER_BUSY, aider) is None  # the submitted prompt is no draft
    assert aider.newline_key == "M-Enter" and aider.submit_keys == ("\r",)
