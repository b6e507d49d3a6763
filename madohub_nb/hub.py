"""The hub: the public face of tiles, routes, the round log and the engine.

Every call validates its arguments at once (a ``ValueError`` that names the
bad value and what is allowed), builds the object, and only *schedules* work
on the engine thread, so it returns at once, from any thread. Calls that take
time return a :class:`HubFuture`. The machinery lives in :class:`Runtime`, and each
feature in a module of its own (``tile_start``, ``route_start``, ``workflow_runner``,
``by_hand``, ``shutdown``): a method here checks that the hub is open and delegates.
"""

from __future__ import annotations

from typing import Any

from . import by_hand
from .engine import HubFuture
from .errors import MadohubError
from .hub_settings import HubSettings, SettingAttributes, add_setting_attributes
from .io.log import RoundLog, RoundRecord
from .pipeline.gather import Gather
from .pipeline.inbox import Ask
from .pipeline.options import given_options, table_signature
from .pipeline.route import Route
from .pipeline.tile import Tile
from .pipeline.transforms import AIClientConfig
from .pipeline.workflow import Workflow
from .render import html_for_hub, repr_hub
from .route_start import start_gather, start_route
from .runtime import Runtime
from .shutdown import CloseSummary
from .tile_start import start_tile
from .workflow_runner import Recipes, run_workflow


class Hub(SettingAttributes):
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

    def __init__(self, *args: Any, **settings: Any) -> None:
        self._rt = Runtime(HubSettings(*args, **settings))
        self._recipes = Recipes()

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
    @table_signature("tile", ("name", "str"))
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
        tile = start_tile(self._rt.tiles, lambda: self.mcp, self.socket_name, name, given)
        self._recipes.keep(tile, "tile", given)
        return tile

    # routes -----------------------------------------------------------------
    @table_signature("connect", ("source", "str | Tile"), ("target", "str | Tile"))
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
        route = start_route(self._rt, source, target, given)
        self._recipes.keep(route, "connect", given)
        return route

    @table_signature(
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
        made = start_gather(self._rt, sources, target, given)
        self._recipes.keep(made, "gather", given)
        return made

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
        return self._recipes.workflow(name, self.tiles.values(), self.routes)

    def run(self, workflow: Workflow) -> list[Route]:
        """Start a workflow's tiles and routes in this hub; returns the routes, in order.

        Everything that can be checked is checked before the first tile starts (a tile name
        this hub already has, a missing ``cwd``, an AI transform without a key): errors name
        ``file:table.key``. Each round of these routes records ``workflow`` and
        ``workflow_hash``."""
        self._check_open()
        return run_workflow(self, workflow, self._rt.recorder.workflows)

    # hand delivery, replay, waiting ----------------------------------------------
    def send(
        self, tile: str | Tile, text: str, *, delivery: str | None = None, allow_shell: bool = False
    ) -> HubFuture[RoundRecord]:
        """Type ``text`` into a tile by hand (logged as round 0 of route ``send``)."""
        self._check_open()
        return by_hand.send(self._rt, tile, text, delivery, allow_shell)

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
        return by_hand.replay(
            self._rt, round_id, transform, template, deliver, model, allow_shell
        )  # fmt: skip

    async def replay_async(self, round_id: str, **kwargs: Any) -> RoundRecord:
        """``await hub.replay_async(...)``: the same as ``await hub.replay(...)``."""
        return await self.replay(round_id, **kwargs)

    def keys(self, tile: str | Tile, *keys: str) -> HubFuture[RoundRecord]:
        """Press keys in a tile (``hub.keys("writer", "Escape")``, ``"1"``, ``"C-c"``)."""
        self._check_open()
        return by_hand.keys(self._rt, tile, keys)

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
        return self._rt.close()

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


add_setting_attributes(Hub, lambda hub: hub._rt)
