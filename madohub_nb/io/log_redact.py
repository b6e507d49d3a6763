"""What the log keeps of a round's text: secrets replaced, long text cut, UTF-8 safe.

No secret reaches the file: every text field (and every string in ``meta``) is scrubbed
of API-key-like strings and of registered secrets before it is written (keys put in the
environment later are picked up at each write). Each text field is cut at
``max_field_chars`` (``defaults.MAX_LOGGED_CHARS``) with a visible marker.

Nothing here blocks: the secrets are a ``SecretRegistry`` snapshot and no file is
touched, so the engine loop and the views redact directly, never waiting on an append
held by a locked file.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from ..agents.regex import lazy_compile
from ..defaults import CUT_MARKER, MAX_LOGGED_CHARS, check_range
from ..secrets import SecretRegistry, scrub_secrets
from .log_record import TEXT_COLUMNS, RoundRecord


class LogRedactor:
    """The secrets one log redacts and the longest text a field keeps."""

    def __init__(self, *, max_field_chars: int = MAX_LOGGED_CHARS) -> None:
        self.secrets: Final = SecretRegistry()
        """What this log redacts; reading it takes no lock (see ``SecretRegistry``)."""
        self.max_field_chars = max_field_chars

    @property
    def max_field_chars(self) -> int:
        """Longest text one field keeps; longer text is cut with a visible marker."""
        return self._max_field_chars

    @max_field_chars.setter
    def max_field_chars(self, value: int) -> None:
        self._max_field_chars = check_range("max_field_chars", value, (100, 1 << 30), " characters")

    def register_env_secrets(self) -> None:
        """Redact the keys now in ``SECRET_ENV_VARS`` (the environment may change later).

        Never blocks: it takes no lock on the log (see ``SecretRegistry``).
        """
        self.secrets.add_env()

    def redact_text(self, text: str) -> str:
        """``text`` with every registered secret (and key-like string) replaced: safe to show.

        Never blocks: it reads the secrets' snapshot, not the file, so a view or the
        engine loop redacting meanwhile never waits on an append held by a locked file.
        """
        return self.secrets.redact(text)

    def register_secret(self, secret: str) -> None:
        """Redact ``secret`` (e.g. an API key) from every row appended from now on.

        Never blocks on the log (a swap of the secrets' snapshot).
        """
        self.secrets.add(secret)

    def redact(self, rec: RoundRecord) -> RoundRecord:
        """A copy of ``rec`` as the log stores it (secrets redacted): safe to show.

        Every secret is replaced in the text fields and in ``meta``, each text cut at
        ``max_field_chars``. Lone surrogates (a transcript's ``\\udc9b`` escape) become U+FFFD:
        SQLite stores UTF-8, which cannot encode them.
        Never blocks: no lock on the log, no file I/O (safe on the engine loop).
        """
        self.register_env_secrets()
        secrets = self.secrets.snapshot
        cap = self._max_field_chars
        changes: dict[str, Any] = {
            name: _capped(_storable(scrub_secrets(value, secrets)), cap)
            for name in TEXT_COLUMNS
            if isinstance(value := getattr(rec, name), str)
        }
        changes["meta"] = _scrub_json(rec.meta, secrets, cap)
        return dataclasses.replace(rec, **changes)


def _scrub_json(value: Any, secrets: tuple[str, ...], cap: int = MAX_LOGGED_CHARS) -> Any:
    """``value`` as JSON-ready data with secrets scrubbed and strings capped; other objects
    become their ``str``."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {
            _scrub_json(str(k), secrets, cap): _scrub_json(v, secrets, cap)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_scrub_json(v, secrets, cap) for v in value]
    text = value if isinstance(value, str) else str(value)
    return _capped(_storable(scrub_secrets(text, secrets)), cap)


def _capped(text: str, cap: int) -> str:
    """``text`` cut to ``cap`` characters with a visible marker saying how much went."""
    if len(text) <= cap:
        return text
    return text[:cap] + "\n" + CUT_MARKER.format(cut=len(text) - cap)


_SURROGATE: Final = lazy_compile("[\ud800-\udfff]")


def _storable(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, so that it encodes as UTF-8."""
    return _SURROGATE.sub("\ufffd", text)
