"""Agents users describe: ``mh.register_agent``, ``MadoHub.agents`` and ``agents.toml``.

A description has the fields of the shipped profiles (``agents/profiles.py``),
regexes written as strings. It is checked whole before anything is
registered: an unknown field, a wrong type, a bad regex or a TOML syntax error
is a one-line ``MadohubValueError`` naming the place (``file:table.field`` or
the keyword), and nothing is half-registered. Once registered, a kind is
detected by its process names and accepted by ``agent=``.

``agents.toml``::

    [cline]
    process_tokens = ["cline"]
    busy_markers = ['esc to cancel']
    idle_markers = ['^> ']
    submit_keys = ["\\r"]
    extractor = "terminal"
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from .. import defaults
from ..errors import MadohubValueError
from .kinds import SHIPPED_KINDS as AGENT_KINDS
from .profiles import (
    EXTRACTORS,
    PROFILES,
    SCREEN_STATES,
    TERMINAL,
    AgentProfile,
    command_name,
    is_command_reader,
)

AGENTS_FILE: Final = "madohub_nb/agents.toml"
"""Under ``$XDG_CONFIG_HOME`` (default ``~/.config``)."""

KIND_RE: Final = re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z")

_REGEX_LISTS: Final = ("busy_markers", "idle_markers", "waiting_markers", "title_busy_markers")
_STRING_LISTS: Final = ("process_tokens", "idle_commands", "submit_keys", "command_submit_keys")
_INTS: Final = {
    "pre_submit_delay_ms": (0, 10_000),
    "between_submit_keys_ms": (0, 10_000),
    "marker_tail_lines": (1, 200),
    "ready_quiet_ms": defaults.READY_QUIET_MS_RANGE,
}
_BOOLS: Final = ("uses_bracketed_paste", "executes_input", "answer_after_input")
FIELDS: Final = (
    *_STRING_LISTS,
    *_REGEX_LISTS,
    *_INTS,
    *_BOOLS,
    "no_marker_state",
    "newline_key",
    "typed_tab",
    "extractor",
)
"""What a user-defined agent may say; every other profile field keeps the terminal default."""


def agents_file() -> Path:
    """``$XDG_CONFIG_HOME/madohub_nb/agents.toml`` (``~/.config`` when the variable is unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / AGENTS_FILE


def build_profile(kind: str, fields: Mapping[str, Any], where: str) -> AgentProfile:
    """A checked ``AgentProfile`` from a user description; errors name ``where.field``."""
    if not isinstance(kind, str) or not KIND_RE.fullmatch(kind):
        raise MadohubValueError(
            f"{where}: agent name {kind!r} is not allowed; use a lower-case letter, then "
            "letters, digits, '-' or '_'"
        )
    shipped = AGENT_KINDS
    if kind in shipped:
        raise MadohubValueError(
            f"{where}: {kind!r} is a shipped agent kind; pick another name ({', '.join(shipped)} are taken)"
        )
    if not isinstance(fields, Mapping):
        raise MadohubValueError(f"{where}: expected a table of fields, got {fields!r}")
    values: dict[str, Any] = {}
    for name, value in fields.items():
        at = f"{where}.{name}"
        if name not in FIELDS:
            raise MadohubValueError(f"{at}: unknown field; known: {', '.join(FIELDS)}")
        values[name] = _check_field(name, value, at)
    markers = any(values.get(name) for name in ("busy_markers", "idle_markers"))
    defaults: dict[str, Any] = {
        "kind": kind,
        # No markers: ready when quiet, like a terminal tile; markers: they decide.
        "no_marker_state": "unknown" if markers else "idle",
        "ready_quiet_ms": None if markers else TERMINAL.ready_quiet_ms,
        "executes_input": False,
        "answer_after_input": not markers,
        "marker_tail_lines": 12,
    }
    base = {**TERMINAL.__dict__, **defaults}
    if "process_tokens" in values:
        values["process_tokens"] = tuple(t.lower() for t in values["process_tokens"])
    return AgentProfile(**{**base, **values})


def _check_field(name: str, value: Any, at: str) -> Any:
    if name in _STRING_LISTS or name in _REGEX_LISTS:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise MadohubValueError(f"{at}: expected a list of strings, got {value!r}")
        if not all(isinstance(v, str) and v for v in value):
            raise MadohubValueError(f"{at}: expected non-empty strings, got {value!r}")
        if name in _REGEX_LISTS:
            return tuple(defaults.check_regex(at, v) for v in value)
        if name == "submit_keys" and not value:
            raise MadohubValueError(f"{at}: give at least one key, e.g. ['\\r'] (Enter)")
        if name == "process_tokens":
            _check_not_a_shell(value, at)
        return tuple(value)
    if name in _INTS:
        return defaults.check_range(at, value, _INTS[name], " ms" if name.endswith("_ms") else "")
    if name in _BOOLS:
        if not isinstance(value, bool):
            raise MadohubValueError(f"{at}: expected true or false, got {value!r}")
        return value
    if name == "no_marker_state":
        return defaults.check_choice(f"{at} value", value, SCREEN_STATES)
    if name == "extractor":
        return defaults.check_choice(f"{at} value", value, EXTRACTORS)
    if name == "newline_key" and value in (None, ""):
        return None
    if not isinstance(value, str) or not value:
        raise MadohubValueError(f"{at}: expected a non-empty string, got {value!r}")
    return value


def _check_not_a_shell(tokens: list[str] | tuple[str, ...], at: str) -> None:
    """Refuse a process token that names a shell or an interpreter: every bash or python
    prompt would then be taken for this agent."""
    for token in tokens:
        if is_command_reader(token):
            raise MadohubValueError(
                f"{at}: {token!r} names a shell or an interpreter ({command_name(token)}): "
                "every such process, a login shell or a REPL, would be taken for this agent; "
                "give the agent's own program or script name instead (for `node my-agent.js`, "
                "'my-agent'). To type into a shell, use a shell tile with allow_shell=True"
            )


def register_agents(
    agents: Mapping[str, Mapping[str, Any]], where: str, sep: str = "."
) -> list[str]:
    """Check every description, then register them all (or none); returns their kinds."""
    if not isinstance(agents, Mapping):
        raise MadohubValueError(f"{where}: expected a table of agents by name, got {agents!r}")
    built = [build_profile(kind, fields, f"{where}{sep}{kind}") for kind, fields in agents.items()]
    for profile in built:
        PROFILES[profile.kind] = profile
    return [p.kind for p in built]


def register_agent(name: str, **fields: Any) -> AgentProfile:
    """Describe an agent the toolkit does not ship; ``agent=name`` then works and it is detected.

    ``mh.register_agent("cline", process_tokens=["cline"], busy_markers=["esc to cancel"],
    idle_markers=[r"^> "], submit_keys=["\\r"])``. Fields: ``registry.FIELDS``.
    """
    profile = build_profile(name, fields, f"register_agent({name!r})")
    PROFILES[profile.kind] = profile
    return profile


def load_agents_file(path: str | os.PathLike[str] | None = None) -> list[str]:
    """Register the agents of ``agents.toml`` (a missing file is no error); returns their kinds."""
    file = Path(os.path.expanduser(os.fspath(path))) if path is not None else agents_file()
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise MadohubValueError(f"{file}: cannot be read ({exc.strerror})") from exc
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MadohubValueError(f"{file}: TOML syntax error: {exc}") from exc
    return register_agents(data, f"{file}:", sep="")


def unregister_agent(name: str) -> None:
    """Forget a user-defined agent (shipped kinds stay)."""
    if name not in AGENT_KINDS:
        PROFILES.pop(name, None)
