"""Real Gemini CLI, Qwen Code, Copilot CLI and OpenCode, started by the hub with
``mcp=["reviewer"]``, ask a reviewer through the hub's MCP server (issue 25, item 2).

Each runs offline in a pane of a private tmux server against its local fake API, which
is told to call the hub's ``ask`` tool (by the name the agent gives it); the hub types
the question into a stand-in reviewer, waits for its whole answer and returns it, and the
agent's next API request carries it as the tool's result. The round is logged (``trigger``
``mcp``), no permission prompt is seen, the token is on no command line, and the user's
own settings files get no MCP server.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import log_rows, start_standin, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb.agents.kinds.gemini import SETTINGS_ENV as GEMINI_SETTINGS_ENV
from madohub_nb.agents.kinds.opencode import CONFIG_ENV as OPENCODE_CONFIG_ENV
from madohub_nb.agents.kinds.qwen import SETTINGS_ENV as QWEN_SETTINGS_ENV
from madohub_nb.agents.mcp_setup import (
    mcp_setup,
)
from madohub_nb.testing import fake_gemini as gemini_api
from madohub_nb.testing import fake_openai as openai_api
from madohub_nb.testing.fake_gemini import FakeGemini
from madohub_nb.testing.fake_openai import FakeOpenAIResponses

from . import install
from .conftest import (
    COPILOT_VERSION,
    GEMINI_MODEL,
    GEMINI_VERSION,
    LEAKY_ENV,
    STARTUP_TIMEOUT_S,
    copilot_env,
    copilot_prompt,
    gemini_env,
    write_gemini_settings,
)
from .test_real_routing import OPENCODE_QUIET_ENV, OPENCODE_VERSION, write_opencode_config

pytestmark = pytest.mark.real_agents

QWEN_VERSION = "0.24.4"
ASK_TEXT = "Is slugify('A b') == 'a-b' right?"
LEAD_PROMPT = "Please ask the reviewer about slugify."
TIMEOUT_S = 120.0
EXPECTED = f"Done: {ASK_TEXT}"
"""What the stand-in reviewer (persona ``echo``) answers the question."""


@pytest.fixture
def secure_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``$XDG_RUNTIME_DIR``: a 0700 folder with no group- or other-writable folder above
    it (the test HOME is under /tmp, where Gemini CLI skips settings files)."""
    base = install.DEFAULT_CACHE_DIR.parent  # the real ~/.cache/madohub_nb
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="mcp-test-", dir=base))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _tool_name(kind: str, tool: str) -> str:
    """What ``kind``'s model calls the hub's ``tool`` (from the hub's own table)."""
    setup = mcp_setup(
        kind, "http://127.0.0.1:1/mcp", "t", "/x", server="madohub",
        tools=("list_agents", "send", "ask"), token_env="MADOHUB_MCP_TOKEN",
    )  # fmt: skip
    assert setup is not None
    return setup.tool_names[("list_agents", "send", "ask").index(tool)]


def _command(exe: Path, *args: str, keep: tuple[str, ...] = ()) -> str:
    """``exe args`` without the test process's variables that would lead it elsewhere
    (but ``keep``: the pane's own, given by ``env=``)."""
    gone = [v for v in LEAKY_ENV if v not in ("TMUX", "TMUX_PANE", *keep)]
    unset = [a for var in gone for a in ("-u", var)]
    return shlex.join(["env", *unset, str(exe), *args])


@dataclass
class Lead:
    """How one agent kind is started as the lead, and what its API saw."""

    command: str
    env: dict[str, str]
    fake: FakeGemini | FakeOpenAIResponses
    result_of: Callable[[dict[str, Any]], str | None]
    """The tool result an API request carries (None: none)."""
    user_files: tuple[Path, ...]
    """The user's own settings files, which must not name the hub's server."""

    def results(self) -> list[str]:
        """The tool results its API requests carried, oldest first."""
        return [r for r in map(self.result_of, _bodies(self.fake)) if r is not None]

    def tools_seen(self) -> list[str]:
        """The names of the hub's tools in its last API request (for a failure's message)."""
        bodies = _bodies(self.fake)
        names: list[str] = []
        for tool in (bodies[-1].get("tools") or []) if bodies else []:
            for decl in tool.get("functionDeclarations", [tool]):
                name = decl.get("name") or (decl.get("function") or {}).get("name")
                if name and "madohub" in name:
                    names.append(name)
        return names


def _gemini_model(body: dict[str, Any]) -> str | dict[str, Any] | None:
    result = gemini_api.function_response(body)
    if result is not None:
        return f"Lead got: {result}"
    if "ask the reviewer" in (gemini_api.prompt_text(body) or ""):
        args = {"to": "reviewer", "text": ASK_TEXT, "timeout_s": 60}
        return {"function_call": {"name": _tool_name("gemini", "ask"), "args": args}}
    return None


def _openai_model(kind: str) -> Callable[[dict[str, Any]], str | dict[str, Any] | None]:
    def reply(body: dict[str, Any]) -> str | dict[str, Any] | None:
        result = openai_api.function_output(body)
        if result is not None:
            return f"Lead got: {result}"
        prompt = copilot_prompt(openai_api.prompt_text(body)) or ""
        if "ask the reviewer" in prompt:
            args = {"to": "reviewer", "text": ASK_TEXT, "timeout_s": 60}
            return {"function_call": {"name": _tool_name(kind, "ask"), "arguments": args}}
        return openai_api.default_answer(prompt)

    return reply


def _bodies(fake: FakeGemini | FakeOpenAIResponses) -> list[dict[str, Any]]:
    return [r["body"] for r in list(fake.requests) if isinstance(r.get("body"), dict)]


def _gemini_lead(home: Path, exe: Path, fake: FakeGemini) -> Lead:
    settings = write_gemini_settings(home)
    fake.reply = _gemini_model

    command = _command(exe, "--model", GEMINI_MODEL)
    env = gemini_env(home, fake.base_url)
    return Lead(command, env, fake, gemini_api.function_response, (settings,))


def _qwen_lead(home: Path, exe: Path, fake: FakeOpenAIResponses) -> Lead:
    settings = home / ".qwen" / "settings.json"
    settings.parent.mkdir(parents=True)
    user = {
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ui": {"hideTips": True},
        "general": {"enableAutoUpdate": False},  # no registry lookup at start
    }
    settings.write_text(json.dumps(user))
    fake.reply = _openai_model("qwen")
    env = {
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-fake-qwen",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_MODEL": "fake-model",
    }
    command = _command(exe, keep=tuple(env))
    return Lead(command, env, fake, openai_api.function_output, (settings,))


def _copilot_lead(home: Path, exe: Path, fake: FakeOpenAIResponses, cwd: Path) -> Lead:
    config = home / ".copilot" / "config.json"
    config.parent.mkdir(parents=True)
    # What answering its folder-trust dialog with "2. Yes, and remember" writes.
    config.write_text(json.dumps({"trustedFolders": [str(cwd)]}))
    fake.reply = _openai_model("copilot")
    user_mcp = home / ".copilot" / "mcp-config.json"
    user_mcp.write_text(json.dumps({"mcpServers": {}}))
    env = copilot_env(home, fake.base_url)
    return Lead(_command(exe), env, fake, openai_api.function_output, (config, user_mcp))


def _opencode_lead(home: Path, exe: Path, fake: FakeOpenAIResponses) -> Lead:
    config = write_opencode_config(home, fake.base_url)
    # OpenCode runs MCP tools unasked by default: a user's config that asks before every
    # tool shows the hub's permission entry is what lets its three through.
    user = json.loads(config.read_text())
    config.write_text(json.dumps({**user, "permission": {"*": "ask"}}, indent=2))
    fake.reply = _openai_model("opencode")
    env = {"HOME": str(home), **OPENCODE_QUIET_ENV}
    return Lead(_command(exe), env, fake, openai_api.function_output, (config,))


@pytest.fixture
def fake_gemini_api() -> Iterator[FakeGemini]:
    with FakeGemini() as fake:
        yield fake


def test_real_gemini_asks_a_reviewer_through_the_hub_and_gets_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_gemini_api: FakeGemini,
    secure_runtime_dir: Path,
) -> None:
    lead = _gemini_lead(home, agent_bin("gemini", GEMINI_VERSION), fake_gemini_api)
    _ask_through_the_hub("gemini", lead, tmux_socket, tmp_path)


def test_real_qwen_asks_a_reviewer_through_the_hub_and_gets_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> None:
    lead = _qwen_lead(home, agent_bin("qwen", QWEN_VERSION), fake_openai)
    _ask_through_the_hub("qwen", lead, tmux_socket, tmp_path)


def test_real_copilot_asks_a_reviewer_through_the_hub_and_gets_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> None:
    exe = agent_bin("copilot", COPILOT_VERSION)
    lead = _copilot_lead(home, exe, fake_openai, _project(tmp_path, "lead"))
    _ask_through_the_hub("copilot", lead, tmux_socket, tmp_path)


def test_real_opencode_asks_a_reviewer_through_the_hub_and_gets_its_answer(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> None:
    lead = _opencode_lead(home, agent_bin("opencode", OPENCODE_VERSION), fake_openai)
    _ask_through_the_hub("opencode", lead, tmux_socket, tmp_path)


def _project(tmp_path: Path, name: str) -> Path:
    cwd = tmp_path / name
    cwd.mkdir(exist_ok=True)
    return Path(os.path.realpath(cwd))


def _ask_through_the_hub(kind: str, lead_setup: Lead, tmux_socket: str, tmp_path: Path) -> None:
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3")
    try:
        hub.mcp_cooldown_ms = 1000
        reviewer = start_standin(hub, "reviewer", cwd=tmp_path)
        lead = hub.tile(
            "lead", agent=kind, command=lead_setup.command, cwd=_project(tmp_path, "lead"),
            env=lead_setup.env, mcp=["reviewer"],
        )  # fmt: skip
        _wait(lead, lambda: lead.state == "idle", STARTUP_TIMEOUT_S, f"{kind} idle")
        token = hub.mcp.token("lead")
        assert token is not None
        proc = lead.agent_process()
        assert proc is not None
        agent = psutil.Process(proc.pid)
        assert token not in " ".join(agent.cmdline())
        config = _config_file(kind, agent)
        assert config.stat().st_mode & 0o777 == 0o600
        assert token not in config.read_text()  # it reads the token from its environment
        assert config.parent.stat().st_mode & 0o777 == 0o700
        hub.send("lead", LEAD_PROMPT).result(60)

        def answered() -> bool:
            return any(EXPECTED in r for r in lead_setup.results())

        try:
            wait_until(answered, TIMEOUT_S, what="the reviewer's answer as the lead's tool result")
        except AssertionError:
            raise AssertionError(
                f"results {lead_setup.results()}; tools {lead_setup.tools_seen()}; "
                f"screen:\n{lead.screen()}"
            ) from None
        assert user_prompts(reviewer) == [ASK_TEXT]
        wait_until(lambda: len(_mcp(hub)) == 2, 20, what="the ask's rows")
        asked, answer = _mcp(hub)
        assert (asked["route_id"], asked["source"], asked["trigger"]) == (
            "mcp:lead->reviewer", "lead", "mcp",
        )  # fmt: skip
        assert (asked["prompt"], asked["status"], asked["meta"]["tool"]) == (
            ASK_TEXT, "delivered", "ask",
        )  # fmt: skip
        assert (answer["source"], answer["extracted"]) == ("reviewer", EXPECTED)
        wait_until(lambda: lead.state == "idle", 60, what=f"{kind} idle after its turn")
        # Its turn ended with the model's last answer on screen (OpenCode repaints at times).
        _wait(lead, lambda: "Lead got:" in lead.screen(), 30, "the lead's answer on screen")
        for path in lead_setup.user_files:
            text = path.read_text()
            assert hub.mcp.url not in text and token not in text, f"the user's {path} was written"
            assert '"madohub":' not in text, f"the user's {path} names the hub's server"
    finally:
        hub.close()
    assert not config.exists(), "the hub's MCP settings outlived close()"


def _config_file(kind: str, agent: psutil.Process) -> Path:
    """The hub's MCP settings file ``agent`` was started with (its environment or argv)."""
    if kind == "copilot":
        argv = agent.cmdline()
        return Path(argv[argv.index("--additional-mcp-config") + 1].removeprefix("@"))
    var = {"gemini": GEMINI_SETTINGS_ENV, "qwen": QWEN_SETTINGS_ENV}.get(kind, OPENCODE_CONFIG_ENV)
    return Path(agent.environ()[var])


def _mcp(hub: mh.Hub) -> list[dict[str, Any]]:
    return [r for r in log_rows(hub) if str(r["route_id"]).startswith("mcp:")]


def _wait(tile: mh.Tile, cond: Callable[[], object], timeout_s: float, what: str) -> None:
    try:
        wait_until(cond, timeout_s, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; state {tile.state}; screen:\n{tile.screen()}") from None
