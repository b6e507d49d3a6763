"""``%madohub`` and ``%%madohub``: the hub's API as IPython magics.

Parsing is separate from doing: ``parse_command(line)`` (``parsing.py``) turns
one magic line into an ``argparse.Namespace`` (pure, tested without a hub), and
``MadohubMagics`` routes each sub-command to one small method that calls the
kernel's hub. An error fails the cell with one line (IPython's ``UsageError``:
Run All, nbclient and papermill stop there); set ``MADOHUB_DEBUG=1`` or pass
``--debug`` to see the traceback. Tab completion knows the sub-commands, the
options, the tiles, the routes and the key names.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..errors import MadohubError, MadohubValueError
from ..render import tile_attach_command
from . import config
from .completion import register_completer, unregister_completer
from .parsing import (
    ARROW,
    COMMANDS,
    DEBUG_ENV,
    SUBCOMMANDS,
    TRY_TAIL_DEFAULT,
    HelpShown,
    build_parser,
    debug_wanted,
    expand_variables,
    full_help,
    option_keywords,
    parse_command,
    parse_duration_ms,
    parse_round_spec,
    parse_variants,
    split_endpoints,
    split_words,
)

__all__ = [
    "ARROW", "DEBUG_ENV", "SUBCOMMANDS", "HelpShown", "MadohubMagics", "build_parser",
    "expand_variables", "parse_command", "parse_duration_ms", "split_endpoints", "split_words",
]  # fmt: skip

if TYPE_CHECKING:
    import pandas as pd

    from ..hub import Hub

TILES_WAIT_S = 30.0
"""``%madohub tiles`` waits this long for the tiles' states."""
REPLAY_WAIT_S = 660.0
"""``%madohub replay`` waits this long for its round (a delivery waits up to 600 s for an idle target)."""


def _unescape_template(text: str) -> str:
    # A line magic cannot hold a line break: accept the two characters \n for one.
    return text.replace("\\n", "\n").replace("\\t", "\t")


# The magics -------------------------------------------------------------------


@magics_class
class MadohubMagics(Magics):
    """``%madohub COMMAND …`` and ``%%madohub COMMAND …`` over the kernel's hub."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.templates: dict[str, str] = {}
        self._handlers: dict[str, Callable[[argparse.Namespace, str], Any]] = {
            name: getattr(self, f"_{name}") for name in COMMANDS
        }
        """Each sub-command's method: ``_<command>`` (the commands: ``parsing.COMMANDS``)."""

    @no_var_expand
    @line_cell_magic
    def madohub(self, line: str, cell: str | None = None) -> Any:
        """Drive the kernel's hub; ``%madohub --help`` lists the commands."""
        debug = os.environ.get(DEBUG_ENV, "") not in ("", "0") or debug_wanted(line)
        try:
            args = parse_command(line, self.shell.user_ns if self.shell else {})
            return self._handlers[args.command](args, cell or "")
        except HelpShown:
            return None
        except (MadohubError, ValueError) as exc:
            if debug:
                raise
            # One line, no traceback, and the cell fails: Run All and nbclient stop here.
            raise UsageError(f"madohub: {exc}") from None

    # Helpers --------------------------------------------------------------

    def hub(self) -> Hub:
        """The kernel's hub (created from ``MadoHub`` settings on first use)."""
        from .registry import get_hub

        config.settings(self.shell)  # so the hub is made from this shell's config
        return get_hub()

    def resolve_template(self, text: str | None) -> str | None:
        """``@NAME`` → the stored template; other text with ``\\n`` made line breaks."""
        if text is None:
            return None
        if text.startswith("@"):
            name = text[1:]
            if name not in self.templates:
                known = ", ".join(sorted(self.templates)) or "none yet"
                raise MadohubValueError(
                    f"no template named {name!r}; stored: {known} "
                    f"(store one with a %%madohub template {name} cell)"
                )
            return self.templates[name]
        return _unescape_template(text)

    @staticmethod
    def _no_cell(args: argparse.Namespace, cell: str) -> None:
        if cell.strip():
            raise MadohubValueError(
                f"%%madohub {args.command} takes no cell body "
                "(a cell body is for template, connect, gather, replay, send and try)"
            )

    # Sub-commands ---------------------------------------------------------

    def _tile(self, args: argparse.Namespace, cell: str) -> Any:
        self._no_cell(args, cell)
        sources = [o for o in ("command_line", "pane", "demo") if getattr(args, o)]
        if len(sources) > 1:
            flags = " and ".join("--" + s.replace("command_line", "cmd") for s in sources)
            raise MadohubValueError(f"tile takes one of --cmd, --pane, --demo, not {flags}")
        kwargs = option_keywords("tile", args)
        if args.mcp is None:  # --allow-shell says which tiles MCP calls may type into
            kwargs.pop("allow_shell", None)
        if args.demo and not args.pane:
            from ..demo import standin_command

            kind = args.agent or "claude"
            kwargs["agent"] = kind
            kwargs["command"] = standin_command(kind, persona=args.demo)
        return self.hub().tile(args.name, **kwargs)

    def _connect(self, args: argparse.Namespace, cell: str) -> Any:
        kwargs = self._route_kwargs("connect", args, cell)
        return self.hub().connect(args.source, args.target, **kwargs)

    def _gather(self, args: argparse.Namespace, cell: str) -> Any:
        kwargs = self._route_kwargs("gather", args, cell)
        return self.hub().gather(args.sources, args.target, **kwargs)

    def _route_kwargs(self, kind: str, args: argparse.Namespace, cell: str) -> dict[str, Any]:
        """The ``connect`` / ``gather`` options given, as keywords (the cell: the template)."""
        kwargs = option_keywords(kind, args)
        template = kwargs.pop("template", None)
        if cell.strip():
            if template is not None:
                raise MadohubValueError("give the template as --template or as the cell, not both")
            template = cell
        else:
            template = self.resolve_template(template)
        if template is not None:
            kwargs["template"] = template
        return kwargs

    def _tiles(self, args: argparse.Namespace, cell: str) -> pd.DataFrame:
        import pandas as pd

        self._no_cell(args, cell)
        hub = self.hub()
        tiles = list(hub.tiles.values())

        async def states() -> list[str]:  # tmux and psutil reads run on the engine thread
            return list(await asyncio.gather(*(t.astate() for t in tiles)))

        fresh = hub.engine.submit(states()).result(TILES_WAIT_S)
        columns = ["name", "agent", "pane", "state", "attach"]
        rows = [
            [t.name, t.agent, t.pane_id, state, tile_attach_command(t)]
            for t, state in zip(tiles, fresh, strict=True)
        ]
        return pd.DataFrame(rows, columns=columns)

    def _routes(self, args: argparse.Namespace, cell: str) -> pd.DataFrame:
        import pandas as pd

        self._no_cell(args, cell)
        columns = [
            "id", "source", "target", "state", "rounds", "max_rounds", "budget_spent",
            "last_status", "last_error",
        ]  # fmt: skip
        extra = ["trigger", "transform", "dispatch", "notes"]
        rows = [{c: getattr(r, c, None) for c in (*columns, *extra)} for r in self.hub().routes]
        return pd.DataFrame(rows, columns=[*columns, *extra])

    def _pause(self, args: argparse.Namespace, cell: str) -> None:
        self._route_verb(args, cell)

    def _resume(self, args: argparse.Namespace, cell: str) -> None:
        self._route_verb(args, cell)

    def _stop(self, args: argparse.Namespace, cell: str) -> None:
        self._route_verb(args, cell)

    def _route_verb(self, args: argparse.Namespace, cell: str) -> None:
        self._no_cell(args, cell)
        hub = self.hub()
        routes = list(hub.routes) if args.route == "all" else [hub.route(args.route)]
        for route in routes:
            getattr(route, args.command)()
            print(f"route {route.id} ({route.source} -> {route.target}): {route.state}")
        if not routes:
            print("no routes yet")

    def _send(self, args: argparse.Namespace, cell: str) -> Any:
        text = " ".join(args.text)
        if cell.strip():
            if text.strip():
                raise MadohubValueError("give the text on the line or in the cell, not both")
            text = cell.rstrip("\n")
        if not text.strip():
            raise MadohubValueError("send needs TEXT: %madohub send TILE TEXT")
        future = self.hub().send(
            args.tile, text, delivery=args.delivery, allow_shell=args.allow_shell
        )
        tile = args.tile

        def report(done: Any) -> None:
            if not done.cancelled() and done.exception() is not None:
                print(f"madohub: send to {tile} failed: {done.exception()}", file=sys.stderr)

        future.add_done_callback(report)
        return future

    def _keys(self, args: argparse.Namespace, cell: str) -> Any:
        self._no_cell(args, cell)
        return self.hub().keys(args.tile, *args.keys)

    def _watch(self, args: argparse.Namespace, cell: str) -> Any:
        from .widgets import TileView

        self._no_cell(args, cell)
        return TileView(self.hub(), args.tile)

    def _dashboard(self, args: argparse.Namespace, cell: str) -> Any:
        from .widgets import Dashboard

        self._no_cell(args, cell)
        return Dashboard(self.hub())

    def _inbox(self, args: argparse.Namespace, cell: str) -> Any:
        from .widgets import InboxView

        self._no_cell(args, cell)
        return InboxView(self.hub())

    def _log(self, args: argparse.Namespace, cell: str) -> pd.DataFrame:
        self._no_cell(args, cell)
        hub = self.hub()
        df = hub.log.df
        if not args.all:
            df = df[df["session_id"] == hub.session_id]
        return df.tail(args.tail) if args.tail else df

    def _plot(self, args: argparse.Namespace, cell: str) -> Any:
        self._no_cell(args, cell)
        hub = self.hub()
        return hub.log.plot(session_id=None if args.all else hub.session_id)

    def _replay(self, args: argparse.Namespace, cell: str) -> Any:
        template = cell if cell.strip() else self.resolve_template(args.template)
        if cell.strip() and args.template is not None:
            raise MadohubValueError("give the template as --template or as the cell, not both")
        kwargs: dict[str, Any] = {"deliver": args.deliver}
        if args.transform:
            kwargs["transform"] = args.transform
        if template is not None:
            kwargs["template"] = template
        # The engine runs in its own thread: waiting here never stops routing.
        return self.hub().replay(args.round_id, **kwargs).result(REPLAY_WAIT_S)

    def _try(self, args: argparse.Namespace, cell: str) -> Any:
        """The playground on logged answers: the cell's variants (or ``--variants NAME``)."""
        from ..playground import try_transforms

        if args.variants is not None:
            if cell.strip():
                raise MadohubValueError(
                    "give the variants as --variants NAME or as the cell, not both"
                )
            namespace = self.shell.user_ns if self.shell else {}
            if args.variants not in namespace:
                raise MadohubValueError(
                    f"--variants {args.variants}: no such name in the notebook; give a dict of "
                    "name -> template, transform or transform settings"
                )
            variants = namespace[args.variants]
        else:
            variants = parse_variants(cell)
        hub = self.hub()
        df = hub.log.df
        if args.rounds is not None:
            numbers, ids, open_from = parse_round_spec(args.rounds)
            unknown = [n for n in numbers if n not in df.index]
            if unknown:
                raise MadohubValueError(
                    f"--rounds: the log has no row {unknown[0]} (rows 0 to {len(df) - 1})"
                )
            picked = df.index.isin(numbers) | df["round_id"].isin(ids)
            if open_from is not None:
                picked |= df.index >= open_from
            df = df[picked]
        else:
            if not args.all:
                df = df[df["session_id"] == hub.session_id]
            df = df[df["extracted"].notna()].tail(args.tail or TRY_TAIL_DEFAULT)
        return try_transforms(df, variants, judge=args.judge, hub=hub)

    def _template(self, args: argparse.Namespace, cell: str) -> str | None:
        if cell.strip():
            self.templates[args.name] = cell.rstrip("\n")
            print(f"template @{args.name} stored ({len(self.templates[args.name])} characters)")
            return None
        if args.name in self.templates:
            return self.templates[args.name]
        raise MadohubValueError(
            f"%%madohub template {args.name} needs the template as the cell body "
            "(write it under the %%madohub line)"
        )

    def _hooks(self, args: argparse.Namespace, cell: str) -> None:
        """Print the snippet that opts an adopted pane of ``args.agent`` in to its hooks."""
        from ..agents.hooks import HOOK_AGENTS, opt_in_snippet
        from ..io.hooks.command import command_argv

        self._no_cell(args, cell)
        if args.agent not in HOOK_AGENTS:
            raise MadohubValueError(
                f"agent {args.agent!r} has no hooks madohub_nb knows; agents with hooks: "
                f"{', '.join(HOOK_AGENTS)} (its turns are told from its records or screen)"
            )
        print(opt_in_snippet(args.agent, command_argv()), end="")

    def _workflow(self, args: argparse.Namespace, cell: str) -> Any:
        """``save FILE``: the hub's wiring to a file; ``load FILE``: a checked Workflow;
        ``run FILE``: load it and start it in the kernel's hub (its routes returned)."""
        from ..pipeline.workflow import Workflow

        self._no_cell(args, cell)
        if args.verb == "save":
            path = Path(args.file)
            digest = self.hub().workflow(name=path.stem).save(path)
            print(f"workflow saved to {path} (sha256 {digest[:12]})")
            return None
        workflow = Workflow.load(args.file)
        return workflow if args.verb == "load" else self.hub().run(workflow)

    def _close(self, args: argparse.Namespace, cell: str) -> None:
        from .registry import registry

        self._no_cell(args, cell)
        if registry.current is None:
            print("no hub is open")
            return
        summary = registry.reset()
        print("hub closed (its routes stopped, the tiles it created killed)")
        if summary is not None and (summary.worktrees_kept or summary.worktrees_removed):
            print(summary)


def load_ipython_extension(ip: Any) -> None:
    """``%load_ext madohub_nb``: register ``%madohub`` and the ``MadoHub`` settings."""
    config.register(ip)
    ip.register_magics(MadohubMagics)
    register_completer(ip)


def unload_ipython_extension(ip: Any) -> None:
    """``%unload_ext madohub_nb``: remove ``%madohub`` (the hub and its routes stay)."""
    magics = ip.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("madohub", None)
    ip.magics_manager.registry.pop(MadohubMagics.__name__, None)
    unregister_completer(ip)
    config.unregister(ip)


MadohubMagics.madohub.__doc__ = full_help()
"""``%madohub?`` shows every command, every option with its default, the placeholders."""
