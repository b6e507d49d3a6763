"""The ``MadoHub`` settings and the kernel's hub made from them.

``MadoHub`` is a traitlets ``Configurable`` with one trait per ``Hub(...)``
keyword, so ``%config MadoHub.idle_delay_ms = 2000`` and ``c.MadoHub.… = …``
in ``ipython_config.py`` both work. ``madohub_nb.get_hub()`` builds the kernel's
hub from ``hub_kwargs_from_config()`` on first use; later changes reach the
live hub where they can and say so where they cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from traitlets import Bool, Dict, Enum, Float, Int, TraitError, Unicode, observe, validate
from traitlets.config import SingletonConfigurable

from ..errors import MadohubValueError
from ..settings import (
    AI_MAX_RETRIES,
    AI_TIMEOUT_S,
    DELIVERY_MODES,
    IDLE_DELAY_MS,
    IDLE_DELAY_MS_RANGE,
    PRICES_TAKEN,
    check_prices,
)

if TYPE_CHECKING:
    from traitlets import TraitType

HUB_SETTINGS: Final = (
    "socket_name",
    "idle_delay_ms",
    "log_path",
    "api_key",
    "base_url",
    "model",
    "claude_home",
    "delivery",
    "ai_timeout_s",
    "ai_max_retries",
    "prices",
    "keep_panes",
    "ssh_command",
    "remote_socket_name",
)
"""The traits passed to ``Hub(...)`` as keywords, in its signature's order."""

FIXED_SETTINGS: Final = ("socket_name", "log_path", "remote_socket_name")
"""Settings fixed when the hub is made: a change waits for the next hub."""

LIVE_SETTINGS: Final = tuple(name for name in HUB_SETTINGS if name not in FIXED_SETTINGS)
"""Settings a running hub takes over at once (assigned as ``hub.<name>``)."""


class MadoHub(SingletonConfigurable):
    """Settings of the kernel's hub; one trait per ``Hub(...)`` keyword."""

    socket_name = Unicode(
        None,
        allow_none=True,
        help="tmux socket name (tmux -L NAME) for the tiles the hub creates; None: the default server.",
    ).tag(config=True)
    idle_delay_ms = Int(
        IDLE_DELAY_MS,
        help="Silence (ms) after an agent's completion marker before an on-idle route fires.",
    ).tag(config=True)
    log_path = Unicode(
        None,
        allow_none=True,
        help="SQLite file of the round log; None: the toolkit's default location.",
    ).tag(config=True)
    api_key = Unicode(
        None,
        allow_none=True,
        help="Anthropic API key for the AI transforms; None: ANTHROPIC_API_KEY from the environment.",
    ).tag(config=True)
    base_url = Unicode(
        None, allow_none=True, help="Anthropic API base URL; None: the client's default."
    ).tag(config=True)
    model = Unicode(
        None, allow_none=True, help="Model of the AI transforms; None: the toolkit's default."
    ).tag(config=True)
    claude_home = Unicode(
        None,
        allow_none=True,
        help="Claude config directory used when an agent's own cannot be read; None: ~/.claude.",
    ).tag(config=True)
    delivery = Enum(
        DELIVERY_MODES,
        default_value="typed",
        help="Default delivery of %madohub connect: typed line by line, or a bracketed paste.",
    ).tag(config=True)
    ai_timeout_s = Float(
        AI_TIMEOUT_S, help="Per-attempt timeout (seconds) of one Anthropic API request."
    ).tag(config=True)
    ai_max_retries = Int(
        AI_MAX_RETRIES, help="How often a failed Anthropic request is retried (0 to 10)."
    ).tag(config=True)

    prices = Dict(
        default_value=None,
        allow_none=True,
        help=(
            "Price table for each round's cost_usd: {model: {input, output, cache_read, "
            "cache_write}} in USD per million tokens. None: madohub_nb.settings."
            f"PRICES_USD_PER_MTOK (taken {PRICES_TAKEN}; check them). A model missing "
            "from the table gets cost NaN."
        ),
    ).tag(config=True)

    keep_panes = Bool(
        False,
        help="Leave the panes the hub created running when the kernel exits (default: end them). "
        "Adopted panes are never ended.",
    ).tag(config=True)

    ssh_command = Unicode(
        "ssh",
        help="How remote hosts (%madohub tile NAME --host HOST) are reached: the ssh command "
        "line, split as a shell would, e.g. 'ssh -F ~/.ssh/config.work'.",
    ).tag(config=True)
    remote_socket_name = Unicode(
        None,
        allow_none=True,
        help="tmux socket name (tmux -L NAME) on remote hosts; None: their default server.",
    ).tag(config=True)

    def __repr__(self) -> str:
        parts = [f"{name}={self._shown(name)}" for name in HUB_SETTINGS]
        return f"MadoHub({', '.join(parts)})"

    def _shown(self, name: str) -> str:
        value = getattr(self, name)
        if name == "api_key" and value is not None:
            return "<set>"
        if name == "prices" and value is not None:
            return f"<{len(value)} models>"
        return repr(value)

    @classmethod
    def class_get_trait_help(
        cls,
        trait: TraitType[Any, Any],
        inst: Any = None,
        helptext: str | None = None,
    ) -> str:
        """Trait help for ``%config MadoHub``, never printing the API key."""
        if trait.name == "api_key" and inst is not None:
            state = "<set>" if inst.api_key is not None else "None"
            text = super().class_get_trait_help(trait, None, helptext)
            return f"{text}\n    Current: {state}"
        return super().class_get_trait_help(trait, inst, helptext)

    agents = Dict(
        help="Agents the toolkit does not ship, by name: {name: {field: value}} with the fields "
        "of madohub_nb.register_agent (process_tokens, busy_markers, idle_markers, submit_keys…).",
    ).tag(config=True)

    @validate("agents")
    def _register_agents(self, proposal: dict[str, Any]) -> dict[str, Any]:
        from ..agents.registry import register_agents

        try:
            register_agents(proposal["value"], "MadoHub.agents")
        except MadohubValueError as exc:
            raise TraitError(str(exc)) from None
        return dict(proposal["value"])

    @validate("idle_delay_ms")
    def _check_idle_delay(self, proposal: dict[str, Any]) -> int:
        value = int(proposal["value"])
        low, high = IDLE_DELAY_MS_RANGE
        if not low <= value <= high:
            raise TraitError(f"MadoHub.idle_delay_ms must be from {low} to {high} ms, got {value}")
        return value

    def hub_kwargs(self) -> dict[str, Any]:
        """The keywords ``Hub(...)`` is called with (every setting)."""
        return {name: getattr(self, name) for name in HUB_SETTINGS}

    @observe(*LIVE_SETTINGS, *FIXED_SETTINGS)
    def _changed(self, change: dict[str, Any]) -> None:
        for listener in list(_CHANGE_LISTENERS):
            listener(change["name"], change["old"], change["new"])

    @validate("prices")
    def _check_prices(self, proposal: dict[str, Any]) -> dict[str, Any] | None:
        value = proposal["value"]
        if value is None:
            return None
        try:
            return check_prices(value)
        except MadohubValueError as exc:
            raise TraitError(f"MadoHub.prices: {exc}") from None


SettingListener = Callable[[str, Any, Any], None]
_CHANGE_LISTENERS: list[SettingListener] = []


def on_change(listener: SettingListener) -> None:
    """Call ``listener(name, old, new)`` whenever a ``MadoHub`` setting changes."""
    if listener not in _CHANGE_LISTENERS:
        _CHANGE_LISTENERS.append(listener)


def settings(shell: Any = None) -> MadoHub:
    """The one ``MadoHub`` of this process, configured from IPython when it runs.

    The first call inside IPython takes the shell's config (``ipython_config.py``,
    earlier ``%config`` lines) and registers the settings with the shell.
    """
    if shell is None:
        shell = _running_shell()
    if not MadoHub.initialized():
        if shell is not None:
            MadoHub.instance(parent=shell)
        else:
            MadoHub.instance()
    current = MadoHub.instance()
    if shell is not None:
        register(shell, current)
    return current


def register(shell: Any, current: MadoHub | None = None) -> None:
    """Make ``%config MadoHub…`` and ``shell.config`` reach the settings."""
    current = current if current is not None else settings(shell)
    configurables: list[Any] = shell.configurables
    if any(c is current for c in configurables):
        return
    if current.parent is not shell:
        current.update_config(shell.config)
    configurables.append(current)


def unregister(shell: Any) -> None:
    """Take the settings off the shell's configurables (the hub stays open)."""
    shell.configurables[:] = [c for c in shell.configurables if not isinstance(c, MadoHub)]


def hub_kwargs_from_config() -> dict[str, Any]:
    """The ``Hub(...)`` keywords from the ``MadoHub`` settings (IPython config when it runs)."""
    return settings().hub_kwargs()


def _running_shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None
    return get_ipython()
