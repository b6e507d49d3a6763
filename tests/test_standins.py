"""The stand-in agents behave like the real Claude Code and Codex inside tmux.

Each tmux test starts a stand-in in a pane of a private tmux server (200x50),
types into it with ``send-keys`` like a router does, and checks the screen,
the process and the files against what the real agents produced
(``fixtures/real/``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import wait_until

from madohub_nb.agents.profiles import get_profile, screen_state
from madohub_nb.agents.screen import input_text, terminal_last_response
from madohub_nb.demo import PERSONAS, install_standins, standin_command
from madohub_nb.demo.personas import echo, reply
from madohub_nb.errors import MadohubValueError
from madohub_nb.io.agent_records import read_last_response

THINK_S = 0.3
RULE = "─" * 20


# Helpers ----------------------------------------------------------------------


class Pane:
    """One tmux pane running a stand-in, addressed by its pane id."""

    def __init__(self, socket: str, pane_id: str) -> None:
        self.socket = socket
        self.pane_id = pane_id

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.pane_id)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.pane_id, "-l", text)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.pane_id, *keys)

    def paste(self, text: str) -> None:
        self.tmux("set-buffer", "-b", "standin-test", text)
        self.tmux("paste-buffer", "-p", "-d", "-b", "standin-test", "-t", self.pane_id)

    def agent(self, name: str) -> psutil.Process:
        """The pane's process (or descendant) whose command name is ``name``."""
        pane_pid = int(self.tmux("display-message", "-p", "-t", self.pane_id, "#{pane_pid}"))

        def find() -> psutil.Process | None:
            root = psutil.Process(pane_pid)
            return next(
                (p for p in [root, *root.children(recursive=True)] if p.name() == name), None
            )

        found = wait_until(find, 10, what=f"a process named {name}")
        assert isinstance(found, psutil.Process)
        return found

    def wait_screen(self, cond: Callable[[str], object], what: str, timeout_s: float = 10) -> str:
        screens: list[str] = []

        def check() -> bool:
            screens.append(self.screen())
            return bool(cond(screens[-1]))

        try:
            wait_until(check, timeout_s, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast screen:\n{screens[-1] if screens else ''}") from None
        return screens[-1]


def start(
    socket: str, cwd: Path, command: str, env: dict[str, str] | None = None, first: bool = True
) -> Pane:
    """Start ``command`` in a new 200x50 pane (a new session, or a new window of it)."""
    # A session of its own for every pane: no pane depends on another one still running.
    name = "t" if first else f"t{uuid.uuid4().hex[:8]}"
    where = ["new-session", "-d", "-x", "200", "-y", "50", "-s", name]
    args = [
        "tmux",
        "-L",
        socket,
        "-f",
        "/dev/null",
        *where,
        "-P",
        "-F",
        "#{pane_id}",
        "-c",
        str(cwd),
    ]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    proc = subprocess.run([*args, command], capture_output=True, text=True)
    assert proc.returncode == 0, f"tmux could not start {command!r}: {proc.stderr.strip()}"
    return Pane(socket, proc.stdout.strip())


def claude_cmd(home: Path, persona: str = "echo", **opts: object) -> str:
    return standin_command(
        "claude", persona, bin_dir=home / "bin", think_s=THINK_S, private_config=False, **opts
    )


def codex_cmd(home: Path, persona: str = "echo") -> str:
    return standin_command(
        "codex", persona, bin_dir=home / "bin", think_s=THINK_S, private_config=False
    )


def sessions_file(home: Path, pid: int) -> Path:
    return home / ".claude" / "sessions" / f"{pid}.json"


def session(home: Path, pid: int) -> dict[str, Any]:
    try:
        data = json.loads(sessions_file(home, pid).read_text())
    except (OSError, ValueError):
        return {}
    assert isinstance(data, dict)
    return data


def records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a transcript or rollout (a half-written line is skipped)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def transcript(home: Path, cwd: Path, session_id: str) -> Path:
    """Where Claude Code keeps a session's transcript: the real cwd, non-alphanumerics as '-'."""
    name = re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(cwd))
    return home / ".claude" / "projects" / name / f"{session_id}.jsonl"


def prompts(recs: list[dict[str, Any]]) -> list[str]:
    """What was submitted as prompts (user records that came from the input box)."""
    return [
        r["message"]["content"] for r in recs if r.get("type") == "user" and "promptSource" in r
    ]


def last_answer(recs: list[dict[str, Any]]) -> str | None:
    """A small reader: the text blocks of the last main-thread assistant message."""
    lines = [r for r in recs if r.get("type") == "assistant" and not r.get("isSidechain")]
    for rec in reversed(lines):
        msg_id = rec["message"]["id"]
        texts = [
            b["text"]
            for r in lines
            if r["message"]["id"] == msg_id
            for b in r["message"]["content"]
            if b.get("type") == "text" and b["text"].strip()
        ]
        if texts:
            return "\n".join(texts)
    return None


def java_hash(text: str) -> int:
    """Java's String.hashCode, computed with big integers and wrapped once at the end."""
    h = 0
    for ch in text:  # the test paths are ASCII: one UTF-16 unit per character
        h = h * 31 + ord(ch)
    h %= 2**32
    return h - 2**32 if h >= 2**31 else h


def composer_rows(screen: str) -> list[str]:
    """The Codex composer's rows: from the last ``›`` line to the blank row above the model line."""
    lines = screen.splitlines()
    model = max(i for i, line in enumerate(lines) if line.startswith("  standin-"))
    top = max(i for i, line in enumerate(lines[:model]) if line.startswith("›"))
    return lines[top : model - 1]


def fixture_records(fixtures_dir: Path, name: str) -> list[dict[str, Any]]:
    return records(fixtures_dir / "real" / name)


def kinds(recs: list[dict[str, Any]]) -> set[str]:
    return {r["type"] + ("/" + r["subtype"] if r["type"] == "system" else "") for r in recs}


def keys_of(
    recs: list[dict[str, Any]], cond: Callable[[dict[str, Any]], bool]
) -> set[frozenset[str]]:
    return {frozenset(r) for r in recs if cond(r)}


def is_prompt(r: dict[str, Any]) -> bool:
    return r["type"] == "user" and "promptSource" in r


def is_tool_result(r: dict[str, Any]) -> bool:
    return r["type"] == "user" and "toolUseResult" in r


def is_turn_duration(r: dict[str, Any]) -> bool:
    return r["type"] == "system" and r.get("subtype") == "turn_duration"


CLAUDE = get_profile("claude")
CODEX = get_profile("codex")


# Personas ---------------------------------------------------------------------


def test_echo_persona_answers_like_the_fake_api_of_the_fixtures(fixtures_dir: Path) -> None:
    recs = fixture_records(fixtures_dir, "claude/transcript_long_session_submit_tests.jsonl")
    pairs = []
    prompt = None
    for r in recs:
        if is_prompt(r):
            prompt = r["message"]["content"]
        elif r["type"] == "assistant" and prompt is not None:
            block = r["message"]["content"][0]
            if block["type"] == "text" and "[[bash" not in prompt:
                pairs.append((prompt, block["text"]))
            prompt = None
    assert len(pairs) >= 10
    for prompt, answer in pairs:
        assert echo(prompt) == answer
        assert reply("echo", prompt, 1) == answer


def test_counter_persona_counts_its_turns() -> None:
    assert [reply("counter", "anything", n) for n in (1, 2, 3)] == ["count 1", "count 2", "count 3"]


def test_writer_and_reviewer_loop_ends_with_lgtm_at_draft_v3() -> None:
    task = "Write a small function that makes URL slugs."
    review = ""
    for turn in (1, 2, 3):
        draft = reply("writer", task if turn == 1 else review, turn)
        assert draft.startswith(f"Draft v{turn} (function)")
        assert draft.count("\n") >= 1
        if turn > 1:
            first_comment = next(line[2:] for line in review.splitlines() if line.startswith("- "))
            assert f"addressing: {first_comment}" in draft
        review = reply("reviewer", f"Review this:\n{draft}", turn)
        assert review.startswith(f"Review of draft v{turn} (function):")
        bullets = [line for line in review.splitlines() if line.startswith("- ")]
        if turn < 3:
            assert "LGTM" not in review
            assert 2 <= len(bullets) <= 3
        else:
            assert "LGTM" in review and not bullets


def test_writer_keeps_the_topic_it_was_given() -> None:
    first = reply("writer", "Please write a haiku about tmux", 1)
    assert first.startswith("Draft v1 (haiku):") and len(first.splitlines()) == 4
    review = reply("reviewer", first, 1)
    assert reply("writer", review, 2).startswith("Draft v2 (haiku)")


@pytest.mark.parametrize("persona", PERSONAS)
def test_personas_are_deterministic(persona: str) -> None:
    assert reply(persona, "Draft v1 (spec): x", 2) == reply(persona, "Draft v1 (spec): x", 2)


def test_unknown_persona_is_refused_with_the_allowed_names() -> None:
    with pytest.raises(MadohubValueError, match="persona 'poet'.*echo, writer, reviewer, counter"):
        reply("poet", "hi", 1)
    with pytest.raises(MadohubValueError, match="turn"):
        reply("echo", "hi", 0)


# Launchers --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_install_standins_writes_launchers_named_like_the_agents(tmp_path: Path, kind: str) -> None:
    paths = install_standins(tmp_path / "bin")
    assert set(paths) == {"claude", "codex", "mh-setenv"}
    path = paths[kind]
    assert path.name == kind
    assert path.stat().st_mode & stat.S_IXUSR
    assert path.read_text().splitlines()[0] == f"#!{sys.executable}"
    out = subprocess.run([str(path), "--help"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith(f"usage: {kind}")


def test_standin_command_names_the_launcher_and_options(tmp_path: Path) -> None:
    cmd = standin_command(
        "claude", "writer", bin_dir=tmp_path, think_s=0.5, allow_bash=True, private_config=False
    )
    assert cmd == f"{tmp_path / 'claude'} --persona writer --think-s 0.5 --allow-bash"
    with pytest.raises(MadohubValueError, match="kind 'amp'.*claude, codex"):
        standin_command("amp", bin_dir=tmp_path)
    with pytest.raises(MadohubValueError, match="option 'speed'.*think_s"):
        standin_command("claude", bin_dir=tmp_path, speed=2)
    with pytest.raises(MadohubValueError, match="claude stand-in only"):
        standin_command("codex", bin_dir=tmp_path, allow_bash=True)
    with pytest.raises(MadohubValueError, match="persona"):
        standin_command("codex", "poet", bin_dir=tmp_path)


def test_a_private_config_dir_is_in_the_standins_environment_from_its_first_exec(
    tmp_path: Path,
) -> None:
    """The launcher named like the agent starts with its config dir already in its
    environment: a router that reads it at once (same pid after any exec) finds it."""
    config = tmp_path / "cfg"
    cmd = standin_command("codex", bin_dir=tmp_path / "bin", config_dir=config)
    words = shlex.split(cmd)
    assert words[:3] == [str(tmp_path / "bin" / "mh-setenv"), "CODEX_HOME", str(config)]
    proc = subprocess.Popen([*words, "--help"], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=30)
    assert out.startswith("usage: codex") and config.is_dir()


# Claude Code stand-in -----------------------------------------------------------


def test_claude_starts_idle_as_a_process_named_claude_with_a_sessions_file(
    tmux_socket: str, home: Path, project: Path, fixtures_dir: Path
) -> None:
    pane = start(tmux_socket, project, claude_cmd(home))
    agent = pane.agent("claude")
    assert Path(f"/proc/{agent.pid}/comm").read_text().strip() == "claude"
    screen = pane.wait_screen(lambda s: "? for shortcuts" in s, "the idle footer")
    lines = screen.splitlines()
    box = lines.index(next(line for line in lines if line.startswith("❯")))
    assert lines[box - 1].startswith(RULE) and lines[box + 1].startswith(RULE)
    assert "Claude Code v2.1.197" in screen
    assert screen_state(CLAUDE, screen) == "idle"

    data = wait_until(lambda: session(home, agent.pid), 5, what="sessions file")
    real = json.loads((fixtures_dir / "real/claude/sessions_23811_idle.json").read_text())
    assert isinstance(data, dict) and list(data) == list(real)
    assert data["pid"] == agent.pid and data["status"] == "idle"
    assert data["cwd"] == os.path.realpath(project) and data["kind"] == "interactive"


def test_claude_turn_goes_busy_then_idle_with_the_answer_on_screen_and_in_the_transcript(
    tmux_socket: str, home: Path, project: Path, tmp_path: Path
) -> None:
    pane = start(tmux_socket, project, claude_cmd(home))
    pid = pane.agent("claude").pid
    pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
    output = tmp_path / "output.bin"
    pane.tmux("pipe-pane", "-t", pane.pane_id, "-o", f"cat >> {output}")

    pane.type("Test one: please reply [[sleep 3]]")
    pane.keys("Enter")
    busy = pane.wait_screen(lambda s: "esc to interrupt" in s, "busy footer")
    assert re.search(r"^[·✢✳✶✻✽] \w+…", busy, re.MULTILINE), busy
    assert screen_state(CLAUDE, busy) == "busy"
    assert session(home, pid)["status"] == "busy"

    # A busy agent repaints its spinner regularly (REAL-AGENTS.md, output stream).
    sizes: list[int] = []

    def grew_three_times() -> bool:
        sizes.append(output.stat().st_size if output.exists() else 0)
        return len(set(sizes)) >= 4

    wait_until(grew_three_times, 10, what="spinner output while busy")

    idle = pane.wait_screen(lambda s: "● Done:" in s and "? for shortcuts" in s, "idle again")
    assert "● Done: Test one: please reply [[sleep 3]]" in idle
    assert re.search(r"^✻ \w+ for \ds$", idle, re.MULTILINE)
    assert screen_state(CLAUDE, idle) == "idle"
    data = wait_until(lambda: session(home, pid).get("status") == "idle" and session(home, pid), 5)
    assert isinstance(data, dict)
    path = transcript(home, project, data["sessionId"])
    recs = records(path)
    assert is_turn_duration(recs[-1])
    assert prompts(recs) == ["Test one: please reply [[sleep 3]]"]
    answer = last_answer(recs)
    assert answer == "Done: Test one: please reply [[sleep 3]]"
    assert terminal_last_response(idle, CLAUDE) == answer
    extraction = read_last_response(path)
    assert extraction is not None and extraction.text == answer

    # An idle agent writes nothing.
    quiet = output.stat().st_size
    time.sleep(1.0)
    assert output.stat().st_size == quiet


def test_claude_ctrl_j_keeps_one_prompt_and_a_cr_inside_text_submits_early(
    tmux_socket: str, home: Path, project: Path
) -> None:
    pane = start(tmux_socket, project, claude_cmd(home))
    pid = pane.agent("claude").pid
    pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
    for i, line in enumerate(["line one", "line two", "line three"]):
        if i:
            pane.keys("C-j")
        pane.type(line)
    pane.wait_screen(lambda s: input_text(s, CLAUDE) == "line one\nline two\nline three", "3 lines")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "● Done: line one\\nline two\\nline three" in s, "one answer")

    pane.type("first part\rsecond part")
    pane.wait_screen(
        lambda s: "● Done: first part" in s and input_text(s, CLAUDE) == "second part",
        "'first part' answered, 'second part' left in the box",
    )
    recs = records(transcript(home, project, session(home, pid)["sessionId"]))
    assert prompts(recs) == ["line one\nline two\nline three", "first part"]


def test_claude_bracketed_paste_waits_for_enter_and_busy_typing_is_queued(
    tmux_socket: str, home: Path, project: Path
) -> None:
    pane = start(tmux_socket, project, claude_cmd(home))
    pid = pane.agent("claude").pid
    pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
    pane.paste("Pasted one\nPasted two\nPasted three\nPasted four")
    pane.wait_screen(lambda s: "[Pasted text #1 +3 lines]" in s, "the paste label")
    assert not transcript(home, project, session(home, pid)["sessionId"]).exists()
    pane.keys("Enter")
    pane.wait_screen(lambda s: "● Done: Pasted one\\nPasted two" in s, "the paste answered")

    pane.type("Slow one [[sleep 2]]")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "esc to interrupt" in s, "busy")
    pane.type("Queued while busy")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "  ❯ Queued while busy" in s, "the queued prompt above the box")
    pane.wait_screen(lambda s: "● Done: Queued while busy" in s, "the queued prompt answered")

    recs = records(transcript(home, project, session(home, pid)["sessionId"]))
    assert prompts(recs) == [
        "Pasted one\nPasted two\nPasted three\nPasted four",
        "Slow one [[sleep 2]]",
        "Queued while busy",
    ]
    assert [r["promptSource"] for r in recs if is_prompt(r)] == ["typed", "typed", "queued"]
    assert [r["operation"] for r in recs if r["type"] == "queue-operation"] == [
        "enqueue",
        "dequeue",
    ]


def test_claude_bash_marker_asks_permission_then_answers(
    tmux_socket: str, home: Path, project: Path
) -> None:
    pane = start(tmux_socket, project, claude_cmd(home))
    pid = pane.agent("claude").pid
    pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
    pane.type("Permission test [[bash touch made_by_tool]]")
    pane.keys("Enter")
    waiting = pane.wait_screen(lambda s: "Do you want to proceed?" in s, "the permission prompt")
    assert " ❯ 1. Yes" in waiting and "   3. No" in waiting
    assert "● Bash(touch made_by_tool)" in waiting and "⎿  Waiting…" in waiting
    assert screen_state(CLAUDE, waiting) == "waiting"
    data = session(home, pid)
    assert data["status"] == "waiting" and data["waitingFor"] == "permission prompt"

    pane.type("1")
    idle = pane.wait_screen(lambda s: "● Done: (Bash completed with no output)" in s, "the answer")
    assert screen_state(CLAUDE, idle) == "idle"
    wait_until(lambda: session(home, pid).get("status") == "idle", 5, what="status idle")
    assert "waitingFor" not in session(home, pid)
    assert not (project / "made_by_tool").exists()  # pretended: no --allow-bash


def test_claude_allowed_bash_runs_and_writes_records_shaped_like_the_real_ones(
    tmux_socket: str, home: Path, project: Path, fixtures_dir: Path
) -> None:
    env = {"MADOHUB_STANDIN_ALLOW_BASH": "1", "MADOHUB_STANDIN_THINK_S": str(THINK_S)}
    pane = start(
        tmux_socket,
        project,
        standin_command("claude", bin_dir=home / "bin", private_config=False),
        env=env,
    )
    pid = pane.agent("claude").pid
    pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
    pane.type("Minimal example prompt, please answer")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "● Done: Minimal example prompt" in s, "first answer")
    pane.type("Tool example [[bash echo hello-from-tool]]")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "Do you want to proceed?" in s, "the permission prompt")
    pane.keys("Enter")
    screen = pane.wait_screen(lambda s: "● Done: hello-from-tool" in s, "the tool answer")
    assert "  ⎿  hello-from-tool" in screen
    wait_until(lambda: session(home, pid).get("status") == "idle", 5, what="status idle")

    ours = records(transcript(home, project, session(home, pid)["sessionId"]))
    minimal = fixture_records(fixtures_dir, "claude/transcript_minimal.jsonl")
    tool = fixture_records(fixtures_dir, "claude/transcript_with_tool_use.jsonl")
    long = fixture_records(fixtures_dir, "claude/transcript_long_session_submit_tests.jsonl")
    assert kinds(minimal) <= kinds(ours) <= kinds(minimal) | kinds(tool) | kinds(long)
    for cond in (is_prompt, is_tool_result, is_turn_duration):
        assert keys_of(ours, cond) == keys_of(tool, cond), cond.__name__
    assert keys_of(ours, is_prompt) == keys_of(minimal, is_prompt)
    assistant = [r for r in ours if r["type"] == "assistant"]
    real_assistant = [r for r in minimal if r["type"] == "assistant"]
    assert {frozenset(r) for r in assistant} == {frozenset(real_assistant[0])}
    assert {frozenset(r["message"]) for r in assistant} == {frozenset(real_assistant[0]["message"])}
    assert {frozenset(r["message"]["usage"]) for r in assistant} == {
        frozenset(real_assistant[0]["message"]["usage"])
    }
    # One API response, one line per content block, sharing message.id and requestId.
    text_line, tool_line = (r for r in assistant if r["message"]["stop_reason"] == "tool_use")
    assert text_line["message"]["id"] == tool_line["message"]["id"]
    assert text_line["requestId"] == tool_line["requestId"]
    assert tool_line["message"]["content"][0]["input"]["command"] == "echo hello-from-tool"
    result = next(r for r in ours if is_tool_result(r))
    assert result["message"]["content"][0]["content"] == "hello-from-tool"
    assert result["sourceToolAssistantUUID"] == tool_line["uuid"]
    # Each record links to the one before it.
    chained = [r for r in ours if "parentUuid" in r]
    assert all(b["parentUuid"] == a["uuid"] for a, b in zip(chained, chained[1:], strict=False))
    assert last_answer(ours) == "Done: hello-from-tool"


def test_claude_clear_switches_to_a_new_session_and_transcript(
    tmux_socket: str, home: Path, tmp_path: Path
) -> None:
    # A working directory whose project name is over 200 characters: cut and hashed.
    cwd = tmp_path / ("deep_" + "x" * 120) / ("dir." + "y" * 100)
    cwd.mkdir(parents=True)
    pane = start(tmux_socket, cwd, claude_cmd(home))
    pid = pane.agent("claude").pid
    pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
    pane.type("Before clear")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "● Done: Before clear" in s, "first answer")
    first = session(home, pid)["sessionId"]

    pane.type("/clear")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "Before clear" not in s, "an empty conversation")
    second = wait_until(
        lambda: session(home, pid)["sessionId"] != first and session(home, pid)["sessionId"], 5
    )
    pane.type("After clear")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "● Done: After clear" in s, "answer after /clear")

    real = os.path.realpath(cwd)
    h = java_hash(real)
    folders = list((home / ".claude" / "projects").iterdir())
    assert len(folders) == 1
    name = folders[0].name
    assert name[:200] == re.sub(r"[^A-Za-z0-9]", "-", real)[:200]
    assert name[200] == "-" and int(name[201:], 36) == abs(h)
    old = records(folders[0] / f"{first}.jsonl")
    new = records(folders[0] / f"{second}.jsonl")
    assert prompts(old) == ["Before clear"] and prompts(new) == ["After clear"]
    assert any("<command-name>/clear</command-name>" in str(r.get("message")) for r in new)
    assert last_answer(new) == "Done: After clear"


def test_claude_escape_interrupts_a_busy_turn_without_an_answer(
    tmux_socket: str, home: Path, project: Path
) -> None:
    pane = start(tmux_socket, project, claude_cmd(home))
    pid = pane.agent("claude").pid
    pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
    pane.type("Long one [[sleep 30]]")
    pane.keys("Enter")
    pane.wait_screen(lambda s: "esc to interrupt" in s, "busy")
    pane.keys("Escape")
    screen = pane.wait_screen(
        lambda s: "Interrupted" in s and "? for shortcuts" in s, "interrupted"
    )
    assert screen_state(CLAUDE, screen) == "idle"
    wait_until(lambda: session(home, pid).get("status") == "idle", 5, what="status idle")
    recs = records(transcript(home, project, session(home, pid)["sessionId"]))
    assert "[Request interrupted by user]" in json.dumps(recs[-1])
    assert last_answer(recs) is None and not any(is_turn_duration(r) for r in recs)


def test_claude_exit_by_keys_or_signal_removes_the_sessions_file(
    tmux_socket: str, home: Path, project: Path
) -> None:
    panes = [start(tmux_socket, project, claude_cmd(home), first=i == 0) for i in range(3)]
    agents = [p.agent("claude") for p in panes]
    for pane, agent in zip(panes, agents, strict=True):
        pane.wait_screen(lambda s: "? for shortcuts" in s, "idle")
        assert sessions_file(home, agent.pid).exists()
    panes[0].keys("C-d")
    panes[1].keys("C-c")
    panes[1].wait_screen(lambda s: "Press Ctrl-C again to exit" in s, "the exit hint")
    panes[1].keys("C-c")
    agents[2].send_signal(signal.SIGTERM)
    for agent in agents:
        agent.wait(10)
        assert not agent.is_running()
        assert not sessions_file(home, agent.pid).exists()


# Codex stand-in -----------------------------------------------------------------


def test_codex_starts_idle_as_a_process_named_codex(
    tmux_socket: str, home: Path, project: Path
) -> None:
    pane = start(tmux_socket, project, codex_cmd(home))
    agent = pane.agent("codex")
    assert Path(f"/proc/{agent.pid}/comm").read_text().strip() == "codex"
    screen = pane.wait_screen(lambda s: "› Ask Codex to do anything" in s, "the empty composer")
    assert ">_ OpenAI Codex (v0.171.0)" in screen and "? for shortcuts" in screen
    assert screen_state(CODEX, screen) == "idle"
    assert input_text(screen, CODEX) == ""


def test_codex_swallows_an_enter_right_after_typing_but_submits_after_a_pause(
    tmux_socket: str, home: Path, project: Path, fixtures_dir: Path
) -> None:
    pane = start(tmux_socket, project, codex_cmd(home))
    agent = pane.agent("codex")
    pane.wait_screen(lambda s: "› Ask Codex to do anything" in s, "idle")

    pane.type("Codex prompt one")
    pane.keys("Enter")  # inside the paste burst: a newline, not a submit
    pane.wait_screen(
        lambda s: composer_rows(s) == ["› Codex prompt one", ""], "a second composer row"
    )
    assert not (home / ".codex").exists()
    time.sleep(0.8)  # what a router must do before Enter (REAL-AGENTS.md)
    pane.keys("Enter")
    busy = pane.wait_screen(lambda s: "• Working (" in s, "the working line")
    assert "esc to interrupt)" in busy and "? for shortcuts" in busy
    assert screen_state(CODEX, busy) == "busy"
    idle = pane.wait_screen(lambda s: "• Done: Codex prompt one" in s and "Ask Codex" in s, "idle")
    assert re.search(r"^  Worked for <1s • \d\d:\d\d$", idle, re.MULTILINE)
    assert screen_state(CODEX, idle) == "idle"
    assert terminal_last_response(idle, CODEX) == "Done: Codex prompt one"

    pane.type("alpha")
    pane.keys("C-j")
    pane.type("beta [[sleep 1]]")
    time.sleep(0.8)
    pane.keys("Enter")
    pane.wait_screen(
        lambda s: "• Done: alpha\\nbeta [[sleep 1]]" in s, "the two-line prompt answered"
    )

    (path,) = (home / ".codex" / "sessions").rglob("rollout-*.jsonl")
    assert re.fullmatch(r"rollout-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-[0-9a-f-]{36}\.jsonl", path.name)
    assert str(path) in {f.path for f in agent.open_files()}
    ours = records(path)
    real = fixture_records(fixtures_dir, "codex/codex_rollout_tui.jsonl")

    def shape(rec: dict[str, Any]) -> tuple[str, str]:
        return rec["type"], rec["payload"].get("type", "")

    assert {shape(r) for r in ours} == {shape(r) for r in real}
    for kind in {shape(r) for r in real}:
        assert {frozenset(r["payload"]) for r in ours if shape(r) == kind} <= {
            frozenset(r["payload"]) for r in real if shape(r) == kind
        }, kind
    assert ours[0]["payload"]["cwd"] == os.path.realpath(project)
    done = [
        r["payload"]["last_agent_message"]
        for r in ours
        if shape(r) == ("event_msg", "task_complete")
    ]
    assert done == ["Done: Codex prompt one", "Done: alpha\\nbeta [[sleep 1]]"]
    user = [
        r["payload"]["content"][0]["text"]
        for r in ours
        if shape(r) == ("response_item", "message") and r["payload"]["role"] == "user"
    ]
    assert user[-2:] == ["Codex prompt one", "alpha\nbeta [[sleep 1]]"]
    extraction = read_last_response(path)
    assert extraction is not None and extraction.text == "Done: alpha\\nbeta [[sleep 1]]"
