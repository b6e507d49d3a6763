"""The hub's settings, declared once: name, default, validator, live or fixed, help.

Everything else is derived from :data:`SETTINGS`: the ``Hub(...)`` keywords and
their order, the ``hub.<setting>`` attributes (a live one validated on every
change exactly as the constructor validates it; a fixed one read-only), the
``MadoHub`` traits of ``%config``, and the settings page of the docs.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .defaults import (
    AI_MAX_RETRIES,
    AI_MAX_RETRIES_RANGE,
    AI_TIMEOUT_S,
    COOLDOWN_MS_DEFAULT,
    COOLDOWN_MS_RANGE,
    DELIVERY_MODES,
    IDLE_DELAY_MS,
    IDLE_DELAY_MS_RANGE,
    MAX_ROUNDS_DEFAULT,
    MAX_ROUNDS_RANGE,
    PRICES_TAKEN,
    TARGET_WAIT_S,
    TARGET_WAIT_S_RANGE,
    check_choice,
    check_prices,
    check_range,
    check_socket_name,
    parse_ssh_command,
)
from .errors import MadohubValueError
from .secrets import MIN_SECRET_CHARS

AI_TIMEOUT_S_MAX: Final = 3600.0
"""An Anthropic request may wait up to an hour per attempt."""


@dataclass(frozen=True)
class Setting:
    """One hub setting: what it is called, its default, how a value is checked, its help."""

    name: str
    default: Any
    check: Callable[[Any], Any]
    """Returns the value to keep (normalised) or raises a teaching ``MadohubValueError``."""
    live: bool
    """A running hub takes a change at once; a fixed one is read-only on the hub."""
    help: str
    kind: type
    """The Python type of a value (None is always allowed where the default is None)."""
    secret: bool = False
    """Never shown: reprs and help say only whether it is set."""

    @property
    def optional(self) -> bool:
        return self.default is None


# validators -------------------------------------------------------------------------
def _optional_text(name: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise MadohubValueError(f"{name} must be a non-empty string or None, got {value!r}")
        return value

    return check


def _check_idle_delay(value: Any) -> int:
    return check_range("idle_delay_ms", value, IDLE_DELAY_MS_RANGE, " ms")


def _check_log_path(value: Any) -> str | os.PathLike[str] | None:
    if value is None or (isinstance(value, (str, os.PathLike)) and str(value).strip()):
        return value
    raise MadohubValueError(f"log_path must be a file path (str or Path) or None, got {value!r}")


def _check_api_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise MadohubValueError(f"api_key must be a string or None, got {type(value).__name__}")
    if len(value.strip()) < MIN_SECRET_CHARS:
        raise MadohubValueError(
            f"api_key is too short to be an API key ({len(value.strip())} characters; an "
            f"Anthropic key is far longer, and anything under {MIN_SECRET_CHARS} could not be "
            "kept out of the log reliably): pass the whole key, or None to use ANTHROPIC_API_KEY"
        )
    return value


def _check_claude_home(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise MadohubValueError(
            f"claude_home must be a directory path (str or Path) or None, got {value!r}"
        )
    return os.path.expanduser(os.fspath(value))


def _check_delivery(value: Any) -> str:
    return check_choice("delivery", value, DELIVERY_MODES)


def _check_timeout(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= AI_TIMEOUT_S_MAX
    ):
        raise MadohubValueError(
            f"ai_timeout_s must be a number of seconds above 0 and at most "
            f"{AI_TIMEOUT_S_MAX:.0f}, got {value!r}"
        )
    return float(value)


def _check_target_wait(value: Any) -> float:
    low, high = TARGET_WAIT_S_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise MadohubValueError(
            f"target_wait_s must be a number of seconds from {low} to {high}, got {value!r}"
        )
    return float(value)


def _check_retries(value: Any) -> int:
    return check_range("ai_max_retries", value, AI_MAX_RETRIES_RANGE)


def _check_mcp_max_rounds(value: Any) -> int:
    return check_range("mcp_max_rounds", value, MAX_ROUNDS_RANGE)


def _check_mcp_cooldown(value: Any) -> int:
    return check_range("mcp_cooldown_ms", value, COOLDOWN_MS_RANGE)


def _check_prices(value: Any) -> dict[str, dict[str, float]]:
    return check_prices(value)


def _check_bool(name: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise MadohubValueError(f"{name} must be True or False, got {value!r}")
        return value

    return check


def _check_ssh_command(value: Any) -> str:
    parse_ssh_command(value)
    if not isinstance(value, str):
        raise MadohubValueError(f"ssh_command must be a command line string, got {value!r}")
    return value


# the table ----------------------------------------------------------------------------
SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "socket_name", None, check_socket_name, False,
        "tmux socket name (tmux -L NAME) of the tiles the hub makes; None: the default server.",
        str,
    ),
    Setting(
        "idle_delay_ms", IDLE_DELAY_MS, _check_idle_delay, True,
        f"Silence (ms) after an agent's completion marker before an on-idle route fires "
        f"({IDLE_DELAY_MS_RANGE[0]} to {IDLE_DELAY_MS_RANGE[1]}).",
        int,
    ),
    Setting(
        "log_path", None, _check_log_path, False,
        "SQLite file of the round log; None: the toolkit's default location.",
        str,
    ),
    Setting(
        "api_key", None, _check_api_key, True,
        "Anthropic API key for the AI transforms; None: ANTHROPIC_API_KEY. Never logged.",
        str, secret=True,
    ),
    Setting(
        "base_url", None, _optional_text("base_url"), True,
        "Anthropic API base URL; None: the client's default.",
        str,
    ),
    Setting(
        "model", None, _optional_text("model"), True,
        "Model of the AI transforms; None: the toolkit's default.",
        str,
    ),
    Setting(
        "claude_home", None, _check_claude_home, True,
        "Claude config directory used when an agent's own cannot be read; None: ~/.claude.",
        str,
    ),
    Setting(
        "delivery", "typed", _check_delivery, True,
        f"Default delivery of routes and sends: {' or '.join(DELIVERY_MODES)} "
        "(typed line by line, or a bracketed paste).",
        str,
    ),
    Setting(
        "target_wait_s", TARGET_WAIT_S, _check_target_wait, True,
        "How long (s) a round waits for its target to become ready before it ends as an "
        f"error row saying what it waited for ({TARGET_WAIT_S_RANGE[0]} to "
        f"{TARGET_WAIT_S_RANGE[1]}).",
        float,
    ),
    Setting(
        "ai_timeout_s", AI_TIMEOUT_S, _check_timeout, True,
        "Per-attempt timeout (seconds) of one Anthropic API request.",
        float,
    ),
    Setting(
        "ai_max_retries", AI_MAX_RETRIES, _check_retries, True,
        f"How often a failed Anthropic request is retried "
        f"({AI_MAX_RETRIES_RANGE[0]} to {AI_MAX_RETRIES_RANGE[1]}).",
        int,
    ),
    Setting(
        "prices", None, _check_prices, True,
        "Price table for each round's cost_usd: {model: {input, output, cache_read, "
        "cache_write}} in USD per million tokens. None: madohub_nb.defaults."
        f"PRICES_USD_PER_MTOK (taken {PRICES_TAKEN}; check them). A model missing from the "
        "table gets cost NaN.",
        dict,
    ),
    Setting(
        "channels", True, _check_bool("channels"), True,
        "Tiles the hub starts of an agent with a native channel (Qwen Code...) take prompts "
        "through it (its TUI stays live in the pane); False: typed. A tile's channel= wins.",
        bool,
    ),
    Setting(
        "keep_panes", False, _check_bool("keep_panes"), True,
        "Leave the panes the hub made running when the interpreter exits (close() still "
        "ends them). Adopted panes are never ended.",
        bool,
    ),
    Setting(
        "ssh_command", "ssh", _check_ssh_command, True,
        "How remote hosts are reached: the ssh command line, split as a shell would, "
        "e.g. 'ssh -F ~/.ssh/config.work'.",
        str,
    ),
    Setting(
        "remote_socket_name", None, check_socket_name, False,
        "tmux socket name (tmux -L NAME) on remote hosts; None: their default server.",
        str,
    ),
    Setting(
        "mcp_max_rounds", MAX_ROUNDS_DEFAULT, _check_mcp_max_rounds, True,
        "Loop protection of the MCP tools: how many send/ask calls one agent may make to "
        f"another ({MAX_ROUNDS_RANGE[0]} to {MAX_ROUNDS_RANGE[1]}); hub.mcp.reset() starts "
        "a new conversation.",
        int,
    ),
    Setting(
        "mcp_cooldown_ms", COOLDOWN_MS_DEFAULT, _check_mcp_cooldown, True,
        "Loop protection of the MCP tools: the least time (ms) between two calls of one "
        f"pair; a call sooner waits ({COOLDOWN_MS_RANGE[0]} to {COOLDOWN_MS_RANGE[1]}).",
        int,
    ),
)  # fmt: skip
"""Every setting of ``Hub(...)``, in the order of its keywords."""

BY_NAME: Final = {s.name: s for s in SETTINGS}
POSITIONAL: Final = 7
"""``Hub(...)`` takes its first seven settings by position too (socket_name … claude_home)."""
LIVE: Final = tuple(s.name for s in SETTINGS if s.live)
FIXED: Final = tuple(s.name for s in SETTINGS if not s.live)


def setting(name: str) -> Setting:
    """The setting called ``name``, or a teaching error listing them."""
    found = BY_NAME.get(name)
    if found is None:
        raise MadohubValueError(f"unknown hub setting {name!r}; settings: {', '.join(BY_NAME)}")
    return found


class HubSettings:
    """The values of one hub's settings, each checked by its validator when set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > POSITIONAL:
            raise MadohubValueError(
                f"Hub() takes at most {POSITIONAL} settings by position "
                f"({', '.join(s.name for s in SETTINGS[:POSITIONAL])}); name the others"
            )
        given = dict(zip((s.name for s in SETTINGS), args, strict=False))
        for name, value in kwargs.items():
            if name in given:
                raise MadohubValueError(f"Hub() got {name!r} twice (by position and by name)")
            setting(name)
            given[name] = value
        self._values: dict[str, Any] = {}
        for s in SETTINGS:
            self._values[s.name] = s.check(given.get(s.name, s.default))

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def set(self, name: str, value: Any) -> Any:
        """Change a live setting (validated); a fixed one raises, saying it is fixed."""
        s = setting(name)
        if not s.live:
            raise MadohubValueError(
                f"{name} is fixed when the hub is made; make a new hub with {name}=... to change it"
            )
        self._values[name] = checked = s.check(value)
        return checked

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self._values.items())

    def shown(self, name: str) -> str:
        """``repr`` of a value, never a secret's."""
        value = self._values[name]
        if BY_NAME[name].secret and value is not None:
            return "<set>"
        return repr(value)


def hub_signature(extra: Mapping[str, Any] | None = None) -> inspect.Signature:
    """The signature ``Hub(...)`` shows (``help(Hub)``, Jupyter's ``Hub?``), from the table."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for i, s in enumerate(SETTINGS):
        kind = (
            inspect.Parameter.POSITIONAL_OR_KEYWORD if i < POSITIONAL
            else inspect.Parameter.KEYWORD_ONLY
        )  # fmt: skip
        annotation = f"{s.kind.__name__} | None" if s.optional else s.kind.__name__
        params.append(inspect.Parameter(s.name, kind, default=s.default, annotation=annotation))
    return inspect.Signature(params)


class SettingAttributes:
    """The attributes :func:`add_setting_attributes` gives a class (the Hub), one per setting,
    as the type checker sees them (at run time they are the properties it makes)."""

    if TYPE_CHECKING:  # (made by add_setting_attributes from SETTINGS)
        socket_name: str | None
        idle_delay_ms: int
        api_key: str | None
        base_url: str | None
        model: str | None
        claude_home: str | None
        delivery: str
        target_wait_s: float
        ai_timeout_s: float
        ai_max_retries: int
        prices: Mapping[str, Mapping[str, float]]
        channels: bool
        keep_panes: bool
        ssh_command: str
        remote_socket_name: str | None
        mcp_max_rounds: int
        mcp_cooldown_ms: int


def add_setting_attributes(cls: type, runtime_of: Callable[[Any], Any]) -> None:
    """Give ``cls`` (the Hub) an attribute per setting and the signature of the table.

    A live setting's attribute validates every change as the constructor does (through
    ``runtime.set_setting``); a fixed one is read-only. ``api_key`` reads the key in use
    (the setting, else ``ANTHROPIC_API_KEY``). Names ``cls`` defines itself are kept.
    """
    for s in SETTINGS:
        if s.name in vars(cls):
            continue

        def get(obj: Any, name: str = s.name) -> Any:
            runtime = runtime_of(obj)
            return runtime.api_key if name == "api_key" else runtime.settings[name]

        def put(obj: Any, value: Any, name: str = s.name) -> None:
            runtime_of(obj).set_setting(name, value)

        setattr(cls, s.name, property(get, put if s.live else None, doc=s.help))
    cls.__init__.__signature__ = hub_signature()  # type: ignore[misc]


def settings_markdown() -> str:
    """The settings as a Markdown table, for the docs."""
    rows = ["| setting | default | live | what it does |", "|---|---|---|---|"]
    for s in SETTINGS:
        live = "yes" if s.live else "fixed"
        rows.append(f"| `{s.name}` | `{s.default!r}` | {live} | {s.help} |")
    return "\n".join(rows)
