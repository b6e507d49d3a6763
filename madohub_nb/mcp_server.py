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
import contextlib
import json
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .agents.mcp_setup import (
    HOST_MCP_AGENTS,
    MCP_AGENTS,
    McpSetup,
    SystemLayers,
    http_server,
    mcp_setup,
)
from .errors import MadohubError, MadohubValueError
from .io.mcp import (
    MCP_HOST,
    MCP_PATH,
    SERVER_NAME,
    TOKEN_ENV,
    BearerGate,
    McpEndpoint,
    ToolRefused,
)
from .io.remote import SshMachine
from .pipeline.handoff import Handoff
from .pipeline.tile import McpLimits, check_mcp_limits
from .tile_registry import private_folder

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("madohub_nb")

START_TIMEOUT_S = 15.0
TOOLS: Final = ("list_agents", "send", "ask")
"""The agents ``hub.tile(..., host=, mcp=)`` starts with the hub's tools on a host."""
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


MachineLayers = tuple[dict[str, Any] | None, str | None]
"""The machine's own system settings (parsed) and system defaults (text) of an agent."""


def _machine_layers(layers: SystemLayers | None) -> MachineLayers:
    """What the machine's own system settings and defaults files of an agent hold (None:
    no such file), so the hub's file for the pane, which takes their place, carries them.
    A settings file that is not plain JSON (the agent takes comments too) is left out,
    with a warning."""
    if layers is None:
        return None, None
    settings_path, defaults_path = layers.paths(os.environ)
    settings: dict[str, Any] | None = None
    with contextlib.suppress(OSError):  # (none, or one it cannot read either)
        text = Path(settings_path).read_text(encoding="utf-8")
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            settings = parsed
        else:
            log.warning("mcp=: %s is no JSON object; the pane does not read it", settings_path)
    defaults = None
    with contextlib.suppress(OSError):  # (none, or one it cannot read either)
        defaults = Path(defaults_path).read_text(encoding="utf-8")
    return settings, defaults


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
        self._folder_secure = False

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
    def gate(self) -> BearerGate | None:
        """The token check in front of the server (None before it starts): its 401 count,
        each token's open sessions."""
        return self._endpoint.gate

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
        return {"mcpServers": {SERVER_NAME: http_server(url, token)}}

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
    ) -> McpSetup:  # fmt: skip
        """The command-line words (and pane environment) that start ``agent`` of ``tile``
        (on ``host`` if given: its URL is the host's forwarded port, its files are written
        there) with the hub's tools and a new token, never in the user's settings files, and
        with no permission prompt for the three tools (the user opted in with ``mcp=``; the
        hub's checks apply to every call): see :func:`~madohub_nb.agents.mcp_setup.mcp_setup`,
        agent by agent. Its files are written (0600) into a private folder of the hub's,
        removed by ``close()``."""
        if agent not in MCP_AGENTS:
            raise MadohubValueError(
                f"mcp= starts an agent with the hub's tools; {agent or 'this command'!r} is not "
                f"one the hub can configure yet (it can: {', '.join(MCP_AGENTS)}); "
                "give one of those as agent=, or start it yourself with "
                "hub.mcp.grant(name) and hub.mcp.client_config(name)"
            )
        if host is not None and agent not in HOST_MCP_AGENTS:
            raise MadohubValueError(
                f"mcp= on a host starts {', '.join(HOST_MCP_AGENTS)} with the hub's tools; "
                f"{agent!r} is set up there only on this machine for now (Gemini CLI and Qwen "
                "Code read a system settings layer of their machine that the hub stands in "
                "for); start it here, or on the host yourself with hub.mcp.grant(name) and "
                "hub.mcp.client_config(name)"
            )
        needs_folder = bool(self._plan(agent, "", "/").files)
        place = self._host_place(host, needs_folder) if host is not None else None
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
        try:
            if place is not None:  # (its files on the host, in this hub's folder there)
                plan = self._plan(agent, token, f"{place.folder or '/'}/{tile}", url=place.url)
                if plan.files:
                    place.machine.write_private(dict(plan.files))
            else:
                plan = self._plan(agent, token, "/")
                if plan.files:
                    folder = self._tile_folder(tile, secure=plan.secure_dir)
                    machine = _machine_layers(plan.system_layers)
                    plan = self._plan(agent, token, str(folder), machine)
                    for path, text in plan.files.items():
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                        with os.fdopen(fd, "w") as out:
                            out.write(text)
        except BaseException:  # no agent starts with it: the token ends here
            self.handoff.revoke(tile)
            raise
        # (its files are written: the layer the pane gets is its words and variables)
        return McpSetup(plan.agent, args=plan.args, env=dict(plan.env), how=plan.how)

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

    def _plan(
        self,
        agent: str,
        token: str,
        folder: str,
        machine: MachineLayers = (None, None),
        url: str | None = None,
    ) -> McpSetup:
        plan = mcp_setup(
            agent, url or self.url, token, folder,
            server=SERVER_NAME, tools=TOOLS, token_env=TOKEN_ENV, machine=machine,
        )  # fmt: skip
        assert plan is not None  # (agent is one of MCP_AGENTS)
        return plan

    def _tile_folder(self, tile: str, *, secure: bool) -> Path:
        """``tile``'s 0700 folder in the hub's private one, made on first use where no
        folder above it is writable by group or others if there is such a place (Gemini
        CLI skips settings elsewhere: ``secure`` requires it)."""
        import shutil
        import tempfile

        if self._folder is None:
            made = private_folder("madohub-mcp-", secure=True)
            self._folder_secure = made is not None
            self._folder = Path(made or tempfile.mkdtemp(prefix="madohub-mcp-"))
        if secure and not self._folder_secure:
            raise MadohubValueError(
                "mcp=: no private folder without a group- or world-writable parent was found "
                "for the agent's MCP settings (it skips them elsewhere); set $XDG_RUNTIME_DIR "
                "to a 0700 folder"
            )
        path = self._folder / tile
        shutil.rmtree(path, ignore_errors=True)  # (a tile made again: its old files go)
        path.mkdir(mode=0o700)
        return path

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
        import shutil

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
