"""``mcp=`` for Gemini CLI, Qwen Code, Copilot CLI and OpenCode (issue 25, item 2): what
each is started with, on a real tmux, and the refusals.

A small program stands in for each agent (the tile says ``agent=``): it writes down
the argv, environment and MCP settings file it was started with, so the test reads what
the real agent would. The real agents themselves are in
tests/real_agents/test_real_mcp_agents.py.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from test_mcp import call

import madohub_nb as mh
from madohub_nb.agents.kinds.gemini import SETTINGS_ENV as GEMINI_SETTINGS_ENV
from madohub_nb.agents.kinds.opencode import CONFIG_ENV as OPENCODE_CONFIG_ENV
from madohub_nb.agents.kinds.qwen import SETTINGS_ENV as QWEN_SETTINGS_ENV
from madohub_nb.agents.mcp_setup import (
    MCP_AGENTS,
    mcp_setup,
)

SECURE_BASE = Path.home() / ".cache" / "madohub_nb"
"""Taken at import, before a test's HOME (under /tmp) takes the place of the real one."""
TOOLS = ("list_agents", "send", "ask")
TOKEN_ENV = "MADOHUB_MCP_TOKEN"
SEEN = """\
import json, os, sys, time
argv = sys.argv[1:]
env = {k: v for k, v in os.environ.items() if k.startswith(("MADOHUB_MCP", "GEMINI_CLI",
       "QWEN_CODE", "OPENCODE_CONFIG"))}
files = [v for v in env.values() if v.startswith("/")]
if "--additional-mcp-config" in argv:
    files.append(argv[argv.index("--additional-mcp-config") + 1].removeprefix("@"))
found = {p: [open(p).read(), os.stat(p).st_mode & 0o777] for p in files}
with open(os.environ["SEEN_PATH"], "w") as out:
    json.dump({"argv": argv, "env": env, "files": found}, out)
time.sleep(120)
"""
"""A stand-in agent: writes what it was started with to $SEEN_PATH, then waits."""


def _setup(agent: str, token: str = "tok-123") -> Any:
    return mcp_setup(
        agent, "http://127.0.0.1:4321/mcp", token, "/private/lead",
        server="madohub", tools=TOOLS, token_env=TOKEN_ENV,
    )  # fmt: skip


@pytest.mark.parametrize("agent", MCP_AGENTS)
def test_every_setup_keeps_the_token_off_the_command_line_and_in_the_private_folder(
    agent: str,
) -> None:
    setup = _setup(agent)
    assert "tok-123" not in " ".join(setup.args)
    assert all(path.startswith("/private/lead/") for path in setup.files)
    assert all("tok-123" not in v for k, v in setup.env.items() if k != TOKEN_ENV)
    in_env = setup.env.get(TOKEN_ENV) == "tok-123"
    in_files = any("tok-123" in text for text in setup.files.values())
    assert in_env != in_files  # in exactly one place: the pane's environment or a 0600 file
    names = zip(setup.tool_names, TOOLS, strict=True)
    assert all(n.endswith(t) and "madohub" in n for n, t in names)


def test_an_agent_the_hub_cannot_configure_has_no_setup() -> None:
    assert _setup("pi") is None and _setup("aider") is None


def test_gemini_and_qwen_get_a_trusted_server_in_their_system_settings_layer() -> None:
    gemini, qwen = _setup("gemini"), _setup("qwen")
    for setup, var in ((gemini, GEMINI_SETTINGS_ENV), (qwen, QWEN_SETTINGS_ENV)):
        settings = json.loads(setup.files[setup.env[var]])
        assert settings["mcpServers"] == {
            "madohub": {
                "httpUrl": "http://127.0.0.1:4321/mcp",
                "headers": {"Authorization": "Bearer ${MADOHUB_MCP_TOKEN}"},
                "trust": True,
                "includeTools": list(TOOLS),
            }
        }
    assert gemini.secure_dir and not qwen.secure_dir
    assert json.loads(qwen.files[qwen.env[QWEN_SETTINGS_ENV]])["$version"] == 4
    assert (gemini.tool_names[2], qwen.tool_names[2]) == ("mcp_madohub_ask", "mcp__madohub__ask")


def test_copilot_gets_an_additional_mcp_config_file_and_the_servers_tools_allowed() -> None:
    """Copilot CLI 1.0.102 reads ``${NAME}`` in a header from its environment (tested with
    the real one: the hub took the token it sent)."""
    setup = _setup("copilot")
    assert setup.args == (
        "--additional-mcp-config", "@/private/lead/copilot-mcp.json", "--allow-tool", "madohub",
    )  # fmt: skip
    config = json.loads(setup.files["/private/lead/copilot-mcp.json"])
    assert config == {
        "mcpServers": {
            "madohub": {
                "type": "http",
                "url": "http://127.0.0.1:4321/mcp",
                "headers": {"Authorization": "Bearer ${MADOHUB_MCP_TOKEN}"},
                "tools": list(TOOLS),
            }
        }
    }
    assert setup.env == {TOKEN_ENV: "tok-123"}
    assert setup.tool_names == ("madohub-list_agents", "madohub-send", "madohub-ask")


def test_opencode_gets_one_more_config_file_reading_the_token_from_its_environment() -> None:
    setup = _setup("opencode")
    config = json.loads(setup.files[setup.env[OPENCODE_CONFIG_ENV]])
    assert config["mcp"]["madohub"] == {
        "type": "remote",
        "url": "http://127.0.0.1:4321/mcp",
        "headers": {"Authorization": "Bearer {env:MADOHUB_MCP_TOKEN}"},
        "enabled": True,
        "oauth": False,
    }
    assert config["permission"] == {f"madohub_{t}": "allow" for t in TOOLS}
    assert "OPENCODE_CONFIG_CONTENT" not in setup.env  # (the hub's hooks use that one)


@pytest.fixture
def seen(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The stand-in's command and where it writes what it saw."""
    script = tmp_path / "seen.py"
    script.write_text(SEEN)
    yield shlex.join([sys.executable, str(script)]), tmp_path / "seen.json"


@pytest.fixture
def secure_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``$XDG_RUNTIME_DIR`` with no group- or world-writable folder above it (not /tmp)."""
    SECURE_BASE.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="mcp-unit-", dir=SECURE_BASE))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("agent", ["gemini", "qwen", "copilot", "opencode"])
def test_a_tile_of_each_agent_starts_with_its_settings_and_its_own_token(
    agent: str,
    hub: mh.Hub,
    project: Path,
    seen: tuple[str, Path],
    secure_runtime_dir: Path,
) -> None:
    command, seen_path = seen
    hub.tile("reviewer", agent="claude", command="sleep 120", cwd=project, hooks=False)
    hub.tile(
        "lead", agent=agent, command=command, cwd=project, mcp=["reviewer"], hooks=False,
        env={"SEEN_PATH": str(seen_path)},
    )  # fmt: skip
    wait_until(seen_path.exists, 15, what="the stand-in's report")
    got = json.loads(seen_path.read_text())
    token = hub.mcp.token("lead")
    assert token is not None and token not in " ".join(got["argv"])
    ((path, (text, mode)),) = got["files"].items()
    assert mode == 0o600 and Path(path).is_relative_to(secure_runtime_dir)
    assert hub.mcp.url in text
    assert got["env"][TOKEN_ENV] == token and token not in text
    is_error, listing = call(hub, token, "list_agents")  # the token is the lead's
    assert not is_error and '"name": "reviewer"' in listing, listing
    hub.close()
    assert not Path(path).exists()


def test_gemini_is_refused_where_no_folder_is_secure_enough(
    hub: mh.Hub, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME is under /tmp here and $XDG_RUNTIME_DIR unset: Gemini CLI would skip the file."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    with pytest.raises(ValueError, match="no private folder without a group- or world-writable"):
        hub.tile("lead", agent="gemini", command="gemini", cwd=project, mcp=True, hooks=False)
    assert hub.tiles == {} and hub.mcp.token("lead") is None


def test_env_that_would_hide_what_mcp_sets_is_refused(hub: mh.Hub, project: Path) -> None:
    with pytest.raises(ValueError, match=r"env= sets OPENCODE_CONFIG, which mcp= needs"):
        hub.tile(
            "lead", agent="opencode", command="opencode", cwd=project, mcp=True,
            env={"OPENCODE_CONFIG": "/elsewhere.json"},
        )  # fmt: skip
    assert hub.tiles == {} and hub.mcp.token("lead") is None


def test_the_machines_own_system_settings_are_carried_over_and_its_defaults_copied() -> None:
    machine = {"ui": {"theme": "corp"}, "mcpServers": {"corp": {"httpUrl": "http://corp"}}}
    setup = mcp_setup(
        "gemini", "http://127.0.0.1:4321/mcp", "tok", "/private/lead", server="madohub",
        tools=TOOLS, token_env=TOKEN_ENV, machine=(machine, '{"general": {}}'),
    )  # fmt: skip
    assert setup is not None
    settings = json.loads(setup.files[setup.env[GEMINI_SETTINGS_ENV]])
    assert settings["ui"] == {"theme": "corp"}
    assert set(settings["mcpServers"]) == {"corp", "madohub"}
    # Found beside the system settings file when its own variable is unset, as the agent does:
    assert setup.files["/private/lead/system-defaults.json"] == '{"general": {}}'
    assert setup.system_layers is not None
    assert setup.system_layers.paths({}) == (
        "/etc/gemini-cli/settings.json", "/etc/gemini-cli/system-defaults.json",
    )  # fmt: skip
    assert setup.system_layers.paths({GEMINI_SETTINGS_ENV: "/opt/g/s.json"})[1] == (
        "/opt/g/system-defaults.json"
    )


def test_a_gemini_tile_still_reads_the_machines_system_files_beside_the_hubs(
    hub: mh.Hub,
    project: Path,
    seen: tuple[str, Path],
    secure_runtime_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The machine's system settings (named by the variable in the hub's environment, as an
    admin sets it) are merged into the hub's file; its system defaults are copied beside."""
    system = tmp_path / "etc-gemini"
    system.mkdir()
    machine = {"ui": {"theme": "corp"}, "mcpServers": {"corp": {"httpUrl": "http://corp"}}}
    (system / "settings.json").write_text(json.dumps(machine))
    (system / "system-defaults.json").write_text('{"general": {"vimMode": true}}')
    monkeypatch.setenv(GEMINI_SETTINGS_ENV, str(system / "settings.json"))
    command, seen_path = seen
    hub.tile(
        "lead", agent="gemini", command=command, cwd=project, mcp=True, hooks=False,
        env={"SEEN_PATH": str(seen_path)},
    )  # fmt: skip
    wait_until(seen_path.exists, 15, what="the stand-in's report")
    got = json.loads(seen_path.read_text())
    path = got["env"][GEMINI_SETTINGS_ENV]
    assert path != str(system / "settings.json")
    settings = json.loads(got["files"][path][0])
    assert settings["ui"] == {"theme": "corp"} and set(settings["mcpServers"]) == {
        "corp", "madohub",
    }  # fmt: skip
    copied = Path(path).parent / "system-defaults.json"
    assert copied.read_text() == '{"general": {"vimMode": true}}'
    assert json.loads((system / "settings.json").read_text()) == machine  # not written
