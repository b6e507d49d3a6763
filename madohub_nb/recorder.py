"""The round recorder: every finished round reaches the log once, or waits in its backlog.

Rounds are written on one writer thread of the recorder's own, in the order they
finished, never on the engine loop (a log another program has locked waits its
busy timeout there, not in every route). A round handed to :meth:`record` is
written even if the task that handed it is cancelled meanwhile (``close()``
during a locked log's retries): it is in the log or in :attr:`unlogged`,
never lost. Redaction of secrets is done here, once, before anything is stored.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable

from .engine import aside
from .errors import LogError
from .io.log import RoundLog, RoundRecord
from .pipeline.events import HubEvent, RoundLogged
from .secrets import MIN_SECRET_CHARS

CLOSE_WAIT_S = 1.0
"""How long closing waits for rounds still being written before it closes the log."""


class RoundRecorder:
    """Writes finished rounds (redacted) to the log, keeps what it refuses, wakes waiters."""

    def __init__(
        self,
        log: RoundLog,
        *,
        emit: Callable[[HubEvent], None],
        call_soon: Callable[..., None],
        current_key: Callable[[], str | None],
        on_unwritable: Callable[[LogError], None],
    ) -> None:
        self.log = log
        self._emit = emit
        self._call_soon = call_soon
        self._current_key = current_key
        self._on_unwritable = on_unwritable
        self._writer = concurrent.futures.ThreadPoolExecutor(1, "madohub-log")
        self._backlog_lock = threading.Lock()
        self.unlogged: list[RoundRecord] = []
        """Rounds that could not be written (log full or read-only); kept so nothing is lost,
        and written (each once) before the next round once the log takes writes again."""
        self.rounds_written = 0
        self.pending = 0
        """Rounds handed to the writer thread and not yet written or kept."""
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.workflows: dict[str, tuple[str, str]] = {}
        """Route id -> (workflow name, file hash) for routes ``hub.run`` made: their rows say so."""

    # recording ---------------------------------------------------------------
    async def record(self, rec: RoundRecord) -> RoundRecord:
        """Write a finished round (or keep it when the log refuses); returns it as logged.

        Cancelling the caller does not cancel the write: the round still lands.
        """
        written = self._submit(rec)
        return await asyncio.shield(asyncio.wrap_future(written))

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        """Hand a round to the writer without waiting (a round cancelled mid-way); any thread."""
        redacted = self._redacted(rec)
        self._writer_submit(redacted)
        return redacted

    def _submit(self, rec: RoundRecord) -> concurrent.futures.Future[RoundRecord]:
        return self._writer_submit(self._redacted(rec))

    def _writer_submit(self, rec: RoundRecord) -> concurrent.futures.Future[RoundRecord]:
        try:
            written = self._writer.submit(self._write, rec)
        except RuntimeError:  # the recorder is closed: keep the round rather than lose it
            with self._backlog_lock:
                self.unlogged.append(rec)
            done: concurrent.futures.Future[RoundRecord] = concurrent.futures.Future()
            done.set_result(rec)
            return done
        with self._backlog_lock:
            self.pending += 1
        return written

    def _redacted(self, rec: RoundRecord) -> RoundRecord:
        if rec.route_id in self.workflows and rec.workflow is None:
            rec.workflow, rec.workflow_hash = self.workflows[rec.route_id]
        # The key as it is now (set by %config or in the environment after the hub was made).
        key = self._current_key()
        if key and len(key.strip()) >= MIN_SECRET_CHARS:
            self.log.register_secret(key)
        return self.log.redact(rec)

    def _write(self, rec: RoundRecord) -> RoundRecord:
        """On the writer thread: the backlog first, oldest first, each once; then ``rec``."""
        self._write_backlog()
        try:
            self.log.append(rec)
        except LogError as exc:
            with self._backlog_lock:
                self.unlogged.append(rec)
            self._on_unwritable(exc)
        else:
            self.rounds_written += 1
        with self._backlog_lock:
            self.pending -= 1
        self._emit(RoundLogged(str(rec.route_id), rec.status, rec))
        self._call_soon(self._wake_waiters)
        return rec

    def _write_backlog(self) -> None:
        while self.unlogged:
            try:
                self.log.append(self.unlogged[0])
            except LogError:
                return  # still unwritable: keep them for the next round
            with self._backlog_lock:
                self.unlogged.pop(0)
            self.rounds_written += 1

    def ensure_writable(self) -> None:
        """Raise ``LogError`` unless the log can take a round now (blocking: not on the loop)."""
        self.log.ensure_writable()

    # waiting for rounds ----------------------------------------------------------
    @property
    def rounds_finished(self) -> int:
        """Rounds written plus rounds kept in the backlog."""
        return self.rounds_written + len(self.unlogged)

    def _wake_waiters(self) -> None:
        for n, fut in self._waiters:
            if self.rounds_finished >= n and not fut.done():
                fut.set_result(None)
        self._waiters = [(n, f) for n, f in self._waiters if not f.done()]

    async def wait_rounds(self, n: int, timeout_s: float) -> int:
        """Wait (on the engine) until ``n`` rounds have finished in all; returns the count."""
        if self.rounds_finished < n:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((n, fut))
            await asyncio.wait_for(fut, timeout_s)
        return self.rounds_finished

    # life cycle ------------------------------------------------------------------
    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Let the rounds being written land, then close the log; waits up to ``wait_s``.

        A round still waiting on a locked log after that is written (and the log closed)
        by the writer thread when it can.
        """

        def drain_then_close() -> None:
            self._writer.shutdown(wait=True)
            self.log.close()

        aside(drain_then_close, name="madohub-log-close").wait(wait_s)
