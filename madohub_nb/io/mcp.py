"""The hub's MCP endpoint: streamable HTTP on 127.0.0.1, served on the engine's loop.

This module is the transport only: the official ``mcp`` SDK's ``MCPServer`` with
three tools whose work is done by a :class:`HandoffTools` (the pipeline's
:class:`~madohub_nb.pipeline.handoff.Handoff`), and uvicorn serving it on a socket
bound to the loopback address. Each call hands the tools the caller's bearer token
(``Authorization: Bearer …``), taken from the HTTP request that carried the call;
the tools decide who that is. A refusal is a :class:`ToolRefused`, which the
caller sees as a tool error (``isError``), never as a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Mapping
from typing import Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ..engine import spawn
from ..errors import MadohubError

log = logging.getLogger("madohub_nb")

MCP_HOST = "127.0.0.1"
"""The only address the endpoint listens on: agents on this machine (or a forward to it)."""
MCP_PATH = "/mcp"
SERVER_NAME = "madohub"
"""Claude Code names a tool ``mcp__<server>__<tool>``: ``mcp__madohub__ask``."""
STOP_TIMEOUT_S = 0.5
TOKEN_ENV = "MADOHUB_MCP_TOKEN"
"""Where an agent's bearer token is kept in its environment (Codex's ``bearer_token_env_var``,
the stdio bridge's): never on a command line."""


class ToolRefused(Exception):
    """A call the hub refuses: its message is what the calling agent reads."""


class HandoffTools(Protocol):
    """What the endpoint's tools do; ``token`` is the caller's bearer token (None: none sent)."""

    async def list_agents(self, token: str | None) -> list[dict[str, str]]: ...

    async def send(self, token: str | None, to: str, text: str) -> str: ...

    async def ask(self, token: str | None, to: str, text: str, timeout_s: float) -> str: ...


def bearer_token(headers: Mapping[str, str] | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None when there is none."""
    if not headers:
        return None
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _build_server(tools: HandoffTools) -> Any:
    server: Any = MCPServer(
        SERVER_NAME,
        instructions=(
            "The madohub hub: reach the other agents of this notebook. list_agents names "
            "them; send types a message into one; ask types it and returns that agent's "
            "next whole answer."
        ),
        log_level="WARNING",
    )

    async def call(ctx: Context, work: Any) -> Any:
        try:
            return await work(bearer_token(ctx.headers))
        except (ToolRefused, MadohubError) as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # a bug: the caller still gets a tool error, the hub a log line
            log.exception("madohub_nb MCP tool failed")
            raise ToolError(f"the hub failed on this call: {type(exc).__name__}: {exc}") from None

    @server.tool(structured_output=False)
    async def list_agents(ctx: Context) -> list[dict[str, str]]:
        """The agents this caller may reach: name, agent kind and state (idle, busy...)."""
        return await call(ctx, tools.list_agents)

    @server.tool(structured_output=False)
    async def send(to: str, text: str, ctx: Context) -> str:
        """Type ``text`` into agent ``to`` as a prompt; returns "delivered" (or the error)."""
        return await call(ctx, lambda token: tools.send(token, to, text))

    @server.tool(structured_output=False)
    async def ask(to: str, text: str, ctx: Context, timeout_s: float = 600.0) -> str:
        """Type ``text`` into agent ``to`` and wait (up to ``timeout_s``) for its next whole
        answer, which is returned."""
        return await call(ctx, lambda token: tools.ask(token, to, text, timeout_s))

    return server


class McpEndpoint:
    """The MCP server of one hub: ``url`` once :meth:`start` returned; :meth:`stop` ends it."""

    def __init__(self, tools: HandoffTools) -> None:
        self._tools = tools
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self.url: str | None = None
        self.port: int | None = None

    async def start(self) -> str:
        """Bind 127.0.0.1 on a free port and serve (engine loop only); returns the URL."""
        if self.url is not None:
            return self.url
        import uvicorn

        app = _build_server(self._tools).streamable_http_app(
            streamable_http_path=MCP_PATH, host=MCP_HOST
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((MCP_HOST, 0))
        config = uvicorn.Config(
            app, log_config=None, log_level=logging.WARNING, lifespan="on", access_log=False
        )
        # (After the Config, which sets the level.) Its "Exception in ASGI application" at
        # close is an agent's event stream cut off (Claude Code keeps a GET open); the
        # hub's own failures are logged by the hub.
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
        self._server = uvicorn.Server(config)
        self._task = spawn(self._server.serve(sockets=[sock]), name="madohub mcp")
        while not self._server.started:
            if self._task.done():  # it could not start: say why
                sock.close()
                self._task.result()
                raise OSError("the MCP server stopped before it started")
            await asyncio.sleep(0.01)
        self.port = sock.getsockname()[1]
        self.url = f"http://{MCP_HOST}:{self.port}{MCP_PATH}"
        return self.url

    async def stop(self) -> None:
        """End the server and its open sessions (engine loop only); idempotent."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        self._server.force_exit = True  # an agent's open event stream never ends by itself
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(self._task), STOP_TIMEOUT_S)
        if not self._task.done():
            self._task.cancel()
        self._server = self._task = None
