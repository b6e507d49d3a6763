"""What routes and rounds get from the hub: ``RouteServices``, each answer from its part.

:class:`HubServices` is the one object a hub's routes and rounds hold. It asks the
runtime's parts at each call (settings, recorder, tile registry, route registry,
deliverer, engine), so a part swapped later (a log reopened, a test's deliverer)
is the one used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import LogError
from .io.log import RoundRecord
from .io.watch import PaneStream
from .pipeline.deliver import Deliverer
from .pipeline.events import HubEvent
from .pipeline.inbox import Inbox
from .pipeline.tile import Tile
from .pipeline.transforms import AIClientConfig

if TYPE_CHECKING:
    from .runtime import Runtime


class HubServices:
    """``RouteServices`` (and so ``RoundServices``) of one hub, by delegation to its parts."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self.session_id = runtime.session_id

    @property
    def deliverer(self) -> Deliverer:
        return self._rt.deliverer

    @property
    def inbox(self) -> Inbox:
        return self._rt.inbox

    @property
    def idle_delay_ms(self) -> int:
        return int(self._rt.settings["idle_delay_ms"])

    @property
    def target_wait_s(self) -> float:
        return float(self._rt.settings["target_wait_s"])

    @property
    def prices(self) -> Mapping[str, Mapping[str, float]]:
        return self._rt.settings["prices"]

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        settings, key = self._rt.settings, self._rt.api_key
        if key:
            self._rt.log.register_secret(key)
        kwargs: dict[str, Any] = {
            "api_key": key,
            "base_url": settings["base_url"],
            "timeout_s": settings["ai_timeout_s"],
            "max_retries": settings["ai_max_retries"],
        }
        if model or settings["model"]:
            kwargs["model"] = model or settings["model"]
        return AIClientConfig(**kwargs)

    async def watch(self, tile: Tile) -> PaneStream:
        return await self._rt.tiles.watch(tile)

    def emit(self, event: HubEvent) -> None:
        self._rt.emit(event)

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        self._rt.engine.call_soon(fn, *args)

    def ensure_writable(self) -> None:
        self._rt.recorder.ensure_writable()

    def log_unwritable(self, exc: LogError) -> None:
        self._rt.routes.pause_all(exc)

    async def record(self, rec: RoundRecord) -> RoundRecord:
        return await self._rt.recorder.record(rec)

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        return self._rt.recorder.record_now(rec)
