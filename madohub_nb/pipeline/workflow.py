"""Workflows: a hub's tiles and routes as data, kept in a TOML file.

A :class:`Workflow` is plain data: tiles (each ``hub.tile`` keyword) and routes
(each ``hub.connect`` / ``hub.gather`` keyword), in the order they were made.
It is checked whole when it is made, from a hub or from a file, so a bad file
fails before anything starts: unknown keys, values of the wrong type or out of
range, a tile named twice, a route naming a tile the workflow does not have, and
any secret (an API-key variable or a key-shaped value) are errors naming
``file:table.key``.

The options a file may hold are those of the one table of options
(:mod:`madohub_nb.pipeline.options`) that a workflow keeps: a new ``hub.tile`` /
``hub.connect`` keyword is one row there, and files take it at once.

The file, written by :meth:`Workflow.dumps` (a small emitter of our own: the
standard library reads TOML but does not write it)::

    name = "review"

    [tiles.writer]
    command = "claude"

    [routes."writer->reviewer"]
    template = "Review this:\\n{output}"
    stop_keyword = "LGTM"

Routes are keyed by their id without the number (``a->b``; a gather's is
``a+b->c``); a second route between the same tiles is ``a->b#2``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..agents.regex import lazy_compile
from ..errors import MadohubValueError
from ..secrets import KEY_PATTERNS, SECRET_ENV_VARS
from .options import Option, options_of
from .tile import check_tile_name

TILE_OPTIONS: Final = tuple(o for o in options_of("tile") if o.kept)
"""``hub.tile``'s keywords a workflow keeps, as shipped (the code reads :func:`options_named`)."""
ROUTE_OPTIONS: Final = tuple(o for o in options_of("connect") if o.kept)
"""``hub.connect``'s keywords after source and target, as shipped."""
GATHER_OPTIONS: Final = tuple(o for o in options_of("gather") if o.kept)
"""``hub.gather``'s keywords after sources and target, as shipped."""

WORKFLOW_KEYS: Final = ("name", "tiles", "routes")
ROUTE_ID_RE: Final = lazy_compile(
    r"^(?P<sources>[^>#+\s]+(?:\+[^>#+\s]+)*)->(?P<target>[^>#+\s]+)(?:#(?P<n>[0-9]+))?\Z"
)


def options_named(kind: str) -> tuple[Option, ...]:
    """The options of ``kind`` (``tile``, ``connect`` or ``gather``) a workflow keeps, read from
    the one table (:mod:`.options`) when called."""
    return tuple(opt for opt in options_of(kind) if opt.kept)


@dataclass
class RouteSpec:
    """One route of a workflow: its sources (one for ``connect``), target and options."""

    sources: list[str]
    target: str
    options: dict[str, Any] = field(default_factory=dict)
    gather: bool = False

    @property
    def key(self) -> str:
        """Its id without the number: ``a->b``, a gather's ``a+b->c``."""
        return f"{'+'.join(self.sources)}->{self.target}"


@dataclass
class Workflow:
    """Tiles and routes as data: ``hub.workflow()``, :meth:`load`, :meth:`save`, ``hub.run``.

    ``tiles`` maps each tile's name to its ``hub.tile`` keywords; ``routes`` lists
    :class:`RouteSpec` in the order made. ``path`` and ``hash`` (SHA-256 of the file's
    bytes) are set once it was loaded from or saved to a file.
    """

    name: str
    tiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    routes: list[RouteSpec] = field(default_factory=list)
    path: str | None = None
    hash: str | None = None

    def __post_init__(self) -> None:
        check_workflow(self, where=self.path or "workflow")

    # ids ------------------------------------------------------------------------
    def route_keys(self) -> list[str]:
        """Each route's table name in the file, in order (``a->b``, then ``a->b#2``...)."""
        seen: dict[str, int] = {}
        keys = []
        for spec in self.routes:
            seen[spec.key] = seen.get(spec.key, 0) + 1
            n = seen[spec.key]
            keys.append(spec.key if n == 1 else f"{spec.key}#{n}")
        return keys

    # files ----------------------------------------------------------------------
    def dumps(self) -> str:
        """The workflow as TOML text: stable order, defaults left out."""
        lines = [f"name = {toml_value(self.name)}"]
        for tile, options in self.tiles.items():
            lines += ["", f"[tiles.{toml_key(tile)}]"]
            env = None
            for opt in options_named("tile"):
                value = options.get(opt.name, opt.default)
                if opt.name == "env":
                    env = value
                elif value != opt.default:
                    lines.append(f"{opt.name} = {toml_value(value)}")
            if env:
                lines += ["", f"[tiles.{toml_key(tile)}.env]"]
                lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in env.items()]
        for key, spec in zip(self.route_keys(), self.routes, strict=True):
            lines += ["", f"[routes.{toml_key(key)}]"]
            if spec.gather and len(spec.sources) == 1:
                lines.append("gather = true")
            for opt in options_named("gather" if spec.gather else "connect"):
                value = spec.options.get(opt.name, opt.default)
                if value != opt.default:
                    lines.append(f"{opt.name} = {toml_value(value)}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the workflow to ``path`` (TOML); returns the SHA-256 of the bytes written."""
        import hashlib

        data = self.dumps().encode()
        Path(path).write_bytes(data)
        self.path, self.hash = str(path), hashlib.sha256(data).hexdigest()
        return self.hash

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Workflow:
        """Read and check a workflow file; errors name ``file:table.key``."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise MadohubValueError(f"cannot read workflow file {str(path)!r}: {exc}") from exc
        return cls.loads(data, str(path))

    @classmethod
    def loads(cls, data: bytes | str, where: str = "workflow.toml") -> Workflow:
        """A workflow from TOML text (``where`` names it in errors)."""
        import hashlib

        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib

        raw = data.encode() if isinstance(data, str) else data
        _check_no_table_twice(raw, where)
        try:
            doc = tomllib.loads(raw.decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise MadohubValueError(f"{where}: not a valid TOML file: {exc}") from exc
        wf = _from_document(doc, where)
        wf.path, wf.hash = where, hashlib.sha256(raw).hexdigest()
        return wf


# checking -------------------------------------------------------------------------
def _bad(where: str, table: str, message: str) -> MadohubValueError:
    """One line naming ``where:table`` (a line break in a table's name shown as ``\\n``)."""
    if not table.isprintable():
        table = repr(table)[1:-1]
    return MadohubValueError(f"{where}:{table}: {message}")


def check_option(opt: Option, value: Any, where: str, table: str) -> Any:
    """``value`` if it fits ``opt`` (an int is taken for a float option), else an error."""
    at = f"{table}.{opt.name}"
    if value is None:
        return None
    fits = isinstance(value, opt.types) and not (isinstance(value, bool) and bool not in opt.types)
    if not fits:
        wanted = " or ".join(t.__name__ for t in opt.types)
        raise _bad(where, at, f"must be {wanted}, got {value!r}")
    try:
        opt.verify(value)
    except MadohubValueError as exc:
        raise _bad(where, at, str(exc)) from None
    return value


def check_options(
    options: Mapping[str, Any], table_of: tuple[Option, ...], where: str, table: str
) -> dict[str, Any]:
    """Check every key of ``options`` against its table; unknown keys name what is allowed."""
    known = {opt.name: opt for opt in table_of}
    out = {}
    for key, value in options.items():
        if key not in known:
            raise _bad(where, f"{table}.{key}", f"unknown key; allowed: {', '.join(known)}")
        out[key] = check_option(known[key], value, where, table)
    return out


def _check_secrets(tile: str, options: Mapping[str, Any], where: str) -> None:
    """A workflow never holds a key: such env variables and key-shaped values are refused."""
    env = options.get("env") or {}
    for name, value in env.items():
        if name in SECRET_ENV_VARS or any(p.search(str(value)) for p in KEY_PATTERNS):
            raise _bad(
                where, f"tiles.{tile}.env.{name}",
                "holds an API key; a workflow file never keeps secrets: leave the variable "
                "out and set it in the environment the hub's panes inherit",
            )  # fmt: skip
    for key, value in options.items():
        if key != "env" and isinstance(value, str) and any(p.search(value) for p in KEY_PATTERNS):
            raise _bad(where, f"tiles.{tile}.{key}", "holds an API key; a workflow never keeps one")


def check_workflow(wf: Workflow, where: str) -> None:
    """Check a whole workflow; raises at the first fault, naming ``where:table.key``."""
    if not isinstance(wf.name, str) or not wf.name.strip():
        raise _bad(where, "name", f"must be a non-empty string, got {wf.name!r}")
    for tile, options in wf.tiles.items():
        try:
            check_tile_name(tile)
        except MadohubValueError as exc:
            raise _bad(where, f"tiles.{tile}", str(exc)) from None
        wf.tiles[tile] = check_options(options, options_named("tile"), where, f"tiles.{tile}")
        _check_secrets(tile, options, where)
    for key, spec in zip(wf.route_keys(), wf.routes, strict=True):
        table = f"routes.{key}"
        for name in [*spec.sources, spec.target]:
            if name not in wf.tiles:
                known = ", ".join(wf.tiles) or "none"
                raise _bad(where, table, f"names tile {name!r}, which the workflow does not have "
                           f"(its tiles: {known})")  # fmt: skip
        if spec.target in spec.sources:
            raise _bad(where, table, f"routes {spec.target!r} to itself")
        table_of = options_named("gather" if spec.gather else "connect")
        spec.options = check_options(spec.options, table_of, where, table)
        for opt, value in spec.options.items():
            if isinstance(value, str) and any(p.search(value) for p in KEY_PATTERNS):
                raise _bad(where, f"{table}.{opt}", "holds an API key; a workflow never keeps one")


_TABLE_HEADER: Final = lazy_compile(r"^\s*\[\s*(tiles|routes)\s*\.\s*(.+?)\s*\]\s*(?:#.*)?$")


def _check_no_table_twice(raw: bytes, where: str) -> None:
    """A tile (or route) named twice: say which, before TOML's own less telling error."""
    seen: set[tuple[str, str]] = set()
    for line in raw.decode(errors="replace").splitlines():
        found = _TABLE_HEADER.match(line)
        if found is None:
            continue
        kind, name = found[1], found[2].strip().strip('"').strip("'")
        if (kind, name) in seen:
            what = "the tile" if kind == "tiles" else "the route"
            raise _bad(where, f"{kind}.{name}", f"{what} {name!r} is named twice; "
                       "each tile (and route) is one table")  # fmt: skip
        seen.add((kind, name))


def _from_document(doc: dict[str, Any], where: str) -> Workflow:
    for key in doc:
        if key not in WORKFLOW_KEYS:
            raise _bad(where, key, f"unknown key; allowed: {', '.join(WORKFLOW_KEYS)}")
    name = doc.get("name", Path(where).stem)
    tiles = doc.get("tiles", {})
    routes = doc.get("routes", {})
    for key, value in (("tiles", tiles), ("routes", routes)):
        if not isinstance(value, dict):
            raise _bad(where, key, f"must be a table of tables ([{key}.NAME]), got {value!r}")
    for tile, options in tiles.items():
        if not isinstance(options, dict):
            raise _bad(where, f"tiles.{tile}", f"must be a table, got {options!r}")
    specs = []
    for key, options in routes.items():
        table = f"routes.{key}"
        if not isinstance(options, dict):
            raise _bad(where, table, f"must be a table, got {options!r}")
        found = ROUTE_ID_RE.fullmatch(key)
        if found is None:
            raise _bad(where, table, "a route's table is named by its id: "
                       "source->target, or a+b->target for a gather (then #2, #3 for more)")  # fmt: skip
        options = dict(options)
        gather = options.pop("gather", False)
        if not isinstance(gather, bool):
            raise _bad(where, f"{table}.gather", f"must be true or false, got {gather!r}")
        sources = found["sources"].split("+")
        specs.append(RouteSpec(sources, found["target"], options, gather or len(sources) > 1))
    wf = Workflow.__new__(Workflow)
    wf.name, wf.tiles, wf.routes, wf.path, wf.hash = name, dict(tiles), specs, where, None
    check_workflow(wf, where)
    keys = wf.route_keys()
    if keys != list(routes):
        extra = next(r for k, r in zip(keys, routes, strict=False) if k != r)
        raise _bad(where, f"routes.{extra}", "routes between the same tiles are numbered in "
                   f"order: {', '.join(keys)}")  # fmt: skip
    return wf


# writing TOML ---------------------------------------------------------------------
_BARE_KEY: Final = lazy_compile(r"^[A-Za-z0-9_-]+\Z")
_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                   "\f": "\\f", "\r": "\\r"}  # fmt: skip


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string (every control character escaped)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    """A bare key when TOML allows one, else a quoted one."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """A TOML value for the types a workflow holds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise MadohubValueError(f"{value!r} cannot be kept in a workflow file")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise MadohubValueError(f"{value!r} ({type(value).__name__}) cannot be kept in a workflow file")
