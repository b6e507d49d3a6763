"""``hub.tile``'s work: check a tile's options, then start a new pane or adopt one.

A new pane may get the hub's MCP tools (``mcp=``): its token and launch layer are made
before the pane starts, and end with it if it does not. An adopted pane takes no option
that only a new pane can (``command=``, ``cwd=``, ``env=``, ``worktree=``, ``mcp=``,
``hooks=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .agents.detect import kind_from_command
from .agents.profiles import known_kinds
from .defaults import check_choice
from .errors import MadohubValueError
from .pipeline.options import with_defaults
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
from .tile_registry import ADOPTED_HOOKS, TileRegistry

ADOPTED_CHANNEL = (
    "channel=True is for panes the hub starts (with the arguments that open the agent's "
    "channel); an adopted pane's prompts are typed: there is no safe way to find the channel "
    "of an agent the hub did not start"
)

if TYPE_CHECKING:
    from .mcp_server import HubMcp


def start_tile(
    tiles: TileRegistry,
    mcp: Callable[[], HubMcp],
    socket_name: str | None,
    name: str,
    given: Mapping[str, Any],
) -> Tile:
    """The tile ``name`` made with the options ``given`` (``hub.tile``'s, by name), in
    ``tiles``; ``mcp``: the hub's MCP server (asked only for a tile with ``mcp=``)."""
    o = with_defaults("tile", given)
    agent, command, cwd, env, pane = o["agent"], o["command"], o["cwd"], o["env"], o["pane"]
    host, hooks, worktree, channel = o["host"], o["hooks"], o["worktree"], o["channel"]
    if agent is not None:
        check_choice("agent kind", agent, known_kinds())
    options = tile_options(o["ready_quiet_ms"], o["ready_pattern"], o["completion_pattern"])
    reach = check_mcp_option(o["mcp"])
    limits = check_mcp_limits(reach, o["mcp_max_rounds"], o["mcp_cooldown_ms"])
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
            tiles.check_name_free(name)
            kind = agent or kind_from_command(command)
            setup = mcp().agent_setup(name, kind, reach, o["allow_shell"], host, limits)
            if clash := sorted(set(setup.env) & set(env or {})):
                mcp().revoke(name)
                raise MadohubValueError(
                    f"env= sets {', '.join(clash)}, which mcp= needs for {kind}; leave it out"
                )
            mcp_layer = setup
        try:
            tile = tiles.create(
                name,
                agent,
                command,
                workdir,
                env,
                host,
                hooks,
                branch,
                mcp=mcp_layer,
                channel=channel,
            )
        except BaseException:
            if reach is not False:  # no tile: its token ends with it
                mcp().revoke(name)
            raise
    elif worktree not in (None, False):
        raise MadohubValueError("worktree= makes a new pane's worktree; pane= adopts one")
    elif hooks is True:
        raise MadohubValueError(ADOPTED_HOOKS)
    elif channel is True:
        raise MadohubValueError(ADOPTED_CHANNEL)
    elif command is not None or cwd is not None or env:
        raise MadohubValueError("pane= adopts; command=, cwd= and env= only apply to new panes")
    else:
        check_tile_name(name)
        ref = pane if host is not None else pane_reference(pane, socket_name)
        tile = tiles.adopt(name, ref, agent, host)
    tile.ready_quiet_ms, tile.ready_pattern, tile.completion_pattern = options
    return tile
