"""A shell or an interpreter as a pane's reader always needs ``allow_shell`` (issue 22, item 7).

An ``agents.toml`` once turned a bash pane into "an agent" (``process_tokens =
["bash"]``), and ``hub.send`` into it ran a command without the opt-in. What
decides now is the reading process's own program, not the tile's profile; and a
profile may not name a shell or an interpreter at all. Checked where it would
arrive: a marker file the typed command would create, and the pane's screen.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import psutil
import pytest
from conftest import FAST_IDLE_MS, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.agents.foreground import reads_commands
from madohub_nb.agents.profiles import PROFILES, command_name
from madohub_nb.agents.registry import build_profile, load_agents_file

pytestmark = pytest.mark.usefixtures("forget_user_agents")

BARE_BASH = "bash --norc --noprofile"


def _write_agents_toml(home: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    """A real ``agents.toml`` under a temporary ``$XDG_CONFIG_HOME``, read by the next Hub."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    path = home / ".config" / "madohub_nb" / "agents.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- which processes read typed text as commands ---------------------------------------------


@pytest.mark.parametrize(
    ("comm", "argv", "runs_commands"),
    [
        ("bash", ["bash"], True),
        ("bash", ["-bash"], True),  # a login shell
        ("bash", ["myagent", "--norc", "--noprofile"], True),  # exec -a: still bash
        ("bash", ["bash", "-il"], True),
        ("bash", ["bash", "--rcfile", "my.rc"], True),  # a value, not a script
        ("zsh", [], True),  # argv not readable: counts as a prompt
        ("python3.12", ["python3.12"], True),
        ("node", ["node"], True),
        ("python3", ["python3", "-i", "x.py"], True),
        ("bash", ["bash", "/home/u/bin/wrapper.sh"], False),  # runs a script
        ("bash", ["bash", "-c", "exec claude"], False),
        ("node", ["node", "/usr/lib/node_modules/@openai/codex/bin/codex.js"], False),
        ("python3", ["python3", "-m", "aider"], False),
        ("claude", ["/venv/bin/python", "/home/u/.cache/bin/claude", "--persona", "echo"], False),
        ("claude", ["claude"], False),  # Claude Code's node renames itself
        ("cat", ["cat"], False),
    ],
)
def test_a_shell_or_an_interpreter_at_its_prompt_reads_commands(
    comm: str, argv: list[str], runs_commands: bool
) -> None:
    assert reads_commands(comm, argv) is runs_commands


# --- profiles may not name a shell or an interpreter -------------------------------------------


@pytest.mark.parametrize("token", ["bash", "sh", "-zsh", "python3.12", "node", "/usr/bin/perl"])
def test_a_profile_naming_a_shell_or_an_interpreter_is_refused(token: str) -> None:
    with pytest.raises(mh.MadohubValueError, match="shell or an interpreter") as info:
        mh.register_agent("shellbot", process_tokens=["shellbot", token])
    assert repr(token) in str(info.value) and "allow_shell" in str(info.value)
    assert "shellbot" not in PROFILES


def test_names_that_only_look_like_a_shell_are_fine() -> None:
    assert command_name("/usr/bin/python3.12") == "python"
    profile = mh.register_agent("bashful", process_tokens=["bashful", "nodemon-agent"])
    assert profile.process_tokens == ("bashful", "nodemon-agent")


def test_an_agents_toml_naming_bash_stops_the_hub_with_the_place_named(
    tmux_socket: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write_agents_toml(home, monkeypatch, '[bashagent]\nprocess_tokens = ["bash"]\n')
    with pytest.raises(mh.MadohubValueError) as info:
        mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "r.sqlite3")
    assert f"{path}:bashagent.process_tokens" in str(info.value)
    assert "'bash' names a shell" in str(info.value)
    assert "bashagent" not in PROFILES
    with pytest.raises(mh.MadohubValueError):
        load_agents_file()


# --- on real tmux: an agent tile whose reader is bash ----------------------------------------

MYAGENT_TOML = '[myagent]\nprocess_tokens = ["myagent"]\nready_quiet_ms = 300\n'


def _bash_named_myagent(hub: mh.Hub) -> str:
    """An agents.toml agent ``myagent`` whose process is bash under that name (``exec -a``)."""
    inner = f"export PS1='$ '; exec -a myagent {BARE_BASH}"  # bash -c drops an inherited PS1
    command = f"bash -c {shlex.quote(inner)}"
    pane, _ = hub.runtime.tmux.new_pane(hub.session_name, command, window_name="ag")
    wait_until(lambda: "$" in hub.runtime.tmux.capture(pane), 10, what="bash prompt")
    return pane


def _bash_with_a_bash_token(hub: mh.Hub) -> str:
    """A plain bash pane, and a profile whose process token is ``bash``.

    Registration refuses such a profile; it is put into the table past that check here
    to show the reader check holds on its own.
    """
    made = build_profile("bashagent", {"ready_quiet_ms": 300}, "test")
    PROFILES["bashagent"] = dataclasses.replace(made, process_tokens=("bash",))
    pane, _ = hub.runtime.tmux.new_pane(
        hub.session_name, f"env PS1='$ ' {BARE_BASH}", window_name="ag"
    )
    wait_until(lambda: "$" in hub.runtime.tmux.capture(pane), 10, what="bash prompt")
    return pane


@pytest.mark.parametrize(
    ("make_pane", "kind"),
    [(_bash_named_myagent, "myagent"), (_bash_with_a_bash_token, "bashagent")],
    ids=["agents-toml-agent-that-is-bash", "bash-token-past-registration"],
)
def test_an_agent_tile_whose_reader_is_bash_takes_nothing_without_allow_shell(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_pane: object,
    kind: str,
) -> None:
    _write_agents_toml(home, monkeypatch, MYAGENT_TOML)
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=tmp_path / "r.sqlite3"
    )
    try:
        pane = make_pane(hub)  # type: ignore[operator]
        pid = hub.runtime.tmux.pane_info(pane).pid  # type: ignore[union-attr]
        assert psutil.Process(pid).name() == "bash"
        tile = hub.tile("ag", pane=pane)
        assert tile.agent == kind  # the profile matched: an "agent" tile on a bash
        assert not tile.profile.executes_input

        marker = tmp_path / "MARKER"
        rec = hub.send("ag", f"touch {marker}").result(60)
        assert rec.status == "error"
        assert "'bash', a shell or interpreter" in (rec.error or "")
        assert "allow_shell=True" in (rec.error or "") and "nothing was typed" in (rec.error or "")
        assert "touch" not in tile.screen()

        # The opt-in still works, and shows the pane would have run the line.
        done = hub.send("ag", f"touch {marker}", allow_shell=True).result(60)
        assert done.status == "delivered", done.error
        wait_until(marker.exists, 10, what="bash ran the typed line")
        rows = hub.log.df.to_dict("records")
        assert [r["status"] for r in rows] == ["error", "delivered"]
    finally:
        hub.close()


def test_a_route_into_an_agent_tile_whose_reader_is_bash_needs_allow_shell(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Routes take the same decision at each round: an error row, nothing typed."""
    _write_agents_toml(home, monkeypatch, MYAGENT_TOML)
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=tmp_path / "r.sqlite3"
    )
    try:
        start_standin(hub, "src", cwd=project)
        tile = hub.tile("ag", pane=_bash_named_myagent(hub))
        marker = tmp_path / "ROUTED"
        route = hub.connect("src", "ag", template=f"touch {marker} # {{output}}", cooldown_ms=1000)
        wait_until(lambda: route.ready.is_set(), 10)
        hub.send("src", "hello").result(30)
        wait_until(lambda: route.last_status, 30, what="the routed round")
        assert route.last_status == "error"
        (row,) = [r for r in hub.log.df.to_dict("records") if r["route_id"] == route.id]
        assert "allow_shell=True" in row["error"] and "nothing was typed" in row["error"]
        assert not marker.exists() and "touch" not in tile.screen()
    finally:
        hub.close()
