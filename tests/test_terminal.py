"""``agent="terminal"``: any program is a tile; a shell running a REPL or ``cat`` acts as one."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from conftest import BASH, start_standin, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb import defaults
from madohub_nb.agents.profiles import (
    SHELL,
    TERMINAL,
    foreground_profile,
    get_profile,
    last_line,
    quiet_state,
)
from madohub_nb.pipeline.extract import answer_after_input

PYTHON_REPL = f"{shlex.quote(sys.executable)} -i -q"

# Pure parts ---------------------------------------------------------------------------


def test_quiet_program_is_idle_only_after_the_quiet_time() -> None:
    assert quiet_state(">>> ", quiet_for_ms=999, ready_quiet_ms=1000, ready_pattern=None) == "busy"
    assert quiet_state(">>> ", quiet_for_ms=1000, ready_quiet_ms=1000, ready_pattern=None) == "idle"


def test_ready_pattern_must_match_the_last_non_blank_line_with_its_trailing_space() -> None:
    ready = re.compile(r">>> $")
    screen = "Python 3\n>>> print(1)\n1\n>>> \n\n\n"
    assert last_line(screen) == ">>> "
    assert (
        quiet_state(screen, quiet_for_ms=5000, ready_quiet_ms=1000, ready_pattern=ready) == "idle"
    )
    running = "Python 3\n>>> import time; time.sleep(9)\n\n"
    assert (
        quiet_state(running, quiet_for_ms=5000, ready_quiet_ms=1000, ready_pattern=ready) == "busy"
    )


def test_a_shell_running_another_program_takes_the_terminal_profile() -> None:
    assert foreground_profile(SHELL, "bash") is SHELL
    assert foreground_profile(SHELL, "-zsh") is SHELL
    assert foreground_profile(SHELL, "python3") is TERMINAL
    assert foreground_profile(SHELL, "cat") is TERMINAL
    assert foreground_profile(SHELL, None) is SHELL
    assert foreground_profile(get_profile("claude"), "node") is get_profile("claude")


def test_terminal_profile_submits_with_enter_and_runs_what_it_is_typed() -> None:
    assert TERMINAL.submit_keys == ("\r",)
    assert TERMINAL.executes_input and TERMINAL.answer_after_input
    assert TERMINAL.ready_quiet_ms == defaults.READY_QUIET_MS == 1000


def test_answer_is_the_output_after_the_last_typed_input() -> None:
    screen = ">>> print(1)\n1\n>>> for i in range(3): print(i)\n... \n0\n1\n2\n>>> \n\n"
    typed = "for i in range(3): print(i)\n"
    assert answer_after_input(screen, typed, re.compile(r">>> $")) == "...\n0\n1\n2"
    assert answer_after_input(screen, "print(1)", re.compile(r">>> $")) is not None
    # Without a ready pattern the prompt line stays part of the answer.
    assert answer_after_input(">>> 6*7\n42\n>>>", "6*7") == "42\n>>>"
    assert answer_after_input(">>> x\n", "never typed") is None


def test_cat_echo_then_copy_anchors_on_the_echo() -> None:
    # The terminal echoes the typed line, then cat writes its copy: the copy is the answer.
    assert answer_after_input("hello\nhello\n", "hello") == "hello"
    # Searching the whole history, the last echo counts.
    assert answer_after_input("a\na\nhello\nb\n", "a", last=True) == "hello\nb"


# On tmux ------------------------------------------------------------------------------


def test_python_repl_tile_takes_a_sent_line_and_routes_its_output_on_idle(
    hub: mh.Hub, project: Path
) -> None:
    sink = start_standin(hub, "sink", cwd=project)
    py = hub.tile("py", agent="terminal", command=PYTHON_REPL, ready_pattern=r">>> $")
    wait_until(lambda: py.state == "idle", 15, what="the REPL's prompt")
    assert py.agent == "terminal"
    route = hub.connect("py", "sink", template="REPL said: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    with pytest.raises(mh.MadohubValueError, match="allow_shell=True"):
        hub.send("py", "print(6 * 7)")
    rec = hub.send("py", "print(6 * 7)", allow_shell=True).result(30)
    assert rec.status == "delivered"
    wait_until(lambda: route.last_status == "delivered", 30, what="the routed round")
    assert user_prompts(sink) == ["REPL said: 42"]
    found = py.last_response()
    assert found is not None and found.text == "42" and found.method == "terminal"


def test_terminal_tile_is_busy_while_its_program_prints_or_lacks_its_prompt(
    hub: mh.Hub, project: Path
) -> None:
    py = hub.tile(
        "py", agent="terminal", command=PYTHON_REPL, ready_pattern=r">>> $", ready_quiet_ms=300
    )
    wait_until(lambda: py.state == "idle", 15, what="the REPL's prompt")
    hub.send("py", "import time; time.sleep(3); print('woke')", allow_shell=True).result(30)
    # Quiet for longer than ready_quiet_ms, but the last line is not ">>> ": busy.
    wait_until(lambda: "time.sleep(3)" in py.screen(), 10)
    assert py.state == "busy"
    wait_until(lambda: py.state == "idle", 15, what="the REPL back at its prompt")
    found = py.last_response()
    assert found is not None and found.text == "woke"


def test_route_into_cat_running_in_a_shell_tile_writes_the_prompt(
    hub: mh.Hub, project: Path
) -> None:
    out = project / "out.txt"
    start_standin(hub, "src", cwd=project)
    sh = hub.tile("sh", agent="shell", command=BASH, cwd=project, ready_quiet_ms=300)
    wait_until(lambda: sh.state == "idle", 10, what="shell prompt")
    hub.send("sh", f"cat > {out}", allow_shell=True).result(30)
    wait_until(lambda: out.exists(), 10, what="cat started")
    # cat is quiet and in the foreground: the shell tile acts as a terminal tile.
    wait_until(lambda: sh.state == "idle" and sh.active_profile.kind == "terminal", 10)
    route = hub.connect("src", "sh", template="note: {output}", allow_shell=True, cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("src", "hello cat").result(30)
    wait_until(lambda: route.last_status == "delivered", 30, what="the round into cat")
    wait_until(lambda: out.read_text() == "note: Done: hello cat\n", 10, what="cat's file")
    route.stop()
    hub.runtime.tmux.run(
        "send-keys", "-t", sh.pane_id, "C-d"
    )  # end cat: the shell is a shell again
    wait_until(lambda: sh.state == "idle" and sh.active_profile.kind == "shell", 10)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        pytest.param({"ready_pattern": "(>>>"}, "ready_pattern", id="unbalanced-ready-pattern"),
        pytest.param(
            {"completion_pattern": "[DONE"},
            "completion_pattern",
            id="unbalanced-completion-pattern",
        ),
        pytest.param({"ready_quiet_ms": -5}, "ready_quiet_ms", id="negative-quiet-ms"),
        pytest.param({"ready_quiet_ms": "1s"}, "ready_quiet_ms", id="quiet-ms-as-text"),
    ],
)
def test_bad_ready_options_are_one_line_errors_naming_the_parameter(
    hub: mh.Hub, kwargs: dict[str, object], named: str
) -> None:
    with pytest.raises(mh.MadohubValueError) as info:
        hub.tile("t", agent="terminal", command=PYTHON_REPL, **kwargs)  # type: ignore[arg-type]
    assert named in str(info.value) and "\n" not in str(info.value)
    assert hub.tiles == {}


def test_on_idle_with_completion_pattern_waits_for_the_keyword(hub: mh.Hub, project: Path) -> None:
    import time

    sink = start_standin(hub, "sink", cwd=project)
    py = hub.tile(
        "py", agent="terminal", command=PYTHON_REPL, ready_pattern=r">>> $", ready_quiet_ms=300
    )
    wait_until(lambda: py.state == "idle", 15, what="the REPL's prompt")
    route = hub.connect(
        "py", "sink", template="{output}", cooldown_ms=1000, completion_pattern=r"^ALL DONE$"
    )
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("py", "print('half way')", allow_shell=True).result(30)
    # Quiet and at its prompt for well over idle_delay_ms, but no keyword: no round.
    time.sleep(hub.idle_delay_ms * 3 / 1000)
    assert route.rounds == 0
    hub.send("py", "print('ALL ' + 'DONE')", allow_shell=True).result(30)
    wait_until(lambda: route.last_status == "delivered", 30, what="the round after the keyword")
    assert user_prompts(sink) == ["ALL DONE"]


def test_a_slash_command_is_submitted_with_the_profiles_command_keys() -> None:
    from madohub_nb.agents.profiles import is_slash_command, submit_keys_for

    claude = get_profile("claude")
    assert is_slash_command("  /clear ") and is_slash_command("/model opus")
    assert not is_slash_command("/clear\nthen this") and not is_slash_command("see /tmp")
    assert submit_keys_for(claude, "/clear") == ("\r",)
    assert submit_keys_for(claude, "Review src/app.py") == ("\r", "\r")  # picker protection
    assert submit_keys_for(get_profile("codex"), "/clear") == get_profile("codex").submit_keys
