"""The tile registry's table, fast and without tmux: tiles by name and by pane, copied on
write, a taken name or pane refused with a teaching error, output told by pane."""

from __future__ import annotations

import pytest

from madohub_nb.engine import EventBus
from madohub_nb.errors import MadohubValueError
from madohub_nb.pipeline.events import HubEvent, TileOutput
from madohub_nb.pipeline.tile import Tile
from madohub_nb.testing.memory import MemoryMachine
from madohub_nb.tile_table import TileTable


def _table() -> tuple[TileTable, list[HubEvent]]:
    events: EventBus[HubEvent] = EventBus()
    seen: list[HubEvent] = []
    events.subscribe(seen.append)
    return TileTable(events), seen


def _tile(machine: MemoryMachine, name: str, pane_id: str, created: bool = False) -> Tile:
    return Tile(name, pane_id, "shell", machine, session="s", created=created)


def test_a_taken_name_or_pane_is_refused_and_the_dict_is_copied_on_write() -> None:
    table, _ = _table()
    box = MemoryMachine("box")
    table.add(_tile(box, "a", "%1"))
    before = table.tiles
    with pytest.raises(MadohubValueError, match="a tile named 'a' already exists"):
        table.add(_tile(box, "a", "%2"))
    with pytest.raises(MadohubValueError, match="is already the tile 'a'"):
        table.add(_tile(box, "b", "%1"))
    table.add(_tile(MemoryMachine("other"), "b", "%1"))  # the same pane id on another machine
    assert sorted(table.tiles) == ["a", "b"] and list(before) == ["a"]


def test_a_tile_whose_start_failed_may_be_made_again_under_its_name() -> None:
    table, _ = _table()
    box = MemoryMachine("box")
    old = _tile(box, "a", "%1")
    table.add(old)
    old.error = "its command exited"
    table.check_name_free("a")
    table.add(_tile(box, "a", "%2"))
    assert table.tiles["a"] is not old


def test_a_missing_tile_is_a_teaching_error_naming_the_tiles() -> None:
    table, _ = _table()
    with pytest.raises(MadohubValueError, match="none yet; make one with hub.tile"):
        table.named("x", "source")
    tile = _tile(MemoryMachine("box"), "a", "%1")
    table.add(tile)
    assert table.named("a", "source") is tile and table.named(tile, "source") is tile
    with pytest.raises(MadohubValueError, match="no target tile named 'x'; tiles: a"):
        table.named("x", "target")


def test_output_is_told_by_pane_and_machine() -> None:
    table, seen = _table()
    table.add(_tile(MemoryMachine("box"), "a", "%1", created=True))
    table.on_remote_output("box", "%1", 5)
    table.on_remote_output("elsewhere", "%1", 7)  # another machine's %1: not ours
    table.on_output("%1", 9)  # this machine's %1: not ours either
    assert seen == [TileOutput("a", 5)]
    assert table.made_on() == {"box"}
