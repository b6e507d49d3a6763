"""The hub's MCP endpoint: streamable HTTP on 127.0.0.1, served on the engine's loop.

This module is the transport only: the official ``mcp`` SDK's ``MCPServer`` with
three tools whose work is done by a :class:`HandoffTools` (the pipeline's
:class:`~madohub_nb.pipeline.handoff.Handoff`), and uvicorn serving it on a socket
bound to the loopback address. Each call hands the tools the caller's bearer token
(``Authorization: Bearer …``), taken from the HTTP request that carried the call;
the tools decide who that is. A refusal is a :class:`ToolRefused`, which the
caller sees as a tool error (``isError``), never as a crash.

In front of the SDK's app, :class:`BearerGate` answers HTTP 401 to any request
without a token the hub gave, before the SDK sees it (no session is made for it),
and keeps at most :data:`SESSIONS_PER_TOKEN` sessions per token open (a new one
closes that token's oldest): a client without a token cannot use up the server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final, Protocol

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


SESSIONS_PER_TOKEN: Final = 8
"""The most MCP sessions one token keeps open; a new one closes its oldest (an agent that
reconnects is never locked out; one that opens sessions in a loop holds no more)."""
UNAUTHORIZED_CODE: Final = -32001
"""The JSON-RPC error code of the 401's body (the SDK's client raises it as an MCPError)."""
UNAUTHORIZED_NO_TOKEN: Final = (
    "this request carries no bearer token (an 'Authorization: Bearer <token>' header); the "
    "hub gives each tile it starts with mcp= its own (hub.mcp.grant gives one by hand)"
)
UNAUTHORIZED_BAD_TOKEN: Final = (
    "the bearer token is not one this hub gave (or its tile was closed and the token "
    "ended); hub.mcp.grant(name) gives a new one"
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class ToolRefused(Exception):
    """A call the hub refuses: its message is what the calling agent reads."""


class HandoffTools(Protocol):
    """What the endpoint's tools do; ``token`` is the caller's bearer token (None: none sent)."""

    async def list_agents(self, token: str | None) -> list[dict[str, str]]: ...

    async def send(self, token: str | None, to: str, text: str) -> str: ...

    async def ask(self, token: str | None, to: str, text: str, timeout_s: float) -> str: ...

    def knows(self, token: str) -> bool:
        """``token`` is one the hub gave and has not ended (the transport's check)."""
        ...


def bearer_token(headers: Mapping[str, str] | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None when there is none."""
    if not headers:
        return None
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class BearerGate:
    """ASGI middleware in front of the SDK's app: a request without a token the hub gave is
    answered 401 (``WWW-Authenticate: Bearer``, the hub's words in a JSON-RPC error) before
    the SDK sees it; each token keeps at most ``max_sessions`` sessions (its oldest is
    closed, by a DELETE of the protocol's own, when it opens one more)."""

    def __init__(
        self, app: Asgi, knows: Callable[[str], bool], max_sessions: int = SESSIONS_PER_TOKEN
    ) -> None:
        self._app = app
        self._knows = knows
        self._max_sessions = max_sessions
        self._sessions: dict[str, collections.OrderedDict[str, Scope]] = {}
        """token -> its open sessions' ids (oldest first), each with its opening request."""
        self.refused = 0
        """Requests answered 401 so far."""

    def sessions(self, token: str) -> list[str]:
        """The ids of the sessions ``token`` opened that are still counted (oldest first)."""
        return list(self._sessions.get(token, ()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # (lifespan)
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = bearer_token(headers)
        if token is None or not self._knows(token):
            self.refused += 1
            await _unauthorized(
                send, UNAUTHORIZED_NO_TOKEN if token is None else UNAUTHORIZED_BAD_TOKEN
            )
            return
        for gone in [t for t in self._sessions if t != token and not self._knows(t)]:
            del self._sessions[gone]  # (ended tokens: their sessions answer 401 from now on)
        session = headers.get("mcp-session-id")
        if session is not None:
            if scope.get("method") == "DELETE":
                self._sessions.get(token, {}).pop(session, None)
            await self._app(scope, receive, send)
            return
        opened: list[str] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for key, value in message.get("headers", ()):
                    if key.decode("latin-1").lower() == "mcp-session-id":
                        opened.append(value.decode("latin-1"))
            await send(message)

        await self._app(scope, receive, watch)
        if opened:
            await self._opened(token, opened[0], scope)

    async def _opened(self, token: str, session: str, scope: Scope) -> None:
        """Count ``token``'s new session; past the cap, close its oldest."""
        mine = self._sessions.setdefault(token, collections.OrderedDict())
        mine[session] = scope
        while len(mine) > self._max_sessions:
            oldest, opening = mine.popitem(last=False)
            log.info(
                "MCP: a token opened more than %d sessions; its oldest ends", self._max_sessions
            )
            await self._close(oldest, opening)

    async def _close(self, session: str, opening: Scope) -> None:
        """End ``session`` as its client would: a DELETE with its id (answered to no one)."""
        headers = [(k, v) for k, v in opening["headers"] if k.lower() != b"mcp-session-id"]
        scope = {
            **opening,
            "method": "DELETE",
            "headers": [*headers, (b"mcp-session-id", session.encode())],
        }

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: Message) -> None:
            return None

        with contextlib.suppress(Exception):
            await self._app(scope, receive, discard)


async def _unauthorized(send: Send, why: str) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": UNAUTHORIZED_CODE, "message": f"Unauthorized: {why}"},
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="madohub", error="invalid_token"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


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
        self.gate: BearerGate | None = None
        """The token check in front of the SDK (once started)."""

    async def start(self) -> str:
        """Bind 127.0.0.1 on a free port and serve (engine loop only); returns the URL."""
        if self.url is not None:
            return self.url
        import uvicorn

        app = _build_server(self._tools).streamable_http_app(
            streamable_http_path=MCP_PATH, host=MCP_HOST
        )
        self.gate = BearerGate(app, self._tools.knows)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((MCP_HOST, 0))
        config = uvicorn.Config(
            self.gate, log_config=None, log_level=logging.WARNING, lifespan="on", access_log=False
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
