"""The person in the loop: ``hub.inbox`` lists what waits for a person, and answers it once.

Real tmux, stand-in Claude Code panes (same permission dialog as the real 2.1.197,
fixtures/real/screens/06) and their own transcripts as the receiving end.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, start_standin, user_prompts, wait_until

from madohub_nb.agents.permission import (
    chars_cut,
    needs_colours,
    read_permission_prompt,
    tool_request,
    with_tool_line,
)
from madohub_nb.agents.profiles import get_profile
from madohub_nb.demo import standin_command
from madohub_nb.errors import MadohubError, MadohubValueError
from madohub_nb.pipeline.events import AskChanged

SCREENS = Path(__file__).parent / "fixtures" / "screens"


def _asking_tile(hub: Any, name: str, cwd: Path) -> Any:
    """A stand-in Claude Code (hooks on) that runs Bash tools for real once allowed."""
    tile = hub.tile(
        name, agent="claude", command=standin_command("claude", persona="echo"), cwd=cwd,
        env={"MADOHUB_STANDIN_THINK_S": "0.2", "MADOHUB_STANDIN_ALLOW_BASH": "1"},
    )  # fmt: skip
    wait_until(lambda: tile.state == "idle", 15, what=f"{name} idle")
    return tile


def _one_ask(hub: Any, kind: str = "permission", timeout_s: float = 20) -> Any:
    wait_until(lambda: [a for a in hub.inbox if a.kind == kind], timeout_s, what=f"a {kind} ask")
    (ask,) = hub.inbox
    return ask


def test_screen_06_reads_as_question_and_choices(fixtures_dir: Path) -> None:
    screens = fixtures_dir / "real" / "screens"
    prompt = read_permission_prompt(
        get_profile("claude"), (screens / "06_waiting_permission_prompt.txt").read_text()
    )
    assert prompt is not None
    assert prompt.choices == (
        "Yes", "Yes, and always allow access to proj-a/ from this project", "No",
    )  # fmt: skip
    assert prompt.keys == ("1", "2", "3")
    assert "touch /srv/demo/work/proj-a/made_by_tool" in prompt.question
    assert prompt.question.endswith("Do you want to proceed?")
    for idle in ("03_idle_after_reply.txt", "02_busy_waiting.txt"):
        assert read_permission_prompt(get_profile("claude"), (screens / idle).read_text()) is None


PERMISSION_SCREENS = [  # captured from the real agents (tests/fixtures/screens/permission/)
    ("codex", "codex", ("Yes, proceed (y)", "Yes, and don't ask again for commands that start "
     "with `touch made_by_tool` (p)", "No, and tell Codex what to do differently (esc)"),
     ("1", "2", "3"), "Would you like to run the following command?"),
    ("gemini", "gemini", ("Allow once", "Allow for this session", "No, suggest changes (esc)"),
     ("1", "2", "3"), "? Shell  touch made_by_tool"),
    ("qwen", "qwen", ("Yes, allow once", "Always allow run 'touch *' commands in this project",
     "Always allow run 'touch *' commands for this user", "No, suggest changes (esc)"),
     ("1", "2", "3", "4"), "? Shell touch made_by_tool (Create the file made_by_tool) ←"),
    ("qwen", "qwen_auto", ("Yes, allow once", "Switch to Default Mode and allow once "
     "(recommended)", "No, suggest changes (esc)"), ("1", "2", "3"),
     "? Shell touch made_by_tool (Create the file made_by_tool) ←"),
    ("copilot", "copilot", ("Yes", "Yes, and don't ask again for `touch` in this directory "
     "(~/proj)", "No, and tell Copilot what to do differently (Esc to stop)"), ("1", "2", "3"),
     "Create the file made_by_tool"),
    ("opencode", "opencode", ("Allow once", "Allow always", "Reject"),
     ("Enter", "Right Enter", "Right Right Enter"),
     "Permission required"),
    ("aider", "aider", ("Yes", "No"), ("y Enter", "n Enter"), "touch made_by_tool"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "screen", "choices", "keys", "first_line"), PERMISSION_SCREENS)
def test_real_agents_dialogs_read_as_question_choices_and_keys(
    kind: str,
    screen: str,
    choices: tuple[str, ...],
    keys: tuple[str, ...],
    first_line: str,
) -> None:
    text = (SCREENS / "permission" / f"{screen}.txt").read_text()
    prompt = read_permission_prompt(get_profile(kind), text)
    assert prompt is not None
    assert (prompt.choices, prompt.keys) == (choices, keys)
    lines = prompt.question.splitlines()
    assert lines[0] == first_line, prompt.question
    assert "touch made_by_tool" in prompt.question
    assert "PERM please run it" not in prompt.question  # (the user's prompt above the dialog)
    assert not any(set(ln) <= set("─╭╮╰╯│ ") for ln in lines if ln), prompt.question  # no box
    assert "?" in prompt.question or kind == "opencode", prompt.question


@pytest.mark.parametrize("kind", ["codex", "gemini", "qwen", "copilot", "opencode", "aider"])
def test_an_answer_after_the_dialog_is_no_prompt(fixtures_dir: Path, kind: str) -> None:
    """The same agents' idle or answer screens read as no permission prompt."""
    real = fixtures_dir / "real" / "screens"
    found = sorted(
        [*SCREENS.glob(f"{kind}/*idle*.txt"), *SCREENS.glob(f"{kind}_*answer.txt"),
         *real.glob(f"{kind}_*after_reply.txt")]
    )  # fmt: skip
    assert found, kind
    for path in found:
        if not path.name.endswith(".ansi.txt"):
            assert read_permission_prompt(get_profile(kind), path.read_text()) is None, path


def test_the_two_kinds_of_ask_are_two_types_that_keep_their_kind_string() -> None:
    """A permission prompt and an approval route's prompt are told apart by type; ``kind``
    is still the string DESIGN.md promises, and each refuses the other's answer."""
    import concurrent.futures

    from madohub_nb.agents.permission import PermissionPrompt
    from madohub_nb.pipeline.inbox import ApprovalAsk, Ask, PermissionAsk

    answered: list[tuple[str, object]] = []

    def on_answer(ask: Ask, state: str, how: object) -> concurrent.futures.Future[Any]:
        answered.append((state, how))
        return concurrent.futures.Future()

    prompt = PermissionPrompt("Run it?", ("Yes", "No"), ("1", "2"))
    permission = PermissionAsk("w", "Run it?", prompt=prompt, on_answer=on_answer)
    approval = ApprovalAsk("b", "Review this", route="r1", on_answer=on_answer)
    assert (permission.kind, approval.kind) == ("permission", "approval")
    assert (permission.choices, approval.choices, approval.signal) == (("Yes", "No"), (), "route")
    with pytest.raises(MadohubValueError, match="takes no text"):
        permission.approve("edited")
    with pytest.raises(MadohubValueError, match="choose\\(\\) answers a permission prompt"):
        approval.choose(0)
    permission.reject()
    approval.approve("Review this, briefly")
    assert [state for state, _ in answered] == ["rejected", "approved"]
    assert permission.choice == "No" and approval.state == "approved"


def test_permission_prompt_is_listed_and_choose_answers_it_once(hub: Any, project: Path) -> None:
    tile = _asking_tile(hub, "w", project)
    hub.send("w", "please [[bash touch made_by_tool]]").result(30)
    ask = _one_ask(hub)
    assert (ask.kind, ask.tile, ask.route, ask.state) == ("permission", "w", None, "open")
    assert ask.choices == ("Yes", "Yes, and always allow access to proj/ from this project", "No")
    assert "touch made_by_tool" in ask.text and "Do you want to proceed?" in ask.text
    assert ask.signal == "hook"  # the agent's own Notification hook told the hub at once
    # Its PermissionRequest hook names the tool and its input.
    wait_until(lambda: ask.tool is not None, 10, what="the PermissionRequest hook's tool")
    assert (ask.tool, ask.tool_input["command"]) == ("Bash", "touch made_by_tool")
    assert ask.text.count("touch made_by_tool") >= 1  # (the dialog shows it: not added twice)
    assert not ask.text.startswith("Bash(")
    rec = ask.choose("Yes").result(30)
    assert (rec.status, rec.route_id, rec.prompt, rec.decision) == (
        "delivered",
        "inbox",
        "1",
        "approved",
    )
    wait_until((project / "made_by_tool").exists, 15, what="the tool ran once allowed")
    wait_until(lambda: tile.state == "idle", 15, what="the agent went on")
    assert ask.state == "approved" and ask.choice == "Yes" and hub.inbox == []
    with pytest.raises(MadohubError, match="no longer open"):
        ask.choose(0)
    assert [r["route_id"] for r in log_rows(hub)].count("inbox") == 1


def test_answered_in_the_pane_closes_the_ask_and_nothing_is_pressed(
    hub: Any, project: Path
) -> None:
    tile = _asking_tile(hub, "w", project)
    hub.send("w", "please [[bash touch never_made]]").result(30)
    ask = _one_ask(hub)
    hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "3")  # someone answers in the pane
    wait_until(lambda: ask.state == "answered", 15, what="the ask closed itself")
    assert hub.inbox == []
    with pytest.raises(MadohubError, match="answered"):
        ask.choose("Yes")
    assert not (project / "never_made").exists()
    assert [r for r in log_rows(hub) if r["route_id"] == "inbox"] == []


SLOW_REDRAW = """#!/bin/sh
# A Claude-like agent that shows a captured permission dialog, reads one key, and redraws
# only 1 s later: until then its screen still shows the prompt that key answered.
stty -echo -icanon min 1
clear
cat "$DIALOG"
key=$(dd bs=1 count=1 2>/dev/null)
sleep 1
clear
printf 'pressed %s\\n' "$key"
exec sleep 600
"""


def test_a_prompt_still_shown_after_its_key_is_not_asked_again(
    hub: Any, project: Path, tmp_path: Path, fixtures_dir: Path
) -> None:
    """The soak found it: the screen read just after a key answered a prompt still shows the
    prompt (the agent has not redrawn yet); that is the answered ask, not a new one."""
    launcher = tmp_path / "bin" / "claude"
    launcher.parent.mkdir()
    launcher.write_text(SLOW_REDRAW)
    launcher.chmod(0o755)
    dialog = fixtures_dir / "real" / "screens" / "06_waiting_permission_prompt.txt"
    tile = hub.tile(
        "w", agent="claude", command=str(launcher), cwd=project, hooks=False,
        env={"DIALOG": str(dialog)},
    )  # fmt: skip
    ask = _one_ask(hub)
    opened: list[str] = []
    hub.events.subscribe(
        lambda e: (
            opened.append(e.ask_id) if isinstance(e, AskChanged) and e.state == "open" else None
        )
    )
    rec = ask.choose("No").result(30)
    assert (rec.status, rec.prompt, rec.decision) == ("delivered", "3", "rejected")
    wait_until(lambda: "pressed 3" in tile.screen(), 15, what="the agent's redraw")
    assert opened == [] and hub.inbox == []


def test_choice_out_of_range_or_not_shown_names_the_choices(hub: Any, project: Path) -> None:
    _asking_tile(hub, "w", project)
    hub.send("w", "please [[bash true]]").result(30)
    ask = _one_ask(hub)
    with pytest.raises(MadohubValueError, match=r"out of range.*3 choices.*'Yes'.*'No'"):
        ask.choose(3)
    with pytest.raises(MadohubValueError, match=r"'Maybe' is not a choice.*0: 'Yes'"):
        ask.choose("Maybe")
    with pytest.raises(MadohubValueError, match="takes no text"):
        ask.approve("some text")
    assert ask.state == "open"
    assert ask.choose("3").result(30).decision == "rejected"  # the number it shows works too


def test_two_threads_choose_one_wins(hub: Any, project: Path) -> None:
    _asking_tile(hub, "w", project)
    hub.send("w", "please [[bash echo x >> twice]]").result(30)
    ask = _one_ask(hub)
    outcomes: list[object] = []
    go = threading.Barrier(2)

    def press() -> None:
        go.wait()
        try:
            outcomes.append(ask.choose(0).result(30))
        except MadohubError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=press) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    errors = [o for o in outcomes if isinstance(o, MadohubError)]
    assert len(outcomes) == 2 and len(errors) == 1, outcomes
    wait_until((project / "twice").exists, 15)
    wait_until(lambda: hub.tiles["w"].state == "idle", 15)
    assert (project / "twice").read_text() == "x\n"


# --- approval routes ---------------------------------------------------------------------------
def _pair(hub: Any, writer_hooks: bool | None = None, **options: Any) -> Any:
    start_standin(hub, "writer", hooks=writer_hooks)
    start_standin(hub, "reviewer")
    route = hub.connect("writer", "reviewer", template="Review: {output}", approve=True, **options)
    wait_until(lambda: route.ready.is_set(), 5)
    return route


def test_approval_edited_is_delivered_and_logs_the_proposed_prompt(hub: Any) -> None:
    route = _pair(hub)
    hub.send("writer", "draft one").result(30)
    ask = _one_ask(hub, "approval", 30)
    assert (ask.kind, ask.tile, ask.route) == ("approval", "reviewer", route.id)
    assert ask.text.startswith("Review: ") and user_prompts(hub.tiles["reviewer"]) == []
    rec = ask.approve("Review it briefly, please").result(30)
    assert (rec.status, rec.decision) == ("delivered", "edited")
    assert rec.proposed_prompt == ask.text and rec.prompt == "Review it briefly, please"
    wait_until(lambda: user_prompts(hub.tiles["reviewer"]), 15)
    assert user_prompts(hub.tiles["reviewer"]) == ["Review it briefly, please"]
    row = log_rows(hub, route)[-1]
    assert (row["decision"], row["proposed_prompt"]) == ("edited", ask.text)
    with pytest.raises(MadohubError, match="no longer open"):
        ask.approve()


def test_approval_as_is_then_rejected(hub: Any) -> None:
    route = _pair(hub, max_rounds=3)
    hub.send("writer", "draft one").result(30)
    first = _one_ask(hub, "approval", 30)
    rec = first.approve().result(30)
    assert (rec.status, rec.decision, rec.proposed_prompt) == ("delivered", "approved", None)
    hub.send("writer", "draft two").result(30)
    wait_until(lambda: [a for a in hub.inbox if a is not first], 30, what="a second approval")
    (second,) = hub.inbox
    rec = second.reject("not this one").result(30)
    assert (rec.status, rec.decision) == ("rejected", "rejected")
    assert "not this one" in (rec.error or "")
    assert second.state == "rejected" and route.state == "active"
    assert user_prompts(hub.tiles["reviewer"]) == [first.text]


def test_approval_expires_after_its_timeout_and_types_nothing(hub: Any) -> None:
    route = _pair(hub, approve_timeout_s=1.0)
    hub.send("writer", "draft one").result(30)
    ask = _one_ask(hub, "approval", 30)
    wait_until(lambda: route.last_status is not None, 15, what="the round logged")
    row = log_rows(hub, route)[-1]
    assert (row["status"], row["decision"]) == ("rejected", "expired")
    assert ask.state == "expired" and hub.inbox == []
    with pytest.raises(MadohubError, match="expired"):
        ask.approve()
    assert user_prompts(hub.tiles["reviewer"]) == []


def test_route_stopped_while_its_prompt_waits_expires_it(hub: Any) -> None:
    route = _pair(hub)
    hub.send("writer", "draft one").result(30)
    ask = _one_ask(hub, "approval", 30)
    route.stop()
    wait_until(lambda: ask.state == "expired", 10, what="the ask expired with its route")
    with pytest.raises(MadohubError, match="stopped"):
        ask.approve()
    wait_until(lambda: route.last_status is not None, 10)
    assert log_rows(hub, route)[-1]["decision"] == "expired"
    assert user_prompts(hub.tiles["reviewer"]) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"approve": True, "approve_timeout_s": 0}, "approve_timeout_s must be"),
        ({"approve": True, "approve_timeout_s": "5"}, "approve_timeout_s must be"),
        ({"approve_timeout_s": 5}, "needs approve=True"),
        ({"approve": True, "dispatch": "shadow"}, "types nothing"),
        ({"approve": "yes"}, "approve must be True or False"),
    ],
)
def test_bad_approval_options_are_refused(hub: Any, options: dict[str, Any], message: str) -> None:
    start_standin(hub, "a")
    start_standin(hub, "b")
    with pytest.raises(MadohubValueError, match=message):
        hub.connect("a", "b", **options)


@pytest.mark.parametrize(
    ("line", "approve", "timeout_ms"),
    [
        ("--approve", True, None),
        ("--approve --approve-timeout 90s", True, 90_000),
        ("", False, None),
    ],
)
def test_connect_magic_takes_approve(line: str, approve: bool, timeout_ms: int | None) -> None:
    from madohub_nb.notebook.parsing import parse_command

    args = parse_command(f"connect w -> r {line}")
    assert (args.approve, args.approve_timeout) == (approve, timeout_ms)


def test_connect_magic_refuses_a_bad_approve_timeout() -> None:
    from madohub_nb.notebook.parsing import parse_command

    with pytest.raises(MadohubValueError, match="soon"):
        parse_command("connect w -> r --approve --approve-timeout soon")


def test_target_exiting_while_a_prompt_waits_expires_it(hub: Any) -> None:
    from conftest import kill_tree

    route = _pair(hub)
    hub.send("writer", "draft one").result(30)
    ask = _one_ask(hub, "approval", 30)
    reviewer = hub.tiles["reviewer"]
    kill_tree(reviewer.pane_info().pid)
    wait_until(lambda: ask.state == "expired", 15, what="the ask expired with its target")
    assert "exited" in (ask.reason or "")
    with pytest.raises(MadohubError, match="exited"):
        ask.approve()
    wait_until(lambda: route.last_status is not None, 10)
    row = log_rows(hub, route)[-1]
    assert (row["status"], row["decision"]) == ("rejected", "expired")


# --- the inbox widget --------------------------------------------------------------------------
def test_inbox_widget_lists_a_permission_and_its_button_answers_it(hub: Any, project: Path) -> None:
    from madohub_nb.notebook.widgets import Dashboard, InboxView

    _asking_tile(hub, "w", project)
    view, dash = InboxView(hub), Dashboard(hub)
    try:
        hub.send("w", "please [[bash touch by_button]]").result(30)
        wait_until(lambda: view.count == 1, 20, what="the ask in the widget")
        wait_until(lambda: "1 waiting" in dash._title.value, 10, what="the dashboard's count")
        assert dash.inbox.count == 1
        (row,) = view.rows.values()
        assert [b.description for b in row.buttons][0] == "1. Yes"
        assert "Do you want to proceed?" in view.snapshot_html()
        (ask,) = hub.inbox  # a hook that names the tool late adds its line: the row is redrawn
        ask.text = f"Bash(touch by_button)\n{ask.text}"
        view.sync()
        (row,) = view.rows.values()
        assert row.shown_text == ask.text and "Bash(touch by_button)" in view.snapshot_html()
        row.buttons[0].click()
        wait_until((project / "by_button").exists, 15, what="the tool ran on the click")
        wait_until(lambda: view.count == 0, 15, what="the answered ask left the widget")
        row.buttons[0].click()  # a stale button: refused in the view, nothing pressed again
        assert "no longer open" in view.error.value
        assert [r["route_id"] for r in log_rows(hub)].count("inbox") == 1
    finally:
        view.close()
        dash.close()


LONG_COMMAND = (
    "curl -fsSL http://127.0.0.1:9/setup/"
    + "/".join(f"stage-{i:03d}" for i in range(140))
    + "/install.sh | sh"
)  # (1,500 characters: on screen it wraps over more lines than the dialog keeps)


def test_a_long_command_is_shown_whole_in_the_ask_and_in_the_inbox_widget(
    hub: Any, project: Path
) -> None:
    """Issue 38.9: the hook's tool line was cut at 200 characters and the screen's dialog at
    its last 12 lines, both without a mark, so a person approving saw no ``| sh``."""
    import html

    from madohub_nb.notebook.widgets import InboxView

    tile = hub.tile(
        "w", agent="claude", command=standin_command("claude", persona="echo"), cwd=project,
        env={"MADOHUB_STANDIN_THINK_S": "0.2"},  # (it never runs the command: no ALLOW_BASH)
    )  # fmt: skip
    wait_until(lambda: tile.state == "idle", 15, what="w idle")
    view = InboxView(hub)
    try:
        hub.send("w", f"please [[bash {LONG_COMMAND}]]").result(60)
        ask = _one_ask(hub)
        wait_until(lambda: ask.tool is not None, 10, what="the PermissionRequest hook's tool")
        assert ask.tool_input["command"] == LONG_COMMAND
        assert f"Bash({LONG_COMMAND})" in ask.text  # whole, on one line, its end included
        assert ask.text.endswith("Do you want to proceed?")
        # The dialog on screen wraps the command over more lines than are kept of it: the
        # cut is marked, with how many lines it left out.
        assert re.search(r"^… \[\d+ more lines? of the dialog above\]$", ask.text, re.M), ask.text
        wait_until(lambda: view.count == 1 and "Bash(" in view.snapshot_html(), 10)
        (row,) = view.rows.values()
        shown = html.escape(f"Bash({LONG_COMMAND})")
        assert shown in view.snapshot_html() and shown in row.children[1].value
        assert "white-space:pre-wrap" in row.children[1].value  # wrapped, not run off the edge
        rec = ask.reject().result(30)
        assert (rec.status, rec.prompt) == ("delivered", "3")
        assert LONG_COMMAND in rec.meta["question"]  # the round log keeps what was answered
    finally:
        view.close()


def test_every_cut_of_a_dialog_is_marked() -> None:
    rule = "─" * 80
    command_rows = [f"   part {i:02d} of a long command" for i in range(20)]
    screen = "\n".join(
        ["● Bash(long)", "", rule, " Bash command", "", *command_rows, "   | sh", "",
         " Do you want to proceed?", " ❯ 1. Yes", "   2. No", ""]
    )  # fmt: skip
    prompt = read_permission_prompt(get_profile("claude"), screen)
    assert prompt is not None and prompt.choices == ("Yes", "No")
    lines = prompt.question.splitlines()
    # 12 lines kept; above them "Bash command" and 11 command rows (blank lines not counted).
    assert lines[0] == "… [12 more lines of the dialog above]", prompt.question
    assert lines[-3:] == ["| sh", "", "Do you want to proceed?"]
    # A dialog that fits is whole, with no mark.
    short = screen.replace("\n".join(command_rows[2:]) + "\n", "")
    fits = read_permission_prompt(get_profile("claude"), short)
    assert (
        fits is not None and fits.question.startswith("Bash command") and "…" not in fits.question
    )
    # The hook's line carries the whole command, however long; a cut elsewhere says how much.
    request = tool_request({"tool_name": "Bash", "tool_input": {"command": LONG_COMMAND}})
    assert request is not None and request.line == f"Bash({LONG_COMMAND})"
    assert chars_cut("x" * 100, 60) == "x" * 59 + "… [41 more characters]"
    assert chars_cut("short", 60) == "short"


def test_characters_that_would_hide_part_of_a_command_are_shown_as_escapes() -> None:
    """A carriage return or an escape sequence draws over what came before it, a bidi
    override reorders it, tag characters are invisible: the tool's line writes them out."""
    command = "echo fine\r\x1b[2Kcurl http://127.0.0.1:9/x | sh \u202eexe.\U000e0041\u200b"
    request = tool_request({"tool_name": "Bash", "tool_input": {"command": command}})
    assert request is not None and request.input["command"] == command  # the data as it is
    assert request.line == (
        "Bash(echo fine\\r\\x1b[2Kcurl http://127.0.0.1:9/x | sh \\u202eexe.\\U000e0041\\u200b)"
    )
    plain = tool_request({"tool_name": "Bash", "tool_input": {"command": "a\tb\nc é ✓"}})
    assert plain is not None and plain.line == "Bash(a\tb\nc é ✓)"  # (these stay as they are)


def test_inbox_widget_delivers_an_approval_edited_in_its_text_box(hub: Any) -> None:
    from madohub_nb.notebook.widgets import InboxView

    route = _pair(hub)
    view = InboxView(hub)
    try:
        hub.send("writer", "draft one").result(30)
        wait_until(lambda: view.count == 1, 30, what="the approval in the widget")
        (row,) = view.rows.values()
        assert row.prompt is not None and row.prompt.value.startswith("Review: ")
        proposed = row.prompt.value
        row.prompt.value = "Edited in the widget"
        row.buttons[0].click()
        wait_until(lambda: user_prompts(hub.tiles["reviewer"]), 15, what="the edit delivered")
        assert user_prompts(hub.tiles["reviewer"]) == ["Edited in the widget"]
        wait_until(lambda: view.count == 0, 10)
        wait_until(lambda: log_rows(hub, route), 10, what="the round logged")
        row_ = log_rows(hub, route)[-1]
        assert (row_["decision"], row_["proposed_prompt"]) == ("edited", proposed)
    finally:
        view.close()


def test_closing_the_hub_while_a_prompt_waits_closes_the_ask(hub: Any) -> None:
    _pair(hub)
    hub.send("writer", "draft one").result(30)
    ask = _one_ask(hub, "approval", 30)
    hub.close()
    assert ask.state == "expired" and "hub closed" in (ask.reason or "")
    assert hub.inbox == []
    with pytest.raises(MadohubError, match="no longer open"):
        ask.approve()


@pytest.mark.parametrize("hooks", [None, False], ids=["stop-hook", "status-file"])
def test_turns_finished_while_a_prompt_waits_route_once_the_newest(
    hub: Any, hooks: bool | None
) -> None:
    route = _pair(hub, writer_hooks=hooks, max_rounds=5)
    hub.send("writer", "draft one").result(30)
    first = _one_ask(hub, "approval", 30)
    for text in ("draft two", "draft three"):  # the source goes on while the person reads
        hub.send("writer", text).result(30)
        wait_until(lambda t=text: t in hub.tiles["writer"].screen(), 10)
    wait_until(lambda: hub.tiles["writer"].state == "idle", 15)
    assert hub.inbox == [first]  # one prompt at a time: nothing else asked meanwhile
    first.approve().result(30)
    second = wait_until(
        lambda: [a for a in hub.inbox if a is not first], 30, what="the next prompt"
    )[0]  # type: ignore[index]
    assert "draft three" in second.text and "draft two" not in second.text, second.text
    second.reject().result(30)
    assert [r["decision"] for r in log_rows(hub, route)] == ["approved", "rejected"]


@pytest.mark.parametrize(
    ("payload", "line"),
    [
        ({"tool_name": "Bash", "tool_input": {"command": "touch x", "description": "d"}},
         "Bash(touch x)"),
        ({"tool_name": "Write", "tool_input": {"file_path": "/p/a.txt", "content": "hi"}},
         "Write(/p/a.txt)"),
        ({"tool_name": "mcp__madohub__ask", "tool_input": {"to": "b", "text": "hi"}},
         'mcp__madohub__ask({"text": "hi", "to": "b"})'),
        ({"tool_name": "Bash"}, "Bash"),
    ],
)  # fmt: skip
def test_a_permission_request_hook_says_the_tool_in_one_line(
    payload: dict[str, Any], line: str
) -> None:
    request = tool_request(payload)
    assert request is not None and (request.tool, request.line) == (payload["tool_name"], line)
    question = "Do you want to proceed?"
    assert with_tool_line(question, request) == f"{line}\n{question}"  # (2.1.332's dialog)
    shown = f"Bash command\n\ntouch x\n\n{question}"  # (2.1.197's dialog shows the command)
    assert with_tool_line(shown, request) == (
        shown if line == "Bash(touch x)" else f"{line}\n{shown}"
    )
    assert tool_request({"tool_input": {"command": "x"}}) is None  # no tool named
    assert tool_request({"tool_name": 3}) is None


def test_opencode_buttons_are_pressed_from_the_selected_one() -> None:
    """OpenCode's row has no key per button: Right (it wraps round) from the one selected,
    read from the colours (captured after Right moved it onto "Allow always"), then Enter."""
    profile = get_profile("opencode")
    moved = read_permission_prompt(
        profile, (SCREENS / "permission" / "opencode_right.ansi.txt").read_text()
    )
    opened = read_permission_prompt(
        profile, (SCREENS / "permission" / "opencode.ansi.txt").read_text()
    )
    assert moved is not None and opened is not None
    assert (opened.selected, moved.selected) == (0, 1)
    assert [opened.keys_for(i) for i in range(3)] == ["Enter", "Right Enter", "Right Right Enter"]
    assert [moved.keys_for(i) for i in range(3)] == ["Right Right Enter", "Enter", "Right Enter"]
    assert moved == opened  # the same ask: only where the selection stands differs
    # The hub reads the text from the plain screen, the selection from the coloured one.
    plain = (SCREENS / "permission" / "opencode_right.txt").read_text()
    coloured = (SCREENS / "permission" / "opencode_right.ansi.txt").read_text()
    assert needs_colours(plain) and not needs_colours(
        (SCREENS / "permission" / "codex.txt").read_text()
    )
    both = read_permission_prompt(profile, plain, coloured)
    assert both == moved and both is not None and both.selected == 1
    alone = read_permission_prompt(profile, plain)  # (no colours: as the dialog opens)
    assert alone is not None and alone.selected == 0
