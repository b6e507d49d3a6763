"""Routes: source tile → target tile, with a trigger, a transform and loop protection.

A route is a small task on the engine loop: it listens to the source's pushed
output, asks its trigger whether to fire, applies loop protection, and hands
each firing to :func:`madohub_nb.pipeline.round.run_round`.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import html
import re
import time
from typing import TYPE_CHECKING

from ..agents.screen import strip_ansi
from ..engine import HubEvent
from ..io.transcripts import Extraction
from .extract import extract
from .protection import LoopGuard
from .round import RoundPlan, run_round
from .transforms import TransformSpec
from .triggers import IdleTrigger, KeywordTrigger, StreamTrigger

if TYPE_CHECKING:
    from ..hub import Hub
    from .tile import Tile


def _text_key(found: Extraction | None) -> str | None:
    """The identity of an answer's text, whichever way it was read (transcript or screen)."""
    if found is None:
        return None
    return hashlib.sha1(" ".join(found.text.split()).encode("utf-8", "replace")).hexdigest()


def _now_ms() -> float:
    return time.monotonic() * 1000


def _pane_gone(tile: Tile) -> bool:
    info = tile.pane_info()
    return info is None or info.dead


class Route:
    """A live connection between two tiles. Made by :meth:`Hub.connect`."""

    def __init__(
        self,
        hub: Hub,
        route_id: str,
        source: Tile,
        target: Tile,
        *,
        trigger: str,
        pattern: str | None,
        spec: TransformSpec,
        guard: LoopGuard,
        dispatch: str,
        delivery: str,
        allow_shell: bool,
    ) -> None:
        self.id = route_id
        self._hub = hub
        self.source_tile = source
        self.target_tile = target
        self.trigger = trigger
        self.pattern = pattern
        self.spec = spec
        self.guard = guard
        self.dispatch = dispatch
        self.delivery = delivery
        self.allow_shell = allow_shell
        self.state = "active"
        self.last_status: str | None = None
        self.last_round_id: str | None = None
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set once the route listens to its source (a turn finishing later will fire it)."""

    # the public face ------------------------------------------------------
    @property
    def source(self) -> str:
        return self.source_tile.name

    @property
    def target(self) -> str:
        return self.target_tile.name

    @property
    def rounds(self) -> int:
        """Rounds fired so far."""
        return self.guard.rounds

    @property
    def max_rounds(self) -> int:
        return self.guard.max_rounds

    @property
    def transform(self) -> str:
        return self.spec.name

    def pause(self) -> None:
        """Stop firing until :meth:`resume`; turns that finish meanwhile are skipped."""
        if self.state == "active":
            self._set_state("paused")

    def resume(self) -> None:
        if self.state == "paused":
            self._set_state("active")

    def stop(self) -> None:
        """End the route for good (a round already typing finishes first)."""
        if self.state in ("active", "paused"):
            self._set_state("stopped")
        self._hub.engine.call_soon(self._cancel_if_idle)

    def _cancel_if_idle(self) -> None:
        if self._task is not None and not self._in_round:
            self._task.cancel()

    def _set_state(self, state: str) -> None:
        self.state = state
        self._hub._emit(HubEvent("route_state", self.id, state, self))

    # the task -------------------------------------------------------------
    _in_round = False
    completion_pattern: re.Pattern[str] | None = None
    """Output that ends the source's turn (on-idle/on-complete); else the tile's, else its state."""

    def start(self) -> None:
        """Start listening (engine loop only)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"route {self.id}")

    async def _run(self) -> None:
        hub = self._hub
        source = self.source_tile
        stream = await hub.watcher.watch(source.pane_id, source.session, source.pane_pid)
        listener = stream.listen()
        legacy = self.dispatch == "legacy"
        idle: IdleTrigger | None = None
        keyword: KeywordTrigger | None = None
        streamer: StreamTrigger | None = None
        if self.trigger in ("on-idle", "on-complete"):
            idle = IdleTrigger(
                hub.idle_delay_ms, self.completion_pattern or source.completion_pattern
            )
            first = await asyncio.to_thread(extract, source, legacy)
            idle.baseline(first.message_id if first else None, _text_key(first))
        elif self.trigger == "on-keyword":
            keyword = KeywordTrigger(self.pattern or "")
        else:
            streamer = StreamTrigger()
        # Output arrives in arbitrary chunks: keep a UTF-8 character split across two whole.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.ready.set()
        try:
            while self.state in ("active", "paused", "exhausted"):
                timeout_s: float | None = None
                if idle is not None:
                    idle.idle_delay_ms = hub.idle_delay_ms
                    due = idle.next_check_ms()
                    if due is not None:
                        timeout_s = max(0.0, (due - _now_ms()) / 1000)
                got = await listener.wait(timeout_s)
                data = listener.take() if got else b""
                if stream.pane_exited and not data and await asyncio.to_thread(_pane_gone, source):
                    # Pushed by the pane process's pidfd (watchers.py): no polling needed.
                    self.last_error = f"source {source.name!r} exited (its pane is gone)"
                    self._set_state("stopped")
                    return
                if stream.ended and not data:
                    if await source.astate() == "exited":
                        self.last_error = f"source {source.name!r} exited"
                        self._set_state("stopped")
                        return
                    stream = await hub.watcher.watch(
                        source.pane_id, source.session, source.pane_pid
                    )
                    listener.close()
                    listener = stream.listen()
                    continue
                now = _now_ms()
                if idle is not None:
                    if data:
                        idle.output(now, strip_ansi(decoder.decode(data)))
                    due = idle.next_check_ms()
                    if due is None or now < due:
                        continue
                    decision = idle.evaluate(now, await source.astate())
                    if decision.action != "fire":
                        continue
                    started = time.monotonic()
                    found = await asyncio.to_thread(extract, source, legacy)
                    unique = found is not None and found.method != "terminal"
                    key = found.message_id if found else None
                    if not idle.accept(key, unique=unique, text_key=_text_key(found)):
                        continue
                    await self._fire(found, (time.monotonic() - started) * 1000)
                elif data:
                    text = strip_ansi(decoder.decode(data))
                    if keyword is not None:
                        decision = keyword.output(now, text)
                        if decision.action != "fire":
                            continue
                        started = time.monotonic()
                        found = await asyncio.to_thread(extract, source, legacy)
                        # No answer yet (the match is mid-turn): route what matched.
                        found = found or Extraction(decision.text, "terminal", None)
                        await self._fire(found, (time.monotonic() - started) * 1000)
                    elif streamer is not None:
                        streamer.output(now, text)
                        left = self.guard.cooldown_left_ms(_now_ms())
                        if left > 0 and self.state == "active" and not self.guard.exhausted:
                            await asyncio.sleep(left / 1000)
                            streamer.output(_now_ms(), strip_ansi(decoder.decode(listener.take())))
                        chunk = streamer.take()
                        if chunk.strip():
                            await self._fire(Extraction(chunk, "terminal", None), 0.0)
        finally:
            listener.close()

    async def _fire(self, found: Extraction | None, extract_ms: float) -> None:
        """Apply loop protection and run one round."""
        if self.state == "paused":
            return
        if self.state == "exhausted":
            # Log the answer to the last delivered prompt, so the conversation's end is on record.
            await self._round(found, extract_ms, exhausted=True)
            self._stop_listening()
            return
        left = self.guard.cooldown_left_ms(_now_ms())
        if left > 0:
            await asyncio.sleep(left / 1000)
            if self.state != "active":
                return
        await self._round(found, extract_ms)

    async def _round(
        self, found: Extraction | None, extract_ms: float, exhausted: bool = False
    ) -> None:
        hub = self._hub
        screen_tail = None
        if self.spec.name in ("full-output", "raw"):
            screen_tail = (
                (await asyncio.to_thread(self.source_tile.history)).rstrip("\n").splitlines()
            )
        number = self.guard.rounds + (1 if exhausted else 0)
        if not exhausted:
            number = self.guard.fire(_now_ms())
        plan = RoundPlan(
            route_id=self.id,
            source=self.source,
            target=self.target_tile,
            round=number,
            max_rounds=self.guard.max_rounds,
            trigger=self.trigger,
            spec=self.spec,
            dispatch=self.dispatch,
            delivery=self.delivery,
            extraction=found,
            extract_ms=round(extract_ms, 3),
            screen_tail=screen_tail,
            stop_keyword=self.guard.stop_keyword,
            exhausted=exhausted,
        )
        self._in_round = True
        try:
            rec = await run_round(hub, plan)
        finally:
            self._in_round = False
        self.last_status, self.last_round_id, self.last_error = rec.status, rec.round_id, rec.error
        if rec.status == "stopped":
            self._set_state("stopped")
        elif not exhausted and self.guard.exhausted and self.state == "active":
            self._set_state("exhausted")
        else:
            hub._emit(HubEvent("route_state", self.id, self.state, self))

    def _stop_listening(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait_closed(self) -> None:
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # display ------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"<Route {self.id} {self.source}->{self.target} {self.state} "
            f"rounds={self.rounds}/{self.max_rounds} trigger={self.trigger} transform={self.spec.name} "
            f"dispatch={self.dispatch}>"
        )

    def _repr_html_(self) -> str:
        return (
            f"<div><b>{html.escape(self.id)}</b>: {html.escape(self.source)} → {html.escape(self.target)}"
            f" · <i>{self.state}</i> · rounds {self.rounds}/{self.max_rounds} · {self.trigger} · "
            f"{self.spec.name} · {self.dispatch} · last: {self.last_status or '–'}</div>"
        )
