"""``hub.mcp``: the hub's MCP server, started on first use, ended by ``close()``.

It joins the transport (:class:`~madohub_nb.io.mcp.McpEndpoint`, streamable HTTP on
127.0.0.1, on the engine's loop) to the tools' work
(:class:`~madohub_nb.pipeline.handoff.Handoff`) and hands out the tiles' tokens.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .agents.mcp_setup import MCP_AGENTS, McpSetup, SystemLayers, http_server, mcp_setup
from .errors import MadohubError, MadohubValueError
from .io.mcp import SERVER_NAME, TOKEN_ENV, McpEndpoint, ToolRefused
from .pipeline.handoff import Handoff
from .tiles import private_folder

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("madohub_nb")

START_TIMEOUT_S = 15.0
TOOLS: Final = ("list_agents", "send", "ask")
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
        """``active``, or ``exhausted`` once ``mcp_max_rounds`` calls were made."""
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

    def client_config(self, tile: str) -> dict[str, Any]:
        """The ``mcpServers`` entry an agent of ``tile`` connects with (url and its token)."""
        token = self.token(tile)
        if token is None:
            raise MadohubValueError(f"{tile!r} has no MCP token; hub.mcp.grant({tile!r}) makes one")
        return {"mcpServers": {SERVER_NAME: http_server(self.url, token)}}

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
        self, tile: str, agent: str | None, reach: bool | list[str], allow_shell: bool
    ) -> AgentSetup:
        """The command-line words (and pane environment) that start ``agent`` of ``tile``
        with the hub's tools and a new token, never in the user's settings files, and with
        no permission prompt for the three tools (the user opted in with ``mcp=``; the hub's
        checks apply to every call): see :func:`~madohub_nb.agents.mcp_setup.mcp_setup`,
        agent by agent. Its files are written (0600) into a private folder of the hub's,
        removed by ``close()``."""
        if agent not in MCP_AGENTS:
            raise MadohubValueError(
                f"mcp= starts an agent with the hub's tools; {agent or 'this command'!r} is not "
                f"one the hub can configure yet (it can: {', '.join(MCP_AGENTS)}); "
                "give one of those as agent=, or start it yourself with "
                "hub.mcp.grant(name) and hub.mcp.client_config(name)"
            )
        try:
            token = self.handoff.grant(tile, reach, allow_shell=allow_shell, known=False)
        except ToolRefused as exc:
            raise MadohubValueError(str(exc)) from None
        self._rt.log.register_secret(token)
        plan = self._plan(agent, token, "/")
        try:
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
        return AgentSetup(shlex.join(plan.args), dict(plan.env))

    def _plan(
        self, agent: str, token: str, folder: str, machine: MachineLayers = (None, None)
    ) -> McpSetup:
        plan = mcp_setup(
            agent, self.url, token, folder,
            server=SERVER_NAME, tools=TOOLS, token_env=TOKEN_ENV, machine=machine,
        )  # fmt: skip
        assert plan is not None  # (agent is one of MCP_AGENTS)
        return plan

    def _tile_folder(self, tile: str, *, secure: bool) -> Path:
        """``tile``'s 0700 folder in the hub's private one, made on first use where no
        folder above it is writable by group or others if there is such a place (Gemini
        CLI skips settings elsewhere: ``secure`` requires it)."""
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
        max_rounds = int(self._rt.settings["mcp_max_rounds"])
        rounds = self.handoff.rounds(caller, target)
        return McpPair(route_id, caller, target, rounds, max_rounds)

    def reset(self) -> None:
        """A new conversation: every pair's ``mcp_max_rounds`` count starts again."""
        self._rt.engine.call_soon(self.handoff.reset)

    async def close(self) -> None:
        """End the server (engine loop); the ears of late answers end with the engine."""
        await self._endpoint.stop()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def __repr__(self) -> str:
        where = self._endpoint.url or "not started"
        return f"<HubMcp {where} callers={self.handoff.callers}>"
