"""The worked example of docs/development.md ("Add an agent in ten minutes") works as written.

The kind module and the stand-in program are read from the page; the module is put in a
folder the kinds package looks in (as if dropped into ``madohub_nb/agents/kinds/``) and
found by the registry's own discovery; two stand-ins run in real tmux panes, and a round
routes one's answer to the other.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import one_round, wait_until

from madohub_nb.agents import kinds
from madohub_nb.agents.profiles import PROFILES

DEVELOPMENT_PAGE = Path(__file__).resolve().parent.parent / "docs" / "development.md"


def _block(name: str) -> str:
    """The code block between ``<!-- name -->`` and ``<!-- /name -->`` of the page."""
    page = DEVELOPMENT_PAGE.read_text()
    block = page.split(f"<!-- {name} -->")[1].split(f"<!-- /{name} -->")[0]
    return block.strip().removeprefix("```python").removesuffix("```").strip() + "\n"


@pytest.fixture
def parrot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The page's kind, found by the registry in a folder of the kinds package."""
    folder = tmp_path / "kinds"
    folder.mkdir()
    (folder / "parrot.py").write_text(_block("kind-module-example"))
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(folder)])
    try:
        found = kinds.discover()
    finally:
        sys.modules.pop(f"{kinds.__name__}.parrot", None)
    kind = found["parrot"]
    assert list(found)[-3:] == ["parrot", "shell", "terminal"]  # its place: before the shell
    monkeypatch.setitem(kinds.KINDS, "parrot", kind)
    monkeypatch.setitem(PROFILES, "parrot", kind.profile)
    return kind


def test_the_documented_kind_routes_a_round(
    hub: Any, parrot: Any, tmp_path: Path, project: Path
) -> None:
    standin = tmp_path / "parrot.py"
    standin.write_text(_block("kind-standin-example"))
    command = f"{sys.executable} {standin}"
    a = hub.tile("a", agent="parrot", command=command, cwd=project)
    b = hub.tile("b", agent="parrot", command=command, cwd=project)
    for tile in (a, b):
        wait_until(lambda t=tile: t.state == "idle", 15, what=f"{tile.name} at its prompt")
    route = hub.connect("a", "b", template="{output}", max_rounds=1)
    row = one_round(hub, route, "hello")
    assert row["status"] == "delivered"
    assert row["prompt"].strip() == "olleh"  # a's answer, read off its screen
    wait_until(lambda: "PARROT: hello" in b.screen(), 15, what="b's answer to olleh")
