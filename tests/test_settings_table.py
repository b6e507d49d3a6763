"""One settings table: Hub keywords, hub attributes, MadoHub traits and help all come from it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError

import madohub_nb as mh
from madohub_nb.hub_settings import BY_NAME, FIXED, LIVE, SETTINGS, settings_markdown
from madohub_nb.notebook.config import MadoHub

NAMES = [s.name for s in SETTINGS]

BAD_VALUES: list[tuple[str, Any, str]] = [
    ("idle_delay_ms", -1, "idle_delay_ms must be from 0 to 600000"),
    ("idle_delay_ms", "fast", "idle_delay_ms must be a whole number"),
    ("api_key", "short", "api_key is too short"),
    ("api_key", 12, "api_key must be a string"),
    ("base_url", "", "base_url must be a non-empty string"),
    ("model", 3, "model must be a non-empty string"),
    ("claude_home", "", "claude_home must be a directory path"),
    ("delivery", "fax", "unknown delivery 'fax'; allowed: typed, paste"),
    ("ai_timeout_s", 0, "ai_timeout_s must be a number of seconds above 0"),
    ("ai_max_retries", 11, "ai_max_retries must be from 0 to 10"),
    ("prices", {"m": {"input": 1}}, "prices\\['m'\\] must have exactly the keys"),
    ("keep_panes", "yes", "keep_panes must be True or False"),
    ("ssh_command", "", "ssh_command must be a command line"),
]


def test_hub_keywords_are_the_table_in_order() -> None:
    params = list(inspect.signature(mh.Hub).parameters.values())
    assert [p.name for p in params] == NAMES
    assert [p.default for p in params] == [s.default for s in SETTINGS]


def test_madohub_traits_are_the_table() -> None:
    traits = MadoHub.class_traits(config=True)
    assert set(NAMES) <= set(traits)
    fresh = MadoHub()
    for s in SETTINGS:
        assert traits[s.name].help == s.help
        assert getattr(fresh, s.name) == s.default


def test_every_setting_has_a_typed_attribute_on_the_hub() -> None:
    """The type checker's view of ``hub.<setting>`` (``SettingAttributes``, a base of the Hub)
    names every setting of the table."""
    assert issubclass(mh.Hub, mh.hub_settings.SettingAttributes)
    tree = ast.parse(Path(mh.hub_settings.__file__).read_text())
    typed = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SettingAttributes"
    )
    block = next(n for n in typed.body if isinstance(n, ast.If))
    annotated = {n.target.id for n in block.body if isinstance(n, ast.AnnAssign)}  # type: ignore[union-attr]
    assert annotated | {"log_path"} == set(NAMES)


@pytest.mark.parametrize(("name", "value", "message"), BAD_VALUES)
def test_a_bad_value_is_refused_alike_by_hub_attribute_and_config(
    hub: mh.Hub, tmux_socket: str, name: str, value: Any, message: str
) -> None:
    with pytest.raises(mh.MadohubValueError, match=message):
        mh.Hub(socket_name=tmux_socket, **{name: value})
    before = getattr(hub, name)
    with pytest.raises(mh.MadohubValueError, match=message):
        setattr(hub, name, value)
    assert getattr(hub, name) == before  # a refused change changes nothing
    # A value of the trait's type reaches the table's validator; another type is refused by
    # traitlets' own type check first (its message names the trait and the type expected).
    ours = value is None or isinstance(value, BY_NAME[name].kind) and not isinstance(value, bool)
    ours = ours or BY_NAME[name].kind is bool and isinstance(value, bool)
    with pytest.raises(TraitError, match=f"MadoHub.{name}: .*{message}" if ours else name):
        setattr(MadoHub(), name, value)


@pytest.mark.parametrize("name", FIXED)
def test_fixed_settings_are_read_only_on_a_live_hub(hub: mh.Hub, name: str) -> None:
    with pytest.raises(AttributeError):
        setattr(hub, name, BY_NAME[name].default)


def test_live_settings_take_effect_where_they_are_used(hub: mh.Hub) -> None:
    assert set(LIVE) >= {"idle_delay_ms", "ai_timeout_s", "delivery"}
    hub.ai_timeout_s = 5
    hub.ai_max_retries = 0
    hub.model = "claude-haiku-4-5"
    config = hub.ai_config()
    assert (config.timeout_s, config.max_retries, config.model) == (5.0, 0, "claude-haiku-4-5")
    hub.idle_delay_ms = 1234
    assert hub.runtime.services.idle_delay_ms == 1234


def test_a_short_api_key_is_refused_naming_the_key(tmux_socket: str, home: Path) -> None:
    with pytest.raises(mh.MadohubValueError, match=r"api_key is too short .*5 characters"):
        mh.Hub(socket_name=tmux_socket, api_key="short")


def test_positional_settings_and_twice_given_settings(tmux_socket: str, home: Path) -> None:
    with pytest.raises(mh.MadohubValueError, match="'socket_name' twice"):
        mh.Hub(tmux_socket, socket_name=tmux_socket)
    with pytest.raises(mh.MadohubValueError, match="unknown hub setting 'idle_delay'"):
        mh.Hub(socket_name=tmux_socket, idle_delay=5)


def test_the_docs_table_lists_every_setting() -> None:
    table = settings_markdown()
    for s in SETTINGS:
        assert f"| `{s.name}` |" in table


def test_magic_help_lists_every_setting_with_its_default() -> None:
    from madohub_nb.notebook.parsing import full_help

    text = full_help()
    for s in SETTINGS:
        assert f"  {s.name} (default {s.default!r}" in text
