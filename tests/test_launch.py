"""The agent kinds' registry and a new pane's launch plan: pure logic, no tmux."""

from __future__ import annotations

import dataclasses
import importlib
import shlex

import pytest

from madohub_nb.agents.hooks import HOOK_AGENTS, hook_setup
from madohub_nb.agents.kinds import KINDS, SHIPPED_KINDS, AgentKind
from madohub_nb.agents.launch import LaunchLayer, LaunchPlan
from madohub_nb.agents.mcp_setup import HOST_MCP_AGENTS, MCP_AGENTS
from madohub_nb.agents.profiles import PROFILES, kind_of


@pytest.mark.parametrize("name", SHIPPED_KINDS)
def test_each_shipped_kind_is_one_module_exporting_one_frozen_kind(name: str) -> None:
    module = importlib.import_module(f"madohub_nb.agents.kinds.{name}")
    kind = module.KIND
    assert isinstance(kind, AgentKind) and kind.name == name and KINDS[name] is kind
    assert PROFILES[name] is kind.profile
    with pytest.raises(dataclasses.FrozenInstanceError):
        kind.hooks = None  # type: ignore[misc]


def test_the_kind_lists_are_derived_from_the_kinds() -> None:
    assert set(HOOK_AGENTS) == {n for n, k in KINDS.items() if k.hooks is not None}
    assert set(MCP_AGENTS) == {n for n, k in KINDS.items() if k.mcp is not None}
    assert set(HOST_MCP_AGENTS) == {n for n, k in KINDS.items() if k.mcp_on_hosts}
    assert set(HOST_MCP_AGENTS) <= set(MCP_AGENTS) <= set(HOOK_AGENTS)


def test_a_registered_kind_gets_the_record_reader_its_extractor_names() -> None:
    """``kind_of`` of a shipped kind is its module's; a kind known by its profile alone (a
    user's) gets no layers, and the record reader its ``extractor`` names."""
    assert kind_of("claude") is KINDS["claude"]
    with pytest.raises(ValueError, match="unknown agent kind 'nope'"):
        kind_of("nope")
    PROFILES["claude-fork"] = dataclasses.replace(KINDS["claude"].profile, kind="claude-fork")
    PROFILES["plain"] = dataclasses.replace(KINDS["aider"].profile, kind="plain")
    try:
        fork, plain = kind_of("claude-fork"), kind_of("plain")
        assert fork.record is KINDS["claude"].record and fork.hooks is None and fork.mcp is None
        assert plain.record is None  # ("session" names no format of its own)
    finally:
        del PROFILES["claude-fork"], PROFILES["plain"]


def test_a_plan_without_layers_runs_the_command_as_given() -> None:
    plan = LaunchPlan("claude --model x", {"A": "1"}, "/work")
    assert plan.command_line() == "claude --model x"
    assert plan.environment() == {"A": "1"} and plan.workdir == "/work" and plan.layers == ()
    assert LaunchPlan(None).command_line() is None


def test_layers_compose_in_order_mcp_hooks_then_worktree() -> None:
    mcp = LaunchLayer("claude", args=("--mcp-config", "/p/m.json"), env={"T": "mcp"})
    hooks = LaunchLayer("claude", ("stop",), args=("--settings", '{"a": 1}'), env={"T": "hook"})
    tree = LaunchLayer("claude", cwd="/repo/.worktrees/a")
    plan = LaunchPlan("claude", {"T": "user", "U": "1"}, "/repo").with_layers(
        worktree=tree, hooks=hooks, mcp=mcp
    )
    assert plan.layers == (mcp, hooks, tree)
    line = plan.command_line()
    assert line == "claude " + shlex.join(["--mcp-config", "/p/m.json", "--settings", '{"a": 1}'])
    assert shlex.split(line or "")[-1] == '{"a": 1}'  # quoted once, whole
    assert plan.environment() == {"T": "hook", "U": "1"}  # a later layer's variable wins
    assert plan.workdir == "/repo/.worktrees/a"


def test_a_kinds_hooks_layer_is_what_hook_setup_gives() -> None:
    for name in HOOK_AGENTS:
        layer = hook_setup(name, ["hook"], "/private/")
        assert layer is not None and layer == KINDS[name].hooks(["hook"], "/private")  # type: ignore[misc]
        assert all(path.startswith("/private/") for path in layer.files)
    assert hook_setup("aider", ["hook"], "/private") is None


def test_a_layers_and_plans_repr_shows_no_secret() -> None:
    """A layer's env and files may hold an MCP token or a channel server's password: a repr
    (a traceback, a notebook's echo) shows neither."""
    layer = LaunchLayer(
        "opencode", args=("--port", "4096"), env={"OPENCODE_SERVER_PASSWORD": "pw-s3cret"},
        files={"/p/mcp.json": '{"token": "tok-s3cret"}'},
    )  # fmt: skip
    plan = LaunchPlan("opencode", env={"API_KEY": "key-s3cret"}).with_layers(channel=layer)
    for shown in (repr(layer), repr(plan)):
        assert "s3cret" not in shown and "--port" in shown
