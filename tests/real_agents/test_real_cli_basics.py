"""The real Claude Code and Codex CLIs, offline in tmux, answer typed prompts from the fakes.

Screens seen along the way are saved to ``$MADOHUB_REAL_SCREENS`` (or the test's tmp
folder) so a person can compare them with ``shared/fixtures/real/screens``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import wait_until

from madohub_nb.io.agent_records import read_last_response
from madohub_nb.io.agent_records.claude import claude_project_dir_name
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_openai import FakeOpenAIResponses

from .conftest import (
    BUSY_MARKER,
    CLAUDE_VERSIONS,
    REPLY_TIMEOUT_S,
    RealPane,
    claude_is_idle,
    codex_daemons,
    codex_is_idle,
    end_codex_daemons,
    process_tree,
)

pytestmark = pytest.mark.real_agents

SLOW_MARKER = "[[sleep 3]]"
"""Long enough to see the busy screen and the busy session status."""


@pytest.fixture
def screens_dir(tmp_path: Path) -> Path:
    """Where this test saves the screens it sees."""
    env = os.environ.get("MADOHUB_REAL_SCREENS")
    return Path(env) if env else tmp_path / "screens"


def _session_file(pane: RealPane, pid: int) -> dict[str, Any] | None:
    path = pane.home / ".claude" / "sessions" / f"{pid}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _status_is(pane: RealPane, pid: int, status: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        data = _session_file(pane, pid)
        return data if data is not None and data.get("status") == status else None

    return check


def _rollout_records(codex_home: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted((codex_home / "sessions").rglob("rollout-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # the last line may be half-written
    return records


def _task_complete(codex_home: Path) -> dict[str, Any] | None:
    for rec in _rollout_records(codex_home):
        payload = rec.get("payload") or {}
        if rec.get("type") == "event_msg" and payload.get("type") == "task_complete":
            return payload
    return None


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _names(tree: list[tuple[int, int, str]]) -> str:
    return " -> ".join(name for _, _, name in tree)


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_claude_answers_a_typed_prompt_and_records_it_in_session_and_transcript(
    version: str,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    pane = real_claude_pane(version)
    tag = f"claude_{version}"
    pane.save_screen(screens_dir / f"{tag}_01_idle_startup.txt")
    proc = pane.agent_process()
    assert proc is not None and proc.pid == pane.pane_pid
    assert proc.name() == "claude"
    print(f"\n{tag}: ready in {pane.startup_s:.2f}s; tree {_names(process_tree(pane.pane_pid))}")

    prompt = f"Real tier check {version} {SLOW_MARKER}"
    pane.submit(prompt)
    assert fake_anthropic.wait_for_prompts(1, REPLY_TIMEOUT_S) == [prompt]
    busy = pane.wait_screen(lambda s: BUSY_MARKER in s, what="Claude's busy footer")
    (screens_dir / f"{tag}_02_busy.txt").write_text(busy)
    wait_until(_status_is(pane, proc.pid, "busy"), REPLY_TIMEOUT_S, what="session status busy")

    answer = default_answer(prompt)
    done = pane.wait_screen(
        lambda s: f"● {answer}" in s and claude_is_idle(s), what=f"'● {answer}' and idle"
    )
    (screens_dir / f"{tag}_03_idle_after_reply.txt").write_text(done)
    pane.save_screen(screens_dir / f"{tag}_03_idle_after_reply.ansi.txt", ansi=True)

    session = wait_until(_status_is(pane, proc.pid, "idle"), what="session status idle")
    assert isinstance(session, dict)
    assert session["pid"] == proc.pid and session["cwd"] == str(pane.cwd)
    assert session["version"] == version
    transcript = (
        pane.home
        / ".claude"
        / "projects"
        / claude_project_dir_name(str(pane.cwd))
        / f"{session['sessionId']}.jsonl"
    )

    def last_text() -> str | None:
        found = read_last_response(transcript)
        return found.text if found is not None and found.text == answer else None

    assert wait_until(last_text, what=f"{transcript} ending in the reply") == answer


def test_claude_started_from_a_shell_runs_as_the_shells_child_and_answers(
    real_claude_pane: Callable[..., RealPane], fake_anthropic: FakeAnthropic, screens_dir: Path
) -> None:
    pane = real_claude_pane(CLAUDE_VERSIONS[0], via_shell=True)
    pane.save_screen(screens_dir / "claude_shell_01_idle_startup.txt")
    shell = psutil.Process(pane.pane_pid)
    proc = pane.agent_process()
    assert shell.name() == "bash"
    assert proc is not None and proc.name() == "claude" and proc.ppid() == shell.pid
    print(
        f"\nclaude via shell: ready in {pane.startup_s:.2f}s; tree {_names(process_tree(shell.pid))}"
    )

    pane.submit("Hello from a shell-started Claude")
    assert fake_anthropic.wait_for_prompts(1, REPLY_TIMEOUT_S) == [
        "Hello from a shell-started Claude"
    ]
    answer = default_answer("Hello from a shell-started Claude")
    pane.wait_screen(lambda s: f"● {answer}" in s and claude_is_idle(s), what="the reply")

    pane.stop()
    wait_until(lambda: _gone(proc) and _gone(shell), what="claude and its shell to end")


def test_codex_answers_a_prompt_writes_a_rollout_and_its_daemon_is_ended_by_pid(
    real_codex_pane: Callable[..., RealPane],
    fake_openai: FakeOpenAIResponses,
    screens_dir: Path,
) -> None:
    pane = real_codex_pane()
    codex_home = pane.codex_home
    assert codex_home is not None
    pane.save_screen(screens_dir / "codex_01_idle_startup.txt")
    tree = process_tree(pane.pane_pid)
    assert [name for _, _, name in tree[:2]] == ["node", "codex"]
    print(f"\ncodex: ready in {pane.startup_s:.2f}s; tree {_names(tree)}")

    prompt = f"Codex real tier check {SLOW_MARKER}"
    pane.submit(prompt)
    busy = pane.wait_screen(lambda s: BUSY_MARKER in s, what="Codex's Working line")
    (screens_dir / "codex_02_busy.txt").write_text(busy)
    answer = default_answer(prompt)
    done = pane.wait_screen(
        lambda s: f"• {answer}" in s and codex_is_idle(s), what=f"'• {answer}' and idle"
    )
    (screens_dir / "codex_03_idle_after_reply.txt").write_text(done)
    # The thread-title side request is answered but is no prompt.
    assert fake_openai.prompts == [prompt]
    assert fake_openai.unknown_paths == []

    finished = wait_until(lambda: _task_complete(codex_home), what="task_complete in the rollout")
    assert isinstance(finished, dict) and finished["last_agent_message"] == answer
    rollout = next((codex_home / "sessions").rglob("rollout-*.jsonl"))
    found = read_last_response(rollout)
    assert found is not None and found.text == answer

    daemons = wait_until(lambda: codex_daemons(codex_home), what="the codex app-server daemon")
    assert isinstance(daemons, list)
    print(f"codex daemons: {[(p.pid, p.ppid(), ' '.join(p.cmdline()[1:4])) for p in daemons]}")

    # Quit the TUI as a person would: the daemon outlives it, adopted by init.
    def quit_codex() -> bool:
        try:
            pane.press("C-c")
        except AssertionError:
            pass  # the pane closed with the TUI
        return not psutil.pid_exists(pane.pane_pid)

    wait_until(quit_codex, REPLY_TIMEOUT_S, interval_s=0.5, what="Codex to quit on Ctrl-C")
    left = codex_daemons(codex_home)
    assert {p.pid for p in left} == {p.pid for p in daemons}
    assert all(p.ppid() not in {pid for pid, _, _ in tree} for p in left)
    assert sorted(set(end_codex_daemons(codex_home))) == sorted(p.pid for p in left)
    assert codex_daemons(codex_home) == []


def test_codex_started_from_a_shell_without_daemon_auto_start_leaves_no_daemon(
    real_codex_pane: Callable[..., RealPane], fake_openai: FakeOpenAIResponses
) -> None:
    pane = real_codex_pane(daemon=False, via_shell=True)
    codex_home = pane.codex_home
    assert codex_home is not None
    tree = process_tree(pane.pane_pid)
    assert [name for _, _, name in tree[:3]] == ["bash", "node", "codex"]
    print(f"\ncodex via shell, no daemon: ready in {pane.startup_s:.2f}s; tree {_names(tree)}")
    pane.submit("No daemon please")
    answer = default_answer("No daemon please")
    pane.wait_screen(lambda s: f"• {answer}" in s and codex_is_idle(s), what="the reply")
    assert fake_openai.prompts == ["No daemon please"]
    assert codex_daemons(codex_home) == []
    assert not (codex_home / "packages").exists()
