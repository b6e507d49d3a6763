"""Secrets: which strings are keys, and how they are redacted wherever text leaves the hub.

One place for the rule, used by the round log, the AI transforms' error
messages and the views. ``SecretRegistry`` holds the registered secrets of one
log as an immutable snapshot that each registration replaces whole: redacting
reads the snapshot and takes no lock, so it never waits on the log's file
(an append may hold the log's lock for the whole busy timeout).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from typing import Final

from .errors import MadohubValueError

REDACTED: Final = "[redacted]"
MIN_SECRET_CHARS: Final = 8
"""Shorter values are not registered: redacting them would mangle ordinary text."""
SECRET_ENV_VARS: Final = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
)
"""Environment variables holding keys: redacted wherever they show, kept out of tmux."""
KEY_PATTERNS: Final = (
    re.compile(r"sk-ant-[A-Za-z0-9_\-]+"),
    re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{20,}"),
)
"""Key-shaped strings, redacted even when they are not a registered secret."""


def scrub_secrets(text: str, secrets: Iterable[str] = (), marker: str = REDACTED) -> str:
    """Replace each of ``secrets`` and every key-shaped string in ``text`` by ``marker``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, marker)
    for pattern in KEY_PATTERNS:
        text = pattern.sub(marker, text)
    return text


def is_secret_value(value: object) -> bool:
    """Whether ``value`` is long enough to be registered (``MIN_SECRET_CHARS`` and more)."""
    return isinstance(value, str) and len(value.strip()) >= MIN_SECRET_CHARS


class SecretRegistry:
    """The secrets one log redacts: registered ones and the keys in ``SECRET_ENV_VARS``.

    ``snapshot`` is a tuple, longest first, replaced whole when a secret is added
    (under a lock held only for that swap, never during I/O); readers take the
    current tuple without a lock, so ``redact`` is safe and non-blocking from any
    thread, the engine loop included.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._snapshot: tuple[str, ...] = ()
        self._add_lock = threading.Lock()
        for secret in secrets:
            self.add(secret)

    @property
    def snapshot(self) -> tuple[str, ...]:
        """Every registered secret now, longest first (an immutable value)."""
        return self._snapshot

    def add(self, secret: str) -> None:
        """Redact ``secret`` from now on; ``MadohubValueError`` when it is too short to be one."""
        if not is_secret_value(secret):
            raise MadohubValueError(
                f"a secret to redact must be a string of at least {MIN_SECRET_CHARS} characters "
                "(shorter ones would redact ordinary words)"
            )
        if secret in self._snapshot:
            return
        with self._add_lock:
            if secret not in self._snapshot:
                self._snapshot = tuple(sorted({*self._snapshot, secret}, key=len, reverse=True))

    def add_env(self) -> None:
        """Add the keys now in ``SECRET_ENV_VARS`` (the environment may change later)."""
        for var in SECRET_ENV_VARS:
            value = os.environ.get(var, "")
            if is_secret_value(value) and value not in self._snapshot:
                self.add(value)

    def redact(self, text: str) -> str:
        """``text`` with every secret (env keys read now) and key-like string replaced."""
        self.add_env()
        return scrub_secrets(text, self._snapshot)
