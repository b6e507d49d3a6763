"""The stdio bridge: the hub's three tools for an agent that only speaks MCP over stdio.

``python -m madohub_nb.io.mcp_bridge URL`` is an MCP server on its stdin/stdout whose
``list_agents``, ``send`` and ``ask`` each forward to the hub's streamable-HTTP endpoint
at ``URL`` (``http://127.0.0.1:PORT/mcp``, :attr:`hub.mcp.url`), carrying the bearer token
of :data:`~madohub_nb.io.mcp.TOKEN_ENV` from its environment (never its command line).
What the hub answers, a refusal included, is what the agent reads. The bridge holds no
state and makes no decision: every check is the hub's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any
from urllib.parse import urlparse

from .mcp import MCP_HOST, MCP_PATH, SERVER_NAME, TOKEN_ENV, UNAUTHORIZED_CODE

CONNECT_TIMEOUT_S = 10.0
READ_MARGIN_S = 30.0
"""How much longer than an ask's ``timeout_s`` the bridge waits for the hub's reply."""
LOOPBACK = frozenset({MCP_HOST, "localhost"})


def check_url(url: str) -> str:
    """The hub's endpoint URL, or ValueError saying what a bridge can reach."""
    parts = urlparse(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK or parts.port is None:
        raise ValueError(
            f"the bridge forwards to the hub's MCP server on this machine, "
            f"http://{MCP_HOST}:PORT{MCP_PATH} (hub.mcp.url), got {url!r}"
        )
    return url


async def forward(url: str, token: str | None, tool: str, args: dict[str, Any]) -> str:
    """Call ``tool`` on the hub; its text, or ToolError with the hub's own words."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.mcpserver.exceptions import ToolError

    if not token:
        raise ToolError(
            f"the bridge has no token: start it with {TOKEN_ENV} in its environment "
            "(hub.mcp.bridge_config(name) gives it); nothing was typed"
        )
    read_s = float(args.get("timeout_s", 0) or 0) + READ_MARGIN_S
    timeout = httpx2.Timeout(CONNECT_TIMEOUT_S, read=read_s)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                result = await client.call_tool(tool, args)
    except Exception as exc:
        refused = _unauthorized(exc)
        if refused is not None:  # the hub refused the token before any session: its words
            raise ToolError(f"{refused}; nothing was typed") from None
        raise ToolError(
            f"the hub's MCP server at {url} cannot be reached ({type(exc).__name__}: {exc}); "
            "is its hub still open? nothing was typed"
        ) from None
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        raise ToolError(text.removeprefix(f"Error executing tool {tool}: "))
    return text


def _unauthorized(exc: BaseException) -> str | None:
    """The hub's reason when it refused the token (HTTP 401, which the SDK raises as an
    ``MCPError`` of code ``UNAUTHORIZED_CODE``), found in a group too; None otherwise."""
    if getattr(exc, "code", None) == UNAUTHORIZED_CODE:
        return str(getattr(exc, "message", "") or "").removeprefix("Unauthorized: ") or None
    for inner in getattr(exc, "exceptions", ()):
        found = _unauthorized(inner)
        if found is not None:
            return found
    return None


def build_bridge(url: str, token: str | None) -> Any:
    """The stdio server: the hub's tools under the same names, forwarded."""
    from mcp.server.mcpserver import MCPServer

    server: Any = MCPServer(
        SERVER_NAME,
        instructions=(
            "The madohub hub (through its stdio bridge): list_agents names the agents of this "
            "notebook you may reach; send types a message into one; ask types it and "
            "returns that agent's next whole answer."
        ),
        log_level="WARNING",
    )

    @server.tool(structured_output=False)
    async def list_agents() -> str:
        """The agents this caller may reach: name, agent kind and state (idle, busy...)."""
        return await forward(url, token, "list_agents", {})

    @server.tool(structured_output=False)
    async def send(to: str, text: str) -> str:
        """Type ``text`` into agent ``to`` as a prompt; returns "delivered" (or the error)."""
        return await forward(url, token, "send", {"to": to, "text": text})

    @server.tool(structured_output=False)
    async def ask(to: str, text: str, timeout_s: float = 600.0) -> str:
        """Type ``text`` into agent ``to`` and wait (up to ``timeout_s``) for its next whole
        answer, which is returned."""
        return await forward(url, token, "ask", {"to": to, "text": text, "timeout_s": timeout_s})

    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m madohub_nb.io.mcp_bridge",
        description=f"The hub's MCP tools over stdio; the token comes from ${TOKEN_ENV}.",
    )
    parser.add_argument("url", help=f"the hub's MCP endpoint (hub.mcp.url): http://{MCP_HOST}:PORT")
    args = parser.parse_args(argv)
    try:
        url = check_url(args.url)
    except ValueError as exc:
        parser.error(str(exc))
    build_bridge(url, os.environ.get(TOKEN_ENV)).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
