"""The kernel's hub: made lazily from the ``MadoHub`` settings, one per process."""

from __future__ import annotations

import threading
from typing import Any

from ..hub import Hub
from ..shutdown import CloseSummary
from . import config


class HubRegistry:
    """The kernel's hub, made lazily from the ``MadoHub`` configuration."""

    def __init__(self) -> None:
        self._hub: Hub | None = None
        self._lock = threading.Lock()

    def get(self, **overrides: Any) -> Hub:
        with self._lock:
            if self._hub is None or self._hub.closed:
                self._hub = Hub(**{**config.hub_kwargs_from_config(), **overrides})
            return self._hub

    @property
    def current(self) -> Hub | None:
        """The kernel's hub if one is open (without making one)."""
        hub = self._hub
        return hub if hub is not None and not hub.closed else None

    def reset(self) -> CloseSummary | None:
        """Close the kernel's hub (if any); what its close kept and removed."""
        summary = None
        with self._lock:
            if self._hub is not None:
                summary = self._hub.close()
            self._hub = None
        return summary


registry = HubRegistry()


def _setting_changed(name: str, old: Any, new: Any) -> None:
    """``%config MadoHub.x = …`` reaches the live hub where it can, and says so where not."""
    hub = registry.current
    if hub is None:
        return
    if name in config.LIVE_SETTINGS:
        setattr(hub, name, new)
    elif name in config.FIXED_SETTINGS:
        current = getattr(hub, name, old)
        print(
            f"MadoHub.{name} = {new!r} applies to the next hub only; the running hub and its "
            f"tiles keep {current!r} (hub.close() then get_hub() to switch)."
        )


config.on_change(_setting_changed)


def get_hub() -> Hub:
    """The kernel's hub (made on first use from ``%config MadoHub.*``)."""
    return registry.get()
