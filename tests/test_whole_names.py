"""Every name and id is checked whole: a trailing line break is refused (issue 38 item 10).

Python's ``$`` matches before a final ``\\n``, so ``re.match(r"^name$", "writer\\n")``
accepts it; every check anchors with ``\\Z`` and uses ``fullmatch``. The tile name is
tried where a user gives one: ``hub.tile``, a workflow file, the ``%madohub`` magic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from test_magics import hub_ip, ip  # noqa: F401  (the shell fixtures, over a real hub)

import madohub_nb as mh
from madohub_nb.agents.registry import KIND_RE
from madohub_nb.defaults import SOCKET_NAME_RE, check_socket_name
from madohub_nb.io.remote import HOST_RE, check_host
from madohub_nb.io.tmux import PANE_ID_RE, TARGET_RE
from madohub_nb.pipeline.tile import ENV_NAME_RE, NAME_RE, check_tile_name
from madohub_nb.pipeline.workflow import ROUTE_ID_RE, Workflow

REFUSED = "tile name 'writer\\n' is not allowed (it has a line break or space at an end)"


@pytest.mark.parametrize(
    ("pattern", "good"),
    [
        (NAME_RE, "writer"),
        (ENV_NAME_RE, "MY_VAR"),
        (KIND_RE, "mine"),
        (HOST_RE, "me@box"),
        (PANE_ID_RE, "%3"),
        (SOCKET_NAME_RE, "mh-1"),
        (TARGET_RE, "sess:win.1"),
        (ROUTE_ID_RE, "writer->reviewer"),
    ],
)
def test_each_name_pattern_refuses_a_trailing_line_break_with_match_too(
    pattern: Any, good: str
) -> None:
    assert pattern.match(good) and pattern.fullmatch(good)
    assert pattern.match(good + "\n") is None
    assert pattern.fullmatch(good + "\n") is None


@pytest.mark.parametrize(
    ("check", "bad"),
    [
        (check_tile_name, "writer\n"),
        (check_host, "box\n"),
        (check_socket_name, "mh-1\n"),
    ],
)
def test_the_checks_refuse_a_trailing_line_break(check: Any, bad: str) -> None:
    with pytest.raises(mh.MadohubValueError, match=repr(bad).replace("\\", "\\\\")):
        check(bad)


def test_an_agent_kind_with_a_trailing_line_break_is_refused() -> None:
    with pytest.raises(mh.MadohubValueError, match="agent name 'mine\\\\n' is not allowed"):
        mh.register_agent("mine\n", process_names=["mine"])


def test_hub_tile_refuses_a_name_with_a_trailing_line_break(hub: mh.Hub) -> None:
    with pytest.raises(mh.MadohubValueError) as caught:
        hub.tile("writer\n", agent="shell", command="bash --norc")
    assert REFUSED in str(caught.value) and "e.g. 'writer'" in str(caught.value)
    assert not hub.tiles


def test_a_workflow_file_with_a_trailing_line_break_in_a_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "flow.toml"
    path.write_text('[tiles."writer\\n"]\ncommand = "w"\n')
    with pytest.raises(mh.MadohubValueError) as caught:
        Workflow.load(path)
    assert "flow.toml:tiles.writer\\n: " + REFUSED in str(caught.value)
    assert "\n" not in str(caught.value)
    path.write_text(
        '[tiles.writer]\ncommand = "w"\n[tiles.reviewer]\ncommand = "r"\n'
        '[routes."writer->reviewer\\n"]\n'
    )
    with pytest.raises(mh.MadohubValueError) as caught:
        Workflow.load(path)
    said = str(caught.value)
    assert "routes.writer->reviewer\\n: a route's table is named by its id" in said
    assert "\n" not in said


def test_the_magic_refuses_a_tile_name_with_a_trailing_line_break(
    hub_ip: InteractiveShell,  # noqa: F811
) -> None:
    hub_ip.user_ns["name"] = "writer\n"
    with pytest.raises(UsageError) as caught:
        hub_ip.run_line_magic("madohub", "tile $name --agent shell --cmd 'bash --norc'")
    assert REFUSED in str(caught.value)
    from madohub_nb import get_hub

    assert not get_hub().tiles
