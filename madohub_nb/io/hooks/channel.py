"""The hub's private hook channel: agents' own hooks, pushed to the hub over a Unix socket.

A :class:`HookChannel` listens on a socket in a fresh 0700 folder (the socket 0600).
Each tile gets a random token (:meth:`HookChannel.register`); the hub puts it, with the
socket path, in the pane's environment (:meth:`HookChannel.env`), and the agent's hook
runs ``io/hooks/command.py``, which sends one message. A message is evidence, never a
command: it is accepted only with a known token, the ``$TMUX_PANE`` that token was
issued for, a nonce not seen before and a fresh timestamp; its payload is parsed as
JSON data and nothing in it is ever run. Accepted events go to a callback at once
(no polling) as a :class:`HookEvent`.

Bad input never breaks the channel: every connection has a byte cap and a deadline,
at most ``max_connections`` are read at once (more are closed at once), and every
refusal is counted in :attr:`HookChannel.counts` by reason. Everything runs on the
engine loop; the only file work (making and removing the folder) runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...agents.hooks import HOOK_KINDS, describe
from ...errors import MadohubError, MadohubValueError
from .command import ENV_SOCKET, ENV_TOKEN, MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES, PROTOCOL_VERSION

log = logging.getLogger("madohub_nb")

SOCKET_NAME = "hooks.sock"
MAX_UNIX_PATH = 100
"""A Unix socket path must fit in ``sun_path`` (108 bytes on Linux); keep a margin."""
NONCE_MAX_CHARS = 64


@dataclass(frozen=True)
class HookLimits:
    """The channel's bounds: bytes, time and concurrency per connection, replay memory."""

    max_header_bytes: int = MAX_HEADER_BYTES
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    read_timeout_s: float = 2.0
    max_connections: int = 32
    max_age_s: float | None = 120.0
    """A message whose ``sent_at`` is further than this from now is stale (None: no check)."""
    nonce_memory: int = 65536
    """How many nonces are remembered to refuse replays (oldest forgotten first)."""


@dataclass(frozen=True)
class HookEvent:
    """One accepted hook: which tile's pane said what, and when it arrived.

    ``payload`` is the agent's own JSON object (at most ``max_payload_bytes``; empty
    when the hook command found it too large, then ``truncated`` is True). ``answer``
    is the turn's final text where the agent's payload carries it (Claude's
    ``last_assistant_message``, Codex's ``last-assistant-message``, Pi via madohub's
    extension); ``message`` a notification's text (Claude's "Claude needs your
    permission"). ``received_at`` is ``time.time()`` on arrival.
    """

    token: str = field(repr=False)
    pane: str
    agent: str
    kind: str
    payload: Mapping[str, Any]
    answer: str | None
    message: str | None
    session_id: str | None
    transcript_path: str | None
    turn_id: str | None
    truncated: bool
    received_at: float
    peer_pid: int | None = None


@dataclass
class _Registration:
    agent: str
    pane: str | None


class HookChannel:
    """The hub's hook server: start it on the engine loop, register tiles, get events pushed."""

    def __init__(
        self,
        on_event: Callable[[HookEvent], None],
        *,
        limits: HookLimits | None = None,
        base_dir: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._on_event = on_event
        self.limits = limits or HookLimits()
        self._base_dir = base_dir
        self._clock = clock
        self._lock = threading.Lock()
        self._tiles: dict[str, _Registration] = {}
        self._nonces: OrderedDict[str, None] = OrderedDict()
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._reading = 0
        self._folder: str | None = None
        self.counts: Counter[str] = Counter()
        """``accepted`` and one count per refusal reason (``token``, ``pane``, ``replay``, …)."""

    # lifecycle ------------------------------------------------------------------------
    @property
    def folder(self) -> str:
        """The private 0700 folder holding the socket (after :meth:`start`)."""
        if self._folder is None:
            raise MadohubError("the hook channel is not started; await channel.start() first")
        return self._folder

    @property
    def socket_path(self) -> str:
        """Where hooks connect (the pane's ``MADOHUB_HOOK_SOCKET``)."""
        return os.path.join(self.folder, SOCKET_NAME)

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    @property
    def reading(self) -> int:
        """How many connections are being read now (at most ``limits.max_connections``)."""
        return self._reading

    async def start(self) -> None:
        """Make the folder and socket (in a thread) and serve on the running loop."""
        if self._server is not None:
            return
        sock = await asyncio.to_thread(self._make_socket)
        self._server = await asyncio.start_unix_server(
            self._serve, sock=sock, limit=self.limits.max_header_bytes + 1
        )

    def _make_socket(self) -> socket.socket:
        import shutil
        import tempfile

        base = self._base_dir or os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
        if not os.path.isdir(base) or len(base) > MAX_UNIX_PATH - 40:
            base = tempfile.gettempdir()
        folder = tempfile.mkdtemp(prefix="madohub-hooks-", dir=base)
        os.chmod(folder, 0o700)
        path = os.path.join(folder, SOCKET_NAME)
        if len(path.encode()) > MAX_UNIX_PATH:
            shutil.rmtree(folder, ignore_errors=True)
            raise MadohubValueError(
                f"the hook socket path {path!r} is longer than {MAX_UNIX_PATH} bytes; "
                "pass a shorter base_dir (for example /tmp)"
            )
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o600)  # the folder is 0700 already, so there is no window
            sock.listen(128)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._folder = folder
        return sock

    async def close(self) -> None:
        """Stop serving, drop open connections, remove the folder (in a thread)."""
        import shutil

        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)
        if self._folder is not None:
            await asyncio.to_thread(shutil.rmtree, self._folder, True)

    # tiles ----------------------------------------------------------------------------
    def register(self, pane: str | None, agent: str) -> str:
        """A new random token for a tile of ``agent`` whose hooks run in ``pane`` (``%N``).

        ``pane`` may be None when the pane does not exist yet (its environment must
        hold the token when it starts): :meth:`bind` it then. Thread-safe.
        """
        import secrets

        if pane is not None:
            _check_pane(pane)
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._tiles[token] = _Registration(agent, pane)
        return token

    def bind(self, token: str, pane: str) -> None:
        """Tie ``token`` to the pane it was issued for, once that pane exists."""
        _check_pane(pane)
        with self._lock:
            reg = self._tiles.get(token)
            if reg is None:
                raise MadohubValueError(
                    "unknown hook token; make one with channel.register(pane, agent)"
                )
            reg.pane = pane

    def unregister(self, token: str) -> None:
        """Forget ``token``: its hooks are refused from now on (safe to call twice)."""
        with self._lock:
            self._tiles.pop(token, None)

    def env(self, token: str) -> dict[str, str]:
        """The pane environment a hook command needs: the token and the socket path."""
        return {ENV_TOKEN: token, ENV_SOCKET: self.socket_path}

    # serving --------------------------------------------------------------------------
    def _refuse(self, reason: str) -> None:
        self.counts[reason] += 1
        log.debug("madohub_nb hook channel refused a message: %s", reason)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._reading >= self.limits.max_connections:
            self._refuse("busy")
            writer.transport.abort()
            return
        self._reading += 1
        self._writers.add(writer)
        try:
            event = await asyncio.wait_for(self._read(reader, writer), self.limits.read_timeout_s)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            self._refuse("timeout")
            event = None
        except asyncio.IncompleteReadError:
            self._refuse("incomplete")
            event = None
        except (asyncio.LimitOverrunError, ValueError):
            self._refuse("oversize")
            event = None
        except (ConnectionError, OSError):
            self._refuse("connection")
            event = None
        finally:
            self._reading -= 1
            self._writers.discard(writer)
            writer.transport.abort()
        if event is not None:
            self.counts["accepted"] += 1
            try:
                self._on_event(event)
            except Exception:  # a broken listener must not break the channel
                log.exception("madohub_nb hook listener failed on %s", event.kind)

    async def _read(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> HookEvent | None:
        peer_pid, peer_uid = _peer(writer)
        if peer_uid is not None and peer_uid != os.getuid():
            self._refuse("peer")
            return None
        line = await reader.readuntil(b"\n")
        header = _parse_header(line)
        if header is None:
            self._refuse("malformed")
            return None
        size = header["size"]
        if size > self.limits.max_payload_bytes:
            self._refuse("oversize")
            return None
        with self._lock:
            reg = self._tiles.get(header["token"])
            agent, pane = (reg.agent, reg.pane) if reg is not None else ("", None)
        if reg is None:
            self._refuse("token")
            return None
        if pane is None or header["pane"] != pane:
            self._refuse("pane")
            return None
        if header["event"] not in HOOK_KINDS:
            self._refuse("kind")
            return None
        now = self._clock()
        max_age = self.limits.max_age_s
        if max_age is not None and abs(now - header["sent_at"]) > max_age:
            self._refuse("stale")
            return None
        nonce = header["nonce"]
        if nonce in self._nonces:  # checked and taken with no await between: no race
            self._refuse("replay")
            return None
        self._nonces[nonce] = None
        while len(self._nonces) > self.limits.nonce_memory:
            self._nonces.popitem(last=False)
        raw = await reader.readexactly(size) if size else b""
        payload: dict[str, Any] = {}
        if not header["truncated"]:
            parsed = _parse_payload(raw)
            if parsed is None:
                self._refuse("payload")
                return None
            payload = parsed
        facts = describe(agent, header["event"], payload)
        return HookEvent(
            token=header["token"],
            pane=pane,
            agent=agent,
            kind=header["event"],
            payload=payload,
            answer=facts.answer,
            message=facts.message,
            session_id=facts.session_id,
            transcript_path=facts.transcript_path,
            turn_id=facts.turn_id,
            truncated=bool(header["truncated"]),
            received_at=self._clock(),
            peer_pid=peer_pid,
        )


def _check_pane(pane: str) -> None:
    if not (isinstance(pane, str) and pane.startswith("%") and pane[1:].isdigit()):
        raise MadohubValueError(
            f"pane {pane!r} is not a tmux pane id; pass the pane's id like '%3' (its $TMUX_PANE)"
        )


def _peer(writer: asyncio.StreamWriter) -> tuple[int | None, int | None]:
    """The connecting process's pid and uid (``SO_PEERCRED``, Linux), else (None, None)."""
    sock = writer.get_extra_info("socket")
    option = getattr(socket, "SO_PEERCRED", None)
    if sock is None or option is None:
        return None, None
    try:
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, 12))
    except (OSError, struct.error):
        return None, None
    return pid, uid


def _parse_header(line: bytes) -> dict[str, Any] | None:
    """The header line as a checked dict, or None when anything is off."""
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(header, dict) or header.get("v") != PROTOCOL_VERSION:
        return None
    strings = ("token", "pane", "event", "nonce")
    if not all(isinstance(header.get(k), str) for k in strings):
        return None
    nonce = header["nonce"]
    size, sent_at, truncated = header.get("size"), header.get("sent_at"), header.get("truncated")
    if not (0 < len(nonce) <= NONCE_MAX_CHARS):
        return None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return None
    if isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)):
        return None
    if not isinstance(truncated, bool):
        return None
    return header


def _parse_payload(raw: bytes) -> dict[str, Any] | None:
    """The agent's payload as a JSON object (data only), or None."""
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None
