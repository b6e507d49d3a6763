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
import inspect
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import MadohubValueError
from ..hub import Hub
from ..hub_settings import SETTINGS
from ..model import AGENT_KINDS
from ..pipeline.keys import key_names_help
from ..settings import (
    COOLDOWN_MS_RANGE,
    DELIVERY_MODES,
    DISPATCH_MODES,
    MAX_ROUNDS_RANGE,
    TEMPLATE_PLACEHOLDERS,
    TRANSFORMS,
    TRIGGERS,
)

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


def _duration(text: str) -> int:
    text = _unmarked(text)
    try:
        return parse_duration_ms(text)
    except MadohubValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    text = _unmarked(text)
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


def _max_rounds(text: str) -> int:
    text = _unmarked(text)
    low, high = MAX_ROUNDS_RANGE
    if not text.isdigit() or not low <= int(text) <= high:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from {low} to {high}, got {text!r}"
        )
    return int(text)


_TOKEN_COUNT_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmM]?)")
_TOKEN_UNITS = {"": 1, "k": 1_000, "m": 1_000_000}


def _max_tokens(text: str) -> int:
    """``200000``, ``200_000``, ``200k``, ``1.5M``: a whole number of tokens of 1 or more."""
    text = _unmarked(text)
    found = _TOKEN_COUNT_RE.fullmatch(text.strip().replace("_", ""))
    value = float(found[1]) * _TOKEN_UNITS[found[2].lower()] if found else 0.0
    if not found or value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(
            "expected a whole number of tokens of 1 or more, e.g. 200000, 200k or 1.5M, "
            f"got {text!r}"
        )
    return int(value)


def _max_cost(text: str) -> float:
    """``2.50`` or ``$2.50``: US dollars above 0."""
    text = _unmarked(text)
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected US dollars above 0, e.g. 2.50 or $2.50, got {text!r}"
        )
    return value


def _cooldown(text: str) -> int:
    value = _duration(text)
    low, high = COOLDOWN_MS_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"cooldown must be from {low / 1000:g}s to {high / 1000:g}s, got {text!r}"
        )
    return value


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = _unmarked(text).partition("=")
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


# The parser ---------------------------------------------------------------------

SUBCOMMANDS = (
    "tile", "connect", "gather", "tiles", "routes", "pause", "resume", "stop", "send", "keys",
    "watch", "dashboard", "inbox", "log", "plot", "replay", "template", "hooks", "workflow",
    "close",
)  # fmt: skip

_CONNECT = {n: p.default for n, p in inspect.signature(Hub.connect).parameters.items()}
"""``Hub.connect``'s defaults: the help shows them, never a copy that could drift."""
WORKFLOW_VERBS = ("save", "load", "run")
PLACEHOLDERS = " ".join("{" + p + "}" for p in TEMPLATE_PLACEHOLDERS)


def _default(value: object) -> str:
    return f"(default: {value})"


def _route_options(p: argparse.ArgumentParser) -> None:
    """The options of a route, for ``connect`` and ``gather`` alike."""
    p.add_argument("--trigger", choices=TRIGGERS, help=_default(_CONNECT["trigger"]))
    p.add_argument(
        "--pattern", metavar="RE", help="regex of the on-keyword trigger (default: none)"
    )
    p.add_argument("--transform", choices=TRANSFORMS, help=_default(_CONNECT["transform"]))
    p.add_argument(
        "--template",
        metavar="TEXT|@NAME",
        help=f"prompt template; placeholders {PLACEHOLDERS}; @NAME: a %%%%madohub template; "
        "\\n is a line break; a cell body also works (default: the transform's own)",
    )
    low, high = MAX_ROUNDS_RANGE
    p.add_argument(
        "--max-rounds", type=_max_rounds, metavar="N",
        help=f"{low} to {high} {_default(_CONNECT['max_rounds'])}",
    )  # fmt: skip
    p.add_argument(
        "--max-cost", type=_max_cost, metavar="USD",
        help="money budget: end the route exhausted once its rounds cost this much, "
        "e.g. 2.50 (default: none)",
    )  # fmt: skip
    p.add_argument(
        "--max-tokens", type=_max_tokens, metavar="N",
        help="token budget (input + output, the AI transform's included), e.g. 200k or 1.5M "
        "(default: none)",
    )  # fmt: skip
    p.add_argument(
        "--cooldown", type=_cooldown, metavar="DURATION",
        help=f"{COOLDOWN_MS_RANGE[0] // 1000}s to {COOLDOWN_MS_RANGE[1] // 1000}s, e.g. 3s or "
        f"1500ms {_default(format(_CONNECT['cooldown_ms'] / 1000, 'g') + 's')}",
    )  # fmt: skip
    p.add_argument(
        "--stop", metavar="WORD", help="stop the route when the source says it (default: none)"
    )
    p.add_argument("--dispatch", choices=DISPATCH_MODES, help=_default(_CONNECT["dispatch"]))
    p.add_argument(
        "--delivery", choices=DELIVERY_MODES, help="(default: MadoHub.delivery, itself typed)"
    )
    p.add_argument(
        "--allow-shell", action="store_true",
        help="allow typing into a shell tile: it runs! (default: off)",
    )  # fmt: skip
    p.add_argument(
        "--when", metavar="RE",
        help="route only the answers this regex matches, e.g. LGTM (default: every answer)",
    )  # fmt: skip
    p.add_argument(
        "--unless", metavar="RE", help="skip the answers this regex matches (default: none)"
    )
    p.add_argument(
        "--approve", action="store_true",
        help="each prompt waits in the inbox for a person to approve, edit or reject it "
        "(default: off)",
    )  # fmt: skip
    p.add_argument(
        "--approve-timeout", type=_duration, metavar="DURATION",
        help="with --approve: an unanswered prompt expires after this long, e.g. 10m or 90s, "
        "nothing typed (default: it waits)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``%madohub`` argument parser, one sub-parser per sub-command."""
    parser = _Parser(
        prog="%madohub",
        description="Route AI coding agents in tmux panes to each other.",
        epilog="Run `%madohub COMMAND --help` for one command's options.",
    )
    parser.add_argument(
        "--debug", action="store_true", help=f"show errors with their traceback (or {DEBUG_ENV}=1)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("tile", help="create a tile (new pane) or adopt a pane")
    p.add_argument("name", help="short name of the tile, e.g. writer")
    p.add_argument(
        "--agent",
        metavar="KIND",
        help=f"agent kind: {', '.join(AGENT_KINDS)} or a registered one (default: detected)",
    )
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
    p.add_argument(
        "--cmd", dest="command_line", metavar="COMMAND", help="command to run (default: a shell)"
    )
    p.add_argument("--cwd", help="working directory of the new pane (default: the kernel's)")
    p.add_argument("--pane", help="adopt this existing pane (%%3 or sess:win.pane)")
    p.add_argument(
        "--host", help="make or adopt the pane on this ssh host's tmux (see ssh_command)"
    )
    p.add_argument(
        "--worktree", nargs="?", const=True, default=None, metavar="BRANCH",
        help="run the new pane in a new git worktree of --cwd's repository, on a new branch "
        "(default branch: madohub/NAME); close keeps it only if it holds changes",
    )  # fmt: skip
    p.add_argument(
        "--hooks", action=argparse.BooleanOptionalAction, default=None,
        help="the agent's own end-of-turn hooks for a new pane: --hooks requires them, "
        "--no-hooks turns them off (default: on when the agent has them)",
    )  # fmt: skip
    p.add_argument(
        "--mcp", nargs="*", metavar="NAME", default=None,
        help="start the agent with the hub's MCP tools (list_agents, send, ask): --mcp "
        "reaches every agent tile, --mcp reviewer tester only those (default: off)",
    )  # fmt: skip
    p.add_argument(
        "--allow-shell", action="store_true",
        help="with --mcp NAME…: a shell among the names may be typed into (default: off)",
    )  # fmt: skip
    p.add_argument(
        "--mcp-max-rounds", type=_max_rounds, metavar="N", default=None,
        help=f"with --mcp: this tile's calls per target, {MAX_ROUNDS_RANGE[0]} to "
        f"{MAX_ROUNDS_RANGE[1]} (default: the hub's mcp_max_rounds)",
    )  # fmt: skip
    p.add_argument(
        "--mcp-cooldown", type=_cooldown, metavar="DURATION", default=None,
        help="with --mcp: the least time between two of its calls to one target, e.g. 3s "
        "(default: the hub's mcp_cooldown_ms)",
    )  # fmt: skip
    p.add_argument(
        "--env", type=_env_pair, action="append", default=[], metavar="KEY=VALUE",
        help="environment of the new pane; repeat for more (default: none)",
    )  # fmt: skip
    p.add_argument(
        "--demo",
        metavar="PERSONA",
        help="run a built-in demo agent (echo, writer, reviewer, counter): no key, no network; "
        "its files go to a private temporary directory unless --env CLAUDE_CONFIG_DIR=… "
        "(CODEX_HOME=… for codex) names one",
    )

    p = sub.add_parser(
        "connect",
        help="route SOURCE's answers into TARGET",
        usage="%(prog)s SOURCE -> TARGET [options]",
    )
    p.add_argument("endpoints", nargs="+", metavar="SOURCE -> TARGET", help="two tile names")
    _route_options(p)

    p = sub.add_parser(
        "gather",
        help="fan in: route the answers of SOURCES, once each has a new one, into TARGET",
        usage="%(prog)s SOURCE SOURCE [SOURCE …] -> TARGET [options]",
    )
    p.add_argument(
        "endpoints", nargs="+", metavar="SOURCES -> TARGET",
        help="two or more source tiles, ->, the target tile",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=_duration, metavar="DURATION",
        help="fire this long after the first new answer with those in, e.g. 10m or 600s "
        "(default: wait for every source)",
    )  # fmt: skip
    _route_options(p)

    sub.add_parser("tiles", help="table of the tiles, with the tmux attach command of each")
    sub.add_parser("routes", help="table of the routes, with the last error of each")
    for verb in ("pause", "resume", "stop"):
        p = sub.add_parser(verb, help=f"{verb} a route, or all routes")
        p.add_argument(
            "route", metavar="ROUTE|all", help="route id (writer->reviewer#1) or number, or all"
        )

    p = sub.add_parser(
        "send",
        help="type TEXT into TILE by hand; returns a future of the round",
        usage="%(prog)s TILE [--allow-shell] [--delivery D] [--] TEXT (or the cell)",
        description="Options may stand anywhere; -- ends them (the rest is text).",
    )
    p.add_argument("tile", help="tile name")
    p.add_argument("text", nargs="*", help="the rest of the line (or the cell)")
    p.add_argument(
        "--allow-shell", action="store_true", help="allow typing into a shell tile (default: off)"
    )
    p.add_argument(
        "--delivery", choices=DELIVERY_MODES, help="(default: MadoHub.delivery, itself typed)"
    )

    p = sub.add_parser(
        "keys",
        help="press keys in TILE (answer a prompt, interrupt); returns a future of the round",
    )
    p.add_argument("tile", help="tile name")
    p.add_argument("keys", nargs="+", metavar="KEY", help=f"one of {key_names_help()}")

    p = sub.add_parser("watch", help="live view of a tile")
    p.add_argument("tile")

    sub.add_parser("dashboard", help="live view of all tiles, routes, rounds and the timeline")
    sub.add_parser(
        "inbox", help="live list of what waits for a person: permission prompts, approvals"
    )

    p = sub.add_parser("log", help="this hub's rounds as a DataFrame (df = %%madohub log)")
    p.add_argument("--tail", type=_positive_int, metavar="N", help="only the last N (default: all)")
    p.add_argument(
        "--all", action="store_true", help="every round of the log file, any session (default: off)"
    )

    p = sub.add_parser("plot", help="timeline of this hub's rounds (a matplotlib Figure)")
    p.add_argument(
        "--all", action="store_true", help="every round of the log file, any session (default: off)"
    )

    p = sub.add_parser("replay", help="run a logged round again with another transform")
    p.add_argument("round_id", metavar="ROUND_ID")
    p.add_argument("--transform", choices=TRANSFORMS, help="(default: the round's own)")
    p.add_argument(
        "--template", metavar="TEXT|@NAME", help=f"placeholders {PLACEHOLDERS} (default: none)"
    )
    p.add_argument("--deliver", action="store_true", help="also type the new prompt (default: off)")

    p = sub.add_parser(
        "template",
        help=f"%%%%madohub template NAME stores the cell as a template ({PLACEHOLDERS})",
    )
    p.add_argument("name")

    p = sub.add_parser(
        "hooks", help="print what to add to an agent's own settings to opt an adopted pane in"
    )
    p.add_argument("agent", metavar="AGENT", help="agent kind, e.g. claude or codex")

    p = sub.add_parser(
        "workflow", help="save the hub's tiles and routes to a TOML file, load one, or run one"
    )
    p.add_argument("verb", choices=WORKFLOW_VERBS, help="save, load (check and show) or run")
    p.add_argument("file", metavar="FILE", help="the workflow file (.toml)")

    sub.add_parser("close", help="close the kernel's hub (stops routes, kills its tiles)")
    return parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{command: its parser}``."""
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def full_help() -> str:
    """Every command with every option, its default and the template placeholders, then
    the hub's settings (``%config MadoHub.NAME = value``) with their defaults."""
    parts = [argparse.ArgumentParser.format_help(PARSER)]
    for name, sub in subparsers(PARSER).items():
        parts.append(f"\n--- {name} " + "-" * max(0, 60 - len(name)) + "\n" + sub.format_help())
    parts.append("\n--- settings (%config MadoHub.NAME = value) " + "-" * 17 + "\n")
    for s in SETTINGS:
        fixed = "" if s.live else ", fixed when the hub is made"
        parts.append(f"  {s.name} (default {s.default!r}{fixed})\n      {s.help}\n")
    return "".join(parts)


def option_strings(command: str) -> list[str]:
    """The options of one sub-command (for completion)."""
    sub = subparsers(PARSER).get(command)
    if sub is None:
        return []
    return [o for a in sub._actions for o in a.option_strings if o.startswith("--")]


PARSER = build_parser()


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
        args = PARSER.parse_args(words)
        for name, value in vars(args).items():
            setattr(args, name, _unmarked(value))
        if args.command is None:
            PARSER.print_help()
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
            subparsers(PARSER)["send"].print_help()
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
                    subparsers(PARSER)["send"].print_help()
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
