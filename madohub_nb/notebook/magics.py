"""``%madohub`` and ``%%madohub``: the hub's API as IPython magics.

Parsing is separate from doing: ``parse_command(line)`` turns one magic line
into an ``argparse.Namespace`` (pure, tested without a hub), and
``MadohubMagics`` routes each sub-command to one small method that calls the
kernel's hub. ``$name`` in a line is the Python variable ``name``; ``{…}`` is
left alone for templates. Errors print one readable line instead of a
traceback; set ``MADOHUB_DEBUG=1`` or pass ``--debug`` to see the traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..errors import MadohubError, MadohubValueError
from ..model import AGENT_KINDS
from ..settings import (
    COOLDOWN_MS_RANGE,
    DELIVERY_MODES,
    DISPATCH_MODES,
    MAX_ROUNDS_RANGE,
    TRANSFORMS,
    TRIGGERS,
)
from . import config

if TYPE_CHECKING:
    import pandas as pd

    from ..hub import Hub

DEBUG_ENV = "MADOHUB_DEBUG"
"""Set to 1 to let magic errors raise with their traceback."""

ARROW = "->"
TILES_WAIT_S = 30.0
"""``%madohub tiles`` waits this long for the tiles' states."""
REPLAY_WAIT_S = 660.0
"""``%madohub replay`` waits this long for its round (a delivery waits up to 600 s for an idle target)."""


class HelpShown(Exception):
    """Raised after ``--help`` printed its text: the command stops there."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise MadohubValueError(f"{self.prog}: {message} (see {self.prog} --help)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message, end="")
        raise HelpShown()


# Value parsers ----------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, None: 1000}


def parse_duration_ms(text: str) -> int:
    """``"3s"`` → 3000, ``"1500ms"`` → 1500, ``"2.5"`` (seconds) → 2500."""
    match = _DURATION.match(text)
    if match is None:
        raise MadohubValueError(
            f"duration {text!r} not understood; write it like 3s, 1500ms or 2.5 (seconds)"
        )
    number, unit = match.groups()
    return round(float(number) * _UNIT_MS[unit])


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except MadohubValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


def _max_rounds(text: str) -> int:
    low, high = MAX_ROUNDS_RANGE
    if not text.isdigit() or not low <= int(text) <= high:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from {low} to {high}, got {text!r}"
        )
    return int(text)


def _cooldown(text: str) -> int:
    value = _duration(text)
    low, high = COOLDOWN_MS_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"cooldown must be from {low / 1000:g}s to {high / 1000:g}s, got {text!r}"
        )
    return value


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def split_endpoints(words: Iterable[str]) -> tuple[str, str]:
    """``["writer", "->", "reviewer"]`` (or ``writer->reviewer``, or two names) → the pair."""
    joined = " ".join(words).strip()
    if ARROW in joined:
        parts = [p.strip() for p in joined.split(ARROW)]
    else:
        parts = joined.split()
    if len(parts) != 2 or not all(parts) or any(" " in p for p in parts):
        raise MadohubValueError(f"connect needs SOURCE -> TARGET (two tile names), got {joined!r}")
    return parts[0], parts[1]


_DOLLAR_NAME = re.compile(r"\$\$|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand_variables(line: str, namespace: Mapping[str, Any]) -> str:
    """Replace ``$name`` by the value of the Python variable ``name`` (``$$`` is one ``$``).

    IPython's own expansion is off for ``%madohub`` because it would also fill
    ``{output}`` in templates; unknown names are left as they are.
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return str(namespace[name]) if name in namespace else match.group(0)

    return _DOLLAR_NAME.sub(value, line)


def _unescape_template(text: str) -> str:
    # A line magic cannot hold a line break: accept the two characters \n for one.
    return text.replace("\\n", "\n").replace("\\t", "\t")


# The parser -------------------------------------------------------------------

SUBCOMMANDS = (
    "tile",
    "connect",
    "tiles",
    "routes",
    "pause",
    "resume",
    "stop",
    "send",
    "watch",
    "dashboard",
    "log",
    "replay",
    "template",
    "close",
)


def build_parser() -> argparse.ArgumentParser:
    """The ``%madohub`` argument parser, one sub-parser per sub-command."""
    parser = _Parser(
        prog="%madohub",
        description="Route AI coding agents in tmux panes to each other.",
        epilog="Run `%madohub COMMAND --help` for one command's options.",
    )
    parser.add_argument(
        "--debug", action="store_true", help=f"raise errors with a traceback (or {DEBUG_ENV}=1)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("tile", help="create a tile (new pane) or adopt a pane")
    p.add_argument("name", help="short name of the tile, e.g. writer")
    p.add_argument(
        "--agent",
        metavar="KIND",
        help=f"agent kind: {', '.join(AGENT_KINDS)} or a registered one (default: detected)",
    )
    p.add_argument("--cmd", dest="command_line", metavar="COMMAND", help="command to run")
    p.add_argument(
        "--ready-pattern",
        metavar="RE",
        help="terminal program: its ready prompt line, e.g. '>>> $'",
    )
    p.add_argument(
        "--ready-quiet",
        type=_duration,
        metavar="DURATION",
        help="terminal program: ready after this long without output (default 1s)",
    )
    p.add_argument("--completion-pattern", metavar="RE", help="output that says the turn is over")
    p.add_argument("--cwd", help="working directory of the new pane")
    p.add_argument("--pane", help="adopt this existing pane (%%3 or sess:win.pane)")
    p.add_argument(
        "--env", type=_env_pair, action="append", default=[], metavar="KEY=VALUE", help="repeat"
    )
    p.add_argument(
        "--demo",
        metavar="PERSONA",
        help="run a built-in demo agent (echo, writer, reviewer, counter): no key, no network",
    )

    p = sub.add_parser(
        "connect",
        help="route SOURCE's answers into TARGET",
        usage="%(prog)s SOURCE -> TARGET [options]",
    )
    p.add_argument("endpoints", nargs="+", metavar="SOURCE -> TARGET", help="two tile names")
    p.add_argument("--trigger", choices=TRIGGERS)
    p.add_argument("--pattern", metavar="RE", help="regex of the on-keyword trigger")
    p.add_argument("--transform", choices=TRANSFORMS)
    p.add_argument(
        "--template",
        metavar="TEXT|@NAME",
        help="prompt template with {output} {round} {maxRounds} {source}; @NAME: a "
        "%%%%madohub template; \\n is a line break; a cell body also works",
    )
    p.add_argument("--max-rounds", type=_max_rounds, metavar="N", help="1 to 20 (default 5)")
    p.add_argument(
        "--cooldown", type=_cooldown, metavar="DURATION", help="1s to 30s, e.g. 3s or 1500ms"
    )
    p.add_argument("--stop", metavar="WORD", help="stop the route when the source says it")
    p.add_argument("--dispatch", choices=DISPATCH_MODES)
    p.add_argument("--delivery", choices=DELIVERY_MODES, help="default: MadoHub.delivery")
    p.add_argument(
        "--allow-shell", action="store_true", help="allow typing into a shell tile (it runs!)"
    )

    sub.add_parser("tiles", help="table of the tiles")
    sub.add_parser("routes", help="table of the routes")
    for verb in ("pause", "resume", "stop"):
        p = sub.add_parser(verb, help=f"{verb} a route, or all routes")
        p.add_argument(
            "route", metavar="ROUTE|all", help="route id (writer->reviewer#1) or number, or all"
        )

    p = sub.add_parser(
        "send",
        help="type TEXT into TILE by hand",
        usage="%(prog)s [--allow-shell] [--delivery D] TILE TEXT (or the cell)",
    )
    p.add_argument("tile", help="tile name")
    p.add_argument("text", nargs=argparse.REMAINDER, help="the rest of the line (or the cell)")
    p.add_argument("--allow-shell", action="store_true", help="allow typing into a shell tile")
    p.add_argument("--delivery", choices=DELIVERY_MODES, help="default: MadoHub.delivery")

    p = sub.add_parser("watch", help="live view of a tile")
    p.add_argument("tile")

    sub.add_parser("dashboard", help="live view of all tiles, routes and rounds")

    p = sub.add_parser("log", help="the round log as a DataFrame (df = %%madohub log)")
    p.add_argument("--tail", type=_positive_int, metavar="N", help="only the last N rounds")

    p = sub.add_parser("replay", help="run a logged round again with another transform")
    p.add_argument("round_id", metavar="ROUND_ID")
    p.add_argument("--transform", choices=TRANSFORMS)
    p.add_argument("--template", metavar="TEXT|@NAME")
    p.add_argument("--deliver", action="store_true", help="also type the new prompt")

    p = sub.add_parser("template", help="%%%%madohub template NAME stores the cell as a template")
    p.add_argument("name")

    sub.add_parser("close", help="close the kernel's hub (stops routes, kills its tiles)")
    return parser


_PARSER = build_parser()


def parse_command(line: str) -> argparse.Namespace:
    """Parse one ``%madohub`` line; raise ``MadohubValueError`` on bad input."""
    send = _SEND.match(line)
    if send is not None:
        # The text is taken from the raw line so quotes, apostrophes and spacing survive.
        return _parse_send(*send.groups())
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise MadohubValueError(f"%madohub: cannot split the line: {exc}") from None
    head = words[:1] if words[:1] == ["--debug"] else []
    rest = words[len(head) :]
    if rest[:1] == ["connect"]:
        rest = _join_arrow(rest)
    args = _PARSER.parse_args([*head, *rest])
    if args.command is None:
        _PARSER.print_help()
        raise HelpShown()
    if args.command == "connect":
        args.source, args.target = split_endpoints(args.endpoints)
    return args


def _join_arrow(words: list[str]) -> list[str]:
    """Turn ``connect a -> b --x`` into ``connect a->b --x`` (argparse reads ``->`` as an option)."""
    end = next(
        (i for i, w in enumerate(words) if i > 0 and (w.startswith("--") or w == "-h")),
        len(words),
    )
    names = " ".join(words[1:end]).replace(f" {ARROW} ", ARROW)
    names = names.replace(f" {ARROW}", ARROW).replace(f"{ARROW} ", ARROW)
    return [words[0], *names.split(), *words[end:]]


_SEND = re.compile(r"\s*(--debug\s+)?send(\s.*)?$", re.DOTALL)
_SEND_HEAD = re.compile(
    r"\s*((?:--(?:allow-shell|delivery\s+\S+)\s+)*)([^\s-]\S*)\s+(\S.*)$", re.DOTALL
)


def _parse_send(debug: str | None, rest: str | None) -> argparse.Namespace:
    """``send [--allow-shell] [--delivery D] TILE TEXT``: TEXT is the raw rest of the line."""
    head = _SEND_HEAD.match(rest or "")
    if head is None:  # --help, a missing TILE or TEXT, or text in the cell: plain argparse
        words = shlex.split(rest or "")
        return _PARSER.parse_args([*(["--debug"] if debug else []), "send", *words])
    flags, tile, text = head.groups()
    options = _PARSER.parse_args(["send", *shlex.split(flags), tile])
    try:
        words = shlex.split(text)
    except ValueError:
        words = []
    if len(words) == 1:  # one quoted argument: drop its quotes
        text = words[0]
    options.debug = bool(debug)
    options.text = [text.rstrip()]
    return options


# The magics -------------------------------------------------------------------


@magics_class
class MadohubMagics(Magics):
    """``%madohub COMMAND …`` and ``%%madohub COMMAND …`` over the kernel's hub."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.templates: dict[str, str] = {}
        self._handlers: dict[str, Callable[[argparse.Namespace, str], Any]] = {
            "tile": self._tile,
            "connect": self._connect,
            "tiles": self._tiles,
            "routes": self._routes,
            "pause": self._route_verb,
            "resume": self._route_verb,
            "stop": self._route_verb,
            "send": self._send,
            "watch": self._watch,
            "dashboard": self._dashboard,
            "log": self._log,
            "replay": self._replay,
            "template": self._template,
            "close": self._close,
        }

    @no_var_expand
    @line_cell_magic
    def madohub(self, line: str, cell: str | None = None) -> Any:
        """Drive the kernel's hub; ``%madohub --help`` lists the commands."""
        debug = os.environ.get(DEBUG_ENV, "") not in ("", "0") or line.lstrip().startswith(
            "--debug"
        )
        try:
            args = parse_command(expand_variables(line, self.shell.user_ns if self.shell else {}))
            return self._handlers[args.command](args, cell or "")
        except HelpShown:
            return None
        except (MadohubError, ValueError) as exc:
            if debug:
                raise
            print(f"madohub: {exc}", file=sys.stderr)
            return None

    # Helpers --------------------------------------------------------------

    def hub(self) -> Hub:
        """The kernel's hub (created from ``MadoHub`` settings on first use)."""
        from .registry import get_hub

        config.settings(self.shell)  # so the hub is made from this shell's config
        return get_hub()

    def resolve_template(self, text: str | None) -> str | None:
        """``@NAME`` → the stored template; other text with ``\\n`` made line breaks."""
        if text is None:
            return None
        if text.startswith("@"):
            name = text[1:]
            if name not in self.templates:
                known = ", ".join(sorted(self.templates)) or "none yet"
                raise MadohubValueError(
                    f"no template named {name!r}; stored: {known} "
                    f"(store one with a %%madohub template {name} cell)"
                )
            return self.templates[name]
        return _unescape_template(text)

    @staticmethod
    def _no_cell(args: argparse.Namespace, cell: str) -> None:
        if cell.strip():
            raise MadohubValueError(
                f"%%madohub {args.command} takes no cell body "
                "(a cell body is for template, connect, replay and send)"
            )

    # Sub-commands ---------------------------------------------------------

    def _tile(self, args: argparse.Namespace, cell: str) -> Any:
        self._no_cell(args, cell)
        sources = [o for o in ("command_line", "pane", "demo") if getattr(args, o)]
        if len(sources) > 1:
            flags = " and ".join("--" + s.replace("command_line", "cmd") for s in sources)
            raise MadohubValueError(f"tile takes one of --cmd, --pane, --demo, not {flags}")
        kwargs: dict[str, Any] = {}
        if args.agent:
            kwargs["agent"] = args.agent
        if args.cwd:
            kwargs["cwd"] = args.cwd
        if args.ready_pattern is not None:
            kwargs["ready_pattern"] = args.ready_pattern
        if args.ready_quiet is not None:
            kwargs["ready_quiet_ms"] = args.ready_quiet
        if args.completion_pattern is not None:
            kwargs["completion_pattern"] = args.completion_pattern
        if args.env:
            kwargs["env"] = dict(args.env)
        if args.pane:
            kwargs["pane"] = args.pane
        elif args.demo:
            from ..demo import standin_command

            kind = args.agent or "claude"
            kwargs["agent"] = kind
            kwargs["command"] = standin_command(kind, persona=args.demo)
        elif args.command_line:
            kwargs["command"] = args.command_line
        return self.hub().tile(args.name, **kwargs)

    def _connect(self, args: argparse.Namespace, cell: str) -> Any:
        template = args.template
        if cell.strip():
            if template is not None:
                raise MadohubValueError("give the template as --template or as the cell, not both")
            template = cell
        else:
            template = self.resolve_template(template)
        options = {
            "trigger": args.trigger,
            "pattern": args.pattern,
            "transform": args.transform,
            "template": template,
            "max_rounds": args.max_rounds,
            "cooldown_ms": args.cooldown,
            "stop_keyword": args.stop,
            "dispatch": args.dispatch,
            "delivery": args.delivery,  # None: the hub's own (MadoHub.delivery)
        }
        kwargs = {k: v for k, v in options.items() if v is not None}
        kwargs["allow_shell"] = args.allow_shell
        return self.hub().connect(args.source, args.target, **kwargs)

    def _tiles(self, args: argparse.Namespace, cell: str) -> pd.DataFrame:
        import pandas as pd

        self._no_cell(args, cell)
        hub = self.hub()
        tiles = list(hub.tiles.values())

        async def states() -> list[str]:  # tmux and psutil reads run on the engine thread
            return list(await asyncio.gather(*(t.astate() for t in tiles)))

        fresh = hub.engine.submit(states()).result(TILES_WAIT_S)
        rows = [
            {"name": t.name, "agent": t.agent, "pane": t.pane_id, "state": state}
            for t, state in zip(tiles, fresh, strict=True)
        ]
        return pd.DataFrame(rows, columns=["name", "agent", "pane", "state"])

    def _routes(self, args: argparse.Namespace, cell: str) -> pd.DataFrame:
        import pandas as pd

        self._no_cell(args, cell)
        columns = ["id", "source", "target", "state", "rounds", "max_rounds", "last_status"]
        extra = ["trigger", "transform", "dispatch"]
        rows = [{c: getattr(r, c, None) for c in (*columns, *extra)} for r in self.hub().routes]
        return pd.DataFrame(rows, columns=[*columns, *extra])

    def _route_verb(self, args: argparse.Namespace, cell: str) -> None:
        self._no_cell(args, cell)
        hub = self.hub()
        routes = list(hub.routes) if args.route == "all" else [hub.route(args.route)]
        for route in routes:
            getattr(route, args.command)()
            print(f"route {route.id} ({route.source} -> {route.target}): {route.state}")
        if not routes:
            print("no routes yet")

    def _send(self, args: argparse.Namespace, cell: str) -> None:
        text = " ".join(args.text)
        if cell.strip():
            if text.strip():
                raise MadohubValueError("give the text on the line or in the cell, not both")
            text = cell.rstrip("\n")
        if not text.strip():
            raise MadohubValueError("send needs TEXT: %madohub send TILE TEXT")
        future = self.hub().send(
            args.tile, text, delivery=args.delivery, allow_shell=args.allow_shell
        )
        tile = args.tile

        def report(done: Any) -> None:
            if not done.cancelled() and done.exception() is not None:
                print(f"madohub: send to {tile} failed: {done.exception()}", file=sys.stderr)

        if hasattr(future, "add_done_callback"):
            future.add_done_callback(report)
        print(f"sending {len(text)} characters to {tile}")

    def _watch(self, args: argparse.Namespace, cell: str) -> Any:
        from .widgets import TileView

        self._no_cell(args, cell)
        return TileView(self.hub(), args.tile)

    def _dashboard(self, args: argparse.Namespace, cell: str) -> Any:
        from .widgets import Dashboard

        self._no_cell(args, cell)
        return Dashboard(self.hub())

    def _log(self, args: argparse.Namespace, cell: str) -> pd.DataFrame:
        self._no_cell(args, cell)
        df = self.hub().log.df
        return df.tail(args.tail) if args.tail else df

    def _replay(self, args: argparse.Namespace, cell: str) -> Any:
        template = cell if cell.strip() else self.resolve_template(args.template)
        if cell.strip() and args.template is not None:
            raise MadohubValueError("give the template as --template or as the cell, not both")
        kwargs: dict[str, Any] = {"deliver": args.deliver}
        if args.transform:
            kwargs["transform"] = args.transform
        if template is not None:
            kwargs["template"] = template
        # The engine runs in its own thread: waiting here never stops routing.
        return self.hub().replay(args.round_id, **kwargs).result(REPLAY_WAIT_S)

    def _template(self, args: argparse.Namespace, cell: str) -> str | None:
        if cell.strip():
            self.templates[args.name] = cell.rstrip("\n")
            print(f"template @{args.name} stored ({len(self.templates[args.name])} characters)")
            return None
        if args.name in self.templates:
            return self.templates[args.name]
        raise MadohubValueError(
            f"%%madohub template {args.name} needs the template as the cell body "
            "(write it under the %%madohub line)"
        )

    def _close(self, args: argparse.Namespace, cell: str) -> None:
        from .registry import registry

        self._no_cell(args, cell)
        if registry.current is None:
            print("no hub is open")
            return
        registry.reset()
        print("hub closed (its routes stopped, the tiles it created killed)")


def load_ipython_extension(ip: Any) -> None:
    """``%load_ext madohub_nb``: register ``%madohub`` and the ``MadoHub`` settings."""
    config.register(ip)
    ip.register_magics(MadohubMagics)


def unload_ipython_extension(ip: Any) -> None:
    """``%unload_ext madohub_nb``: remove ``%madohub`` (the hub and its routes stay)."""
    magics = ip.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("madohub", None)
    ip.magics_manager.registry.pop(MadohubMagics.__name__, None)
    config.unregister(ip)
