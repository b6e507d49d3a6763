"""The round log: a durable, append-only SQLite record of every round.

One row per round (trigger → extract → transform → deliver), committed as soon as the
round ends, so a killed kernel loses no finished round and a later hub on the same file
sees every earlier round. ``RoundLog`` is the one object the rest of the package holds
(``hub.log``); it joins the log's parts, each in a module of its own:

- ``log_record``: what one round is (``RoundRecord``, the columns, the check an appended
  round passes);
- ``log_redact``: what the log keeps of its text (secrets replaced, long text cut);
- ``log_file``: the SQLite file (a stranger's refused, schema created or migrated,
  owner-only modes, column chunks packed);
- ``log_store``: durable appends and reads by rowid or id, under one lock;
- ``log_chunks``: the sealed column chunks that make a large log's DataFrame fast;
- ``log_frame``: the DataFrame view, ``RoundLog.df``;
- ``RoundLog.plot`` draws with the plotter the notebook layer attaches, so the log
  imports no plotting.

Every method is safe from any thread. Blocking ones take the log's lock and touch
the file, so they may wait for a reader of this log (``df``) and, for writes, up to
``busy_timeout_ms`` for another process: ``append``, ``ensure_writable``, ``df``,
``since``, ``tail``, ``get``, ``last_rowid``/``len``, ``plot``, ``close``. The engine
loop must call them in a worker thread (``asyncio.to_thread``), never on the loop.
Non-blocking ones take no lock on the log and do no I/O, so the loop and the views
may call them directly: ``redact``, ``redact_text``, ``register_secret``,
``register_env_secrets`` (the secrets are a ``SecretRegistry`` snapshot).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ..defaults import LOG_BUSY_TIMEOUT_MS, MAX_LOGGED_CHARS
from ..errors import MadohubError
from .log_file import SCHEMA_VERSION, default_log_path
from .log_frame import LogFrame, rounds_frame
from .log_record import COUNT_COLUMNS, ROUND_COLUMNS, RoundRecord, checked, new_round_id
from .log_redact import LogRedactor
from .log_store import LogStore

if TYPE_CHECKING:  # pandas loads on first use of .df, not at import (import time)
    import pandas as pd

__all__ = [
    "COUNT_COLUMNS", "ROUND_COLUMNS", "SCHEMA_VERSION", "RoundLog", "RoundRecord",
    "default_log_path", "new_round_id", "rounds_frame",
]  # fmt: skip


class RoundLog:
    """The durable, append-only log of rounds in one SQLite file.

    ``path=None`` uses ``default_log_path()``; ``":memory:"`` keeps the log in
    memory (tests). ``read_only=True`` opens an existing log for analysis
    (SQLite ``mode=ro``): appends then fail with ``LogError``. ``max_bytes``
    caps the file size; appends beyond it fail like a full disk. ``secrets``
    (and the values of ``SECRET_ENV_VARS``) are redacted from every row. A
    write waits up to ``busy_timeout_ms`` for another writer's lock.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        secrets: Iterable[str] = (),
        read_only: bool = False,
        max_bytes: int | None = None,
        busy_timeout_ms: int = LOG_BUSY_TIMEOUT_MS,
        max_field_chars: int = MAX_LOGGED_CHARS,
    ) -> None:
        self._redactor = LogRedactor(max_field_chars=max_field_chars)
        self.secrets: Final = self._redactor.secrets
        """What this log redacts; reading it takes no lock (see ``SecretRegistry``)."""
        for secret in [secrets] if isinstance(secrets, str) else secrets:
            self.register_secret(secret)
        self.register_env_secrets()
        self._store = LogStore(
            path, read_only=read_only, max_bytes=max_bytes, busy_timeout_ms=busy_timeout_ms
        )
        self.read_only: Final = self._store.read_only
        self.in_memory: Final = self._store.in_memory
        self.path: Final = self._store.path
        self.busy_timeout_ms: Final = self._store.busy_timeout_ms
        self._lock: Final = self._store.lock  # held by each transaction (tests watch it)
        self._frame = LogFrame(self._store)

    @property
    def max_field_chars(self) -> int:
        """Longest text one field keeps; longer text is cut with a visible marker."""
        return self._redactor.max_field_chars

    @max_field_chars.setter
    def max_field_chars(self, value: int) -> None:
        self._redactor.max_field_chars = value

    # Writing -----------------------------------------------------------------

    def register_env_secrets(self) -> None:
        """Redact the keys now in ``SECRET_ENV_VARS`` (the environment may change later).

        Never blocks: it takes no lock on the log (see ``SecretRegistry``).
        """
        self._redactor.register_env_secrets()

    def redact_text(self, text: str) -> str:
        """``text`` with every registered secret (and key-like string) replaced: safe to show.

        Never blocks: it reads the secrets' snapshot, not the file, so a view or the
        engine loop redacting meanwhile never waits on an append held by a locked file.
        """
        return self._redactor.redact_text(text)

    def register_secret(self, secret: str) -> None:
        """Redact ``secret`` (e.g. an API key) from every row appended from now on.

        Never blocks on the log (a swap of the secrets' snapshot).
        """
        self._redactor.register_secret(secret)

    def redact(self, rec: RoundRecord) -> RoundRecord:
        """A copy of ``rec`` as the log stores it (secrets redacted): safe to show.

        Never blocks: no lock on the log, no file I/O (safe on the engine loop).
        """
        return self._redactor.redact(rec)

    def append(self, rec: RoundRecord) -> None:
        """Write one round and commit it before returning.

        Blocking (up to ``busy_timeout_ms`` on a file another process locked): call it
        from a worker thread. Once its transaction began it is not undone by the
        caller giving up: a cancelled ``to_thread`` still commits the round.
        """
        self._store.append(self._redactor.redact(checked(rec)))

    def ensure_writable(self) -> None:
        """Raise ``LogError`` unless the log can take a round right now.

        The engine calls this before typing a round, so routing pauses rather
        than running unlogged. It takes the write lock and writes a round-sized
        blob that is rolled back (catching locks, read-only files and a full
        size cap), and checks the file system still has ``MIN_FREE_BYTES``.
        Blocking (up to ``busy_timeout_ms``, and while a ``df`` of this log reads):
        call it from a worker thread, e.g. ``await asyncio.to_thread(log.ensure_writable)``.
        """
        self._store.ensure_writable()

    # Reading -----------------------------------------------------------------

    @property
    def df(self) -> pd.DataFrame:
        """Every round as a DataFrame, in append order, columns in ``ROUND_COLUMNS`` order.

        Text columns are ``object`` holding ``str`` (missing: None; the same
        in pandas 2 and 3, and much faster to build than the string dtype
        for 100k rounds), ``round`` is int64, ``fired_at``/``delivered_at`` are ``datetime64[us, UTC]``
        (missing: NaT), timings are float64 ms (missing: NaN), ``meta`` holds
        dicts. Row ``i`` is the round with rowid ``i + 1``.

        The first call reads every round (packed blocks from their column chunks,
        the rest row by row, see ``log_chunks``); later calls read only the rounds
        appended since (by this or any other process) and add them to the
        rows already read, so a dashboard or notebook asking again and again
        pays for new rounds only. Rounds are never changed once written, which
        is what makes this exact; a file replaced under an open log is noticed
        (its row at the last rowid read is not the one read) and read afresh.
        Each call returns a new DataFrame: changing it leaves the next one as
        it was (the ``meta`` dicts are shared, as a shallow copy shares them).
        """
        return self._frame.read()

    plotter: ClassVar[Callable[..., Any] | None] = None
    """Draws :meth:`plot` from the rounds' DataFrame; attached by the notebook layer
    (madohub_nb.notebook.display: :func:`madohub_nb.plot.timeline_figure`, loaded only when
    a plot is asked for), so the log itself imports no plotting."""

    def plot(self, *, session_id: str | None = None, title: str | None = None) -> Any:
        """The rounds as a timeline Figure: a lane per route, a bar per round, latency beneath.

        ``session_id`` keeps one hub's rounds (``hub.session_id``); an empty log gives a
        Figure that says so. Drawn by :func:`madohub_nb.plot.timeline_figure`.
        """
        draw = RoundLog.plotter
        if draw is None:  # (only if madohub_nb's package __init__ was bypassed)
            raise MadohubError("no plotter attached; import madohub_nb to draw the timeline")
        df = self.df
        if session_id is not None:
            df = df[df["session_id"] == session_id]
        return draw(df, title=title)

    def __len__(self) -> int:
        return self.last_rowid

    @property
    def last_rowid(self) -> int:
        """The rowid of the newest round (0 when empty).

        Rowids count rounds from 1 without gaps (the log is append-only), so
        this is also the number of rounds, and a reader that has seen
        ``since(n)`` knows the next cursor is ``n + len(result)``.
        """
        return self._store.last_rowid

    def since(self, rowid: int, limit: int | None = None) -> list[RoundRecord]:
        """The rounds after rowid ``rowid`` (oldest first), at most ``limit`` of them."""
        return self._store.since(rowid, limit)

    def tail(self, n: int = 10) -> list[RoundRecord]:
        """The newest ``n`` rounds, oldest first."""
        return self._store.tail(n)

    def get(self, round_id: str) -> RoundRecord:
        """The round with this id; ``MadohubValueError`` if the log has none."""
        return self._store.get(round_id)

    # Lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Close the file (idempotent); later calls raise ``LogError``."""
        self._store.close()
        self._frame.forget()  # the rows read for df go with the log

    @property
    def closed(self) -> bool:
        """True once ``close()`` has run."""
        return self._store.closed

    def __enter__(self) -> RoundLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"RoundLog({str(self.path)!r}, closed)"
        mode = ", read_only" if self.read_only else ""
        return f"RoundLog({str(self.path)!r}, rounds={len(self)}{mode})"
