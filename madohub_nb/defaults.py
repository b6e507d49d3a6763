"""Defaults and allowed ranges, named once.

Every timing, limit and choice the toolkit documents lives here so the rest of
the code (and the error messages) quote one source of truth.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Final

from .errors import MadohubValueError

# Triggers -------------------------------------------------------------------
IDLE_DELAY_MS: Final = 8000
"""Silence after the completion marker before an on-idle route fires."""

IDLE_DELAY_MS_RANGE: Final = (0, 600_000)
"""Tests and impatient users may shorten it; ten minutes at most."""

TRIGGERS: Final = ("on-idle", "on-complete", "on-keyword", "always")

# Transforms -----------------------------------------------------------------
TRANSFORMS: Final = ("ai-routing", "prompt-wrap", "full-output", "raw", "summary")
FULL_OUTPUT_LINES: Final = 30
RAW_LINES: Final = 10
DEFAULT_MODEL: Final = "claude-sonnet-5-5"

# Dispatch / delivery --------------------------------------------------------
DISPATCH_MODES: Final = ("madoagent", "legacy", "shadow")
DELIVERY_MODES: Final = ("typed", "paste")
ROW_DELIVERY_MODES: Final = (*DELIVERY_MODES, "channel")
"""A round row's ``delivery_mode``: as asked, or ``channel`` (the target's native channel
took the prompt; never asked for: a tile with a channel uses it)."""
TARGET_WAIT_S: Final = 600.0
"""How long a round waits for its target to become ready (idle, quiet) before it ends as an
``error`` row saying what it waited for; nothing is typed then."""
TARGET_WAIT_S_RANGE: Final = (1, 86_400)
ENDED_ROUTES_KEPT: Final = 256
"""Ended (stopped or exhausted) routes ``hub.routes`` keeps, the newest; older ones leave
the list (and memory) as new routes are made. Their rounds stay in the log."""
TYPING_DELAY_MS: Final = (50, 80)
"""Random pause between typed lines, like a person typing."""

MAX_ROUTED_CHARS: Final = 200_000
"""Routed content longer than this is cut, with a visible marker."""

AGENT_FILE_MAX_BYTES: Final = 1 << 20
"""Largest agent status file (``sessions/<pid>.json``) read whole; bigger ones are ignored."""

# Loop protection ------------------------------------------------------------
MAX_ROUNDS_DEFAULT: Final = 5
MAX_ROUNDS_RANGE: Final = (1, 20)
COOLDOWN_MS_DEFAULT: Final = 3000
COOLDOWN_MS_RANGE: Final = (1000, 30000)

READY_QUIET_MS: Final = 1000
"""A ``terminal`` tile (any program) is ready after this long without output."""
READY_QUIET_MS_RANGE: Final = (0, 600_000)


def check_choice(what: str, value: str, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise a teaching error."""
    if value not in allowed:
        raise MadohubValueError(f"unknown {what} {value!r}; allowed: {', '.join(allowed)}")
    return value


def check_range(what: str, value: int, bounds: tuple[int, int], unit: str = "") -> int:
    """Return ``value`` if ``bounds[0] <= value <= bounds[1]``, else raise."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int):
        raise MadohubValueError(
            f"{what} must be a whole number from {low} to {high}{unit}, got {value!r}"
        )
    if not low <= value <= high:
        raise MadohubValueError(f"{what} must be from {low} to {high}{unit}, got {value}")
    return value


def check_regex(what: str, pattern: object) -> re.Pattern[str]:
    """Compile a user regex, or raise a one-line error naming the parameter."""
    if not isinstance(pattern, str) or not pattern:
        raise MadohubValueError(
            f"{what} must be a non-empty regular expression string, got {pattern!r}"
        )
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise MadohubValueError(
            f"{what} {pattern!r} is not a valid regular expression: {exc}; fix it or leave it out"
        ) from exc


# Round log ------------------------------------------------------------------
CUT_MARKER: Final = "[… madohub_nb: cut {cut} characters …]"
"""Where text was cut (routed content, logged fields), so a reader sees it."""

MAX_LOGGED_CHARS: Final = 1_000_000
"""Longest text one round-log field keeps; longer text is cut with a visible marker."""

LOG_BUSY_TIMEOUT_MS: Final = 5000
"""How long a round log write waits for another writer's lock before failing."""

# AI transforms (ai-routing, summary) -----------------------------------------
TEMPLATE_PLACEHOLDERS: Final = ("output", "round", "maxRounds", "source", "target", "answers")
"""The names a template fills, written ``{output}``; all other brace text is kept verbatim.
``{answers}``: each answer under its source's name (a gather's; a route's one answer)."""
AI_TIMEOUT_S: Final = 60.0
"""Per-attempt timeout of one Anthropic API request."""
AI_MAX_RETRIES: Final = 2
AI_MAX_RETRIES_RANGE: Final = (0, 10)
AI_MAX_TOKENS: Final = 2048
"""Upper bound on the length of an AI-written prompt or summary."""

# Prices (cost_usd of a round) ---------------------------------------------------
PRICE_KEYS: Final = ("input", "output", "cache_read", "cache_write")
"""A price row: US dollars per million tokens of uncached input, output, cache reads, cache writes."""

PRICES_TAKEN: Final = "2026-12-01"
_OPUS_4_5: Final = {"input": 5.0, "output": 25.0, "cache_read": 0.5, "cache_write": 6.25}
_OPUS_4: Final = {"input": 15.0, "output": 75.0, "cache_read": 1.5, "cache_write": 18.75}
_SONNET_4: Final = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
_GPT_5: Final = {"input": 1.25, "output": 10.0, "cache_read": 0.125, "cache_write": 0.0}
PRICES_USD_PER_MTOK: Final[dict[str, dict[str, float]]] = {
    # Anthropic: standard tier, 5-minute cache writes, the lowest prompt-length band.
    "claude-fable-5-1": {"input": 10.0, "output": 50.0, "cache_read": 0.25, "cache_write": 12.5},
    "claude-opus-5-5": {"input": 4.0, "output": 20.0, "cache_read": 0.2, "cache_write": 5.0},
    "claude-opus-5": _OPUS_4_5,
    "claude-opus-4-8": _OPUS_4_5,
    "claude-opus-4-7": _OPUS_4_5,
    "claude-opus-4-6": _OPUS_4_5,
    "claude-opus-4-5": _OPUS_4_5,
    "claude-opus-4-1": _OPUS_4,
    "claude-opus-4": _OPUS_4,
    "claude-opus-4-0": _OPUS_4,
    "claude-sonnet-5-5": {"input": 2.0, "output": 10.0, "cache_read": 0.1, "cache_write": 2.5},
    "claude-sonnet-5": {"input": 2.0, "output": 10.0, "cache_read": 0.2, "cache_write": 2.5},
    "claude-sonnet-4-6": _SONNET_4,
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4": _SONNET_4,
    "claude-sonnet-4-0": _SONNET_4,
    "claude-3-7-sonnet": _SONNET_4,
    "claude-haiku-5-5": {"input": 0.1, "output": 0.5, "cache_read": 0.01, "cache_write": 0.125},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25},
    "claude-3-5-haiku": {"input": 0.8, "output": 4.0, "cache_read": 0.08, "cache_write": 1.0},
    # OpenAI (Codex): cached input is the cache read; there is no cache-write charge.
    "gpt-5": _GPT_5,
    "gpt-5-codex": _GPT_5,
    "gpt-5.1": _GPT_5,
    "gpt-5.1-codex": _GPT_5,
    "gpt-5-mini": {"input": 0.25, "output": 2.0, "cache_read": 0.025, "cache_write": 0.0},
}
"""Default price table (``MadoHub.prices``): model -> USD per million tokens.

Written on ``PRICES_TAKEN`` (2026-12-01) from stored copies of Anthropic's
pricing and model pages (Sonnet 5.5's cache read as cut on 2026-10-07; Haiku
5.5 for prompts up to 100k tokens) and OpenAI's 2025 list for the gpt-5
family; not checked live. Prices change and differ by contract, batch, long
prompts and 1-hour cache writes: check them against your provider and set
your own with ``%config MadoHub.prices = {...}`` or ``Hub(prices=...)``. A
model missing here (stand-ins, fakes, newer models) gets cost NaN, never a
guess. Dated names match their row (``claude-sonnet-4-5-20250929`` →
``claude-sonnet-4-5``).
"""

_MODEL_SUFFIXES: Final = re.compile(
    r"(?:\[[^\]]*\]|-v\d+(?::\d+)?|[-@]\d{8}|-latest)$", re.IGNORECASE
)
"""Suffixes that name a release of a model, not another model: ``[1m]``, ``-v1:0``, ``-20250929``, ``@20250929``, ``-latest``."""


def check_prices(prices: object) -> dict[str, dict[str, float]]:
    """A validated copy of a price table; None gives the defaults."""
    if prices is None:
        return {model: dict(row) for model, row in PRICES_USD_PER_MTOK.items()}
    if not isinstance(prices, Mapping):
        raise MadohubValueError(
            f"prices must be a dict model -> {{{', '.join(PRICE_KEYS)}}} in USD per million tokens, "
            f"got {type(prices).__name__}"
        )
    table: dict[str, dict[str, float]] = {}
    for model, row in prices.items():
        if not isinstance(model, str) or not model.strip():
            raise MadohubValueError(f"prices: a model name must be a non-empty str, got {model!r}")
        if not isinstance(row, Mapping) or set(row) != set(PRICE_KEYS):
            keys = sorted(row) if isinstance(row, Mapping) else type(row).__name__
            raise MadohubValueError(
                f"prices[{model!r}] must have exactly the keys {', '.join(PRICE_KEYS)} "
                f"(USD per million tokens; 0 where there is no charge), got {keys}"
            )
        for key in PRICE_KEYS:
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise MadohubValueError(
                    f"prices[{model!r}][{key!r}] must be a number >= 0 (USD per million tokens), "
                    f"got {value!r}"
                )
        table[model.strip()] = {key: float(row[key]) for key in PRICE_KEYS}
    return table


def price_for(
    model: str | None, prices: Mapping[str, Mapping[str, float]]
) -> Mapping[str, float] | None:
    """The price row of ``model``: its exact name, else without a provider prefix or release suffix.

    ``anthropic/claude-sonnet-4-5-20250929`` and ``claude-sonnet-4-5@20250929``
    find ``claude-sonnet-4-5``; an unlisted ``claude-opus-4-9`` does NOT fall back
    to ``claude-opus-4`` (another model). None when nothing matches.
    """
    if not isinstance(model, str) or not model.strip():
        return None
    lowered = {name.lower(): row for name, row in prices.items()}
    name = model.strip().lower()
    if name in lowered:
        return lowered[name]
    name = name.rsplit("/", 1)[-1]
    if name.startswith(("us.", "eu.", "apac.", "global.")):
        name = name.split(".", 1)[1]  # Bedrock's region prefix
    name = name.removeprefix("anthropic.")
    while True:
        if name in lowered:
            return lowered[name]
        shorter = _MODEL_SUFFIXES.sub("", name)
        if shorter == name:
            return None
        name = shorter


# tmux and ssh words the settings table checks (pure: the adapters in io/ use them too) ---
SOCKET_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.@+-]{1,100}\Z")


def check_socket_name(socket_name: str | None) -> str | None:
    """``socket_name`` if it is a plain name tmux keeps in its private socket folder.

    ``tmux -L NAME`` puts the socket at ``/tmp/tmux-<uid>/NAME``: a ``/`` or
    ``..`` would put it somewhere else, outside that protected folder.
    """
    if socket_name is None:
        return None
    if (
        not isinstance(socket_name, str)
        or not SOCKET_NAME_RE.fullmatch(socket_name)
        or socket_name in (".", "..")
    ):
        raise MadohubValueError(
            f"socket_name {socket_name!r} is not a plain name; use letters, digits and "
            "'_', '-', '.', '@', '+' (at most 100, no '/'), e.g. 'madohub', or None "
            "for the default tmux server"
        )
    return socket_name


def parse_ssh_command(value: object) -> list[str]:
    """The ``ssh_command`` setting split as a shell would (``"ssh -F /x/config"``)."""
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise MadohubValueError(f"ssh_command {value!r} cannot be split: {exc}") from None
    elif isinstance(value, (list, tuple)) and all(isinstance(w, str) for w in value):
        words = list(value)
    else:
        words = []
    if not words:
        raise MadohubValueError(
            f"ssh_command must be a command line such as 'ssh' or 'ssh -F ~/.ssh/config', "
            f"got {value!r}"
        )
    return words
