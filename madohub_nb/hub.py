"""The hub: one object that owns tiles, routes, the round log and the engine.

Every public call validates its arguments at once (a ``ValueError`` that
names the bad value and what is allowed) and then only schedules work on the
engine loop, so a notebook cell that wires a route returns immediately.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .agents.detect import detect_kind
from .agents.profiles import get_profile, known_kinds
from .agents.registry import load_agents_file
from .engine import Engine, EventBus, HubEvent, HubFuture
from .errors import LogError, MadohubError, MadohubValueError, TileError
from .io.log import RoundLog, RoundRecord
from .io.tmux import Tmux
from .io.transcripts import Extraction
from .io.watch import OutputWatcher
from .pipeline.deliver import Deliverer
from .pipeline.protection import LoopGuard
from .pipeline.round import RoundPlan, run_round
from .pipeline.route import Route
from .pipeline.tile import Tile, tile_options
from .pipeline.transforms import (
    AIClientConfig,
    make_transform_spec,
    require_ai_key,
    resolve_api_key,
)
from .pipeline.triggers import check_completion_pattern, check_trigger
from .settings import (
    AI_TRANSFORMS,
    COOLDOWN_MS_DEFAULT,
    DELIVERY_MODES,
    DISPATCH_MODES,
    IDLE_DELAY_MS,
    IDLE_DELAY_MS_RANGE,
    MAX_ROUNDS_DEFAULT,
    check_choice,
    check_range,
)

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")
EXIT_CHECK_S = 0.5
"""How long a new tile is watched for a command that exits at once."""


class Hub:
    """Tiles, routes, the round log and the asyncio engine of one kernel (or script)."""

    def __init__(
        self,
        socket_name: str | None = None,
        idle_delay_ms: int = IDLE_DELAY_MS,
        log_path: str | os.PathLike[str] | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        claude_home: str | os.PathLike[str] | None = None,
        *,
        delivery: str = "typed",
    ) -> None:
        self.idle_delay_ms = idle_delay_ms
        check_choice("delivery", delivery, DELIVERY_MODES)
        self.socket_name = socket_name
        self.base_url = base_url
        self.model = model
        load_agents_file()  # $XDG_CONFIG_HOME/madohub_nb/agents.toml, if there is one
        self.claude_home = os.path.expanduser(claude_home) if claude_home is not None else None
        self.delivery = delivery
        self._api_key = api_key
        self.session_id = uuid.uuid4().hex[:12]
        self.session_name = f"madohub-{self.session_id}"
        self.tmux = Tmux(socket_name)
        self.log = RoundLog(log_path, secrets=[api_key] if api_key else ())
        self.log_path = str(self.log.path)
        self.events = EventBus()
        self.engine = Engine()
        self.watcher = OutputWatcher(self.tmux, on_output=self._on_output)
        self.deliverer = Deliverer()
        self.tiles: dict[str, Tile] = {}
        self.routes: list[Route] = []
        self.unlogged: list[RoundRecord] = []
        """Rounds that could not be written (log full or read-only); kept so nothing is lost."""
        self._rounds_written = 0
        self._round_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._route_counter = 0
        self._lock = threading.RLock()
        self.closed = False

    # settings -------------------------------------------------------------
    @property
    def idle_delay_ms(self) -> int:
        return self._idle_delay_ms

    @idle_delay_ms.setter
    def idle_delay_ms(self, value: int) -> None:
        self._idle_delay_ms = check_range("idle_delay_ms", value, IDLE_DELAY_MS_RANGE, " ms")

    @property
    def api_key(self) -> str | None:
        """The Anthropic API key in use (this setting, else ANTHROPIC_API_KEY); never logged."""
        return resolve_api_key(self._api_key)

    @api_key.setter
    def api_key(self, value: str | None) -> None:
        self._api_key = value
        if value:
            self.log.register_secret(value)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.engine.loop

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        key = self.api_key
        if key:
            self.log.register_secret(key)
        kwargs: dict[str, Any] = {"api_key": key, "base_url": self.base_url}
        if model or self.model:
            kwargs["model"] = model or self.model
        return AIClientConfig(**kwargs)

    # tiles ------------------------------------------------------------------
    def tile(
        self,
        name: str,
        agent: str | None = None,
        command: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        pane: str | None = None,
        *,
        ready_quiet_ms: int | None = None,
        ready_pattern: str | None = None,
        completion_pattern: str | None = None,
    ) -> Tile:
        """Start ``command`` in a new pane, or adopt an existing ``pane`` (``%3`` or ``sess:win.pane``).

        ``ready_quiet_ms``/``ready_pattern``: when a terminal program is ready (quiet that
        long; its last screen line matches). ``completion_pattern``: output that ends a turn.
        """
        self._check_open()
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise MadohubValueError(
                f"tile name {name!r} is not allowed; use a letter then letters, digits, '-' or '_' "
                "(at most 40), e.g. 'writer'"
            )
        if name in self.tiles:
            raise MadohubValueError(f"a tile named {name!r} already exists; pick another name")
        if agent is not None:
            check_choice("agent kind", agent, known_kinds())
        options = tile_options(ready_quiet_ms, ready_pattern, completion_pattern)
        if pane is not None:
            if command is not None or cwd is not None or env:
                raise MadohubValueError(
                    "pane= adopts a running pane; command=, cwd= and env= only apply to new panes"
                )
            tile = self._adopt(name, pane, agent)
        else:
            tile = self._create(name, agent, command, cwd, env)
        tile.ready_quiet_ms, tile.ready_pattern, tile.completion_pattern = options
        with self._lock:
            if name in self.tiles:
                if tile.created:
                    self.tmux.kill_pane(tile.pane_id)
                raise MadohubValueError(f"a tile named {name!r} already exists; pick another name")
            self.tiles[name] = tile
        self.engine.submit(self.watcher.watch(tile.pane_id, tile.session, tile.pane_pid))
        self._emit(HubEvent("tile_added", name, tile.last_state, tile))
        return tile

    def _adopt(self, name: str, pane: str, agent: str | None) -> Tile:
        info = self.tmux.resolve_pane(pane)
        if info.dead:
            raise TileError(f"pane {pane!r} is dead (its program exited); pick a live pane")
        for other in self.tiles.values():
            if other.pane_id == info.pane_id:
                raise MadohubValueError(f"pane {info.pane_id} is already the tile {other.name!r}")
        kind = agent or detect_kind(info.pid, info.current_command)
        if kind not in known_kinds():
            raise TileError(
                f"could not tell which agent runs in pane {info.pane_id} (it runs "
                f"{info.current_command!r}); pass agent= one of {', '.join(known_kinds())}"
            )
        return self._new_tile(name, info.pane_id, kind, info.session, False, info.pid)

    def _create(
        self,
        name: str,
        agent: str | None,
        command: str | None,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
    ) -> Tile:
        if command is not None and (not isinstance(command, str) or not command.strip()):
            raise MadohubValueError(
                f"command must be a non-empty shell command string, got {command!r}"
            )
        workdir: str | None = None
        if cwd is not None:
            path = Path(os.path.expanduser(str(cwd)))
            if not path.is_dir():
                raise MadohubValueError(f"cwd {str(cwd)!r} is not an existing directory")
            workdir = str(path.resolve())
        if env is not None:
            if not isinstance(env, Mapping) or not all(
                isinstance(k, str)
                and isinstance(v, str)
                and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)
                for k, v in env.items()
            ):
                raise MadohubValueError(
                    "env must map variable names (letters, digits, '_') to strings"
                )
        kind = agent or _guess_kind(command)
        pane_id = self.tmux.new_pane(
            self.session_name, command, cwd=workdir, env=env, window_name=name
        )
        # A command that exits at once is an error the user must see now, not a dead tile later.
        deadline = time.monotonic() + EXIT_CHECK_S
        while time.monotonic() < deadline:
            info = self.tmux.pane_info(pane_id)
            if info is None or info.dead:
                # tmux marks the pane dead at the pty's EOF and records the exit status
                # only when it reaps the child; under load that can take a while.
                for _ in range(60):
                    if info is None or info.dead_status is not None:
                        break
                    time.sleep(0.03)
                    info = self.tmux.pane_info(pane_id) or info
                screen = self.tmux.capture(pane_id, history_lines=50) if info else ""
                self.tmux.kill_pane(pane_id)
                status = info.dead_status if info else None
                if (
                    status is None
                ):  # tmux also writes it into the pane: "Pane is dead (status 3, …)"
                    found = re.search(r"Pane is dead \(status (\d+)", screen)
                    status = int(found.group(1)) if found else None
                printed = [
                    ln
                    for ln in screen.splitlines()
                    if ln.strip() and not ln.startswith("Pane is dead")
                ]
                tail = " | ".join(printed[-3:])
                raise TileError(
                    f"command {command!r} for tile {name!r} exited at once"
                    + (f" with status {status}" if status is not None else "")
                    + (f"; it printed: {tail}" if tail else "")
                )
            time.sleep(0.05)
        info = self.tmux.pane_info(pane_id)
        if kind is None:
            detected = detect_kind(info.pid, info.current_command) if info else "unknown"
            kind = detected if detected in known_kinds() else "shell"
        return self._new_tile(
            name, pane_id, kind, self.session_name, True, info.pid if info else None
        )

    def _new_tile(
        self, name: str, pane_id: str, kind: str, session: str, created: bool, pid: int | None
    ) -> Tile:
        return Tile(
            name,
            pane_id,
            kind,
            self.tmux,
            session=session,
            created=created,
            claude_home=lambda: self.claude_home,
            on_state=self._tile_state_changed,
            pane_pid=pid,
            last_output_mono=lambda: getattr(
                self.watcher.streams.get(pane_id), "last_output_mono", None
            ),
        )

    def _tile(self, name: str | Tile, role: str) -> Tile:
        if isinstance(name, Tile):
            name = name.name
        tile = self.tiles.get(name)
        if tile is None:
            known = ", ".join(sorted(self.tiles)) or "none yet; make one with hub.tile(...)"
            raise MadohubValueError(f"no {role} tile named {name!r}; tiles: {known}")
        return tile

    # routes -----------------------------------------------------------------
    def connect(
        self,
        source: str | Tile,
        target: str | Tile,
        trigger: str = "on-idle",
        transform: str = "prompt-wrap",
        template: str | None = None,
        max_rounds: int = MAX_ROUNDS_DEFAULT,
        cooldown_ms: int = COOLDOWN_MS_DEFAULT,
        stop_keyword: str | None = None,
        dispatch: str = "madoagent",
        pattern: str | None = None,
        allow_shell: bool = False,
        delivery: str | None = None,
        model: str | None = None,
        completion_pattern: str | None = None,
    ) -> Route:
        """Wire ``source`` → ``target``; from now on each finished turn of the source is routed."""
        self._check_open()
        src = self._tile(source, "source")
        dst = self._tile(target, "target")
        if src is dst:
            raise MadohubValueError(
                f"a route from {src.name!r} to itself would feed the agent its own output"
            )
        check_trigger(trigger, pattern)
        completion = check_completion_pattern(trigger, completion_pattern)
        spec = make_transform_spec(transform, template, model)
        guard = LoopGuard(max_rounds=max_rounds, cooldown_ms=cooldown_ms, stop_keyword=stop_keyword)
        check_choice("dispatch", dispatch, DISPATCH_MODES)
        mode = check_choice("delivery", delivery or self.delivery, DELIVERY_MODES)
        if dst.profile.executes_input and dispatch != "shadow" and not allow_shell:
            raise MadohubValueError(
                f"target {dst.name!r} is a {dst.agent}: whatever is typed there runs as a command; "
                "pass allow_shell=True to route into it anyway"
            )
        if transform in AI_TRANSFORMS:
            require_ai_key(transform, self.api_key)
        with self._lock:
            self._route_counter += 1
            route_id = f"{src.name}->{dst.name}#{self._route_counter}"
            route = Route(
                self,
                route_id,
                src,
                dst,
                trigger=trigger,
                pattern=pattern,
                spec=spec,
                guard=guard,
                dispatch=dispatch,
                delivery=mode,
                allow_shell=allow_shell,
            )
            route.completion_pattern = completion
            self.routes.append(route)
        self.engine.call_soon(route.start)
        self._emit(HubEvent("route_added", route.id, route.state, route))
        return route

    def route(self, key: str | int) -> Route:
        """A route by id (``writer->reviewer#1``), by its number (``1``), or by list index."""
        for r in self.routes:
            if r.id == key or (isinstance(key, str) and r.id.endswith(f"#{key}")):
                return r
        if isinstance(key, int) and -len(self.routes) <= key < len(self.routes):
            return self.routes[key]
        known = ", ".join(r.id for r in self.routes) or "none yet"
        raise MadohubValueError(f"no route {key!r}; routes: {known}")

    # hand delivery and replay -------------------------------------------------
    def send(
        self, tile: str | Tile, text: str, *, delivery: str | None = None, allow_shell: bool = False
    ) -> HubFuture[RoundRecord]:
        """Type ``text`` into a tile by hand (logged as round 0 of route ``send``); returns a Future."""
        self._check_open()
        dst = self._tile(tile, "target")
        if not isinstance(text, str) or not text.strip():
            raise MadohubValueError("text must be a non-empty string")
        mode = check_choice("delivery", delivery or self.delivery, DELIVERY_MODES)
        if dst.profile.executes_input and not allow_shell:
            raise MadohubValueError(
                f"{dst.name!r} is a {dst.agent}: typed text runs as a command; pass allow_shell=True to send anyway"
            )
        plan = RoundPlan(
            route_id="send",
            source="",
            target=dst,
            round=0,
            max_rounds=0,
            trigger="manual",
            spec=None,
            dispatch="madoagent",
            delivery=mode,
            extraction=None,
            prompt=text,
        )
        return self.engine.submit(run_round(self, plan))

    def replay(
        self,
        round_id: str,
        transform: str | None = None,
        template: str | None = None,
        deliver: bool = False,
        model: str | None = None,
    ) -> RoundRecord:
        """Recompute a logged round's prompt (with another transform or template); log it as a new row."""
        coro = self.replay_async(round_id, transform, template, deliver, model)
        if self.engine.in_loop_thread:
            name = transform or self.log.get(round_id).transform
            if deliver or name in AI_TRANSFORMS:
                coro.close()
                raise MadohubError(
                    "this replay needs the event loop (an AI transform or a delivery); "
                    "in a notebook cell use `await hub.replay_async(...)`"
                )
            return _run_now(coro)
        return self.engine.run_sync(coro)

    async def replay_async(
        self,
        round_id: str,
        transform: str | None = None,
        template: str | None = None,
        deliver: bool = False,
        model: str | None = None,
    ) -> RoundRecord:
        orig = self.log.get(round_id)
        name = transform or (orig.transform if orig.transform != "none" else "prompt-wrap")
        tmpl = (
            template
            if template is not None
            else (orig.template if name == orig.transform else None)
        )
        spec = make_transform_spec(name, tmpl, model)
        if name in AI_TRANSFORMS:
            require_ai_key(name, self.api_key)
        if orig.extracted is None:
            raise MadohubValueError(f"round {round_id} has no extracted output to replay")
        route = next((r for r in self.routes if r.id == orig.route_id), None)
        target = self.tiles.get(orig.target)
        if deliver and target is None:
            raise MadohubValueError(
                f"cannot deliver the replay: tile {orig.target!r} is not in this hub"
            )
        if deliver and target is not None and target.profile.executes_input:
            if route is None or not route.allow_shell:
                raise MadohubValueError(
                    f"{target.name!r} is a {target.agent}: a delivered replay runs there as a command; "
                    "only rounds of a route made with allow_shell=True are replayed into it"
                )
        screen_tail = orig.meta.get("screen_tail")
        plan = RoundPlan(
            route_id=orig.route_id,
            source=orig.source,
            target=target,
            round=orig.round,
            max_rounds=route.max_rounds
            if route
            else int(orig.meta.get("max_rounds", MAX_ROUNDS_DEFAULT)),
            trigger="replay",
            spec=spec,
            dispatch="madoagent" if deliver else "shadow",
            delivery=self.delivery,
            extraction=Extraction(
                orig.extracted,
                orig.extraction_method or "terminal",
                Path(orig.extraction_path) if orig.extraction_path else None,
            ),
            screen_tail=list(screen_tail) if isinstance(screen_tail, list) else None,
            replay_of=orig.round_id,
            meta={"target": orig.target},
        )
        return await run_round(self, plan)

    # log and waiting ------------------------------------------------------------
    def _append_round(self, rec: RoundRecord) -> RoundRecord:
        """Write a finished round; if the log refuses, keep it and pause routing.

        Returns the round as logged, secrets redacted: what events and callers get.
        """
        rec = self.log.redact(rec)
        try:
            self.log.append(rec)
        except LogError as exc:
            self.unlogged.append(rec)
            self._log_unwritable(exc)
        else:
            self._rounds_written += 1
        self._emit(HubEvent("round", rec.route_id, rec.status, rec))
        self._wake_round_waiters()
        return rec

    def _log_unwritable(self, exc: LogError) -> None:
        for r in self.routes:
            if r.state == "active":
                r.last_error = f"paused: the round log cannot be written ({exc})"
                r.pause()

    def _wake_round_waiters(self) -> None:
        for n, fut in list(self._round_waiters):
            if self._rounds_written + len(self.unlogged) >= n and not fut.done():
                fut.set_result(None)
        self._round_waiters = [(n, f) for n, f in self._round_waiters if not f.done()]

    async def wait_rounds(self, n: int, timeout_s: float = 60.0) -> int:
        """Wait until this hub has finished ``n`` rounds in all; returns the count."""
        if self._rounds_written + len(self.unlogged) < n:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._round_waiters.append((n, fut))
            self.engine.call_soon(self._wake_round_waiters)
            await asyncio.wait_for(
                asyncio.shield(fut) if self.engine.in_loop_thread else fut, timeout_s
            )
        return self._rounds_written + len(self.unlogged)

    def wait_rounds_sync(self, n: int, timeout_s: float = 60.0) -> int:
        """:meth:`wait_rounds` for scripts and tests (not from a notebook cell)."""
        return self.engine.run_sync(self.wait_rounds(n, timeout_s), timeout_s + 5)

    @property
    def rounds_written(self) -> int:
        return self._rounds_written

    # events ---------------------------------------------------------------------
    def _emit(self, event: HubEvent) -> None:
        if self.engine.in_loop_thread:
            self.events.emit(event)
        else:
            self.engine.call_soon(self.events.emit, event)

    def _tile_state_changed(self, name: str, state: str) -> None:
        self._emit(HubEvent("tile_state", name, state))

    def _on_output(self, pane_id: str, nbytes: int) -> None:
        for tile in self.tiles.values():
            if tile.pane_id == pane_id:
                self.events.emit(HubEvent("tile_output", tile.name, data=nbytes))

    # life cycle -----------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise MadohubError(
                "this hub is closed; make a new one with madohub_nb.Hub() or get_hub()"
            )

    def close(self) -> None:
        """Stop routes and watchers; kill the panes this hub created. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        for r in self.routes:
            if r.state in ("active", "paused", "exhausted"):
                r.state = "stopped"

        async def _shutdown() -> None:
            for r in self.routes:
                if r._task is not None:
                    r._task.cancel()
            await asyncio.gather(*(r.wait_closed() for r in self.routes), return_exceptions=True)
            await self.watcher.close()

        if self.engine.in_loop_thread:
            task = self.engine.loop.create_task(_shutdown())
            task.add_done_callback(lambda _: None)
        else:
            try:
                self.engine.run_sync(_shutdown(), 10)
            except Exception:  # the loop may already be gone; still clean up below
                pass
        if any(t.created for t in self.tiles.values()):
            self.tmux.kill_session(self.session_name)
        self.engine.close()
        self.log.close()

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Hub socket={self.socket_name!r} tiles={len(self.tiles)} routes={len(self.routes)} "
            f"rounds={self._rounds_written} idle_delay_ms={self.idle_delay_ms} "
            f"api_key={'set' if self.api_key else 'unset'}{' closed' if self.closed else ''}>"
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<li>{html.escape(t.name)} · {t.agent} · {t.pane_id} · {t.last_state}</li>"
            for t in self.tiles.values()
        )
        routes = "".join(f"<li>{r._repr_html_()}</li>" for r in self.routes)
        return (
            f"<div><b>madohub hub</b> (socket {html.escape(str(self.socket_name))}, "
            f"{self._rounds_written} rounds logged)<br>Tiles:<ul>{rows or '<li>none</li>'}</ul>"
            f"Routes:<ul>{routes or '<li>none</li>'}</ul></div>"
        )


def _guess_kind(command: str | None) -> str | None:
    """The agent kind a command's program name says (``claude``, ``/x/codex``), if any."""
    if not command:
        return None
    first = os.path.basename(command.strip().split()[0].strip("'\""))
    for kind in known_kinds():
        if get_profile(kind).process_tokens and kind in first:
            return kind
    return None


def _run_now(coro: Any) -> Any:
    """Run a coroutine that never actually suspends (no I/O) to completion, synchronously."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise MadohubError("this replay needs the event loop; use `await hub.replay_async(...)`")


class HubRegistry:
    """The kernel's hub, made lazily from the ``MadoHub`` configuration."""

    def __init__(self) -> None:
        self._hub: Hub | None = None
        self._lock = threading.Lock()

    def get(self, **overrides: Any) -> Hub:
        with self._lock:
            if self._hub is None or self._hub.closed:
                from .notebook.config import hub_kwargs_from_config

                kwargs = {**hub_kwargs_from_config(), **overrides}
                self._hub = Hub(**kwargs)
            return self._hub

    @property
    def current(self) -> Hub | None:
        """The kernel's hub if one is open (without making one)."""
        hub = self._hub
        return hub if hub is not None and not hub.closed else None

    def reset(self) -> None:
        with self._lock:
            if self._hub is not None:
                self._hub.close()
            self._hub = None


registry = HubRegistry()


def get_hub() -> Hub:
    """The kernel's hub (made on first use from ``%config MadoHub.*``)."""
    return registry.get()
