"""The hook command an agent runs: one message to the hub's hook channel, then exit 0.

An agent (Claude Code's ``Stop`` hook, Codex's ``notify``, Gemini's ``AfterAgent``, ...)
runs ``python -I -S …/madohub_nb/io/hooks/command.py KIND [PAYLOAD]``. It reads the
agent's JSON from stdin (or from ``PAYLOAD``, Codex's way), adds ``$TMUX_PANE``, the
event kind, the tile's token (``MADOHUB_HOOK_TOKEN``) and a fresh nonce, and writes
one message to the hub's socket (``MADOHUB_HOOK_SOCKET``).

A hook must never block or fail the agent: every step is bounded in bytes and time,
nothing is printed (Claude reads a Stop hook's stdout as a decision), and the exit
status is always 0. This file imports only the standard library, so it runs by its
path without importing the package (whose import takes about a second); it also runs
as ``python -m madohub_nb.io.hooks.command``.

Wire format (one message per connection): a JSON header line, ``\\n``, then exactly
``size`` bytes of the agent's payload, as the agent wrote them.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Sequence

ENV_TOKEN = "MADOHUB_HOOK_TOKEN"
ENV_SOCKET = "MADOHUB_HOOK_SOCKET"
PROTOCOL_VERSION = 1

MAX_HEADER_BYTES = 4096
"""A header line longer than this is refused by the hub (and never written here)."""
MAX_PAYLOAD_BYTES = 1 << 20
"""The largest agent payload sent whole; a larger one is sent as ``truncated`` with no bytes."""
STDIN_TIMEOUT_S = 2.0
"""How long the agent may take to write (and close) its stdin payload."""
SEND_TIMEOUT_S = 1.0
"""Connect and send timeout: a hub that does not answer at once is skipped."""
HARD_DEADLINE_S = 5
"""Whatever happens, the process is gone after this many seconds (SIGALRM)."""


def command_argv(python: str | None = None) -> list[str]:
    """The argv prefix an agent runs (add the event kind): this file, by path, isolated.

    ``-I`` ignores ``PYTHON*`` variables and the user's site and keeps this folder off
    ``sys.path``; ``-S`` skips ``site`` (start-up in ~20 ms instead of the package's ~1 s).
    """
    return [python or sys.executable, "-I", "-S", os.path.abspath(__file__)]


def build_message(
    *,
    token: str,
    pane: str,
    kind: str,
    payload: bytes,
    truncated: bool = False,
    nonce: str | None = None,
    sent_at: float | None = None,
) -> bytes:
    """One wire message: the header line and the payload bytes."""
    import secrets

    header = {
        "v": PROTOCOL_VERSION,
        "token": token,
        "pane": pane,
        "event": kind,
        "nonce": nonce if nonce is not None else secrets.token_hex(16),
        "sent_at": time.time() if sent_at is None else sent_at,
        "size": len(payload),
        "truncated": truncated,
    }
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + payload


def read_payload(
    fd: int = 0, limit: int = MAX_PAYLOAD_BYTES, timeout_s: float = STDIN_TIMEOUT_S
) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes from ``fd`` until EOF or ``timeout_s``: (bytes, truncated).

    A terminal on stdin (a hook started by hand) is not read. More than ``limit``
    bytes gives ``(b"", True)``: half a JSON document is no use to anyone.
    """
    try:
        if os.isatty(fd):
            return b"", False
    except OSError:
        return b"", False
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    total = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                break
            data = os.read(fd, 65536)
        except (OSError, ValueError):
            break
        if not data:
            break
        total += len(data)
        if total > limit:
            return b"", True
        chunks.append(data)
    return b"".join(chunks), False


def send(path: str, message: bytes, timeout_s: float = SEND_TIMEOUT_S) -> bool:
    """Write ``message`` to the Unix socket at ``path``; False on any failure."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.sendall(message)
            sock.shutdown(socket.SHUT_WR)
        return True
    except (OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """Run the hook: ``KIND [PAYLOAD]``. Returns 0 whatever happens."""
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    try:
        token = env.get(ENV_TOKEN, "")
        path = env.get(ENV_SOCKET, "")
        pane = env.get("TMUX_PANE", "")
        if not (args and token and path):
            return 0  # not a pane the hub set up: nothing to say, and say nothing
        kind = args[0]
        if len(args) > 1:  # Codex appends its JSON as the last argument
            raw = args[-1].encode("utf-8", "replace")
            payload, truncated = (b"", True) if len(raw) > MAX_PAYLOAD_BYTES else (raw, False)
        else:
            payload, truncated = read_payload()
        message = build_message(
            token=token, pane=pane, kind=kind, payload=payload, truncated=truncated
        )
        send(path, message)
    except Exception:  # noqa: BLE001 - a hook must never fail the agent
        pass
    return 0


def _give_up(signum: int, frame: object) -> None:
    os._exit(0)


if __name__ == "__main__":
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _give_up)
        signal.alarm(HARD_DEADLINE_S)
    main()
    sys.exit(0)
