"""``hub.mcp``: the hub's MCP server, started on first use, ended by ``close()``.

It joins the transport (:class:`~madohub_nb.io.mcp.McpEndpoint`, streamable HTTP on
127.0.0.1, on the engine's loop) to the tools' work
(:class:`~madohub_nb.pipeline.handoff.Handoff`) and hands out the tiles' tokens.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .errors import MadohubError, MadohubValueError
from .io.mcp import SERVER_NAME, McpEndpoint, ToolRefused
from .pipeline.handoff import Handoff

if TYPE_CHECKING:
    from .runtime import Runtime

START_TIMEOUT_S = 15.0


class HubMcp:
    """The MCP server of one hub: ``url``, the tiles' tokens, loop protection's reset."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self.handoff = Handoff(
            runtime.services, lambda: runtime.tiles.tiles, lambda name: runtime.settings[name]
        )
        self._endpoint = McpEndpoint(self.handoff)

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

    def token(self, tile: str) -> str | None:
        """``tile``'s bearer token (None: it has none)."""
        return self.handoff.token(tile)

    def client_config(self, tile: str) -> dict[str, Any]:
        """The ``mcpServers`` entry an agent of ``tile`` connects with (url and its token)."""
        token = self.token(tile)
        if token is None:
            raise MadohubValueError(f"{tile!r} has no MCP token; hub.mcp.grant({tile!r}) makes one")
        return {
            "mcpServers": {
                SERVER_NAME: {
                    "type": "http",
                    "url": self.url,
                    "headers": {"Authorization": f"Bearer {token}"},
                }
            }
        }

    def client_config_json(self, tile: str) -> str:
        return json.dumps(self.client_config(tile))

    def reset(self) -> None:
        """A new conversation: every pair's ``mcp_max_rounds`` count starts again."""
        self._rt.engine.call_soon(self.handoff.reset)

    async def close(self) -> None:
        """End the server (engine loop); the ears of late answers end with the engine."""
        await self._endpoint.stop()

    def __repr__(self) -> str:
        where = self._endpoint.url or "not started"
        return f"<HubMcp {where} callers={self.handoff.callers}>"
