"""The options of ``hub.tile``, ``hub.connect`` and ``hub.gather``, declared once.

One row per option (:class:`Option`): its name, default, type, validator, help, where it
applies (``tile``; ``connect`` / ``gather``), whether a workflow file keeps it, and how
``%madohub`` spells it (:class:`Flag`: ``--cooldown 3s``). Everything else is derived from
:data:`ROUTE` and :data:`TILE`, read when used (never copied at import):

- the keywords of ``Hub.connect`` / ``Hub.gather`` / ``Hub.tile`` (their ``__signature__``,
  the names they accept, positional order) and the keywords ``build_route`` reads;
- the option tables of a workflow file (:func:`options_named`: check, load, save);
- the options of ``%madohub tile / connect / gather`` (notebook/parsing.py);
- the option tables of the docs (docs/hooks/settings_table.py).

A new route option is one row in :data:`ROUTE` (and the code that acts on it in
``build_route``); see docs/development.md, "Add a route option: one row".
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, TypeVar

from ..agents.kinds import SHIPPED_KINDS
from ..agents.profiles import known_kinds
from ..defaults import (
    COOLDOWN_MS_DEFAULT,
    COOLDOWN_MS_RANGE,
    DELIVERY_MODES,
    DISPATCH_MODES,
    MAX_ROUNDS_DEFAULT,
    MAX_ROUNDS_RANGE,
    READY_QUIET_MS_RANGE,
    TEMPLATE_PLACEHOLDERS,
    TRANSFORMS,
    TRIGGERS,
    check_choice,
    check_range,
    check_regex,
)
from ..errors import MadohubValueError

Check = Callable[[str, Any], object]
"""``check(option name, value)``: raises ``MadohubValueError`` saying what is allowed."""

KINDS: Final = ("tile", "connect", "gather")
"""The hub calls that take options: ``hub.tile``, ``hub.connect``, ``hub.gather``."""


@dataclass(frozen=True)
class Flag:
    """How ``%madohub`` spells an option: ``--cooldown 3s`` for ``cooldown_ms=3000``."""

    spelling: str
    """The flag as typed, e.g. ``--cooldown``."""
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    """Reads the typed text (its units: ``3s`` → 3000); raises a teaching ``MadohubValueError``."""
    keyword: Callable[[Any], Any] | None = None
    """Turns the parsed value into the keyword's (milliseconds → seconds, ``--mcp`` alone → True)."""
    help: str | None = None
    """The magic's own words (argparse's ``%%`` escapes) where units or defaults read otherwise."""
    dest: str | None = None
    """The name in the parsed line (default: the spelling, ``--max-cost`` → ``max_cost``)."""
    nargs: str | None = None
    const: Any = None
    negatable: bool = False
    """``--hooks`` / ``--no-hooks``."""
    repeat: bool = False
    """Given once per value (``--env A=1 --env B=2``)."""

    @property
    def name(self) -> str:
        """Where the parsed value is found on the parsed line (``args.<name>``)."""
        return self.dest or self.spelling.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class Option:
    """One keyword of ``hub.tile`` / ``hub.connect`` / ``hub.gather``."""

    name: str
    types: tuple[type, ...]
    default: Any = None
    check: Check | None = None
    """Beyond the type: a range, a regex that must compile (choices: :attr:`choices`)."""
    help: str = ""
    applies: frozenset[str] = frozenset({"connect", "gather"})
    """The calls that take it (:data:`KINDS`)."""
    kept: bool = True
    """A workflow file keeps it (``pane=`` is not kept: a pane does not outlive its server)."""
    flag: Flag | None = None
    """Its ``%madohub`` spelling; None: the magic does not offer it."""
    choices: Callable[[], tuple[str, ...]] | None = None
    by_position: bool = True
    """May be given by position too (in table order, after the call's own arguments)."""
    annotation: str | None = None
    """The type shown in signatures (default: from ``types``, ``| None`` where the default is)."""

    def verify(self, value: Any) -> None:
        """Raise a teaching error unless ``value`` (its type already checked) is allowed."""
        if self.choices is not None:
            check_choice(self.name, value, self.choices())
        if self.check is not None:
            self.check(self.name, value)

    @property
    def shown_type(self) -> str:
        """The annotation of its keyword."""
        if self.annotation is not None:
            return self.annotation
        names = [t.__name__ for t in self.types if not (t is int and float in self.types)]
        shown = " | ".join(names)  # (an int is a float to a type checker)
        return f"{shown} | None" if self.default is None else shown


# validators -------------------------------------------------------------------------
def _range(bounds: tuple[int, int], unit: str) -> Check:
    return lambda what, value: check_range(what, value, bounds, unit)


def _positive(what: str, value: Any) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise MadohubValueError(f"{what} must be a positive number, got {value!r}")


def _regex(what: str, value: Any) -> None:
    check_regex(what, value)


def _env(what: str, value: Any) -> None:
    for name, text in value.items():
        if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise MadohubValueError(f"{what} must map variable names to strings ({name!r})")


def _nonempty(what: str, value: Any) -> None:
    if not value.strip():
        raise MadohubValueError(f"{what} must not be empty")


# the magic's readers of typed values (each raises a teaching MadohubValueError) ---------
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


def parse_max_rounds(text: str) -> int:
    """``7``: a whole number in ``MAX_ROUNDS_RANGE``."""
    low, high = MAX_ROUNDS_RANGE
    if not text.isdigit() or not low <= int(text) <= high:
        raise MadohubValueError(f"expected a whole number from {low} to {high}, got {text!r}")
    return int(text)


def parse_cooldown_ms(text: str) -> int:
    """``3s``, ``1500ms``: a duration in ``COOLDOWN_MS_RANGE``, in milliseconds."""
    value = parse_duration_ms(text)
    low, high = COOLDOWN_MS_RANGE
    if not low <= value <= high:
        raise MadohubValueError(
            f"cooldown must be from {low / 1000:g}s to {high / 1000:g}s, got {text!r}"
        )
    return value


_TOKEN_COUNT_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmM]?)")
_TOKEN_UNITS = {"": 1, "k": 1_000, "m": 1_000_000}


def parse_token_count(text: str) -> int:
    """``200000``, ``200_000``, ``200k``, ``1.5M``: a whole number of tokens of 1 or more."""
    found = _TOKEN_COUNT_RE.fullmatch(text.strip().replace("_", ""))
    value = float(found[1]) * _TOKEN_UNITS[found[2].lower()] if found else 0.0
    if not found or value < 1 or value != int(value):
        raise MadohubValueError(
            "expected a whole number of tokens of 1 or more, e.g. 200000, 200k or 1.5M, "
            f"got {text!r}"
        )
    return int(value)


def parse_usd(text: str) -> float:
    """``2.50`` or ``$2.50``: US dollars above 0."""
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise MadohubValueError(f"expected US dollars above 0, e.g. 2.50 or $2.50, got {text!r}")
    return value


def parse_env_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` → ``(KEY, VALUE)``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise MadohubValueError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _ms_to_s(value_ms: int) -> float:
    return value_ms / 1000


PLACEHOLDERS: Final = " ".join("{" + p + "}" for p in TEMPLATE_PLACEHOLDERS)
STR, INT, NUM, BOOL = (str,), (int,), (int, float), (bool,)
GATHER_ONLY: Final = frozenset({"gather"})
TILE_ONLY: Final = frozenset({"tile"})

# the tables ---------------------------------------------------------------------------
ROUTE: tuple[Option, ...] = (
    Option(
        "trigger", STR, "on-idle", choices=lambda: TRIGGERS,
        help="When a source's turn counts as finished: on-idle (quiet after its completion "
        "marker), on-complete, on-keyword (pattern=), always.",
        flag=Flag("--trigger"),
    ),
    Option(
        "transform", STR, "prompt-wrap", choices=lambda: TRANSFORMS,
        help="How the answer becomes the target's prompt.",
        flag=Flag("--transform"),
    ),
    Option(
        "template", STR,
        help=f"Prompt template (placeholders {PLACEHOLDERS}); None: the transform's own.",
        flag=Flag(
            "--template", "TEXT|@NAME",
            help=f"prompt template; placeholders {PLACEHOLDERS}; @NAME: a %%%%madohub template; "
            "\\n is a line break; a cell body also works (default: the transform's own)",
        ),
    ),
    Option(
        "timeout_s", NUM, None, _positive, applies=GATHER_ONLY,
        help="A gather fires this long (s) after the first new answer, with those in; "
        "None: it waits for every source.",
        flag=Flag(
            "--timeout", "DURATION", parse_duration_ms, _ms_to_s,
            help="fire this long after the first new answer with those in, e.g. 10m or 600s "
            "(default: wait for every source)",
        ),
    ),
    Option(
        "max_rounds", INT, MAX_ROUNDS_DEFAULT, _range(MAX_ROUNDS_RANGE, ""),
        help=f"Loop protection: rounds before the route ends exhausted ({MAX_ROUNDS_RANGE[0]} "
        f"to {MAX_ROUNDS_RANGE[1]}).",
        flag=Flag(
            "--max-rounds", "N", parse_max_rounds,
            help=f"{MAX_ROUNDS_RANGE[0]} to {MAX_ROUNDS_RANGE[1]} (default: {MAX_ROUNDS_DEFAULT})",
        ),
    ),
    Option(
        "cooldown_ms", INT, COOLDOWN_MS_DEFAULT, _range(COOLDOWN_MS_RANGE, " ms"),
        help=f"Loop protection: the least time (ms) between two rounds ({COOLDOWN_MS_RANGE[0]} "
        f"to {COOLDOWN_MS_RANGE[1]}).",
        flag=Flag(
            "--cooldown", "DURATION", parse_cooldown_ms,
            help=f"{COOLDOWN_MS_RANGE[0] // 1000}s to {COOLDOWN_MS_RANGE[1] // 1000}s, e.g. 3s "
            f"or 1500ms (default: {COOLDOWN_MS_DEFAULT / 1000:g}s)",
        ),
    ),
    Option(
        "stop_keyword", STR, None, _nonempty,
        help="The route stops once the source says this word.",
        flag=Flag(
            "--stop", "WORD", help="stop the route when the source says it (default: none)"
        ),
    ),
    Option(
        "dispatch", STR, "madoagent", choices=lambda: DISPATCH_MODES,
        help="madoagent (waits for a ready target, confirms), legacy (types at once), "
        "shadow (logs the prompt, types nothing).",
        flag=Flag("--dispatch"),
    ),
    Option(
        "pattern", STR, None, _regex,
        help="Regex of the on-keyword trigger.",
        flag=Flag("--pattern", "RE", help="regex of the on-keyword trigger (default: none)"),
    ),
    Option(
        "allow_shell", BOOL, False,
        help="Allow typing into a shell tile, where whatever is typed runs.",
        flag=Flag(
            "--allow-shell", help="allow typing into a shell tile: it runs! (default: off)"
        ),
    ),
    Option(
        "delivery", STR, None, choices=lambda: DELIVERY_MODES,
        help="typed or paste; None: the hub's delivery setting.",
        flag=Flag("--delivery", help="(default: MadoHub.delivery, itself typed)"),
    ),
    Option("model", STR, help="Model of an AI transform; None: the hub's model setting."),
    Option(
        "completion_pattern", STR, None, _regex,
        help="Output that ends a source's turn (besides its agent's own signals).",
    ),
    Option(
        "max_cost_usd", NUM, None, _positive,
        help="Money budget (US dollars): the route ends exhausted once its rounds cost this much.",
        flag=Flag(
            "--max-cost", "USD", parse_usd,
            help="money budget: end the route exhausted once its rounds cost this much, "
            "e.g. 2.50 (default: none)",
        ),
    ),
    Option(
        "max_tokens", INT, None, _positive,
        help="Token budget (input + output, the AI transform's included).",
        flag=Flag(
            "--max-tokens", "N", parse_token_count,
            help="token budget (input + output, the AI transform's included), e.g. 200k or 1.5M "
            "(default: none)",
        ),
    ),
    Option(
        "when", STR, None, _regex,
        help="Route only the answers this regex matches (checked before the transform).",
        flag=Flag(
            "--when", "RE",
            help="route only the answers this regex matches, e.g. LGTM (default: every answer)",
        ),
    ),
    Option(
        "unless", STR, None, _regex,
        help="Skip the answers this regex matches.",
        flag=Flag("--unless", "RE", help="skip the answers this regex matches (default: none)"),
    ),
    Option(
        "approve", BOOL, False,
        help="Each prompt waits in hub.inbox for a person to approve, edit or reject it.",
        flag=Flag(
            "--approve",
            help="each prompt waits in the inbox for a person to approve, edit or reject it "
            "(default: off)",
        ),
    ),
    Option(
        "approve_timeout_s", NUM, None, _positive,
        help="With approve: an unanswered prompt expires after this long (s), nothing typed.",
        flag=Flag(
            "--approve-timeout", "DURATION", parse_duration_ms, _ms_to_s,
            help="with --approve: an unanswered prompt expires after this long, e.g. 10m or "
            "90s, nothing typed (default: it waits)",
        ),
    ),
)  # fmt: skip
"""Every option of ``hub.connect`` and ``hub.gather``, in the order of their keywords."""

TILE: tuple[Option, ...] = (
    Option(
        "agent", STR, None, choices=known_kinds, applies=TILE_ONLY,
        help="Agent kind; None: detected from the command or the pane.",
        flag=Flag(
            "--agent", "KIND",
            help=f"agent kind: {', '.join(SHIPPED_KINDS)} or a registered one (default: detected)",
        ),
    ),
    Option(
        "command", STR, None, _nonempty, applies=TILE_ONLY,
        help="Command line of a new pane; None: a shell.",
        flag=Flag(
            "--cmd", "COMMAND", dest="command_line", help="command to run (default: a shell)"
        ),
    ),
    Option(
        "cwd", STR, applies=TILE_ONLY, annotation="str | os.PathLike[str] | None",
        help="Working directory of a new pane; None: the kernel's.",
        flag=Flag("--cwd", help="working directory of the new pane (default: the kernel's)"),
    ),
    Option(
        "env", (dict,), None, _env, applies=TILE_ONLY, annotation="Mapping[str, str] | None",
        help="Environment variables of a new pane.",
        flag=Flag(
            "--env", "KEY=VALUE", parse_env_pair, dict, repeat=True,
            help="environment of the new pane; repeat for more (default: none)",
        ),
    ),
    Option(
        "pane", (object,), None, applies=TILE_ONLY, kept=False, annotation="Any",
        help="Adopt this pane (%3, sess:win.pane, a libtmux.Pane) instead of starting one.",
        flag=Flag("--pane", help="adopt this existing pane (%%3 or sess:win.pane)"),
    ),
    Option(
        "ready_quiet_ms", INT, None, _range(READY_QUIET_MS_RANGE, " ms"), applies=TILE_ONLY,
        by_position=False,
        help="A terminal program is ready after this long (ms) without output.",
        flag=Flag(
            "--ready-quiet", "DURATION", parse_duration_ms,
            help="terminal program: ready after this long without output (default 1s)",
        ),
    ),
    Option(
        "ready_pattern", STR, None, _regex, applies=TILE_ONLY, by_position=False,
        help="A terminal program is ready when its last line matches this regex.",
        flag=Flag(
            "--ready-pattern", "RE", help="terminal program: its ready prompt line, e.g. '>>> $'"
        ),
    ),
    Option(
        "completion_pattern", STR, None, _regex, applies=TILE_ONLY, by_position=False,
        help="Output that ends a turn.",
        flag=Flag("--completion-pattern", "RE", help="output that says the turn is over"),
    ),
    Option(
        "host", STR, applies=TILE_ONLY, by_position=False,
        help="Make or adopt the pane on this ssh host's tmux.",
        flag=Flag("--host", help="make or adopt the pane on this ssh host's tmux (see ssh_command)"),
    ),
    Option(
        "hooks", BOOL, applies=TILE_ONLY, by_position=False,
        help="The agent's own end-of-turn hooks for a new pane (None: when it has them; "
        "True: required; False: off).",
        flag=Flag(
            "--hooks", negatable=True,
            help="the agent's own end-of-turn hooks for a new pane: --hooks requires them, "
            "--no-hooks turns them off (default: on when the agent has them)",
        ),
    ),
    Option(
        "channel", BOOL, applies=TILE_ONLY, by_position=False,
        help="Prompts go in through the agent's native channel, its TUI still live (None: the "
        "hub's channels setting, for kinds that have one; True: required; False: typed).",
        flag=Flag(
            "--channel", negatable=True,
            help="prompts through the agent's native channel: --channel requires one, "
            "--no-channel types them (default: the hub's channels setting)",
        ),
    ),
    Option(
        "worktree", (str, bool), applies=TILE_ONLY, by_position=False,
        help="Run the new pane in a new git worktree of cwd's repository, on a new branch "
        "(True: madohub/NAME; a string: that branch).",
        flag=Flag(
            "--worktree", "BRANCH", nargs="?", const=True,
            help="run the new pane in a new git worktree of --cwd's repository, on a new branch "
            "(default branch: madohub/NAME); close keeps it only if it holds changes",
        ),
    ),
    Option(
        "mcp", (bool, list), False, applies=TILE_ONLY, by_position=False,
        annotation="bool | list[str]",
        help="Start the agent with the hub's MCP tools (True: it may reach every agent tile; "
        "a list: those tiles).",
        flag=Flag(
            "--mcp", "NAME", keyword=lambda names: names or True, nargs="*",
            help="start the agent with the hub's MCP tools (list_agents, send, ask): --mcp "
            "reaches every agent tile, --mcp reviewer tester only those (default: off)",
        ),
    ),
    Option(
        "allow_shell", BOOL, False, applies=TILE_ONLY, by_position=False,
        help="With mcp=[names]: a shell among them may be typed into.",
        flag=Flag(
            "--allow-shell",
            help="with --mcp NAME…: a shell among the names may be typed into (default: off)",
        ),
    ),
    Option(
        "mcp_max_rounds", INT, None, _range(MAX_ROUNDS_RANGE, ""), applies=TILE_ONLY,
        by_position=False,
        help="This tile's MCP calls per target; None: the hub's mcp_max_rounds.",
        flag=Flag(
            "--mcp-max-rounds", "N", parse_max_rounds,
            help=f"with --mcp: this tile's calls per target, {MAX_ROUNDS_RANGE[0]} to "
            f"{MAX_ROUNDS_RANGE[1]} (default: the hub's mcp_max_rounds)",
        ),
    ),
    Option(
        "mcp_cooldown_ms", INT, None, _range(COOLDOWN_MS_RANGE, " ms"), applies=TILE_ONLY,
        by_position=False,
        help="The least time (ms) between two of its MCP calls to one target; None: the hub's "
        "mcp_cooldown_ms.",
        flag=Flag(
            "--mcp-cooldown", "DURATION", parse_cooldown_ms,
            help="with --mcp: the least time between two of its calls to one target, e.g. 3s "
            "(default: the hub's mcp_cooldown_ms)",
        ),
    ),
)  # fmt: skip
"""Every option of ``hub.tile`` after its name, in the order of its keywords."""


# derived ------------------------------------------------------------------------------
def options_of(kind: str) -> tuple[Option, ...]:
    """The options ``kind`` (``tile``, ``connect`` or ``gather``) takes, in keyword order."""
    if kind not in KINDS:
        raise MadohubValueError(f"unknown kind of options {kind!r}; kinds: {', '.join(KINDS)}")
    table = TILE if kind == "tile" else ROUTE
    return tuple(opt for opt in table if kind in opt.applies)


def given_options(
    kind: str, args: tuple[Any, ...], keywords: Mapping[str, Any], call: str | None = None
) -> dict[str, Any]:
    """The options a ``hub.<kind>(...)`` call was given, by name (positional ones named).

    An unknown name, or one given twice, is a ``TypeError`` as Python's own, naming the options.
    """
    call = call or f"{kind}()"
    table = options_of(kind)
    names = [opt.name for opt in table if opt.by_position]
    if len(args) > len(names):
        raise TypeError(
            f"{call} takes at most {len(names)} options by position ({', '.join(names)})"
        )
    given = dict(zip(names, args, strict=False))
    known = {opt.name for opt in table}
    for name, value in keywords.items():
        if name not in known:
            raise TypeError(
                f"{call} got an unexpected keyword argument {name!r}; its options: "
                f"{', '.join(opt.name for opt in table)}"
            )
        if name in given:
            raise TypeError(f"{call} got multiple values for argument {name!r}")
        given[name] = value
    return given


def with_defaults(kind: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of ``kind``: those ``given``, the others at their default.

    An unknown name is a teaching ``MadohubValueError``.
    """
    table = options_of(kind)
    known = {opt.name for opt in table}
    if unknown := sorted(set(given) - known):
        raise MadohubValueError(
            f"unknown {kind} option {unknown[0]!r}; options: {', '.join(sorted(known))}"
        )
    return {opt.name: given.get(opt.name, opt.default) for opt in table}


def signature(kind: str, leading: Iterable[inspect.Parameter]) -> inspect.Signature:
    """The signature ``hub.<kind>`` shows (``help()``, Jupyter's ``?``): ``leading``, then the
    table's options (those given by position first, the others keyword-only)."""
    params = list(leading)
    for opt in options_of(kind):
        how = (
            inspect.Parameter.POSITIONAL_OR_KEYWORD if opt.by_position
            else inspect.Parameter.KEYWORD_ONLY
        )  # fmt: skip
        params.append(
            inspect.Parameter(opt.name, how, default=opt.default, annotation=opt.shown_type)
        )
    return inspect.Signature(params)


P = ParamSpec("P")
R = TypeVar("R")


def table_signature(
    kind: str, *leading: tuple[str, str]
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Show ``hub.<kind>``'s options (``help()``, Jupyter's ``?``) from this table: ``self``,
    ``leading`` (name, annotation), then its rows (:func:`signature`)."""

    def wrap(method: Callable[P, R]) -> Callable[P, R]:
        first = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        first += [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=shown)
            for name, shown in leading
        ]
        method.__signature__ = signature(kind, first)  # type: ignore[attr-defined]
        return method

    return wrap


def options_markdown(kind: str) -> str:
    """The options of ``kind`` (``tile``, or ``route`` for connect and gather) as a Markdown
    table, for the docs: name, default, where it applies, its ``%madohub`` flag, help."""
    table = TILE if kind == "tile" else ROUTE
    if kind == "tile":
        rows = ["| option | default | workflow file | `%madohub tile` | what it does |",
                "|---|---|---|---|---|"]  # fmt: skip
    else:
        rows = ["| option | default | connect | gather | workflow file | `%madohub` | what it does |",
                "|---|---|---|---|---|---|---|"]  # fmt: skip
    for opt in table:
        flag = "–" if opt.flag is None else f"`{opt.flag.spelling} {opt.flag.metavar or ''}`"
        flag = flag.replace(" `", "`")
        kept = "yes" if opt.kept else "no"
        where = [] if kind == "tile" else [
            "yes" if k in opt.applies else "–" for k in ("connect", "gather")
        ]  # fmt: skip
        cells = [f"`{opt.name}`", f"`{opt.default!r}`", *where, kept, flag,
                 opt.help.replace("|", "\\|")]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
