"""``%madohub`` magics and ``MadoHub`` settings, in a real IPython shell over a real hub."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import BASH, REPO, wait_until
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from madohub_nb.errors import MadohubValueError
from madohub_nb.notebook import config
from madohub_nb.notebook.config import MadoHub, hub_kwargs_from_config, settings
from madohub_nb.notebook.magics import (
    HelpShown,
    expand_variables,
    parse_command,
    parse_duration_ms,
    split_endpoints,
)

# Parsing (no hub) ------------------------------------------------------------------


@pytest.mark.parametrize("line", ["connect a -> b", "connect a->b", "connect a ->b", "connect a b"])
def test_connect_accepts_spaced_and_joined_arrows_and_two_names(line: str) -> None:
    args = parse_command(line)
    assert (args.source, args.target) == ("a", "b"), line


def test_connect_options_are_parsed_to_hub_keywords() -> None:
    args = parse_command(
        'connect w -> r --trigger on-keyword --pattern "DONE$" --transform raw '
        "--max-rounds 7 --cooldown 2.5s --stop LGTM --dispatch shadow --delivery paste --allow-shell"
    )
    assert args.trigger == "on-keyword"
    assert args.pattern == "DONE$"
    assert args.transform == "raw"
    assert args.max_rounds == 7
    assert args.cooldown == 2500
    assert args.stop == "LGTM"
    assert args.dispatch == "shadow"
    assert args.delivery == "paste"
    assert args.allow_shell is True


@pytest.mark.parametrize("line", ["connect a ->", "connect a", "connect a -> b -> c"])
def test_connect_without_two_names_is_refused(line: str) -> None:
    with pytest.raises(MadohubValueError, match="SOURCE -> TARGET"):
        parse_command(line)


def test_unknown_choice_names_what_is_allowed() -> None:
    with pytest.raises(MadohubValueError, match=r"invalid choice: 'soon'.*on-idle"):
        parse_command("connect a -> b --trigger soon")


def test_out_of_range_loop_protection_is_refused_with_the_range() -> None:
    with pytest.raises(MadohubValueError, match="from 1 to 20"):
        parse_command("connect a -> b --max-rounds 21")
    with pytest.raises(MadohubValueError, match="from 1s to 30s"):
        parse_command("connect a -> b --cooldown 500ms")


@pytest.mark.parametrize(
    ("text", "ms"), [("3s", 3000), ("1500ms", 1500), ("2.5", 2500), ("1m", 60000), (" 4 s ", 4000)]
)
def test_durations_read_units_and_default_to_seconds(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


def test_bad_duration_says_how_to_write_one() -> None:
    with pytest.raises(MadohubValueError, match="3s, 1500ms"):
        parse_duration_ms("soon")


def test_split_endpoints_rejects_empty_names() -> None:
    with pytest.raises(MadohubValueError):
        split_endpoints(["->", "b"])


def test_send_keeps_the_raw_text_with_quotes_and_apostrophes() -> None:
    args = parse_command("""send writer don't say "hi" twice""")
    assert (args.tile, args.text) == ("writer", ["""don't say "hi" twice"""])
    assert parse_command('send writer "one quoted text"').text == ["one quoted text"]


def test_tile_options_and_env_pairs() -> None:
    args = parse_command(
        "tile w --agent codex --cmd 'codex --full-auto' --cwd /tmp --env A=1 --env B=x=y"
    )
    assert args.agent == "codex"
    assert args.command_line == "codex --full-auto"
    assert args.cwd == "/tmp"
    assert args.env == [("A", "1"), ("B", "x=y")]


def test_tile_terminal_flags() -> None:
    args = parse_command(
        "tile py --agent terminal --cmd 'python3 -i -q' --ready-pattern '>>> $' "
        "--ready-quiet 1.5s --completion-pattern DONE"
    )
    assert (args.agent, args.command_line) == ("terminal", "python3 -i -q")
    assert (args.ready_pattern, args.ready_quiet, args.completion_pattern) == (
        ">>> $",
        1500,
        "DONE",
    )
    with pytest.raises(MadohubValueError, match="duration"):
        parse_command("tile py --agent terminal --cmd cat --ready-quiet soon")


@pytest.mark.parametrize(
    "command",
    [
        "tile", "connect", "tiles", "routes", "pause", "send", "watch", "dashboard", "log",
        "replay", "template",
    ],
)  # fmt: skip
def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(HelpShown):
        parse_command(f"{command} --help")
    assert f"usage: %madohub {command}" in capsys.readouterr().out
    with pytest.raises(HelpShown):
        parse_command("")
    assert "COMMAND" in capsys.readouterr().out


def test_debug_flag_comes_first() -> None:
    assert parse_command("--debug tiles").debug is True
    assert parse_command("tiles").debug is False


# The shell -------------------------------------------------------------------------


@pytest.fixture
def ip(home: Path) -> Iterator[InteractiveShell]:
    """A real IPython shell with the extension loaded; settings and hub reset afterwards."""
    from madohub_nb.notebook.registry import registry

    shell = InteractiveShell.instance()
    MadoHub.clear_instance()
    shell.run_line_magic("load_ext", "madohub_nb")
    yield shell
    registry.reset()
    shell.run_line_magic("unload_ext", "madohub_nb")
    MadoHub.clear_instance()
    shell.config.pop("MadoHub", None)


def test_load_ext_registers_line_and_cell_magic_and_config(ip: InteractiveShell) -> None:
    assert "madohub" in ip.magics_manager.magics["line"]
    assert "madohub" in ip.magics_manager.magics["cell"]
    assert any(isinstance(c, MadoHub) for c in ip.configurables)


def test_unload_ext_removes_the_magic(ip: InteractiveShell) -> None:
    ip.run_line_magic("unload_ext", "madohub_nb")
    assert "madohub" not in ip.magics_manager.magics["line"]
    assert not any(isinstance(c, MadoHub) for c in ip.configurables)
    ip.run_line_magic("load_ext", "madohub_nb")  # for the fixture's teardown


def test_magic_error_fails_the_cell_with_one_line_and_no_traceback(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("madohub", "connect a -> b --max-rounds 99")
    message = str(caught.value)
    assert message.startswith("madohub: ")
    assert "from 1 to 20" in message
    assert len(message.splitlines()) == 1
    # Run as a cell: IPython shows UsageError as one line, no traceback, and the cell fails.
    result = ip.run_cell("%madohub connect a -> b --max-rounds 99")
    shown = capsys.readouterr()
    assert isinstance(result.error_in_exec, UsageError)
    assert not result.success
    assert "from 1 to 20" in shown.err
    assert "Traceback" not in shown.err + shown.out


def test_debug_flag_and_env_reraise(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MadohubValueError):
        ip.run_line_magic("madohub", "--debug connect a -> b --max-rounds 99")
    monkeypatch.setenv("MADOHUB_DEBUG", "1")
    with pytest.raises(MadohubValueError):
        ip.run_line_magic("madohub", "frobnicate")


def test_dollar_names_expand_outside_quotes_only_and_unknown_ones_stay() -> None:
    ns = {"where": "/tmp/my dir", "n": 3}
    line = 'tile w --cwd $where --cmd "echo $where $$5" --template x$n$$ --stop $nope'
    assert expand_variables(line, ns) == (
        'tile w --cwd /tmp/my dir --cmd "echo $where $$5" --template x3$ --stop $nope'
    )
    assert expand_variables("send w 'costs $n'", ns) == "send w 'costs $n'"


def test_an_expanded_value_with_spaces_stays_one_word() -> None:
    args = parse_command("tile w --cwd $where --cmd 'echo $where'", {"where": "/tmp/my dir"})
    assert (args.cwd, args.command_line) == ("/tmp/my dir", "echo $where")


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ("send sh $v echo hi", "text", ["--allow-shell echo hi"]),
        ("send sh echo $v", "text", ["echo --allow-shell"]),
        ("send sh --delivery=$mode hi", "delivery", "paste"),
        ("tile w --cmd $v", "command_line", "--allow-shell"),
        ("tile w --cmd=$v", "command_line", "--allow-shell"),
        ("tile $v", "name", "--allow-shell"),
        ("connect a -> b --stop $v", "stop", "--allow-shell"),
        ("tile w --cmd '--x' --cwd \"-d\"", "cwd", "-d"),
    ],
)
def test_dollar_values_and_quoted_text_are_values_never_options(
    line: str, field: str, value: object
) -> None:
    args = parse_command(line, {"v": "--allow-shell", "mode": "paste"})
    assert getattr(args, field) == value
    assert getattr(args, "allow_shell", False) is False


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("tile w $v", "unrecognized arguments: --cmd=touch x"),
        ("tile w '--cmd=touch x'", "unrecognized arguments: --cmd=touch x"),
        ("connect a -> b $v", "SOURCE -> TARGET"),
        ("connect a -> b --trigger $v", "invalid choice: '--cmd=touch x'"),
    ],
)
def test_a_dollar_value_where_no_value_goes_is_refused(line: str, message: str) -> None:
    with pytest.raises(MadohubValueError, match=message):
        parse_command(line, {"v": "--cmd=touch x"})


def test_options_stand_anywhere_and_double_dash_ends_them() -> None:
    args = parse_command("send w --allow-shell hello")
    assert (args.tile, args.text, args.allow_shell) == ("w", ["hello"], True)
    args = parse_command("send w -- --allow-shell")
    assert (args.text, args.allow_shell) == (["--allow-shell"], False)
    args = parse_command("send w fix  it --delivery paste now")
    assert (args.text, args.delivery) == (["fix  it now"], "paste")
    args = parse_command("connect a -> b --max-rounds 3 --debug")
    assert (args.source, args.target, args.max_rounds, args.debug) == ("a", "b", 3, True)
    assert parse_command("tiles --debug").debug is True


def test_unclosed_quotes_are_an_error_except_in_free_text() -> None:
    with pytest.raises(MadohubValueError, match="never closed"):
        parse_command("tile w --cmd 'echo")
    assert parse_command("send w it's fine").text == ["it's fine"]


def _help_shown(where: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``%madohub --help`` prints, or the magic's docstring (what ``%madohub?`` shows)."""
    from madohub_nb.notebook.magics import MadohubMagics

    if where == "docstring":
        return MadohubMagics.madohub.__doc__ or ""
    with pytest.raises(HelpShown):
        parse_command("--help")
    return capsys.readouterr().out


@pytest.mark.parametrize("where", ["--help", "docstring"])
def test_help_shows_every_option_with_its_default_and_the_placeholders(
    where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = _help_shown(where, capsys)
    for placeholder in ("{output}", "{round}", "{maxRounds}", "{source}", "{target}"):
        assert placeholder in shown
    for default in ("(default: on-idle)", "(default: prompt-wrap)", "(default: 5)"):
        assert default in shown
    assert "(default: 3s)" in shown and "(default: madoagent)" in shown
    for command in ("keys", "plot", "--all", "--allow-shell", "--tail"):
        assert command in shown


def test_keys_takes_a_tile_and_key_names() -> None:
    args = parse_command("keys w 1 Enter")
    assert (args.command, args.tile, args.keys) == ("keys", "w", ["1", "Enter"])


def test_dollar_variables_reach_the_command(ip: InteractiveShell) -> None:
    ip.user_ns["tpl_name"] = "t2"
    ip.run_cell_magic("madohub", "template $tpl_name", "Body {output}")
    assert ip.run_line_magic("madohub", "template t2") == "Body {output}"


def test_braces_in_templates_are_not_expanded_by_ipython(ip: InteractiveShell) -> None:
    ip.user_ns["output"] = "EXPANDED"
    ip.run_cell_magic("madohub", "template t1", "Review {output} of {source}\n")
    assert ip.run_line_magic("madohub", "template t1") == "Review {output} of {source}"


def test_template_cell_stores_and_at_name_resolves(ip: InteractiveShell) -> None:
    ip.run_cell_magic(
        "madohub", "template review", "Please review:\n{output}\n\nSay LGTM when done.\n"
    )
    magics = ip.magics_manager.registry["MadohubMagics"]
    assert magics.resolve_template("@review") == "Please review:\n{output}\n\nSay LGTM when done."
    assert magics.resolve_template("A\\nB {output}") == "A\nB {output}"
    with pytest.raises(MadohubValueError, match="stored: review"):
        magics.resolve_template("@nope")


def test_template_line_without_cell_and_unknown_name_is_an_error(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="needs the template as the cell body"):
        ip.run_line_magic("madohub", "template missing")


def test_cell_body_refused_for_commands_without_one(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="takes no cell body"):
        ip.run_cell_magic("madohub", "tiles", "something")


# Settings -----------------------------------------------------------------------------


def test_config_magic_sets_traits_and_hub_keywords(ip: InteractiveShell) -> None:
    ip.run_line_magic("config", "MadoHub.idle_delay_ms = 2000")
    ip.run_line_magic("config", "MadoHub.socket_name = 'mh-x'")
    ip.run_line_magic("config", "MadoHub.delivery = 'paste'")
    kwargs = hub_kwargs_from_config()
    assert kwargs["idle_delay_ms"] == 2000
    assert kwargs["socket_name"] == "mh-x"
    assert kwargs["delivery"] == "paste"
    assert kwargs["prices"] is None  # None: the documented defaults
    ip.run_line_magic(
        "config",
        "MadoHub.prices = {'m': {'input': 1, 'output': 2, 'cache_read': 0, 'cache_write': 0}}",
    )
    assert hub_kwargs_from_config()["prices"] == {
        "m": {"input": 1.0, "output": 2.0, "cache_read": 0.0, "cache_write": 0.0}
    }
    assert set(kwargs) == set(config.HUB_SETTINGS)


def test_config_before_load_ext_reaches_the_settings(home: Path) -> None:
    shell = InteractiveShell.instance()
    MadoHub.clear_instance()
    shell.run_line_magic("config", "MadoHub.idle_delay_ms = 1234")
    try:
        assert settings(shell).idle_delay_ms == 1234
    finally:
        MadoHub.clear_instance()
        shell.config.pop("MadoHub", None)


def test_bad_config_values_are_refused(ip: InteractiveShell) -> None:
    current = settings(ip)
    with pytest.raises(Exception, match="idle_delay_ms must be from 0"):
        current.idle_delay_ms = -5
    with pytest.raises(Exception, match="typed"):
        current.delivery = "carrier-pigeon"


def test_api_key_is_never_shown(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "sk-test-SECRET-1234567890"
    ip.run_line_magic("config", f"MadoHub.api_key = '{secret}'")
    current = settings(ip)
    assert current.api_key == secret
    assert secret not in repr(current)
    ip.run_line_magic("config", "MadoHub")
    shown = capsys.readouterr().out
    assert "api_key" in shown
    assert secret not in shown
    assert "<set>" in shown


def test_ipython_config_file_configures_the_hub(home: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile_test"
    profile.mkdir()
    (profile / "ipython_config.py").write_text(
        "c.MadoHub.idle_delay_ms = 4321\nc.MadoHub.model = 'claude-test'\n"
    )
    code = (
        "%load_ext madohub_nb\n"
        "from madohub_nb.notebook.config import hub_kwargs_from_config\n"
        "kw = hub_kwargs_from_config()\n"
        "print('RESULT', kw['idle_delay_ms'], kw['model'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "IPython", f"--profile-dir={profile}", "--no-banner", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert "RESULT 4321 claude-test" in out.stdout, out.stderr


# Over a real hub -------------------------------------------------------------------------


@pytest.fixture
def hub_ip(ip: InteractiveShell, tmux_socket: str, tmp_path: Path) -> InteractiveShell:
    """The shell, its hub configured onto a private tmux socket and a temporary log."""
    ip.run_line_magic("config", f"MadoHub.socket_name = '{tmux_socket}'")
    ip.run_line_magic("config", f"MadoHub.log_path = '{tmp_path / 'rounds.db'}'")
    ip.run_line_magic("config", "MadoHub.idle_delay_ms = 300")
    return ip


def _hub(ip: InteractiveShell) -> Any:
    from madohub_nb import get_hub

    return get_hub()


def test_tile_and_tiles_make_and_list_tiles(hub_ip: InteractiveShell, tmux_socket: str) -> None:
    tile = hub_ip.run_line_magic("madohub", f'tile sh --agent shell --cmd "{BASH}"')
    hub = _hub(hub_ip)
    assert hub.socket_name == tmux_socket
    assert hub.idle_delay_ms == 300
    assert hub.tiles["sh"] is tile
    assert tile.agent == "shell"
    df = hub_ip.run_line_magic("madohub", "tiles")
    assert isinstance(df, pd.DataFrame)
    assert list(df["name"]) == ["sh"]
    assert df.loc[0, "pane"] == tile.pane_id


def test_config_change_reaches_the_live_hub_or_says_it_cannot(
    hub_ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = _hub(hub_ip)
    hub_ip.run_line_magic("config", "MadoHub.idle_delay_ms = 2500")
    hub_ip.run_line_magic("config", "MadoHub.model = 'claude-other'")
    assert hub.idle_delay_ms == 2500
    assert hub.model == "claude-other"
    capsys.readouterr()
    hub_ip.run_line_magic("config", "MadoHub.socket_name = 'elsewhere'")
    out = capsys.readouterr().out
    assert "applies to the next hub only" in out
    assert hub.socket_name != "elsewhere"


def test_connect_routes_pause_resume_stop(hub_ip: InteractiveShell) -> None:
    for name in ("a", "b"):
        hub_ip.run_line_magic("madohub", f'tile {name} --agent shell --cmd "{BASH}"')
    hub_ip.run_cell_magic("madohub", "template review", "Look:\n{output}\n")
    route = hub_ip.run_line_magic(
        "madohub",
        "connect a -> b --dispatch shadow --template @review --max-rounds 3 --cooldown 1s --stop LGTM",
    )
    assert (route.source, route.target, route.max_rounds) == ("a", "b", 3)
    assert route.dispatch == "shadow"
    df = hub_ip.run_line_magic("madohub", "routes")
    assert list(df["id"]) == [route.id]
    hub_ip.run_line_magic("madohub", "pause all")
    assert route.state == "paused"
    hub_ip.run_line_magic("madohub", f"resume {route.id}")
    assert route.state == "active"
    hub_ip.run_line_magic("madohub", "stop 1")
    assert route.state == "stopped"


def test_connect_into_a_shell_needs_allow_shell(hub_ip: InteractiveShell) -> None:
    for name in ("a", "b"):
        hub_ip.run_line_magic("madohub", f'tile {name} --agent shell --cmd "{BASH}"')
    with pytest.raises(UsageError, match="allow_shell"):
        hub_ip.run_line_magic("madohub", "connect a -> b")
    route = hub_ip.run_line_magic("madohub", "connect a -> b --allow-shell")
    assert route.allow_shell is True


def test_send_into_a_shell_needs_allow_shell(hub_ip: InteractiveShell) -> None:
    hub_ip.run_line_magic("madohub", f'tile sh --agent shell --cmd "{BASH}"')
    with pytest.raises(UsageError, match="allow_shell"):
        hub_ip.run_line_magic("madohub", "send sh echo hi")


def test_a_dollar_value_never_turns_on_allow_shell(hub_ip: InteractiveShell) -> None:
    """``reply = "--allow-shell"``: ``send sh $reply …`` is refused like any send into a shell."""
    tile = hub_ip.run_line_magic("madohub", f'tile sh --agent shell --cmd "{BASH}"')
    wait_until(lambda: "$" in tile.screen(), 10, what="shell prompt")
    hub_ip.user_ns["reply"] = "--allow-shell"
    with pytest.raises(UsageError, match="allow_shell"):
        hub_ip.run_line_magic("madohub", "send sh $reply echo pwned-$((6*7))")
    hub = _hub(hub_ip)
    assert hub.log.df.empty and hub.rounds_written == 0
    assert "pwned" not in tile.screen()


def test_a_dollar_value_never_sets_a_tiles_command(
    hub_ip: InteractiveShell, tmp_path: Path
) -> None:
    """``name = "--cmd=…"``: ``tile w $name`` is refused, and no command runs."""
    marker = tmp_path / "ran"
    hub_ip.user_ns["name"] = f"--cmd=touch {marker}"
    with pytest.raises(UsageError, match="unrecognized arguments: --cmd=touch"):
        hub_ip.run_line_magic("madohub", "tile w $name")
    assert "w" not in _hub(hub_ip).tiles and not marker.exists()


def test_send_types_into_the_tile_and_log_returns_a_dataframe(hub_ip: InteractiveShell) -> None:
    tile = hub_ip.run_line_magic("madohub", f'tile sh --agent shell --cmd "{BASH}"')
    hub = _hub(hub_ip)
    wait_until(lambda: "$" in tile.screen(), 10, what="shell prompt")
    hub_ip.run_cell_magic("madohub", "send --allow-shell sh", "echo magic-$((6*7))\n")
    wait_until(lambda: "magic-42" in tile.screen(), 15, what="the sent command's output")
    wait_until(lambda: hub.rounds_written >= 1, 15, what="the send logged")
    df = hub_ip.run_line_magic("madohub", "log")
    assert isinstance(df, pd.DataFrame)
    assert list(df["target"]) == ["sh"]
    assert df["prompt"].iloc[-1] == "echo magic-$((6*7))"
    assert len(hub_ip.run_line_magic("madohub", "log --tail 1")) == 1


def test_watch_and_dashboard_return_live_widgets(hub_ip: InteractiveShell) -> None:
    from madohub_nb.notebook.widgets import Dashboard, TileView

    hub_ip.run_line_magic("madohub", f'tile sh --agent shell --cmd "{BASH}"')
    view = hub_ip.run_line_magic("madohub", "watch sh")
    dash = hub_ip.run_line_magic("madohub", "dashboard")
    try:
        assert isinstance(view, TileView)
        assert view.name == "sh"
        assert isinstance(dash, Dashboard)
        assert set(dash.tile_views) == {"sh"}
    finally:
        view.close()
        dash.close()


def test_replay_recomputes_a_logged_round_with_another_template(hub_ip: InteractiveShell) -> None:
    for name in ("a", "b"):
        hub_ip.run_line_magic("madohub", f'tile {name} --agent shell --cmd "{BASH}"')
    hub = _hub(hub_ip)
    wait_until(lambda: "$" in hub.tiles["a"].screen(), 10, what="a's prompt")
    route = hub_ip.run_line_magic("madohub", "connect a -> b --dispatch shadow --cooldown 1s")
    hub_ip.run_line_magic("madohub", "send --allow-shell a echo replay-me")
    wait_until(lambda: route.rounds >= 1, 30, what="the shadow round")
    df = hub_ip.run_line_magic("madohub", "log")
    round_id = df[df.route_id == route.id].round_id.iloc[0]
    hub_ip.run_cell_magic("madohub", "template short", "SHORT<{output}>")
    rec = hub_ip.run_line_magic("madohub", f"replay {round_id} --template @short")
    assert rec.prompt.startswith("SHORT<")
    assert "replay-me" in rec.prompt
    assert rec.replay_of == round_id
    assert rec.status == "shadow"


# Issue 13: answers you can keep, a session's own log, completion, hands on the panes ------


def test_send_returns_its_future_resolved_with_the_logged_round(hub_ip: InteractiveShell) -> None:
    tile = hub_ip.run_line_magic("madohub", f'tile sh --agent shell --cmd "{BASH}"')
    wait_until(lambda: "$" in tile.screen(), 10, what="shell prompt")
    hub_ip.run_cell("fut = %madohub send sh --allow-shell echo kept-$((20+22))")
    fut = hub_ip.user_ns["fut"]
    rec = fut.result(30)
    assert (rec.route_id, rec.status, rec.target) == ("send", "delivered", "sh")
    assert rec.prompt == "echo kept-$((20+22))"
    wait_until(lambda: "kept-42" in tile.screen(), 15, what="the sent command's output")


def test_log_shows_this_hubs_session_unless_all(hub_ip: InteractiveShell, tmp_path: Path) -> None:
    from madohub_nb.io.log import RoundLog, RoundRecord

    hub = _hub(hub_ip)
    with RoundLog(tmp_path / "rounds.db") as other:  # another notebook's round in the same file
        other.append(
            RoundRecord(
                route_id="x->y#1", source="x", target="y", round=1, trigger="on-idle",
                transform="raw", dispatch="shadow", status="shadow", session_id="someone-else",
            )
        )  # fmt: skip
    tile = hub_ip.run_line_magic("madohub", f'tile sh --agent shell --cmd "{BASH}"')
    wait_until(lambda: "$" in tile.screen(), 10, what="shell prompt")
    hub.send("sh", "echo mine", allow_shell=True).result(30)
    mine = hub_ip.run_line_magic("madohub", "log")
    assert set(mine["session_id"]) == {hub.session_id}
    everything = hub_ip.run_line_magic("madohub", "log --all")
    assert set(everything["session_id"]) == {hub.session_id, "someone-else"}
    fig = hub_ip.run_line_magic("madohub", "plot")
    from madohub_nb.plot import lanes_of

    assert lanes_of(fig) == ["send"]
    assert lanes_of(hub_ip.run_line_magic("madohub", "plot --all")) == ["x->y#1", "send"]


def test_tab_completion_knows_commands_options_tiles_routes_and_keys(
    hub_ip: InteractiveShell,
) -> None:
    from IPython.core.completer import provisionalcompleter

    def complete(line: str) -> list[str]:
        with provisionalcompleter():
            return [c.text for c in hub_ip.Completer.completions(line, len(line))]

    assert "connect" in complete("%madohub con")
    assert {"--trigger", "--transform"} <= set(complete("%madohub connect a -> b --tr"))
    for name in ("alpha", "beta"):
        hub_ip.run_line_magic("madohub", f'tile {name} --agent shell --cmd "{BASH}"')
    assert "alpha" in complete("%madohub send al")
    assert "beta" in complete("%madohub connect alpha -> be")
    route = hub_ip.run_line_magic("madohub", "connect alpha -> beta --dispatch shadow")
    assert route.id in complete("%madohub pause alp")
    assert {"Enter", "Escape"} <= set(complete("%madohub keys alpha E"))
    assert "send" in complete("%%madohub se")


def test_tiles_show_the_attach_command_and_routes_their_last_error(
    hub_ip: InteractiveShell, tmux_socket: str
) -> None:
    for name in ("a", "b"):
        hub_ip.run_line_magic("madohub", f'tile {name} --agent shell --cmd "{BASH}"')
    hub = _hub(hub_ip)
    tiles = hub_ip.run_line_magic("madohub", "tiles")
    assert tiles.loc[0, "attach"] == f"tmux -L {tmux_socket} attach -r -t {hub.session_name}"
    route = hub_ip.run_line_magic("madohub", "connect a -> b --dispatch shadow")
    route.last_error = "source 'a' exited (its pane is gone)"
    routes = hub_ip.run_line_magic("madohub", "routes")
    assert routes.loc[0, "last_error"] == route.last_error


def test_keys_and_the_waiting_tile_buttons_answer_a_permission_prompt(
    hub_ip: InteractiveShell, home: Path
) -> None:
    hub_ip.run_line_magic("madohub", "tile w --demo echo --env MADOHUB_STANDIN_THINK_S=0.2")
    hub = _hub(hub_ip)
    tile = hub.tiles["w"]
    tile.ready.result(15)
    wait_until(lambda: "? for shortcuts" in tile.screen(), 15, what="the stand-in idle")
    view = hub_ip.run_line_magic("madohub", "watch w")
    try:
        hub.send("w", "Permission test [[bash touch one]]").result(30)
        wait_until(lambda: "Do you want to proceed?" in tile.screen(), 15, what="the prompt")
        hub_ip.run_cell("answer = %madohub keys w 1")
        rec = hub_ip.user_ns["answer"].result(15)
        assert (rec.transform, rec.status, rec.prompt) == ("keys", "delivered", "1")
        wait_until(
            lambda: "● Done: (Bash completed with no output)" in tile.screen(), 15, what="answer"
        )
        hub.send("w", "Second prompt [[bash touch two]]").result(30)
        wait_until(lambda: view.state == "waiting", 15, what="the view to see the prompt")
        assert view._keys_box.layout.display == "flex"
        (yes,) = [b for b in view.key_buttons if b.description == "1 / Yes"]
        yes.click()
        wait_until(lambda: tile.screen().count("● Done: (Bash completed") == 2, 15, what="2nd")
        wait_until(lambda: view.state == "idle", 15, what="the view to see idle")
        assert view._keys_box.layout.display == "none"
        assert "attach -r -t" in view._header.value
    finally:
        view.close()
    assert not (home / ".claude").exists(), "a --demo tile wrote into HOME/.claude"


# --- the magic ---------------------------------------------------------------------------
def test_magic_tile_host_makes_a_remote_tile(
    ip: InteractiveShell, tmux_socket: str, remote_socket: str, sshd: object, tmp_path: Path
) -> None:
    from madohub_nb import get_hub

    run = ip.run_line_magic
    run("config", f"MadoHub.socket_name = '{tmux_socket}'")
    run("config", f"MadoHub.log_path = '{tmp_path / 'rounds.db'}'")
    run("config", f"MadoHub.ssh_command = '{sshd.ssh_command}'")  # type: ignore[attr-defined]
    run("config", f"MadoHub.remote_socket_name = '{remote_socket}'")
    tile = run("madohub", 'tile far --host box --cmd "sleep 600"')
    assert tile.machine.name == "box"
    assert any(line.endswith(" far") for line in _remote_panes(remote_socket))
    df = run("madohub", "tiles")
    attach = df.loc[0, "attach"]
    assert attach.startswith(f"{sshd.ssh_command} -t box ") and remote_socket in attach  # type: ignore[attr-defined]
    get_hub().close()


def _remote_panes(socket: str) -> list[str]:
    out = subprocess.run(
        ["tmux", "-L", socket, "list-panes", "-a", "-F", "#{pane_id} #{window_name}"],
        capture_output=True,
        text=True,
    )
    return out.stdout.split("\n")


# Budgets (issue 24) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "cost", "tokens"),
    [
        ("--max-cost 2.50 --max-tokens 200k", 2.5, 200_000),
        ("--max-cost $0.75 --max-tokens 1.5M", 0.75, 1_500_000),
        ("--max-tokens 200_000", None, 200_000),
        ("--max-tokens 12345", None, 12_345),
        ("--max-cost 3", 3.0, None),
        ("", None, None),
    ],
)
def test_connect_takes_money_and_token_budgets(
    line: str, cost: float | None, tokens: int | None
) -> None:
    args = parse_command(f"connect w -> r {line}")
    assert (args.max_cost, args.max_tokens) == (cost, tokens)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--max-cost 0", "US dollars above 0, e.g. 2.50.*got '0'"),
        ("--max-cost -1", "above 0"),
        ("--max-cost lots", "above 0.*got 'lots'"),
        ("--max-cost nan", "above 0"),
        ("--max-tokens 0", "tokens of 1 or more, e.g. 200000, 200k or 1.5M, got '0'"),
        ("--max-tokens 200x", "got '200x'"),
        ("--max-tokens 1.5", "got '1.5'"),  # not a whole number of tokens
        ("--max-tokens=-5k", "1 or more"),
        ("--max-tokens k", "got 'k'"),
    ],
)
def test_a_bad_budget_is_refused_saying_what_is_allowed(line: str, message: str) -> None:
    with pytest.raises(MadohubValueError, match=message):
        parse_command(f"connect w -> r {line}")


def test_a_budgeted_magic_route_stops_when_its_cost_cannot_be_known(
    hub_ip: InteractiveShell,
) -> None:
    for name in ("a", "b"):
        hub_ip.run_line_magic("madohub", f'tile {name} --agent shell --cmd "{BASH}"')
    hub = _hub(hub_ip)
    wait_until(lambda: "$" in hub.tiles["a"].screen(), 10, what="a's prompt")
    route = hub_ip.run_line_magic(
        "madohub",
        "connect a -> b --dispatch shadow --cooldown 1s --max-cost 2.50 --max-tokens 200k",
    )
    assert (route.max_cost_usd, route.max_tokens) == (2.5, 200_000)
    hub_ip.run_line_magic("madohub", "send --allow-shell a echo what-did-it-cost")
    # A shell's answer is read from its screen: no usage, so no cost: the route stops.
    wait_until(lambda: route.state == "stopped", 30, what="the route to stop")
    assert "unknown" in route.last_error and "never counts an unknown as free" in route.last_error
    table = hub_ip.run_line_magic("madohub", "routes")
    assert table.budget_spent.iloc[0] == "$0.0000/$2.5 · 0/200,000 tokens"
