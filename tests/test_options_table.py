"""The options of hub.tile / connect / gather are declared once (madohub_nb/pipeline/options.py).

A row added to the table reaches every place that takes options: the hub's keywords (and
build_route), gathers, workflow files (save, load, check), the %madohub flags (units read)
and the docs' tables. The fixture adds a fake option the way docs/development.md tells a
contributor to ("Add a route option: one row"), without touching any other file.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import madohub_nb as mh
from madohub_nb.notebook.magics import MadohubMagics
from madohub_nb.notebook.parsing import (
    COMMANDS,
    HelpShown,
    option_keywords,
    parse_command,
    parser,
    subparsers,
)
from madohub_nb.pipeline import options
from madohub_nb.pipeline.options import Flag, Option, options_markdown, parse_duration_ms
from madohub_nb.pipeline.workflow import Workflow

DEVELOPMENT_PAGE = Path(__file__).resolve().parent.parent / "docs" / "development.md"


def _documented_row() -> Option:
    """The row docs/development.md shows ("Add a route option: one row"), as written there."""
    page = DEVELOPMENT_PAGE.read_text()
    block = page.split("<!-- option-row-example -->")[1].split("<!-- /option-row-example -->")[0]
    code = block.strip().removeprefix("```python").removesuffix("```")
    *definitions, row = code.strip().split("\n\n\n")
    names: dict[str, Any] = {
        "Option": Option, "Flag": Flag, "parse_duration_ms": parse_duration_ms,
        "MadohubValueError": mh.MadohubValueError,
    }  # fmt: skip
    exec("\n\n\n".join(definitions), names)
    made = eval(row, names)
    assert isinstance(made, Option)
    return made


NAP = _documented_row()
"""A route option no shipped code knows, written as one row (connect and gather)."""
SHADE = Option(
    "shade", (str,), None, applies=frozenset({"tile"}), by_position=False,
    help="A fake tile option: the tile's colour in a dashboard.",
    flag=Flag("--shade", "COLOUR", help="the tile's colour (default: none)"),
)  # fmt: skip


@pytest.fixture
def fake_options(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tables with one more route option (``nap_ms``) and one more tile option (``shade``)."""
    monkeypatch.setattr(options, "ROUTE", (*options.ROUTE, NAP))
    monkeypatch.setattr(options, "TILE", (*options.TILE, SHADE))
    yield


def _tiles(hub: Any) -> None:
    for name in ("w", "r1", "r2"):
        hub.tile(name, agent="claude", command="bash --norc")


def test_a_row_added_to_the_table_reaches_connect_gather_files_magic_and_docs(
    hub: Any, fake_options: None, tmp_path: Path
) -> None:
    _tiles(hub)
    hub.tile("t", agent="claude", command="bash --norc", shade="teal")
    # 1. hub.connect takes the keyword, and build_route gets it (the route keeps its options)
    route = hub.connect("w", "r1", dispatch="shadow", nap_ms=250)
    assert route.options["nap_ms"] == 250
    assert hub.connect("w", "r2", dispatch="shadow").options["nap_ms"] is None  # its default
    # 2. hub.gather too
    gather = hub.gather(["r1", "r2"], "w", dispatch="shadow", nap_ms=500)
    assert gather.options["nap_ms"] == 500
    # 3. the workflow file: saved, loaded, checked
    path = tmp_path / "nap.toml"
    hub.workflow("nap").save(path)
    text = path.read_text()
    assert "nap_ms = 250" in text and "nap_ms = 500" in text and 'shade = "teal"' in text
    loaded = Workflow.load(path)
    assert [spec.options.get("nap_ms") for spec in loaded.routes] == [250, None, 500]
    assert loaded.tiles["t"]["shade"] == "teal"
    path.write_text(text.replace("nap_ms = 250", "nap_ms = 9000"))
    with pytest.raises(mh.MadohubValueError, match=r"routes\.w->r1\.nap_ms: nap_ms must be from"):
        Workflow.load(path)
    # 4. the magic: the flag, its units read, the keyword it becomes, its help
    args = parse_command("connect w -> r1 --nap 0.25s --dispatch shadow")
    assert option_keywords("connect", args) == {"nap_ms": 250, "dispatch": "shadow"}
    args = parse_command("gather r1 r2 -> w --nap 1500ms")
    assert option_keywords("gather", args) == {"nap_ms": 1500}
    assert option_keywords("tile", parse_command("tile t --shade teal")) == {"shade": "teal"}
    assert "nap this long" in subparsers(parser())["connect"].format_help()
    # 5. the docs' tables
    assert "| `nap_ms` | `None` | yes | yes | yes | `--nap DURATION` |" in options_markdown("route")
    assert "| `shade` | `None` | yes | `--shade COLOUR` |" in options_markdown("tile")


@pytest.fixture
def hub_ip(home: Path, tmux_socket: str, tmp_path: Path) -> Iterator[Any]:
    """A real IPython shell with the extension, its hub on a private socket and log."""
    from IPython.core.interactiveshell import InteractiveShell

    from madohub_nb.notebook.config import MadoHub
    from madohub_nb.notebook.registry import registry

    shell = InteractiveShell.instance()
    MadoHub.clear_instance()
    shell.run_line_magic("load_ext", "madohub_nb")
    shell.run_line_magic("config", f"MadoHub.socket_name = '{tmux_socket}'")
    shell.run_line_magic("config", f"MadoHub.log_path = '{tmp_path / 'rounds.db'}'")
    yield shell
    registry.reset()
    shell.run_line_magic("unload_ext", "madohub_nb")
    MadoHub.clear_instance()
    shell.config.pop("MadoHub", None)


def test_a_fake_option_given_through_the_magic_reaches_the_route(
    hub_ip: Any, fake_options: None
) -> None:
    for name in ("w", "r1"):
        hub_ip.run_line_magic("madohub", f"tile {name} --agent claude --cmd 'bash --norc'")
    route = hub_ip.run_line_magic("madohub", "connect w -> r1 --dispatch shadow --nap 2s")
    assert route.options["nap_ms"] == 2000


def test_without_the_row_the_option_is_unknown_everywhere(hub: Any, tmp_path: Path) -> None:
    _tiles(hub)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nap_ms'; its options: "):
        hub.connect("w", "r1", nap_ms=250)
    with pytest.raises(mh.MadohubValueError, match=r"routes\.w->r1\.nap_ms: unknown key"):
        Workflow.loads('[tiles.w]\ncommand = "x"\n[tiles.r1]\ncommand = "y"\n'
                       '[routes."w->r1"]\nnap_ms = 250\n')  # fmt: skip
    with pytest.raises(mh.MadohubValueError, match="unrecognized arguments: --nap"):
        parse_command("connect w -> r1 --nap 2s")


def test_the_hub_signatures_are_the_tables() -> None:
    for kind, method, first in (
        ("tile", mh.Hub.tile, ["self", "name"]),
        ("connect", mh.Hub.connect, ["self", "source", "target"]),
        ("gather", mh.Hub.gather, ["self", "sources", "target"]),
    ):
        params = list(inspect.signature(method).parameters.values())
        assert [p.name for p in params[: len(first)]] == first
        rows = options.options_of(kind)
        assert [(p.name, p.default) for p in params[len(first) :]] == [
            (o.name, o.default) for o in rows
        ]
        keyword_only = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
        assert keyword_only == {o.name for o in rows if not o.by_position}


def test_options_may_still_be_given_by_position(hub: Any) -> None:
    _tiles(hub)
    route = hub.connect("w", "r1", "on-idle", "prompt-wrap", "T {output}", 4, dispatch="shadow")
    assert (route.options["template"], route.options["max_rounds"]) == ("T {output}", 4)
    with pytest.raises(TypeError, match="multiple values for argument 'trigger'"):
        hub.connect("w", "r1", "on-idle", trigger="always")


def test_every_command_is_listed_once_with_its_parser_and_its_handler() -> None:
    from madohub_nb.notebook.parsing import SUBCOMMANDS

    assert list(subparsers(parser())) == list(COMMANDS) == list(SUBCOMMANDS)
    magics = MadohubMagics(None)
    assert set(magics._handlers) == set(COMMANDS)
    for name in COMMANDS:
        assert callable(getattr(MadohubMagics, f"_{name}")), f"MadohubMagics has no _{name}"
        with pytest.raises(HelpShown):
            parse_command(f"{name} --help")


def test_flags_read_units_as_before() -> None:
    args = parse_command(
        "connect a -> b --cooldown 2.5s --max-cost $2.50 --max-tokens 1.5M --approve "
        "--approve-timeout 90s --stop LGTM --when ok"
    )
    assert option_keywords("connect", args) == {
        "cooldown_ms": 2500, "max_cost_usd": 2.5, "max_tokens": 1_500_000, "approve": True,
        "approve_timeout_s": 90.0, "stop_keyword": "LGTM", "when": "ok",
    }  # fmt: skip
    args = parse_command("tile w --cmd 'codex x' --env A=1 --mcp --no-hooks --ready-quiet 2s")
    assert option_keywords("tile", args) == {
        "command": "codex x", "env": {"A": "1"}, "mcp": True, "hooks": False,
        "ready_quiet_ms": 2000,
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["tile", "connect", "gather"])
def test_the_magics_flags_of_a_call_are_its_tables(kind: str) -> None:
    """``%madohub tile / connect / gather`` offer exactly the flags of the table's rows (and
    ``--demo``, the magic's own): no flag is declared beside the table."""
    sub = subparsers(parser())[kind]
    shown = {o for a in sub._actions for o in a.option_strings if o.startswith("--")}
    table = {o.flag.spelling for o in options.options_of(kind) if o.flag is not None}
    negated = {f"--no-{o.flag.spelling[2:]}" for o in options.options_of(kind)
               if o.flag is not None and o.flag.negatable}  # fmt: skip
    own = {"--help"} | ({"--demo"} if kind == "tile" else set())
    assert shown == table | negated | own
