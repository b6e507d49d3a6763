"""Secrets: which strings are keys, and how they are redacted wherever text leaves the hub.

One place for the rule, used by the round log, the AI transforms' error
messages and the views.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

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
