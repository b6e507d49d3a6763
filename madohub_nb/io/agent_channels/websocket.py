"""A small WebSocket client (RFC 6455) over a unix socket: what Codex's app-server speaks.

``codex app-server --listen unix://PATH`` answers an HTTP Upgrade on ``GET /`` and then
carries one JSON-RPC message per text message (raw JSON lines get EOF; REAL-AGENTS.md).
The venv has no WebSocket package, and this needs little of one: text messages, masking,
fragments, ping/pong and the closing handshake, on :func:`asyncio.open_unix_connection`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import struct
from typing import Final

from .base import ChannelError

_GUID: Final = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
"""RFC 6455 section 1.3: the accept key is base64(sha1(key + this))."""
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
"""A message larger than this is a protocol error (a broken peer, not an answer)."""
HANDSHAKE_MAX_BYTES: Final = 16 * 1024


class WebSocketClosed(ChannelError):
    """The WebSocket is closed (the peer closed it, the socket ended, or a protocol error)."""


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``Sec-WebSocket-Key: key``."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()


def encode_frame(opcode: int, payload: bytes, *, mask: bool = True, fin: bool = True) -> bytes:
    """One frame: a client's frames are masked (section 5.3), a server's are not."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    size, bit = len(payload), 0x80 if mask else 0
    if size < 126:
        head.append(bit | size)
    elif size < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", size)
    if not mask:
        return bytes(head) + payload
    key = os.urandom(4)
    return bytes(head) + key + _xor(payload, key)


def _xor(data: bytes, key: bytes) -> bytes:
    """``data`` masked (or unmasked) with the 4-byte ``key``."""
    if not data:
        return b""
    whole = (key * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(whole, "big")).to_bytes(len(data), "big")


async def read_frame(reader: asyncio.StreamReader) -> tuple[bool, int, bytes]:
    """``(fin, opcode, payload)`` of the next frame (unmasked if it was masked)."""
    first, second = await reader.readexactly(2)
    size = second & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", await reader.readexactly(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
    if size > MAX_MESSAGE_BYTES:
        raise WebSocketClosed(f"a WebSocket frame of {size} bytes (at most {MAX_MESSAGE_BYTES})")
    key = await reader.readexactly(4) if second & 0x80 else b""
    payload = await reader.readexactly(size)
    return bool(first & 0x80), first & 0x0F, _xor(payload, key) if key else payload


class UnixWebSocket:
    """A client WebSocket on a unix socket: :meth:`connect`, :meth:`send`, :meth:`recv`,
    :meth:`close`. One reader task calls :meth:`recv`; any task may :meth:`send`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._send_lock = asyncio.Lock()
        self.closed = False

    @classmethod
    async def connect(cls, socket_path: str) -> UnixWebSocket:
        """Open ``socket_path`` and upgrade it (``GET /``); :class:`ChannelError` when the
        server refuses or answers something else than ``101`` with the right accept key."""
        try:
            reader, writer = await asyncio.open_unix_connection(socket_path, limit=1 << 20)
        except OSError as exc:
            raise ChannelError(f"cannot connect to {socket_path!r}: {exc}") from exc
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        try:
            writer.write(request.encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            writer.close()
            raise ChannelError(f"no WebSocket handshake on {socket_path!r}: {exc}") from exc
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        if lines[0].split(" ")[1:2] != ["101"] or headers.get("sec-websocket-accept") != (
            accept_key(key)
        ):
            writer.close()
            raise ChannelError(
                f"{socket_path!r} answered the WebSocket upgrade with {lines[0]!r}: "
                "not a WebSocket server (is it `codex app-server --listen unix://...`?)"
            )
        return cls(reader, writer)

    async def send(self, text: str) -> None:
        """Send one text message (one masked frame)."""
        await self._send_frame(OP_TEXT, text.encode())

    async def _send_frame(self, opcode: int, payload: bytes) -> None:
        if self.closed:
            raise WebSocketClosed("the WebSocket is closed")
        async with self._send_lock:
            try:
                self._writer.write(encode_frame(opcode, payload))
                await self._writer.drain()
            except (OSError, RuntimeError) as exc:
                self.closed = True
                raise WebSocketClosed(f"the WebSocket broke while sending: {exc}") from exc

    async def recv(self) -> str:
        """The next text message (fragments joined; pings answered); raises
        :class:`WebSocketClosed` when the peer closes or the socket ends."""
        parts: list[bytes] = []
        opcode = None
        while True:
            try:
                fin, op, payload = await read_frame(self._reader)
            except (asyncio.IncompleteReadError, OSError) as exc:
                self.closed = True
                raise WebSocketClosed(f"the WebSocket ended: {exc}") from exc
            if op == OP_PING:
                with contextlib.suppress(WebSocketClosed):
                    await self._send_frame(OP_PONG, payload)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                with contextlib.suppress(WebSocketClosed):
                    await self._send_frame(OP_CLOSE, payload[:2])
                self.closed = True
                raise WebSocketClosed(f"the server closed the WebSocket (code {code})")
            if op in (OP_TEXT, OP_BINARY):
                if opcode is not None:
                    raise WebSocketClosed("a new WebSocket message inside a fragmented one")
                opcode = op
            elif op != OP_CONT or opcode is None:
                raise WebSocketClosed(f"an unexpected WebSocket frame (opcode {op:#x})")
            parts.append(payload)
            if sum(map(len, parts)) > MAX_MESSAGE_BYTES:
                raise WebSocketClosed(f"a WebSocket message over {MAX_MESSAGE_BYTES} bytes")
            if fin:
                try:
                    return b"".join(parts).decode()
                except UnicodeDecodeError as exc:
                    raise WebSocketClosed(f"a WebSocket message that is not UTF-8: {exc}") from exc

    async def close(self) -> None:
        """Send a close frame (1000) and drop the connection."""
        if not self.closed:
            with contextlib.suppress(WebSocketClosed):
                await self._send_frame(OP_CLOSE, struct.pack("!H", 1000))
        self.closed = True
        self._writer.close()
        with contextlib.suppress(OSError, RuntimeError):
            await self._writer.wait_closed()
