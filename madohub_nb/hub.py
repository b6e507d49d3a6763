"""The hub: the public face of tiles, routes, the round log and the engine.

Every call validates its arguments at once (a ``ValueError`` that names the
bad value and what is allowed), builds the object, and only *schedules* work
on the engine thread, so it returns at once, from any thread. Calls that take
time return a :class:`HubFuture`. The machinery lives in :class:`Runtime`.
"""

from __future__ import annotations

import inspect
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from .agents.detect import kind_from_command
from .agents.profiles import known_kinds
from .defaults import check_choice
from .engine import HubFuture
from .errors import MadohubError, MadohubValueError
from .hub_settings import HubSettings, add_setting_attributes
from .io.log import RoundLog, RoundRecord
from .pipeline.gather import Gather, build_gather
from .pipeline.inbox import Ask
from .pipeline.keys import check_keys, press_keys
from .pipeline.options import given_options, with_defaults
from .pipeline.options import signature as options_signature
from .pipeline.replay import replay_plan
from .pipeline.round import hand_send_plan, run_round
from .pipeline.route import Route, make_route, route_context
from .pipeline.tile import (
    Tile,
    check_mcp_limits,
    check_mcp_option,
    check_new_tile,
    check_tile_name,
    pane_reference,
    tile_options,
    worktree_branch,
)
from .pipeline.transforms import AIClientConfig, make_transform_spec, require_ai_key
from .pipeline.workflow import RouteSpec, Workflow, options_named
from .render import html_for_hub, repr_hub
from .runtime import CloseSummary, Runtime
from .tile_registry import ADOPTED_HOOKS

P = ParamSpec("P")
R = TypeVar("R")


def _table_signature(
    kind: str, *leading: tuple[str, str]
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Show ``hub.<kind>``'s options (``help()``, Jupyter's ``?``) from the one table of
    options (:mod:`.pipeline.options`): ``leading`` (name, annotation), then its rows."""

    def wrap(method: Callable[P, R]) -> Callable[P, R]:
        first = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        first += [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=shown)
            for name, shown in leading
        ]
        method.__signature__ = options_signature(kind, first)  # type: ignore[attr-defined]
        return method

    return wrap


class Hub:
    """Tiles, routes, the round log and the engine thread of one kernel (or script).

    Its settings are :data:`madohub_nb.hub_settings.SETTINGS`: each one is a keyword
    of ``Hub(...)`` (the first seven also by position) and an attribute ``hub.<name>``.
    """

    tiles = property(lambda hub: hub._rt.tiles.tiles, doc="{name: Tile}")
    routes = property(lambda hub: hub._rt.routes.routes, doc="[Route], in order made.")
    events = property(lambda hub: hub._rt.events, doc="Events: madohub_nb.pipeline.events types.")
    unlogged = property(lambda hub: hub._rt.recorder.unlogged, doc="Rounds the log refused.")
    rounds_written = property(lambda hub: hub._rt.recorder.rounds_written, doc="Rounds logged.")
    session_id = property(lambda hub: hub._rt.session_id, doc="This hub's id in the round log.")
    session_name = property(lambda hub: hub._rt.session_name, doc="The tmux session it makes.")
    hosts = property(lambda hub: hub._rt.tiles.hosts, doc="{host: HostLink}: remote hosts in use.")
    engine = property(lambda hub: hub._rt.engine, doc="The engine thread (widgets use it).")
    mcp = property(
        lambda hub: hub._rt.mcp, doc="The MCP server (``.url``): agents call each other through it."
    )
    runtime = property(lambda hub: hub._rt, doc="The machinery behind the hub (for tests, tools).")

    if TYPE_CHECKING:  # the settings' attributes, made from the table below the class
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
        keep_panes: bool
        ssh_command: str
        remote_socket_name: str | None
        mcp_max_rounds: int
        mcp_cooldown_ms: int

    def __init__(self, *args: Any, **settings: Any) -> None:
        self._rt = Runtime(HubSettings(*args, **settings))
        self._close_lock = threading.Lock()
        self._recipes: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, Any]]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def log_path(self) -> str:
        """Where the round log is (the ``log_path`` setting, resolved)."""
        return str(self._rt.log.path)

    @property
    def closed(self) -> bool:
        """True once ``close()`` began: the hub takes no new tiles, routes or rounds."""
        return self._rt.closed

    @property
    def log(self) -> RoundLog:
        """The round log; ``hub.log.df`` is a DataFrame of it."""
        return self._rt.log

    @log.setter
    def log(self, log: RoundLog) -> None:  # (a log reopened, e.g. read-only, under a live hub)
        self._rt.log = self._rt.recorder.log = log

    def ai_config(self, model: str | None = None) -> AIClientConfig:
        """The Anthropic client settings the AI transforms use now (the key is never shown)."""
        return self._rt.services.ai_config(model)

    # tiles ------------------------------------------------------------------
    @_table_signature("tile", ("name", "str"))
    def tile(self, name: str, *args: Any, **keywords: Any) -> Tile:
        """Start ``command`` in a new pane, or adopt ``pane`` (``%3``, ``sess:win.pane``, a
        ``libtmux.Pane``); on ``host``'s tmux over ssh if given. ``tile.ready`` resolves once it
        has started. ``ready_quiet_ms``/``ready_pattern``: when a terminal program is ready (quiet
        that long; its last line matches). ``completion_pattern``: output that ends a turn.
        ``hooks``: the agent's own end-of-turn hooks for a pane the hub starts (None: when its
        agent has them; True: required; False: off); an adopted pane keeps the weaker signals.
        ``worktree``: the pane works in a new ``git worktree`` of ``cwd``'s repository on a new
        branch (True: ``madohub/<name>``; a string: that branch); ``tile.worktree`` is its path,
        and ``close()`` removes it unless it holds changes (``hub.close()`` says which it kept).
        ``mcp``: start the agent with the hub's MCP tools (True: it may reach every agent tile;
        a list: those tiles, a shell among them only with ``allow_shell=True``); on a ``host``,
        its link carries a port of the host's 127.0.0.1 back to the hub's server.
        ``mcp_max_rounds`` / ``mcp_cooldown_ms``: this tile's own loop protection as a caller
        (None: the hub's settings; ``hub.mcp.set_limits(name, ...)`` changes them live).
        Every option is a row of :data:`madohub_nb.pipeline.options.TILE` (the tile options
        table of the docs); the first five may be given by position."""
        self._check_open()
        given = given_options("tile", args, keywords, "tile()")
        o = with_defaults("tile", given)
        agent, command, cwd, env, pane = o["agent"], o["command"], o["cwd"], o["env"], o["pane"]
        ready_quiet_ms, ready_pattern = o["ready_quiet_ms"], o["ready_pattern"]
        completion_pattern, host, hooks, worktree = (
            o["completion_pattern"], o["host"], o["hooks"], o["worktree"],
        )  # fmt: skip
        mcp, allow_shell = o["mcp"], o["allow_shell"]
        mcp_max_rounds, mcp_cooldown_ms = o["mcp_max_rounds"], o["mcp_cooldown_ms"]
        if agent is not None:
            check_choice("agent kind", agent, known_kinds())
        options = tile_options(ready_quiet_ms, ready_pattern, completion_pattern)
        reach = check_mcp_option(mcp)
        limits = check_mcp_limits(reach, mcp_max_rounds, mcp_cooldown_ms)
        if reach is not False and pane is not None:
            raise MadohubValueError(
                "mcp= configures an agent the hub starts in a new pane; an adopted pane cannot "
                "take it (hub.mcp.grant(name) and hub.mcp.client_config(name) give what to hand "
                "its agent)"
            )
        if pane is None:
            workdir = check_new_tile(name, command, cwd, env, remote=host is not None)
            branch = worktree_branch(name, worktree)
            mcp_layer = None
            if reach is not False:
                self._rt.tiles.check_name_free(name)
                kind = agent or kind_from_command(command)
                setup = self.mcp.agent_setup(name, kind, reach, allow_shell, host, limits)
                if clash := sorted(set(setup.env) & set(env or {})):
                    self.mcp.revoke(name)
                    raise MadohubValueError(
                        f"env= sets {', '.join(clash)}, which mcp= needs for {kind}; leave it out"
                    )
                mcp_layer = setup
            try:
                tile = self._rt.tiles.create(
                    name, agent, command, workdir, env, host, hooks, branch, mcp=mcp_layer
                )
            except BaseException:
                if reach is not False:  # no tile: its token ends with it
                    self.mcp.revoke(name)
                raise
        elif worktree not in (None, False):
            raise MadohubValueError("worktree= makes a new pane's worktree; pane= adopts one")
        elif hooks is True:
            raise MadohubValueError(ADOPTED_HOOKS)
        elif command is not None or cwd is not None or env:
            raise MadohubValueError("pane= adopts; command=, cwd= and env= only apply to new panes")
        else:
            check_tile_name(name)
            ref = pane if host is not None else pane_reference(pane, self.socket_name)
            tile = self._rt.tiles.adopt(name, ref, agent, host)
        tile.ready_quiet_ms, tile.ready_pattern, tile.completion_pattern = options
        self._recipes[tile] = ("tile", given)
        return tile

    # routes -----------------------------------------------------------------
    @_table_signature("connect", ("source", "str | Tile"), ("target", "str | Tile"))
    def connect(self, source: str | Tile, target: str | Tile, *args: Any, **options: Any) -> Route:
        """Wire ``source`` → ``target``; from now on each finished turn of the source is routed.

        ``max_cost_usd`` / ``max_tokens``: budgets; once the rounds' ``cost_usd`` (or input +
        output tokens, the AI transform's included) reach one, the route ends ``exhausted``.
        A budgeted route whose spending cannot be known (no price, no usage) stops, saying so.
        ``when`` / ``unless``: regexes over the extracted answer, checked before the transform;
        a turn whose answer does not match ``when`` (or matches ``unless``) is skipped.
        ``approve``: each prompt waits in :attr:`inbox` for a person to approve, edit or reject
        it (``approve_timeout_s``: it expires unanswered after that long, nothing typed).
        Every option is a row of :data:`madohub_nb.pipeline.options.ROUTE` (the route options
        table of the docs), by name or by position in the table's order.
        """
        self._check_open()
        given = given_options("connect", args, options, "connect()")
        src, dst = self._rt.tiles.named(source, "source"), self._rt.tiles.named(target, "target")
        resolved = self._route_options(given)
        route = self._rt.routes.add(
            lambda number: make_route(self._rt.services, number, src, dst, **resolved)
        )
        self._recipes[route] = ("connect", given)
        return route

    def _route_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """A route's options as given, its delivery the hub's unless given, and the hub's key."""
        return {
            **given,
            "delivery": given.get("delivery") or self.delivery,
            "api_key": self.api_key,
        }

    @_table_signature(
        "gather", ("sources", "list[str | Tile] | tuple[str | Tile, ...]"), ("target", "str | Tile")
    )
    def gather(
        self,
        sources: list[str | Tile] | tuple[str | Tile, ...],
        target: str | Tile,
        *args: Any,
        **options: Any,
    ) -> Gather:
        """Fan in: once every source has finished a new turn since the last round (or
        ``timeout_s`` after the first did, with those that have), route their answers, each
        under its source's name (``{answers}``), to ``target``. Its id is ``a+b->target#N``;
        every other option is :meth:`connect`'s. A source that exits or stays silent past the
        timeout is named in the prompt and in the row's ``meta["gather_missing"]``."""
        self._check_open()
        given = given_options("gather", args, options, "gather()")
        if isinstance(sources, str) or not isinstance(sources, (list, tuple)):
            raise MadohubValueError(
                f"sources must be a list of tile names, e.g. ['r1', 'r2'], got {sources!r}"
            )
        srcs = [self._rt.tiles.named(s, "source") for s in sources]
        dst = self._rt.tiles.named(target, "target")
        resolved = self._route_options(given)
        context = route_context(self._rt.services)
        made = self._rt.routes.add(
            lambda number: build_gather(context, number, srcs, dst, **resolved)
        )
        self._recipes[made] = ("gather", given)
        return cast(Gather, made)

    def route(self, key: str | int) -> Route:
        """A route by id (``writer->reviewer#1``), by its number (``1``), or by list index."""
        return self._rt.routes.find(key)

    @property
    def inbox(self) -> list[Ask]:
        """What waits for a person now, oldest first: agents' permission prompts (``choose``)
        and approval routes' prompts (``approve`` / ``reject``), from every tile and host."""
        return self._rt.inbox.asks

    # workflows ---------------------------------------------------------------------
    def workflow(self, name: str = "workflow") -> Workflow:
        """Today's tiles and routes (gathers included) as a :class:`Workflow`, each with the
        options it was made with. Routes stopped by hand are left out; a tile that adopted a
        pane cannot be kept (a pane does not outlive its tmux server) and is an error."""
        tiles: dict[str, dict[str, Any]] = {}
        for tile in self.tiles.values():
            kind, args = self._recipes.get(tile, ("tile", {"pane": "?"}))
            if args.get("pane") is not None:
                raise MadohubValueError(
                    f"tile {tile.name!r} adopted a pane; a workflow keeps only tiles the hub "
                    "starts (give it command= instead of pane=)"
                )
            tiles[tile.name] = _kept(args, kind)
        routes = []
        for route in self.routes:
            if route.state == "stopped" or route not in self._recipes:
                continue
            kind, args = self._recipes[route]
            sources = [t.name for t in route.tiles[:-1]]
            options = _kept(args, kind)
            routes.append(RouteSpec(sources, route.target_tile.name, options, kind == "gather"))
        return Workflow(name, tiles, routes)

    def run(self, workflow: Workflow) -> list[Route]:
        """Start a workflow's tiles and routes in this hub; returns the routes, in order.

        Everything that can be checked is checked before the first tile starts (a tile name
        this hub already has, a missing ``cwd``, an AI transform without a key): errors name
        ``file:table.key``. Each round of these routes records ``workflow`` and
        ``workflow_hash``."""
        import hashlib

        self._check_open()
        where = workflow.path or workflow.name
        for name, options in workflow.tiles.items():
            if name in self.tiles:
                raise MadohubValueError(
                    f"{where}:tiles.{name}: this hub already has a tile {name!r}; "
                    "run the workflow in a fresh hub (or close that tile's hub first)"
                )
            try:
                check_new_tile(name, options.get("command"), options.get("cwd"),
                               options.get("env"), remote=options.get("host") is not None)  # fmt: skip
            except MadohubValueError as exc:
                raise MadohubValueError(f"{where}:tiles.{name}: {exc}") from None
        for key, spec in zip(workflow.route_keys(), workflow.routes, strict=True):
            transform = spec.options.get("transform", "prompt-wrap")
            try:
                made_spec = make_transform_spec(
                    transform, spec.options.get("template"), spec.options.get("model")
                )
                if made_spec.is_ai:
                    require_ai_key(transform, self.api_key)
            except MadohubValueError as exc:
                raise MadohubValueError(f"{where}:routes.{key}: {exc}") from None
        digest = workflow.hash or hashlib.sha256(workflow.dumps().encode()).hexdigest()
        for name, options in workflow.tiles.items():
            try:
                self.tile(name, **options)
            except MadohubError as exc:
                raise MadohubError(f"{where}:tiles.{name}: {exc}") from exc
        made: list[Route] = []
        for key, spec in zip(workflow.route_keys(), workflow.routes, strict=True):
            try:
                if spec.gather:
                    route: Route = self.gather(
                        list[str | Tile](spec.sources), spec.target, **spec.options
                    )
                else:
                    route = self.connect(spec.sources[0], spec.target, **spec.options)
            except MadohubError as exc:
                for done in made:  # no half-wired workflow: the routes made so far stop
                    done.stop()
                raise MadohubError(
                    f"{where}:routes.{key}: {exc} (the workflow's tiles are started; "
                    "its routes made so far were stopped)"
                ) from exc
            self._rt.recorder.workflows[route.id] = (workflow.name, digest)
            made.append(route)
        return made

    # hand delivery, replay, waiting ----------------------------------------------
    def send(
        self, tile: str | Tile, text: str, *, delivery: str | None = None, allow_shell: bool = False
    ) -> HubFuture[RoundRecord]:
        """Type ``text`` into a tile by hand (logged as round 0 of route ``send``)."""
        self._check_open()
        dst = self._rt.tiles.named(tile, "target")
        plan = hand_send_plan(
            dst, text, delivery=delivery or self.delivery, allow_shell=allow_shell,
            target_wait_s=self.target_wait_s,
        )  # fmt: skip
        return self._rt.engine.submit(run_round(self._rt.services, plan))

    def replay(
        self,
        round_id: str,
        transform: str | None = None,
        template: str | None = None,
        deliver: bool = False,
        model: str | None = None,
        allow_shell: bool = False,
    ) -> HubFuture[RoundRecord]:
        """Recompute a logged round's prompt (another transform or template) as a new row;
        ``allow_shell``: a delivered replay may type into a shell (else only a route's)."""
        self._check_open()
        orig = self._rt.log.get(round_id)
        plan = replay_plan(
            orig, transform=transform, template=template, deliver=deliver, model=model,
            route=self._rt.routes.by_id(orig.route_id),
            target=self._rt.tiles.tiles.get(orig.target), delivery=self.delivery,
            api_key=self.api_key, target_wait_s=self.target_wait_s, allow_shell=allow_shell,
            session_id=self.session_id,
        )  # fmt: skip
        return self._rt.engine.submit(run_round(self._rt.services, plan))

    async def replay_async(self, round_id: str, **kwargs: Any) -> RoundRecord:
        """``await hub.replay_async(...)``: the same as ``await hub.replay(...)``."""
        return await self.replay(round_id, **kwargs)

    def keys(self, tile: str | Tile, *keys: str) -> HubFuture[RoundRecord]:
        """Press keys in a tile (``hub.keys("writer", "Escape")``, ``"1"``, ``"C-c"``)."""
        self._check_open()
        target, names = self._rt.tiles.named(tile, "target"), check_keys(keys)
        return self._rt.engine.submit(press_keys(self._rt.services, target, names))

    def wait_rounds(self, n: int, timeout_s: float = 60.0) -> HubFuture[int]:
        """A future that resolves once this hub has finished ``n`` rounds in all."""
        return self._rt.engine.submit(self._rt.recorder.wait_rounds(n, timeout_s))

    def wait_rounds_sync(self, n: int, timeout_s: float = 60.0) -> int:
        """Block until ``n`` rounds have finished (not from the engine thread)."""
        return self.wait_rounds(n, timeout_s).result(timeout_s + 5)

    # life cycle -----------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise MadohubError("this hub is closed; make a new one: madohub_nb.Hub() or get_hub()")

    def close(self) -> CloseSummary | None:
        """Stop routes and watchers; kill the panes this hub created; remove each tile's
        worktree that holds no changes. Any thread; idempotent. Returns what it kept and
        removed (None when called on the engine thread: the close finishes after it)."""
        with self._close_lock:
            if not self.closed:
                self._rt.close()
        return self._rt.close_summary

    @property
    def close_summary(self) -> CloseSummary | None:
        """What ``close()`` kept and removed (None until it has finished)."""
        return self._rt.close_summary

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr_hub(self)

    def _repr_html_(self) -> str:
        return html_for_hub(self)


def _kept(args: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The workflow options among a call's arguments, as plain data (no defaults)."""
    kept: dict[str, Any] = {}
    for opt in options_named(kind):
        value = args.get(opt.name, opt.default)
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        if value != opt.default:
            kept[opt.name] = value
    return kept


add_setting_attributes(Hub, lambda hub: hub._rt)
