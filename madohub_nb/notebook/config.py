"""The ``MadoHub`` settings and the kernel's hub made from them.

``MadoHub`` is a traitlets ``Configurable`` with one trait per ``Hub(...)``
keyword, so ``%config MadoHub.idle_delay_ms = 2000`` and ``c.MadoHub.… = …``
in ``ipython_config.py`` both work. ``madohub_nb.get_hub()`` builds the kernel's
hub from ``hub_kwargs_from_config()`` on first use; later changes reach the
live hub where they can and say so where they cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from traitlets import Bool, Dict, Float, Int, TraitError, TraitType, Unicode, observe, validate
from traitlets.config import SingletonConfigurable

from ..errors import MadohubValueError
from ..hub_settings import BY_NAME, FIXED, LIVE, SETTINGS, Setting

HUB_SETTINGS: Final = tuple(s.name for s in SETTINGS)
"""The traits passed to ``Hub(...)`` as keywords, in its signature's order."""

FIXED_SETTINGS: Final = FIXED
"""Settings fixed when the hub is made: a change waits for the next hub."""

LIVE_SETTINGS: Final = LIVE
"""Settings a running hub takes over at once (assigned as ``hub.<name>``)."""

_TRAIT_TYPES: Final[dict[type, Any]] = {
    int: Int,
    float: Float,
    str: Unicode,
    bool: Bool,
    dict: Dict,
}


def _trait(s: Setting) -> TraitType[Any, Any]:
    """The ``MadoHub`` trait of one setting of the table."""
    trait: TraitType[Any, Any] = _TRAIT_TYPES[s.kind](
        default_value=s.default, allow_none=s.optional, help=s.help
    )
    return trait.tag(config=True)


class MadoHub(SingletonConfigurable):
    """Settings of the kernel's hub; one trait per ``Hub(...)`` keyword (from the table)."""

    locals().update({s.name: _trait(s) for s in SETTINGS})  # the class namespace: one trait each

    @validate(*HUB_SETTINGS)
    def _check_setting(self, proposal: dict[str, Any]) -> Any:
        """Every value is checked by the setting's own validator, as ``Hub(...)`` checks it."""
        name, value = proposal["trait"].name, proposal["value"]
        if value is None and BY_NAME[name].optional:
            return None
        try:
            BY_NAME[name].check(value)
        except MadohubValueError as exc:
            raise TraitError(f"MadoHub.{name}: {exc}") from None
        return value

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

    def hub_kwargs(self) -> dict[str, Any]:
        """The keywords ``Hub(...)`` is called with (every setting)."""
        return {name: getattr(self, name) for name in HUB_SETTINGS}

    @observe(*LIVE_SETTINGS, *FIXED_SETTINGS)
    def _changed(self, change: dict[str, Any]) -> None:
        for listener in list(_CHANGE_LISTENERS):
            listener(change["name"], change["old"], change["new"])


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
