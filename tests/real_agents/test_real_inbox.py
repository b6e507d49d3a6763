"""The inbox with the real agents, offline, against the local fake APIs.

Claude Code (both pinned versions): a Bash call in ``default`` permission mode (2.1.332
starts in ``auto`` mode and would not ask: REAL-AGENTS.md "Hooks") shows its dialog: it
appears in ``hub.inbox`` with the choices the agent draws and the tool its
``PermissionRequest`` hook names, ``choose`` answers it, and the agent goes on (its tool
result reaches the fake API). An approval route into a real Claude delivers the person's
edit. Codex, Gemini CLI, Qwen Code, Copilot CLI, OpenCode and Aider, each in the mode
where its shell tool asks first: the same, from the screen alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, start_standin, wait_until

from madohub_nb.testing.fake_anthropic import FakeAnthropic
from madohub_nb.testing.fake_gemini import FakeGemini, function_response
from madohub_nb.testing.fake_gemini import prompt_text as gemini_prompt
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, function_output, prompt_text

from .conftest import (
    CLAUDE_VERSIONS,
    CODEX_VERSION,
    COPILOT_TRUST_QUESTION,
    COPILOT_VERSION,
    DEFAULT_API_KEY,
    GEMINI_MODEL,
    GEMINI_VERSION,
    LEAKY_ENV,
    QWEN_NO_UPDATE_SETTINGS,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    claude_env,
    codex_env,
    copilot_env,
    end_codex_daemons,
    gemini_env,
    start_agent_pane,
    write_claude_config,
    write_codex_config,
    write_gemini_settings,
)
from .test_real_routing import (
    AIDER_VERSION,
    OPENCODE_QUIET_ENV,
    OPENCODE_VERSION,
    OPENCODE_WIDTH,
    QWEN_VERSION,
    write_aider_config,
    write_opencode_config,
)

pytestmark = pytest.mark.real_agents


def _real_claude(
    hub: Any, name: str, exe: Path, home: Path, cwd: Path, base_url: str, version: str
) -> Any:
    write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    command = shlex.join(["env", *unset, str(exe), "--permission-mode", "default"])
    env = claude_env(home, base_url, DEFAULT_API_KEY)
    tile = hub.tile(name, agent="claude", command=command, cwd=cwd, env=env, hooks=True)
    wait_until(lambda: tile.state == "idle", STARTUP_TIMEOUT_S, what=f"Claude Code {version} idle")
    return tile


def _project(tmp_path: Path, name: str) -> Path:
    cwd = tmp_path / name
    cwd.mkdir()
    return Path(os.path.realpath(cwd))


def _tool_results(fake: FakeAnthropic) -> list[Any]:
    return [
        b
        for r in list(fake.requests)
        if isinstance(r.get("body"), dict)
        for m in r["body"].get("messages", [])
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_permission_prompt_is_in_the_inbox_and_choose_lets_the_agent_go_on(
    hub: Any, home: Path, tmp_path: Path, version: str,
    agent_bin: Callable[[str, str], Path], fake_anthropic: FakeAnthropic,
) -> None:  # fmt: skip
    cwd = _project(tmp_path, "proj")
    tile = _real_claude(
        hub, "w", agent_bin("claude", version), home, cwd, fake_anthropic.base_url, version
    )
    hub.send("w", "run it [[bash touch made]]").result(REPLY_TIMEOUT_S)
    wait_until(lambda: hub.inbox, REPLY_TIMEOUT_S, what="the permission prompt in the inbox")
    (ask,) = hub.inbox
    assert (ask.kind, ask.tile) == ("permission", "w")
    # 2.1.197 shows 3 choices; 2.1.332 adds "Yes, and switch to auto mode · …" before "No"
    assert ask.choices[0] == "Yes" and ask.choices[-1] == "No" and len(ask.choices) >= 3, ask
    assert ask.choices[1].startswith("Yes, and always allow access to "), ask
    assert ask.text.endswith("Do you want to proceed?"), ask.text
    # Its PermissionRequest hook names the tool and its input (the hub started it with hooks).
    wait_until(lambda: ask.tool is not None, REPLY_TIMEOUT_S, what="the PermissionRequest hook")
    assert (ask.tool, ask.tool_input["command"], ask.signal) == ("Bash", "touch made", "hook")
    # Both dialogs show the command (2.1.332 at times only above the dialog: then the hook's
    # "Bash(touch made)" line comes first); it is never said twice.
    assert ask.text.count("touch made") == 1, ask.text
    assert ask.text.startswith(("Bash command", "Bash(touch made)\nBash command")), ask.text
    assert not (cwd / "made").exists() and _tool_results(fake_anthropic) == []
    rec = ask.choose("Yes").result(30)
    assert rec.status == "delivered", rec.error
    wait_until((cwd / "made").exists, REPLY_TIMEOUT_S, what="the tool ran once allowed")
    wait_until(
        lambda: _tool_results(fake_anthropic), REPLY_TIMEOUT_S, what="the tool result at the API"
    )
    wait_until(lambda: tile.state == "idle", REPLY_TIMEOUT_S, what="the agent went on to idle")
    assert ask.state == "approved" and hub.inbox == []
    assert [r["decision"] for r in log_rows(hub) if r["route_id"] == "inbox"] == ["approved"]


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_approval_route_delivers_the_edited_prompt(
    hub: Any, home: Path, tmp_path: Path, version: str,
    agent_bin: Callable[[str, str], Path], fake_anthropic: FakeAnthropic,
) -> None:  # fmt: skip
    start_standin(hub, "writer")
    cwd = _project(tmp_path, "rev")
    _real_claude(
        hub, "reviewer", agent_bin("claude", version), home, cwd, fake_anthropic.base_url, version
    )
    route = hub.connect("writer", "reviewer", template="Review: {output}", approve=True)
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("writer", "a first draft").result(30)
    wait_until(lambda: hub.inbox, 60, what="the route's prompt in the inbox")
    (ask,) = hub.inbox
    assert ask.kind == "approval" and ask.text.startswith("Review: ")
    assert fake_anthropic.prompts == []  # nothing typed before the person says so
    rec = ask.approve("Please review the draft in one line.").result(REPLY_TIMEOUT_S)
    assert (rec.status, rec.decision, rec.proposed_prompt) == ("delivered", "edited", ask.text), (
        rec.error
    )
    assert fake_anthropic.wait_for_prompts(1, REPLY_TIMEOUT_S) == [
        "Please review the draft in one line."
    ]
    (row,) = log_rows(hub, route)
    assert (row["decision"], row["proposed_prompt"], row["prompt"]) == (
        "edited", ask.text, "Please review the draft in one line.",
    )  # fmt: skip


# --------------------------------------------------------------------------- the other agents

COMMAND = "touch made_by_tool"
WHY = "Create the file made_by_tool"
ASKING_PROMPT = "PERM please run it"
TOOL_CALLS: dict[str, Any] = {  # each agent's shell tool, as its request lists it
    "codex": {"function_call": {"name": "exec_command", "arguments": {
        "cmd": COMMAND, "sandbox_permissions": "require_escalated", "justification": WHY}}},
    "copilot": {"function_call": {"name": "bash", "arguments": {
        "command": COMMAND, "description": WHY, "mode": "sync", "initial_wait": 30}}},
    "qwen": {"function_call": {"name": "run_shell_command", "arguments": {
        "command": COMMAND, "description": WHY, "is_background": False}}},
    "opencode": {"function_call": {"name": "bash", "arguments": {
        "command": COMMAND, "description": WHY}}},
    "gemini": {"function_call": {"name": "run_shell_command", "args": {
        "command": COMMAND, "description": WHY}}},
    "aider": f"Run this:\n\n```bash\n{COMMAND}\n```\n",  # (a shell block it offers to run)
}  # fmt: skip
FIRST_CHOICE = {
    "codex": "Yes, proceed (y)",
    "gemini": "Allow once",
    "qwen": "Yes, allow once",
    "copilot": "Yes",
    "opencode": "Allow once",
    "aider": "Yes",
}
VERSIONS = {
    "codex": CODEX_VERSION,
    "gemini": GEMINI_VERSION,
    "qwen": QWEN_VERSION,
    "copilot": COPILOT_VERSION,
    "opencode": OPENCODE_VERSION,
    "aider": AIDER_VERSION,
}


def _asked(kind: str, body: dict[str, Any]) -> bool:
    """The marked prompt's conversation request before its tool ran (side requests left out)."""
    if kind == "gemini":
        return ASKING_PROMPT in (gemini_prompt(body) or "") and function_response(body) is None
    return (
        ASKING_PROMPT in (prompt_text(body) or "")
        and function_output(body) is None
        and bool(body.get("tools") or kind == "aider")
    )


def _tool_answered(kind: str, fake: FakeOpenAIResponses | FakeGemini) -> bool:
    """The tool's result came back to the fake API."""
    bodies = [r["body"] for r in list(fake.requests) if isinstance(r.get("body"), dict)]
    if kind == "gemini":
        return any(function_response(b) is not None for b in bodies)
    return any(function_output(b) is not None for b in bodies)


def _setup(
    kind: str, exe: Path, home: Path, cwd: Path, base_url: str
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of ``kind`` in the mode where a shell tool asks first."""
    if kind == "codex":  # on-request approvals, read-only sandbox: an escalated command asks
        path = write_codex_config(home / ".codex", [cwd], base_url, daemon=False)
        path.write_text(
            'approval_policy = "on-request"\nsandbox_mode = "read-only"\n' + path.read_text()
        )
        return [str(exe)], codex_env(home, home / ".codex")
    if kind == "gemini":
        write_gemini_settings(home)
        return [str(exe), "--model", GEMINI_MODEL], gemini_env(home, base_url)
    if kind == "qwen":
        settings = {
            "security": {"auth": {"selectedType": "openai"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "ui": {"hideTips": True},
            **QWEN_NO_UPDATE_SETTINGS,
        }
        (home / ".qwen").mkdir(parents=True, exist_ok=True)
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
        env = {"HOME": str(home), "OPENAI_API_KEY": "sk-fake-qwen", "OPENAI_BASE_URL": base_url,
               "OPENAI_MODEL": "fake-model"}  # fmt: skip
        return [str(exe), "--approval-mode", "default"], env  # (auto mode asks a classifier)
    if kind == "copilot":  # tool calls are scripted in /v1/responses
        return [str(exe)], {**copilot_env(home, base_url), "COPILOT_PROVIDER_WIRE_API": "responses"}
    if kind == "opencode":
        path = write_opencode_config(home, base_url)
        path.write_text(json.dumps({**json.loads(path.read_text()), "permission": {"bash": "ask"}}))
        return [str(exe)], {"HOME": str(home), **OPENCODE_QUIET_ENV}
    write_aider_config(home, base_url)  # its `diff` format offers a ```bash block to run
    settings = home / ".aider.model.settings.yml"
    settings.write_text(settings.read_text().replace("edit_format: ask", "edit_format: diff"))
    return [str(exe)], {"HOME": str(home)}


@pytest.fixture
def started_panes() -> Iterator[list[RealPane]]:
    """Panes a test started; ended by pid afterwards (Codex's daemons too)."""
    panes: list[RealPane] = []
    yield panes
    for pane in panes:
        pane.stop()
        if pane.kind == "codex":
            end_codex_daemons(pane.home / ".codex")


@pytest.mark.parametrize("kind", list(VERSIONS))
def test_real_agent_permission_prompt_is_in_the_inbox_and_choose_lets_it_go_on(
    kind: str, hub: Any, home: Path, tmp_path: Path, tmux_socket: str,
    agent_bin: Callable[[str, str], Path], started_panes: list[RealPane],
) -> None:  # fmt: skip
    def reply(body: dict[str, Any]) -> Any:
        return TOOL_CALLS[kind] if _asked(kind, body) else None

    with contextlib.ExitStack() as stack:
        fake: FakeOpenAIResponses | FakeGemini = stack.enter_context(
            FakeGemini(reply) if kind == "gemini" else FakeOpenAIResponses(reply)
        )
        cwd = _project(tmp_path, f"proj-{kind}")
        argv, env = _setup(kind, agent_bin(kind, VERSIONS[kind]), home, cwd, fake.base_url)
        pane = start_agent_pane(
            tmux_socket, argv, kind=kind, version=VERSIONS[kind], cwd=cwd, home=home, env=env
        )
        started_panes.append(pane)
        if kind == "opencode":
            pane.tmux("resize-window", "-t", pane.pane_id, "-x", str(OPENCODE_WIDTH))
        if kind == "copilot":  # its first-run folder trust, answered in the pane
            pane.wait_screen(lambda s: COPILOT_TRUST_QUESTION in s, STARTUP_TIMEOUT_S)
            pane.press("1")
        tile = hub.tile("w", pane=pane.pane_id)
        assert tile.agent == kind
        wait_until(lambda: tile.state == "idle", STARTUP_TIMEOUT_S, what=f"{kind} idle")
        rec = hub.send("w", ASKING_PROMPT).result(REPLY_TIMEOUT_S)
        assert rec.status == "delivered", rec.error
        wait_until(lambda: hub.inbox, REPLY_TIMEOUT_S, what=f"{kind}'s permission prompt")
        (ask,) = hub.inbox
        assert (ask.kind, ask.tile, ask.choices[0]) == ("permission", "w", FIRST_CHOICE[kind]), ask
        assert len(ask.choices) >= 2 and COMMAND in ask.text, ask.text
        assert ASKING_PROMPT not in ask.text, ask.text
        assert not (cwd / "made_by_tool").exists()
        rec = ask.choose(0).result(30)
        assert rec.status == "delivered", rec.error
        wait_until((cwd / "made_by_tool").exists, REPLY_TIMEOUT_S, what="the tool ran once allowed")
        if kind != "aider":  # (Aider runs the command itself, and asks nothing more: no output)
            wait_until(lambda: _tool_answered(kind, fake), REPLY_TIMEOUT_S, what="the tool result")
        wait_until(lambda: tile.state == "idle", REPLY_TIMEOUT_S, what=f"{kind} went on to idle")
        assert ask.state == "approved" and hub.inbox == []
        decisions = [r["decision"] for r in log_rows(hub) if r["route_id"] == "inbox"]
        assert decisions[0] == "approved", decisions
