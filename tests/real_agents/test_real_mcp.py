"""A real Claude Code lead, started by the hub with ``mcp=["reviewer"]``, asks a reviewer
through the hub's MCP server (issue 25): the fake API tells it to call
``mcp__madohub__ask``; the reviewer's answer comes back as the tool result, checked in
the lead's next API request. Both pinned versions (2.1.332 starts in ``auto``
permission mode, which refuses MCP calls offline unless the tools are pre-allowed).
Then real agents on both ends: a real Claude Code lead asks a real Codex reviewer, and a
real Codex (0.171.0, its tools in namespace ``mcp__madohub``) sends to a real Claude; and a
real Claude Code on a remote host (a private sshd) asks a local reviewer over the host's
link."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, start_standin, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb.testing.fake_anthropic import (
    FakeAnthropic,
    default_answer,
    prompt_text,
    tool_result,
)
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, function_output
from madohub_nb.testing.fake_openai import prompt_text as prompt_text_openai

from .conftest import (
    CLAUDE_VERSIONS,
    CODEX_VERSION,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    STARTUP_TIMEOUT_S,
    claude_env,
    codex_env,
    end_codex_daemons,
    write_claude_config,
    write_codex_config,
)

pytestmark = pytest.mark.real_agents

ASK_TEXT = "Is slugify('A b') == 'a-b' right?"
SEND_TEXT = "Codex here: the tests pass."
TIMEOUT_S = 90.0
CODEX_NAMESPACE = "mcp__madohub"
"""Codex 0.171.0 lists an MCP server's tools as a ``namespace`` tool of this name."""


def _command(exe: Path) -> str:
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    return shlex.join(["env", *unset, str(exe)])


def _lead_model(body: dict[str, Any]) -> str | dict[str, Any] | None:
    """The lead's "model": a prompt saying ``ask the reviewer`` gets a call of the hub's
    ``ask`` tool; the request carrying its result gets ``Lead got: <result>``."""
    result = tool_result(body)
    if result is not None:
        return f"Lead got: {result}"
    if "ask the reviewer" in (prompt_text(body) or ""):
        call = {
            "type": "tool_use",
            "id": "toolu_fake_mcp_ask_01",
            "name": "mcp__madohub__ask",
            "input": {"to": "reviewer", "text": ASK_TEXT, "timeout_s": 60},
        }
        return {"content": [{"type": "text", "text": "Asking."}, call], "stop_reason": "tool_use"}
    return None


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_claude_asks_a_reviewer_through_the_hub_and_gets_its_answer(
    version: str,
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> None:
    exe = agent_bin("claude", version)
    cwd = tmp_path / "lead"
    cwd.mkdir()
    cwd = Path(os.path.realpath(cwd))
    write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    fake_anthropic.reply = _lead_model
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3")
    try:
        hub.mcp_cooldown_ms = 1000
        reviewer = start_standin(hub, "reviewer", cwd=tmp_path)
        lead = hub.tile(
            "lead", agent="claude", command=_command(exe), cwd=cwd, mcp=["reviewer"],
            env=claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY),
        )  # fmt: skip
        wait_until(lambda: lead.state == "idle", STARTUP_TIMEOUT_S, what="Claude Code idle")
        hub.send("lead", "Please ask the reviewer about slugify.").result(60)
        expected = f"Done: {ASK_TEXT}"

        def result_seen() -> bool:
            return any(tool_result(r["body"]) == expected for r in _posts(fake_anthropic))

        wait_until(result_seen, TIMEOUT_S, what="the reviewer's answer as the lead's tool result")
        assert user_prompts(reviewer) == [ASK_TEXT]
        wait_until(lambda: len(_mcp(hub)) == 2, 20, what="the ask's rows")
        asked, answered = _mcp(hub)
        assert asked["route_id"] == "mcp:lead->reviewer" and asked["source"] == "lead"
        assert (asked["prompt"], asked["status"]) == (ASK_TEXT, "delivered")
        assert (answered["source"], answered["extracted"]) == ("reviewer", expected)
        assert not (home / ".claude" / "settings.json").exists(), "the user's settings were written"
    finally:
        hub.close()


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_claude_on_a_host_asks_a_local_reviewer_over_the_hosts_link(
    version: str,
    tmux_socket: str,
    remote_socket: str,
    sshd: object,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> None:
    """Claude Code started by the hub on host ``box`` (a private sshd on 127.0.0.1, its own
    tmux) with ``mcp=["reviewer"]``: its ``--mcp-config`` is a file on the host naming a port
    of the host's 127.0.0.1 that the host's ssh master carries back to the hub. Its call of
    ``mcp__madohub__ask`` reaches the local reviewer; the answer is its next request's tool
    result."""
    cwd = _project(tmp_path, "lead")
    write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    fake_anthropic.reply = _lead_model
    host_configs = Path(sshd.home) / ".cache" / "madohub_nb" / "mcp"  # type: ignore[attr-defined]
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3",
        ssh_command=sshd.ssh_command, remote_socket_name=remote_socket,  # type: ignore[attr-defined]
    )  # fmt: skip
    try:
        hub.mcp_cooldown_ms = 1000
        reviewer = start_standin(hub, "reviewer", cwd=tmp_path)
        lead = hub.tile(
            "lead", agent="claude", command=_command(agent_bin("claude", version)), cwd=cwd,
            mcp=["reviewer"], host="box",
            env=claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY),
        )  # fmt: skip
        assert lead.machine.name == "box"
        url = hub.mcp.client_config("lead")["mcpServers"]["madohub"]["url"]
        assert url.startswith("http://127.0.0.1:") and url != hub.mcp.url
        wait_until(lambda: lead.state == "idle", STARTUP_TIMEOUT_S, what="Claude Code idle")
        hub.send("lead", "Please ask the reviewer about slugify.").result(60)
        expected = f"Done: {ASK_TEXT}"

        def result_seen() -> bool:
            return any(tool_result(r["body"]) == expected for r in _posts(fake_anthropic))

        wait_until(result_seen, TIMEOUT_S, what="the reviewer's answer as the lead's tool result")
        assert user_prompts(reviewer) == [ASK_TEXT]
        wait_until(lambda: len(_mcp(hub)) == 2, 20, what="the ask's rows")
        asked, answered = _mcp(hub)
        assert (asked["route_id"], asked["source"], asked["prompt"]) == (
            "mcp:lead->reviewer", "lead", ASK_TEXT,
        )  # fmt: skip
        assert (answered["source"], answered["extracted"]) == ("reviewer", expected)
        assert any(host_configs.glob("*/lead/claude-mcp.json"))
    finally:
        hub.close()
    assert not any(host_configs.glob("*/lead/claude-mcp.json"))  # gone with the hub


def _project(tmp_path: Path, name: str) -> Path:
    cwd = tmp_path / name
    cwd.mkdir()
    return Path(os.path.realpath(cwd))


def test_a_real_claude_lead_asks_a_real_codex_reviewer_and_gets_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAIResponses,
) -> None:
    """Claude Code 2.1.332 (``auto`` mode) calls ``mcp__madohub__ask``; the hub hands the
    question to the real Codex (its channel), waits for its whole turn and returns the
    answer, which the lead's next API request carries as the tool result."""
    version = CLAUDE_VERSIONS[-1]
    lead_cwd, codex_cwd = _project(tmp_path, "lead"), _project(tmp_path, "reviewer")
    write_claude_config(home, lead_cwd, DEFAULT_API_KEY, version)
    codex_home = home / ".codex"
    write_codex_config(codex_home, [codex_cwd], fake_openai.base_url, daemon=False)
    fake_anthropic.reply = _lead_model
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3")
    try:
        hub.mcp_cooldown_ms = 1000
        reviewer = hub.tile(
            "reviewer", agent="codex", command=_command(agent_bin("codex", CODEX_VERSION)),
            cwd=codex_cwd, env=codex_env(home, codex_home, DEFAULT_API_KEY),
        )  # fmt: skip
        lead = hub.tile(
            "lead", agent="claude", command=_command(agent_bin("claude", version)),
            cwd=lead_cwd, mcp=["reviewer"],
            env=claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY),
        )  # fmt: skip
        _wait_idle(reviewer, lead)
        hub.send("lead", "Please ask the reviewer about slugify.").result(60)
        expected = default_answer(ASK_TEXT)  # what the fake OpenAI model answers Codex

        def result_seen() -> bool:
            return any(tool_result(r["body"]) == expected for r in _posts(fake_anthropic))

        wait_until(result_seen, TIMEOUT_S, what="Codex's answer as the lead's tool result")
        assert fake_openai.prompts == [ASK_TEXT]  # into Codex once, whole
        wait_until(lambda: len(_mcp(hub)) == 2, 20, what="the ask's rows")
        asked, answered = _mcp(hub)
        assert (asked["route_id"], asked["prompt"]) == ("mcp:lead->reviewer", ASK_TEXT)
        assert (answered["source"], answered["extracted"]) == ("reviewer", expected)
        # Codex's channel (issue 39: on by default for a tile the hub starts), not the screen
        assert answered["extraction_method"] == "channel"
    finally:
        hub.close()
        end_codex_daemons(codex_home)


def _codex_model(body: dict[str, Any]) -> str | dict[str, Any] | None:
    """Codex's "model": ``send it to claude`` gets a call of the hub's ``send``; the
    request carrying the call's output gets ``Codex got: <output>``."""
    output = function_output(body)
    if output is not None:
        return f"Codex got: {output}"
    if "send it to claude" in (prompt_text_openai(body) or ""):
        args = {"to": "claude", "text": SEND_TEXT}
        return {"function_call": {"name": "send", "namespace": CODEX_NAMESPACE, "arguments": args}}
    return None


def test_a_real_codex_sends_to_a_real_claude_through_the_hub(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAIResponses,
) -> None:
    """Codex started with ``mcp=["claude"]`` calls ``send``: the text reaches the real Claude
    (its API request carries it), Codex gets ``delivered``, and the round is logged."""
    version = CLAUDE_VERSIONS[-1]
    claude_cwd, codex_cwd = _project(tmp_path, "claude"), _project(tmp_path, "codex")
    write_claude_config(home, claude_cwd, DEFAULT_API_KEY, version)
    codex_home = home / ".codex"
    write_codex_config(codex_home, [codex_cwd], fake_openai.base_url, daemon=False)
    fake_openai.reply = _codex_model
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3")
    try:
        claude = hub.tile(
            "claude", agent="claude", command=_command(agent_bin("claude", version)),
            cwd=claude_cwd, env=claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY),
        )  # fmt: skip
        codex = hub.tile(
            "codex", agent="codex", command=_command(agent_bin("codex", CODEX_VERSION)),
            cwd=codex_cwd, mcp=["claude"], env=codex_env(home, codex_home, DEFAULT_API_KEY),
        )  # fmt: skip
        _wait_idle(claude, codex)
        hub.send("codex", "Please send it to claude.").result(60)
        assert fake_anthropic.wait_for_prompts(1, TIMEOUT_S) == [SEND_TEXT]  # at the target

        def outputs() -> list[str]:
            bodies = [
                r["body"] for r in list(fake_openai.requests) if isinstance(r.get("body"), dict)
            ]
            return [o for o in map(function_output, bodies) if o is not None]

        wait_until(lambda: outputs(), TIMEOUT_S, what="the send's result back in Codex")
        assert "delivered" in outputs()[0], outputs()
        (sent,) = _mcp(hub)
        assert (sent["route_id"], sent["source"], sent["target"]) == (
            "mcp:codex->claude", "codex", "claude",
        )  # fmt: skip
        assert (sent["prompt"], sent["status"], sent["meta"]["tool"]) == (
            SEND_TEXT,
            "delivered",
            "send",
        )
        assert "MADOHUB_MCP_TOKEN" not in (codex_home / "config.toml").read_text()
    finally:
        hub.close()
        end_codex_daemons(codex_home)


def test_a_real_codex_on_a_host_sends_to_a_local_tile_over_the_hosts_link(
    tmux_socket: str,
    remote_socket: str,
    sshd: object,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> None:
    """Codex started by the hub on host ``box`` with ``mcp=["claude"]``: its URL is the
    host's forwarded port, its token in its pane's environment; its ``send`` reaches the
    local tile and its next request carries ``delivered``."""
    codex_cwd = _project(tmp_path, "codex")
    codex_home = home / ".codex"
    write_codex_config(codex_home, [codex_cwd], fake_openai.base_url, daemon=False)
    fake_openai.reply = _codex_model
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3",
        ssh_command=sshd.ssh_command, remote_socket_name=remote_socket,  # type: ignore[attr-defined]
    )  # fmt: skip
    try:
        hub.mcp_cooldown_ms = 1000
        claude = start_standin(hub, "claude", cwd=tmp_path)
        codex = hub.tile(
            "codex", agent="codex", command=_command(agent_bin("codex", CODEX_VERSION)),
            cwd=codex_cwd, mcp=["claude"], host="box",
            env=codex_env(home, codex_home, DEFAULT_API_KEY),
        )  # fmt: skip
        assert codex.machine.name == "box"
        _wait_idle(codex)
        hub.send("codex", "Please send it to claude.").result(60)
        wait_until(lambda: user_prompts(claude) == [SEND_TEXT], TIMEOUT_S, what="the send")

        def outputs() -> list[str]:
            bodies = [
                r["body"] for r in list(fake_openai.requests) if isinstance(r.get("body"), dict)
            ]
            return [o for o in map(function_output, bodies) if o is not None]

        wait_until(lambda: outputs(), TIMEOUT_S, what="the send's result back in Codex")
        assert "delivered" in outputs()[0], outputs()
        (sent,) = _mcp(hub)
        assert (sent["route_id"], sent["status"]) == ("mcp:codex->claude", "delivered")
    finally:
        hub.close()
        end_codex_daemons(codex_home)


def _wait_idle(*tiles: mh.Tile) -> None:
    for tile in tiles:
        wait_until(lambda t=tile: t.state == "idle", STARTUP_TIMEOUT_S, what=f"{tile.name} idle")


def _posts(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in list(fake.requests) if isinstance(r.get("body"), dict)]


def _mcp(hub: mh.Hub) -> list[dict[str, Any]]:
    return [r for r in log_rows(hub) if str(r["route_id"]).startswith("mcp:")]
