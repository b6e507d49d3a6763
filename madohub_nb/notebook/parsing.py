"""Reading one ``%madohub`` line: words, ``$name``, options, sub-commands, help.

Pure (no hub): ``parse_command(line, namespace)`` turns a line into an
``argparse.Namespace``. The rules, in one place:

- Words split like a shell: ``'…'`` and ``"…"`` group, a backslash escapes.
- ``$name`` is the Python variable ``name``, **outside quotes only** (``$$`` is
  one ``$``; an unknown name stays as typed). Quoted text is always literal, so
  ``"costs $5 for $HOME"`` and templates with ``{output}`` arrive untouched.
- Options are recognised wherever they stand on the line; ``--`` ends them
  (``send w -- --allow-shell`` types ``--allow-shell``).
- A ``$name`` value or quoted text is always a value, never an option: with
  ``reply = "--allow-shell"``, ``send sh $reply`` types ``--allow-shell`` (and a
  shell still needs the opt-in). Only an option name typed as is counts
  (``--cmd=$c`` is the option ``--cmd`` with the value of ``c``).
- ``send TILE TEXT``: TEXT is the rest of the line as typed (quotes and
  apostrophes kept; one quoted word loses its quotes).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from ..defaults import DELIVERY_MODES, TRANSFORMS
from ..errors import MadohubValueError
from ..hub_settings import SETTINGS
from ..pipeline import options as option_table
from ..pipeline.keys import key_names_help
from ..pipeline.options import PLACEHOLDERS, Option, options_of
from ..pipeline.options import parse_duration_ms as parse_duration_ms  # (the magics' API)

DEBUG_ENV = "MADOHUB_DEBUG"
"""Set to 1 to let magic errors raise with their traceback."""
ARROW = "->"


class HelpShown(Exception):
    """Raised after ``--help`` printed its text: the command stops there."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        message = message.replace(repr(_LITERAL)[1:-1], "").replace(_LITERAL, "")
        raise MadohubValueError(f"{self.prog}: {message} (see {self.prog} --help)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message, end="")
        raise HelpShown()

    def print_help(self, file: Any = None) -> None:
        if self.prog == "%madohub":  # the top level shows every command's options
            print(full_help(), file=file)
        else:
            super().print_help(file)


# Words -------------------------------------------------------------------------


@dataclass(frozen=True)
class Word:
    """One word of a line: ``value`` as a shell reads it, ``raw`` as typed (quotes kept).

    ``literal``: its name part (before a typed ``=``) holds quoted text or a ``$name``
    value, so it is a value even when it starts with ``-``.
    """

    value: str
    raw: str
    start: int
    end: int
    quoted: bool
    literal: bool = False

    @property
    def option_like(self) -> bool:
        """Typed as an option (``-x``, ``--name``, ``--name=value``), not a value."""
        return not self.literal and self.value.startswith("-")


_LITERAL = "\x00"
"""Put before a literal word that starts with ``-`` for argparse, which would read it as an
option, and taken off after (``_unmarked``); no typed or expanded word starts with it."""


_DOLLAR_NAME = re.compile(r"\$\$|\$([A-Za-z_][A-Za-z0-9_]*)")


def _closing_double_quote(line: str, i: int) -> tuple[int, str] | None:
    j, buf = i + 1, []
    while j < len(line) and line[j] != '"':
        if line[j] == "\\" and j + 1 < len(line) and line[j + 1] in '"\\':
            buf.append(line[j + 1])
            j += 2
        else:
            buf.append(line[j])
            j += 1
    return (j, "".join(buf)) if j < len(line) else None


def split_words(
    line: str, namespace: Mapping[str, Any] | None = None, *, lenient: bool = False
) -> list[Word]:
    """Split ``line`` into words, expanding ``$name`` outside quotes.

    ``lenient``: a quote without its closing partner is a plain character
    (``don't``), as in free text; otherwise it is an error.
    """
    ns = namespace or {}
    words: list[Word] = []
    i, n = 0, len(line)
    while i < n:
        if line[i].isspace():
            i += 1
            continue
        start, value, raw, quoted = i, [], [], False
        literal, head = False, True  # head: before the first typed "="
        while i < n and not line[i].isspace():
            c = line[i]
            closing: tuple[int, str] | None = None
            if c == "'":
                j = line.find("'", i + 1)
                closing = (j, line[i + 1 : j]) if j >= 0 else None
            elif c == '"':
                closing = _closing_double_quote(line, i)
            if c in "'\"":
                if closing is None:
                    if not lenient:
                        raise MadohubValueError(
                            f"%madohub: the {c} at column {i + 1} is never closed; close it or "
                            f"escape it as \\{c}"
                        )
                    value.append(c)
                    raw.append(c)
                    i += 1
                    continue
                j, inner = closing
                value.append(inner)
                raw.append(line[i : j + 1])
                quoted, i = True, j + 1
                literal = literal or head
            elif c == "\\" and i + 1 < n:
                value.append(line[i + 1])
                raw.append(line[i : i + 2])
                i += 2
            elif c == "$" and (m := _DOLLAR_NAME.match(line, i)) is not None:
                name = m.group(1)
                text = "$" if name is None else str(ns[name]) if name in ns else m.group(0)
                value.append(text)
                raw.append(text)
                literal = literal or (head and name in ns)
                i = m.end()
            else:
                value.append(c)
                raw.append(c)
                head = head and c != "="
                i += 1
        text = "".join(value)
        literal = literal or text.startswith(_LITERAL)
        words.append(Word(text, "".join(raw), start, i, quoted, literal))
    return words


def expand_variables(line: str, namespace: Mapping[str, Any]) -> str:
    """``line`` with ``$name`` replaced by the variable ``name`` outside quotes (``$$``: ``$``).

    IPython's own expansion is off for ``%madohub`` because it would also fill
    ``{output}`` in templates and reach into quoted text.
    """
    words = split_words(line, namespace, lenient=True)
    if not words:
        return line
    out = [line[: words[0].start]]
    for word, nxt in zip(words, [*words[1:], None], strict=True):
        out.append(word.raw)
        out.append(line[word.end : nxt.start] if nxt is not None else line[word.end :])
    return "".join(out)


# Value parsers ------------------------------------------------------------------


def _unmarked(value: Any) -> Any:
    """``value`` (an argparse result) with the ``_LITERAL`` marks taken off its text."""
    if isinstance(value, str):
        return value.removeprefix(_LITERAL)
    if isinstance(value, (list, tuple)):
        return type(value)(_unmarked(v) for v in value)
    return value


def _argparse_word(word: Word) -> str:
    """The word as argparse must see it: a literal that starts with ``-`` (or the mark) marked."""
    if word.literal and (word.value.startswith("-") or word.value.startswith(_LITERAL)):
        return _LITERAL + word.value
    return word.value


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` (a reader of :mod:`~madohub_nb.pipeline.options`) as an argparse ``type``."""

    def convert(text: str) -> Any:
        try:
            return parse(_unmarked(text))
        except MadohubValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def _positive_int(text: str) -> int:
    text = _unmarked(text)
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


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


def split_gather_endpoints(words: Iterable[str]) -> tuple[list[str], str]:
    """``["r1", "r2", "->", "writer"]`` (or ``r1 r2->writer``) → the sources and the target."""
    joined = " ".join(words).strip()
    left, arrow, right = joined.rpartition(ARROW)
    sources, target = left.split(), right.split()
    if not arrow or ARROW in left or len(target) != 1 or not sources:
        raise MadohubValueError(
            f"gather needs SOURCE SOURCE … -> TARGET (tile names, one target), got {joined!r}"
        )
    return sources, target[0]


# The options of tile, connect and gather: from the one table ---------------------------


def _flag_help(opt: Option) -> str:
    """The option's ``--help`` line: the flag's own words, else its default (after the choices
    argparse lists) or its help and its default."""
    assert opt.flag is not None
    if opt.flag.help is not None:
        return opt.flag.help
    if opt.choices is not None:
        return f"(default: {opt.default})"
    return f"{opt.help.replace('%', '%%')} (default: {opt.default})"


def _flag_arguments(opt: Option) -> dict[str, Any]:
    """``add_argument``'s keywords for the option's flag (its row of the table)."""
    flag = opt.flag
    assert flag is not None
    out: dict[str, Any] = {"dest": flag.name, "help": _flag_help(opt)}
    if flag.negatable:
        return {**out, "action": argparse.BooleanOptionalAction, "default": None}
    if opt.types == (bool,):
        return {**out, "action": "store_true"}
    if flag.metavar is not None:
        out["metavar"] = flag.metavar
    elif opt.choices is not None:
        out["choices"] = opt.choices()
    if flag.parse is not None:
        out["type"] = _typed(flag.parse)
    if flag.nargs is not None:
        out["nargs"] = flag.nargs
    if flag.const is not None:
        out["const"] = flag.const
    if flag.repeat:
        out.update(action="append", default=[])
    return out


def add_option_flags(p: argparse.ArgumentParser, kind: str) -> None:
    """The flags of ``kind``'s options (``tile``, ``connect``, ``gather``) that have one."""
    for opt in options_of(kind):
        if opt.flag is not None:
            p.add_argument(opt.flag.spelling, **_flag_arguments(opt))


def option_keywords(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """The ``hub.<kind>`` keywords of the flags given on the line (their units read)."""
    keywords: dict[str, Any] = {}
    for opt in options_of(kind):
        flag = opt.flag
        if flag is None:
            continue
        value = getattr(args, flag.name, None)
        absent = value is None or (value is False and not flag.negatable)
        if absent or (flag.repeat and not value):
            continue
        keywords[opt.name] = flag.keyword(value) if flag.keyword is not None else value
    return keywords


# The commands ---------------------------------------------------------------------------

WORKFLOW_VERBS = ("save", "load", "run")


def _tile_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="short name of the tile, e.g. writer")
    add_option_flags(p, "tile")
    p.add_argument(
        "--demo",
        metavar="PERSONA",
        help="run a built-in demo agent (echo, writer, reviewer, counter): no key, no network; "
        "its files go to a private temporary directory unless --env CLAUDE_CONFIG_DIR=… "
        "(CODEX_HOME=… for codex) names one",
    )


def _connect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("endpoints", nargs="+", metavar="SOURCE -> TARGET", help="two tile names")
    add_option_flags(p, "connect")


def _gather_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "endpoints", nargs="+", metavar="SOURCES -> TARGET",
        help="two or more source tiles, ->, the target tile",
    )  # fmt: skip
    add_option_flags(p, "gather")


def _route_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "route", metavar="ROUTE|all", help="route id (writer->reviewer#1) or number, or all"
    )


def _send_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tile", help="tile name")
    p.add_argument("text", nargs="*", help="the rest of the line (or the cell)")
    p.add_argument(
        "--allow-shell", action="store_true", help="allow typing into a shell tile (default: off)"
    )
    p.add_argument(
        "--delivery", choices=DELIVERY_MODES, help="(default: MadoHub.delivery, itself typed)"
    )


def _keys_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tile", help="tile name")
    p.add_argument("keys", nargs="+", metavar="KEY", help=f"one of {key_names_help()}")


def _watch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tile")


def _all_rounds(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--all", action="store_true", help="every round of the log file, any session (default: off)"
    )


def _log_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tail", type=_positive_int, metavar="N", help="only the last N (default: all)")
    _all_rounds(p)


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("round_id", metavar="ROUND_ID")
    p.add_argument("--transform", choices=TRANSFORMS, help="(default: the round's own)")
    p.add_argument(
        "--template", metavar="TEXT|@NAME", help=f"placeholders {PLACEHOLDERS} (default: none)"
    )
    p.add_argument("--deliver", action="store_true", help="also type the new prompt (default: off)")


TRY_TAIL_DEFAULT = 10
"""``%madohub try`` without ``--rounds``: the last that many answers."""


def _try_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rounds", metavar="SPEC",
        help="rows of %%madohub log by their number (3-7, 3,5,9, 12-) or round ids "
        f"(default: the last {TRY_TAIL_DEFAULT} answers)",
    )  # fmt: skip
    p.add_argument(
        "--tail",
        type=_positive_int,
        metavar="N",
        help=f"the last N answers (default {TRY_TAIL_DEFAULT})",
    )
    p.add_argument(
        "--variants",
        metavar="NAME",
        help="a dict of variants in the user namespace (default: the cell)",
    )
    p.add_argument(
        "--judge", metavar="MODEL", help="a model ranks the prompts pairwise (default: none)"
    )
    _all_rounds(p)


_VARIANT_HEADER = re.compile(
    r"^\[\s*(?P<name>[\w.-]+)\s*(?::\s*(?P<transform>[\w-]+))?"
    r"(?:\s+model=(?P<model>\S+))?\s*\]\s*$"
)


def parse_variants(cell: str) -> dict[str, Any]:
    """``%%madohub try``'s cell: blocks, each under a ``[NAME]`` line holding a template, or
    under ``[NAME: TRANSFORM]`` / ``[NAME: TRANSFORM model=MODEL]`` with an optional template
    (an AI transform's instruction). Variants in the order written."""
    variants: dict[str, dict[str, Any]] = {}
    body: list[str] | None = None
    for number, line in enumerate(cell.splitlines(), 1):
        header = _VARIANT_HEADER.match(line)
        if header is None:
            if body is None:
                if line.strip():
                    raise MadohubValueError(
                        f"line {number} of the cell comes before any [NAME] line: {line!r}; "
                        "write each variant under a [NAME] (or [NAME: TRANSFORM]) line"
                    )
                continue
            body.append(line)
            continue
        name = header.group("name")
        if name in variants:
            raise MadohubValueError(
                f"variant {name!r} is written twice in the cell (line {number})"
            )
        body = []
        settings: dict[str, Any] = {"transform": header.group("transform") or "prompt-wrap"}
        if header.group("model"):
            settings["model"] = header.group("model")
        variants[name] = {**settings, "_body": body}
    if not variants:
        raise MadohubValueError(
            "%%madohub try needs variants: a [NAME] line then its template, one block per "
            "variant, or --variants NAME (a dict in the notebook)"
        )
    out: dict[str, Any] = {}
    for name, settings in variants.items():
        text = "\n".join(settings.pop("_body")).strip("\n")
        if text.strip():
            settings["template"] = text
        out[name] = settings
    return out


_ROUND_ID = re.compile(r"^[0-9a-f]{32}$")


def parse_round_spec(spec: str) -> tuple[list[int], list[str], int | None]:
    """``--rounds``: (row numbers, round ids, an open start like ``12-``)."""
    numbers: list[int] = []
    ids: list[str] = []
    open_from = None
    for part in (p.strip() for p in spec.split(",")):
        lo, dash, hi = part.partition("-")
        if _ROUND_ID.match(part):
            ids.append(part)
        elif lo.isdigit() and dash and hi.isdigit() and int(lo) <= int(hi):
            numbers.extend(range(int(lo), int(hi) + 1))
        elif lo.isdigit() and dash and not hi:
            open_from = int(lo)
        elif part.isdigit() and not dash:
            numbers.append(int(part))
        else:
            raise MadohubValueError(
                f"--rounds: {part!r} is not a row number, a range (3-7, 12-) or a round id; "
                "the numbers are those %madohub log shows on the left"
            )
    return numbers, ids, open_from


def _template_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")


def _hooks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent", metavar="AGENT", help="agent kind, e.g. claude or codex")


def _workflow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("verb", choices=WORKFLOW_VERBS, help="save, load (check and show) or run")
    p.add_argument("file", metavar="FILE", help="the workflow file (.toml)")


@dataclass(frozen=True)
class Command:
    """One sub-command of ``%madohub``: its help and its arguments.

    ``MadohubMagics._<name>`` does it (magics.py; a test checks each command has one).
    """

    help: str
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    usage: str | None = None
    description: str | None = None


COMMANDS: Final[dict[str, Command]] = {
    "tile": Command("create a tile (new pane) or adopt a pane", _tile_arguments),
    "connect": Command(
        "route SOURCE's answers into TARGET", _connect_arguments,
        usage="%(prog)s SOURCE -> TARGET [options]",
    ),
    "gather": Command(
        "fan in: route the answers of SOURCES, once each has a new one, into TARGET",
        _gather_arguments, usage="%(prog)s SOURCE SOURCE [SOURCE …] -> TARGET [options]",
    ),
    "tiles": Command("table of the tiles, with the tmux attach command of each"),
    "routes": Command("table of the routes, with the last error of each"),
    "pause": Command("pause a route, or all routes", _route_arguments),
    "resume": Command("resume a route, or all routes", _route_arguments),
    "stop": Command("stop a route, or all routes", _route_arguments),
    "send": Command(
        "type TEXT into TILE by hand; returns a future of the round", _send_arguments,
        usage="%(prog)s TILE [--allow-shell] [--delivery D] [--] TEXT (or the cell)",
        description="Options may stand anywhere; -- ends them (the rest is text).",
    ),
    "keys": Command(
        "press keys in TILE (answer a prompt, interrupt); returns a future of the round",
        _keys_arguments,
    ),
    "watch": Command("live view of a tile", _watch_arguments),
    "dashboard": Command("live view of all tiles, routes, rounds and the timeline"),
    "inbox": Command("live list of what waits for a person: permission prompts, approvals"),
    "log": Command("this hub's rounds as a DataFrame (df = %%madohub log)", _log_arguments),
    "plot": Command("timeline of this hub's rounds (a matplotlib Figure)", _all_rounds),
    "replay": Command("run a logged round again with another transform", _replay_arguments),
    "try": Command(
        "the transform playground: %%%%madohub try renders the cell's variants ([NAME] then a "
        "template) on logged answers, side by side", _try_arguments,
    ),
    "template": Command(
        f"%%%%madohub template NAME stores the cell as a template ({PLACEHOLDERS})",
        _template_arguments,
    ),
    "hooks": Command(
        "print what to add to an agent's own settings to opt an adopted pane in", _hooks_arguments
    ),
    "workflow": Command(
        "save the hub's tiles and routes to a TOML file, load one, or run one",
        _workflow_arguments,
    ),
    "close": Command("close the kernel's hub (stops routes, kills its tiles)"),
}  # fmt: skip
"""Every sub-command of ``%madohub``, in the order ``--help`` lists them."""

SUBCOMMANDS: Final = tuple(COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    """The ``%madohub`` argument parser: one sub-parser per entry of :data:`COMMANDS`."""
    parser = _Parser(
        prog="%madohub",
        description="Route AI coding agents in tmux panes to each other.",
        epilog="Run `%madohub COMMAND --help` for one command's options.",
    )
    parser.add_argument(
        "--debug", action="store_true", help=f"show errors with their traceback (or {DEBUG_ENV}=1)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMANDS.items():
        p = sub.add_parser(
            name, help=command.help, usage=command.usage, description=command.description
        )
        if command.arguments is not None:
            command.arguments(p)
    return parser


_BUILT: dict[tuple[int, int], argparse.ArgumentParser] = {}


def parser() -> argparse.ArgumentParser:
    """The parser of the option tables as they are now (built again when a table changes)."""
    key = (id(option_table.ROUTE), id(option_table.TILE))
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = build_parser()
    return _BUILT[key]


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{command: its parser}``."""
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def full_help() -> str:
    """Every command with every option, its default and the template placeholders, then
    the hub's settings (``%config MadoHub.NAME = value``) with their defaults."""
    parts = [argparse.ArgumentParser.format_help(parser())]
    for name, sub in subparsers(parser()).items():
        parts.append(f"\n--- {name} " + "-" * max(0, 60 - len(name)) + "\n" + sub.format_help())
    parts.append("\n--- settings (%config MadoHub.NAME = value) " + "-" * 17 + "\n")
    for s in SETTINGS:
        fixed = "" if s.live else ", fixed when the hub is made"
        parts.append(f"  {s.name} (default {s.default!r}{fixed})\n      {s.help}\n")
    return "".join(parts)


def option_strings(command: str) -> list[str]:
    """The options of one sub-command (for completion)."""
    sub = subparsers(parser()).get(command)
    if sub is None:
        return []
    return [o for a in sub._actions for o in a.option_strings if o.startswith("--")]


def parse_command(line: str, namespace: Mapping[str, Any] | None = None) -> argparse.Namespace:
    """Parse one ``%madohub`` line (``$name`` from ``namespace``); ``MadohubValueError`` if bad."""
    loose = split_words(line, namespace, lenient=True)
    options_end = next((i for i, w in enumerate(loose) if w.value == "--" and w.option_like), None)
    head = loose[:options_end]
    debug = any(w.value == "--debug" and w.option_like for w in head)
    command = next((w.value for w in loose if not w.option_like), None)
    if command == "send":
        args = _parse_send(line, [w for w in loose if not (w.value == "--debug" and w.option_like)])
    else:
        strict = split_words(line, namespace)
        cut = options_end if options_end is not None else len(strict)
        words = [
            _argparse_word(w)
            for i, w in enumerate(strict)
            if not (w.value == "--debug" and w.option_like and i < cut)
        ]
        if command in ("connect", "gather"):
            words = _join_arrow(words, command)
        args = parser().parse_args(words)
        for name, value in vars(args).items():
            setattr(args, name, _unmarked(value))
        if args.command is None:
            parser().print_help()
            raise HelpShown()
        if args.command == "connect":
            args.source, args.target = split_endpoints(args.endpoints)
        if args.command == "gather":
            args.sources, args.target = split_gather_endpoints(args.endpoints)
    args.debug = debug
    return args


def debug_wanted(line: str) -> bool:
    """Whether ``--debug`` stands among the options of ``line`` (before any ``--``)."""
    for word in split_words(line, lenient=True):
        if word.value == "--" and word.option_like:
            return False
        if word.value == "--debug" and word.option_like:
            return True
    return False


def _join_arrow(words: list[str], command: str = "connect") -> list[str]:
    """Turn ``connect a -> b --x`` into ``connect a->b --x`` (argparse reads ``->`` as an option)."""
    start = words.index(command) + 1
    end = next(
        (i for i, w in enumerate(words) if i >= start and (w.startswith("--") or w == "-h")),
        len(words),
    )
    names = " ".join(words[start:end]).replace(f" {ARROW} ", ARROW)
    names = names.replace(f" {ARROW}", ARROW).replace(f"{ARROW} ", ARROW)
    return [*words[:start], *names.split(), *words[end:]]


def _parse_send(line: str, words: list[Word]) -> argparse.Namespace:
    """``send TILE TEXT`` with ``--allow-shell`` / ``--delivery D`` anywhere before ``--``."""
    allow_shell, delivery, tile = False, None, None
    text: list[tuple[int, Word]] = []
    ended = False
    i = 1 + next(i for i, w in enumerate(words) if w.value == "send")
    leading = words[: i - 1]
    if leading:  # e.g. --allow-shell before "send": options of %madohub itself
        raise MadohubValueError(
            f"%madohub: {leading[0].value} goes after the command: %madohub send TILE … "
            f"{leading[0].value}"
        )
    while i < len(words):
        w = words[i]
        i += 1
        option = not ended and w.option_like and w.value.startswith("--")
        if option and w.value == "--":
            ended = True
        elif option and w.value == "--help":
            subparsers(parser())["send"].print_help()
            raise HelpShown()
        elif option and w.value == "--allow-shell":
            allow_shell = True
        elif option and w.value.partition("=")[0] == "--delivery":
            name, eq, value = w.value.partition("=")
            if not eq:
                if i >= len(words):
                    raise MadohubValueError(
                        "%madohub send: --delivery needs a value: typed or paste"
                    )
                value, i = words[i].value, i + 1
            if value not in DELIVERY_MODES:
                raise MadohubValueError(
                    f"%madohub send: --delivery {value!r} is not one of {', '.join(DELIVERY_MODES)}"
                )
            delivery = value
        elif tile is None:
            if option or (w.option_like and w.value == "-h"):
                if w.value == "-h":
                    subparsers(parser())["send"].print_help()
                    raise HelpShown()
                raise MadohubValueError(
                    f"%madohub send: unknown option {w.value!r} (see %madohub send --help)"
                )
            tile = w.value
        else:
            text.append((i, w))
    if tile is None:
        raise MadohubValueError("send needs TILE: %madohub send TILE TEXT (or the cell)")
    return argparse.Namespace(
        command="send", tile=tile, text=[_raw_text(line, text)] if text else [],
        allow_shell=allow_shell, delivery=delivery,
    )  # fmt: skip


def _raw_text(line: str, words: list[tuple[int, Word]]) -> str:
    """The words as typed, spacing kept (one space where an option was taken out).

    One quoted word loses its quotes: ``send w "a text"`` types ``a text``.
    """
    if len(words) == 1 and words[0][1].quoted:
        return words[0][1].value
    out = [words[0][1].raw]
    for (k, prev), (j, word) in zip(words, words[1:], strict=False):
        out.append(line[prev.end : word.start] if j == k + 1 else " ")
        out.append(word.raw)
    return "".join(out).rstrip()
