"""User-defined agents: mh.register_agent, MadoHub.agents and agents.toml."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from conftest import wait_until
from traitlets import TraitError

import madohub_nb as mh
from madohub_nb.agents.detect import detect_kind
from madohub_nb.agents.profiles import PROFILES, get_profile, known_kinds, screen_state
from madohub_nb.agents.registry import agents_file, load_agents_file
from madohub_nb.io.machine import LocalMachine

pytestmark = pytest.mark.usefixtures("forget_user_agents")

AGENTS_TOML = """\
[myagent]
process_tokens = ["myagent"]
busy_markers = ['esc to cancel']
idle_markers = ['^> $']
submit_keys = ["\\r"]
pre_submit_delay_ms = 100
extractor = "terminal"

[quietbot]
process_tokens = ["quietbot"]
ready_quiet_ms = 300
"""


def test_register_agent_adds_a_kind_with_its_markers() -> None:
    profile = mh.register_agent(
        "cline",
        process_tokens=["cline"],
        busy_markers=["esc to cancel"],
        idle_markers=[r"^>"],
        submit_keys=["\r"],
        newline_key="C-j",
    )
    assert get_profile("cline") is profile and "cline" in known_kinds()
    assert screen_state(profile, "thinking… (esc to cancel)") == "busy"
    assert screen_state(profile, "answer\n> ") == "idle"
    assert profile.submit_keys == ("\r",) and profile.newline_key == "C-j"
    assert not profile.executes_input


def test_an_agent_without_markers_is_ready_when_quiet_like_a_terminal_tile() -> None:
    profile = mh.register_agent("quiet", process_tokens=["quiet"])
    assert profile.ready_quiet_ms == 1000 and profile.answer_after_input


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"colour": "red"}, "register_agent('x1').colour: unknown field"),
        ({"busy_markers": "esc"}, "register_agent('x1').busy_markers: expected a list"),
        ({"idle_markers": ["(unclosed"]}, "register_agent('x1').idle_markers"),
        ({"pre_submit_delay_ms": "fast"}, "register_agent('x1').pre_submit_delay_ms"),
        ({"executes_input": "yes"}, "register_agent('x1').executes_input: expected true or false"),
        ({"extractor": "magic"}, "register_agent('x1').extractor"),
    ],
)
def test_bad_fields_are_one_line_errors_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(mh.MadohubValueError) as info:
        mh.register_agent("x1", **fields)
    assert named in str(info.value) and "\n" not in str(info.value)
    assert "x1" not in PROFILES


def test_shipped_kinds_cannot_be_redefined() -> None:
    with pytest.raises(mh.MadohubValueError, match="shipped"):
        mh.register_agent("claude", process_tokens=["claude"])
    assert get_profile("claude").process_tokens == ("claude",)


def test_agents_toml_is_loaded_all_or_nothing(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "cfg"))
    path = agents_file()
    assert path == home / "cfg" / "madohub_nb" / "agents.toml"
    assert load_agents_file() == []  # no file: nothing to do
    path.parent.mkdir(parents=True)
    path.write_text(AGENTS_TOML + "\n[broken]\nidle_markers = ['[x']\n")
    with pytest.raises(mh.MadohubValueError) as info:
        load_agents_file()
    assert f"{path}:broken.idle_markers" in str(info.value)
    assert "myagent" not in PROFILES  # the good tables before it were not registered either
    path.write_text("[myagent\nprocess_tokens = 1\n")
    with pytest.raises(mh.MadohubValueError, match=r"agents\.toml: TOML syntax error"):
        load_agents_file()
    path.write_text(AGENTS_TOML)
    assert load_agents_file() == ["myagent", "quietbot"]
    assert get_profile("myagent").pre_submit_delay_ms == 100


def test_config_trait_registers_agents_and_refuses_bad_ones() -> None:
    from madohub_nb.notebook.config import MadoHub

    conf = MadoHub()
    conf.agents = {"cfgagent": {"process_tokens": ["cfgagent"], "idle_markers": ["^> $"]}}
    assert "cfgagent" in known_kinds()
    with pytest.raises(TraitError, match=r"MadoHub\.agents\.bad\.submit_keys"):
        conf.agents = {"bad": {"submit_keys": "\r"}}
    assert "bad" not in PROFILES


def test_hub_loads_agents_toml_and_detects_the_registered_kind(
    tmux_socket: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    (home / ".config" / "madohub_nb").mkdir(parents=True)
    (home / ".config" / "madohub_nb" / "agents.toml").write_text(AGENTS_TOML)
    script = tmp_path / "quietbot"
    script.write_text("import sys\nfor line in sys.stdin:\n    print('bot:', line.strip())\n")
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=500, log_path=":memory:")
    try:
        assert "quietbot" in known_kinds()
        tile = hub.tile("bot", command=f"{shlex.quote(sys.executable)} {script}")
        tile.ready.result(10)  # the agent of a command that names none is detected once started
        assert tile.agent == "quietbot"
        assert (
            tile.pane_pid is not None and detect_kind(LocalMachine(), tile.pane_pid) == "quietbot"
        )
        wait_until(lambda: tile.state == "idle", 10, what="quiet bot ready")
        hub.send("bot", "hello", allow_shell=True).result(30)
        wait_until(lambda: "bot: hello" in tile.screen(), 10)
        found = tile.last_response()
        assert found is not None and found.text == "bot: hello"
    finally:
        hub.close()
