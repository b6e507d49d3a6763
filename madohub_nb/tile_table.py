"""The hub's tiles by name and by pane: added, found, and told their panes' output.

Both dicts are copied on write, so the engine thread reads them while another thread
adds a tile. A pane is known by :class:`~madohub_nb.io.machine.PaneRef` (machine, pane id).
"""

from __future__ import annotations

import threading

from .engine import EventBus
from .errors import MadohubValueError
from .io.machine import PaneRef
from .pipeline.events import HubEvent, TileOutput
from .pipeline.tile import Tile


class TileTable:
    """Every tile of one hub, by name and by pane."""

    def __init__(self, events: EventBus[HubEvent]) -> None:
        self._events = events
        self._lock = threading.Lock()
        self.tiles: dict[str, Tile] = {}
        self._names_by_pane: dict[PaneRef, str] = {}

    def add(self, tile: Tile) -> None:
        """Add ``tile``, or raise a teaching error when its name or pane is taken."""
        key = tile.ref
        with self._lock:
            clash = self._clash(tile.name, key)
            if clash is None:
                self.tiles = {**self.tiles, tile.name: tile}
                self._names_by_pane = {**self._names_by_pane, key: tile.name}
        if clash is not None:
            raise MadohubValueError(clash)

    def named(self, name: str | Tile, role: str) -> Tile:
        """The tile called ``name`` (or ``name`` itself), or a teaching error naming the tiles."""
        key = name if isinstance(name, str) else name.name
        tile = self.tiles.get(key)
        if tile is None:
            known = ", ".join(sorted(self.tiles)) or "none yet; make one with hub.tile(...)"
            raise MadohubValueError(f"no {role} tile named {key!r}; tiles: {known}")
        return tile

    def check_name_free(self, name: str) -> None:
        """Raise a teaching error when a live tile already has ``name``."""
        problem = self._clash(name)
        if problem:
            raise MadohubValueError(problem)

    def _clash(self, name: str, pane: PaneRef | None = None) -> str | None:
        """Why ``name`` (or ``pane``) cannot be a new tile; None: it can."""
        problem = None
        if name in self.tiles and self.tiles[name].error is None:
            # (a tile whose command failed at start-up may be made again under its name)
            problem = f"a tile named {name!r} already exists; pick another name"
        for other in self.tiles.values():
            if pane is not None and other.ref == pane and other.error is None:
                problem = f"pane {pane} is already the tile {other.name!r}"
        return problem

    def made_on(self) -> set[str | None]:
        """The machines this hub made panes on (None: this one)."""
        return {t.machine.name for t in self.tiles.values() if t.created}

    # output --------------------------------------------------------------------------
    def on_output(self, pane_id: str, nbytes: int) -> None:
        """A pane here wrote ``nbytes`` (engine thread)."""
        self._output_of(PaneRef(None, pane_id), nbytes)

    def on_remote_output(self, host: str, pane_id: str, nbytes: int) -> None:
        """A pane on ``host`` wrote ``nbytes`` (engine thread)."""
        self._output_of(PaneRef(host, pane_id), nbytes)

    def _output_of(self, pane: PaneRef, nbytes: int) -> None:
        name = self._names_by_pane.get(pane)
        if name is not None:
            self._events.emit(TileOutput(name, nbytes))  # (engine thread)
