"""``hub.mcp``: the hub's MCP server, started on first use, ended by ``close()``.

It joins the transport (:class:`~madohub_nb.io.mcp.McpEndpoint`, streamable HTTP on
127.0.0.1, on the engine's loop) to the tools' work
(:class:`~madohub_nb.pipeline.handoff.Handoff`) and hands out the tiles' tokens.

A tile on a remote host reaches the server through the host's link: the host's ssh
master carries a port of the host's 127.0.0.1 back to the server's
(``ssh -O forward -R 127.0.0.1:0:127.0.0.1:PORT``, made again on the same port after a
reconnect), and the agent's private config lives on the host, in a 0700 folder of the
hub's there. The forward and that folder end with the hub.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .errors import MadohubError, MadohubValueError
from .io.mcp import MCP_HOST, MCP_PATH, SERVER_NAME, TOKEN_ENV, McpEndpoint, ToolRefused
from .io.remote import SshMachine
from .pipeline.handoff import Handoff
from .pipeline.tile import McpLimits, check_mcp_limits

if TYPE_CHECKING:
    from .runtime import Runtime

START_TIMEOUT_S = 15.0
TOOLS: Final = ("list_agents", "send", "ask")
AGENTS_WITH_MCP: Final = ("claude", "codex")
"""The agents ``hub.tile(..., mcp=...)`` can start with the hub's tools today."""
HOST_CONFIG_DIR: Final = "~/.cache/madohub_nb/mcp"
"""Where a host keeps the private (0700) folder of this hub's agents' MCP configs."""


@dataclass(frozen=True)
class _HostPlace:
    """A host's way to the server: the port on its 127.0.0.1 its link carries back here, and
    the private folder of this hub's config files there (made on its first Claude tile)."""

    machine: SshMachine
    port: int
    folder: str | None = None

    @property
    def url(self) -> str:
        return f"http://{MCP_HOST}:{self.port}{MCP_PATH}"


@dataclass(frozen=True)
class AgentSetup:
    """What starts one agent with the hub's tools: words after its command, its pane's env."""

    args: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class McpPair:
    """One caller → target pair of MCP calls, as the dashboard shows a route."""

    id: str
    source: str
    target: str
    rounds: int
    max_rounds: int
    trigger: str = "mcp"

    @property
    def state(self) -> str:
        """``active``, or ``exhausted`` once the caller's ``max_rounds`` calls were made."""
        return "exhausted" if self.rounds >= self.max_rounds else "active"


class HubMcp:
    """The MCP server of one hub: ``url``, the tiles' tokens, loop protection's reset."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self.handoff = Handoff(
            runtime.services, lambda: runtime.tiles.tiles, lambda name: runtime.settings[name]
        )
        self._endpoint = McpEndpoint(self.handoff)
        self._folder: Path | None = None
        """Private (0700) folder of the agents' MCP config files; removed by close()."""
        self._hosts: dict[str, _HostPlace] = {}
        """Each host whose tiles were started with mcp=: its forwarded port, its folder."""
        self._hosts_lock = threading.Lock()
        """Held while a host's forward and folder are made (two tiles never make two)."""
        self._tile_hosts: dict[str, str] = {}
        """The host of each tile started there with mcp= (its config names the host's URL)."""

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/mcp``; the server starts on the first look."""
        if self._endpoint.url is None:
            if self._rt.closed:
                raise MadohubError("this hub is closed; its MCP server is gone")
            self._rt.engine.run_sync(self._endpoint.start(), START_TIMEOUT_S)
        assert self._endpoint.url is not None
        return self._endpoint.url

    @property
    def started(self) -> bool:
        return self._endpoint.url is not None

    def grant(self, tile: str, reach: bool | list[str] = True, *, allow_shell: bool = False) -> str:
        """A new bearer token for ``tile`` (its old one ends): who it is when it calls.

        ``reach``: True for every agent tile but shells and terminals, or the names it may
        reach (a shell among them only with ``allow_shell=True``)."""
        try:
            return self.handoff.grant(tile, reach, allow_shell=allow_shell)
        except ToolRefused as exc:
            raise MadohubValueError(str(exc)) from None

    def revoke(self, tile: str) -> None:
        """``tile``'s token ends: its calls are refused from now on."""
        self.handoff.revoke(tile)

    def token(self, tile: str) -> str | None:
        """``tile``'s bearer token (None: it has none)."""
        return self.handoff.token(tile)

    def limits(self, tile: str) -> McpLimits:
        """``tile``'s loop protection as a caller now: ``max_rounds`` calls to each target
        within a conversation, ``cooldown_ms`` apart (its own, else the hub's
        ``mcp_max_rounds`` / ``mcp_cooldown_ms``)."""
        self._rt.tiles.named(tile, "MCP")
        return self.handoff.limits(tile)

    def set_limits(
        self, tile: str, max_rounds: int | None = None, cooldown_ms: int | None = None
    ) -> McpLimits:
        """Give ``tile``'s calls their own loop protection, from its next call on (None: the
        hub's setting; both are set by each call, as ``hub.tile(..., mcp_max_rounds=,
        mcp_cooldown_ms=)`` set them); the limits now."""
        self._rt.tiles.named(tile, "MCP")
        self.handoff.set_limits(tile, check_mcp_limits(True, max_rounds, cooldown_ms))
        return self.handoff.limits(tile)

    def client_config(self, tile: str) -> dict[str, Any]:
        """The ``mcpServers`` entry an agent of ``tile`` connects with (url and its token);
        for a tile started on a host with ``mcp=``, the URL is the host's forwarded port."""
        token = self.token(tile)
        if token is None:
            raise MadohubValueError(f"{tile!r} has no MCP token; hub.mcp.grant({tile!r}) makes one")
        host = self._tile_hosts.get(tile)
        url = self._hosts[host].url if host in self._hosts else self.url
        return {
            "mcpServers": {
                SERVER_NAME: {
                    "type": "http",
                    "url": url,
                    "headers": {"Authorization": f"Bearer {token}"},
                }
            }
        }

    def bridge_config(self, tile: str) -> dict[str, Any]:
        """The ``mcpServers`` entry of the stdio bridge for an agent that only speaks stdio:
        ``python -m madohub_nb.io.mcp_bridge <url>``, the token in its environment."""
        token = self.token(tile)
        if token is None:
            raise MadohubValueError(f"{tile!r} has no MCP token; hub.mcp.grant({tile!r}) makes one")
        command = [sys.executable, "-m", "madohub_nb.io.mcp_bridge", self.url]
        server = {"type": "stdio", "command": command[0], "args": command[1:]}
        return {"mcpServers": {SERVER_NAME: {**server, "env": {TOKEN_ENV: token}}}}

    def client_config_json(self, tile: str) -> str:
        return json.dumps(self.client_config(tile))

    def agent_setup(
        self, tile: str, agent: str | None, reach: bool | list[str], allow_shell: bool,
        host: str | None = None, limits: McpLimits | None = None,
    ) -> AgentSetup:  # fmt: skip
        """The command-line words (and pane environment) that start ``agent`` of ``tile``
        (on ``host`` if given: its URL is the host's forwarded port, its config file is
        written there) with the hub's tools and a new token, never in the user's settings
        files:

        - Claude Code: ``--mcp-config`` a private file of the hub's (0600) holding the URL
          and the token, and the tools pre-allowed (2.1.332's ``auto`` mode refuses MCP
          calls offline; a pre-allowed tool runs in every mode, REAL-AGENTS.md);
        - Codex: ``-c mcp_servers.madohub.…`` with the URL, ``bearer_token_env_var`` naming
          ``MADOHUB_MCP_TOKEN`` (the token itself is in the pane's environment, never on its
          command line) and ``default_tools_approval_mode = "approve"`` (no prompt)."""
        if agent not in AGENTS_WITH_MCP:
            raise MadohubValueError(
                f"mcp= starts an agent with the hub's tools; {agent or 'this command'!r} is not "
                f"one the hub can configure yet (it can: {', '.join(AGENTS_WITH_MCP)}); "
                "give agent='claude' or agent='codex'"
            )
        place = self._host_place(host, agent == "claude") if host is not None else None
        try:
            token = self.handoff.grant(tile, reach, allow_shell=allow_shell, known=False)
        except ToolRefused as exc:
            raise MadohubValueError(str(exc)) from None
        self._rt.log.register_secret(token)
        self.handoff.set_limits(tile, limits or McpLimits())
        if host is not None:
            self._tile_hosts[tile] = host
        else:
            self._tile_hosts.pop(tile, None)
        if agent == "codex":
            server = f"mcp_servers.{SERVER_NAME}"
            options = {
                "url": place.url if place is not None else self.url,
                "bearer_token_env_var": TOKEN_ENV,
                "default_tools_approval_mode": "approve",
            }
            words = [w for k, v in options.items() for w in ("-c", f"{server}.{k}={json.dumps(v)}")]
            return AgentSetup(shlex.join(words), {TOKEN_ENV: token})
        if place is not None:
            assert place.folder is not None
            path = f"{place.folder}/{tile}.json"
            place.machine.write_private({path: self.client_config_json(tile)})
        else:
            path = str(self._local_config(tile))
        allowed = ",".join(f"mcp__{SERVER_NAME}__{t}" for t in TOOLS)
        return AgentSetup(shlex.join(["--mcp-config", path, "--allowedTools", allowed]))

    def _local_config(self, tile: str) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="madohub-mcp-"))
        path = self._folder / f"{tile}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(self.client_config(tile), out)
        return path

    def _host_place(self, host: str, folder: bool) -> _HostPlace:
        """``host``'s forwarded port (made on first use), and its private folder if
        ``folder``; a clear error when the host's link cannot carry the port back."""
        self.url  # noqa: B018 (the server runs: its port is what the host forwards)
        port = self._endpoint.port
        assert port is not None
        with self._hosts_lock:
            return self._host_place_locked(host, port, folder)

    def _host_place_locked(self, host: str, port: int, folder: bool) -> _HostPlace:
        place = self._hosts.get(host)
        if place is None:
            machine = self._rt.tiles.host_link(host).machine
            there = machine.forward_port(port)
            if there is None:
                raise MadohubError(
                    f"host {host!r} did not carry the hub's MCP port back over its ssh link "
                    f"(ssh -R {MCP_HOST}:0:{MCP_HOST}:{port}): "
                    f"{machine.forward_error or 'no reason given'}; its agents cannot call the "
                    "hub. The host's sshd must allow remote TCP forwarding (AllowTcpForwarding "
                    "yes or remote); or start the tile without mcp="
                )
            place = _HostPlace(machine, there)
        if folder and place.folder is None:
            made = place.machine.make_private_folder(HOST_CONFIG_DIR, f"{self._rt.session_name}-")
            place = _HostPlace(place.machine, place.port, made)
        self._hosts[host] = place
        return place

    def pair(self, route_id: str) -> McpPair:
        """The pair of ``route_id`` (``mcp:<caller>-><target>``): its calls of this conversation."""
        caller, arrow, target = route_id.removeprefix("mcp:").partition("->")
        if not route_id.startswith("mcp:") or not arrow or not caller or not target:
            raise MadohubValueError(
                f"an MCP pair's id is 'mcp:<caller>-><target>' (e.g. 'mcp:lead->reviewer'), "
                f"got {route_id!r}"
            )
        max_rounds = self.handoff.limits(caller).max_rounds or 0
        rounds = self.handoff.rounds(caller, target)
        return McpPair(route_id, caller, target, rounds, max_rounds)

    def reset(self) -> None:
        """A new conversation: every pair's ``mcp_max_rounds`` count starts again."""
        self._rt.engine.call_soon(self.handoff.reset)

    async def close(self) -> None:
        """End the server (engine loop), the hosts' forwards and config folders (before their
        links close: over their masters); the ears of late answers end with the engine."""
        await self._endpoint.stop()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        places, self._hosts = self._hosts, {}
        port = self._endpoint.port
        await asyncio.gather(
            *(asyncio.to_thread(_end_place, p, port) for p in places.values()),
            return_exceptions=True,
        )

    def __repr__(self) -> str:
        where = self._endpoint.url or "not started"
        return f"<HubMcp {where} callers={self.handoff.callers}>"


def _end_place(place: _HostPlace, port: int | None) -> None:
    """A host's forward and config folder go (bounded; a host that is gone keeps nothing
    of ours listening: the forward ended with its ssh connection)."""
    if port is not None:
        place.machine.cancel_port(port)
    if place.folder is not None and place.machine.reachable:
        place.machine.remove_trees((place.folder,))
