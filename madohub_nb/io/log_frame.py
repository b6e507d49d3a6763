"""The round log as a pandas DataFrame (``RoundLog.df``): read once, then only new rounds.

A newly opened log's ``df`` reads every ``CHUNK_ROWS`` rounds from one column chunk
(``log_chunks``), packed by the append that completed the block, and only the free text
(``extracted``, ``prompt``) and the newest rounds row by row: 100,000 rounds in about
0.2 s, where a row-by-row read costs 0.9 s. A log may come from anyone: chunks not sealed
by this user, or whose rows changed since, are not read (the rows are), each row's meta is
parsed alone, and a value of the wrong type in a row reads as missing (NaN, NaT) or as
stored, never as an error.

The columns are typed here, from ``log_record``'s groups: text as ``object`` holding
``str``, ``round`` int64, times ``datetime64[us, UTC]``, timings, counts and cost float64,
``meta`` dicts. pandas is imported on the first read, not with the package.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from .log_chunks import CHUNK_ROWS, ChunkError, chunk_key, object_array, open_chunk, unpack_chunks
from .log_file import CHUNK_COLUMNS, ROW_ONLY_COLUMNS
from .log_record import (
    COUNT_COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    MONEY_COLUMNS,
    ROUND_COLUMNS,
    TIME_COLUMNS,
    parse_meta,
)
from .log_store import LogStore

if TYPE_CHECKING:  # pandas loads on first use of .df, not at import (import time)
    import pandas as pd

logger = logging.getLogger("madohub_nb.io.log")  # the round log's one logger, whichever part speaks

TIME_DTYPE: Final = "datetime64[us, UTC]"


class LogFrame:
    """The DataFrame of one store's rounds, kept between reads so a read pays for new rounds."""

    def __init__(self, store: LogStore) -> None:
        self._store = store
        self._frame: pd.DataFrame | None = None
        """The rounds ``read`` has read so far; later calls read only newer rows."""
        self._lock = threading.Lock()  # one build at a time; appends go on beside it

    def read(self) -> pd.DataFrame:
        """Every round as a DataFrame: what :attr:`RoundLog.df <madohub_nb.io.log.RoundLog.df>`
        returns (its docstring says the columns' types and why only new rounds are read)."""
        with self._lock:
            with _gc_paused():
                frame = self._frame
                if frame is not None and len(frame) and not self._still_has(frame):
                    frame = None
                if frame is None:
                    frame = self._read_all()
                else:
                    rows = self._store.rows_after(len(frame))
                    if rows:
                        frame = _appended(frame, rounds_frame(rows))
                self._frame = frame
                return _copy_frame(frame)

    def _read_all(self) -> pd.DataFrame:
        """Every round: the packed blocks from their column chunks, the rest row by row.

        Chunks are used from rowid 1 up to the first block without one; the chunks and
        the rows are read in one transaction, so they are one snapshot of the file.
        """
        chunks, covered, texts, rows = self._store.snapshot()
        if not covered:
            return rounds_frame(rows)
        try:
            key = chunk_key(create=False)
            bodies = [open_chunk(blob, last - CHUNK_ROWS + 1, last, key) for last, blob in chunks]
            packed = _chunk_frame(bodies, texts, covered)
        except Exception as exc:  # a chunk is a copy of rows: whatever is wrong, read the rows
            logger.warning(
                "round log %s: column chunks unreadable (%s); reading rows", self._store.path, exc
            )
            return rounds_frame(self._store.rows_after(None))
        return _appended(packed, rounds_frame(rows)) if rows else packed

    def _still_has(self, frame: pd.DataFrame) -> bool:
        """Is the last row read still the round at its rowid (the file was not replaced)?"""
        rowid = len(frame)
        found = self._store.round_id_at(rowid)
        return found is not None and found == frame["round_id"].iat[rowid - 1]

    def forget(self) -> None:
        """Drop the rounds read so far (the log closed: they go with it)."""
        with self._lock:
            self._frame = None


def rounds_frame(rows: list[Any]) -> pd.DataFrame:
    """Build the log's DataFrame from rows in ``ROUND_COLUMNS`` order (vectorised conversions)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in ROUND_COLUMNS]
    return _frame(dict(zip(ROUND_COLUMNS, columns, strict=True)))


def _chunk_frame(blobs: list[bytes], texts: list[tuple[Any, ...]], rows: int) -> pd.DataFrame:
    """The DataFrame of the first ``rows`` rounds: chunk columns, plus the row-only text.

    ``texts``: (round_id, *row-only columns) of each row. Every round_id must be the
    chunks' own: rows deleted or rewritten by another program leave chunks that no
    longer describe them (``ChunkError``).
    """
    import numpy as np

    columns = unpack_chunks(blobs, CHUNK_COLUMNS)
    if len(texts) != rows or any(len(values) != rows for values in columns.values()):
        raise ChunkError(f"the chunks and rows do not both hold {rows} rounds")
    ids, *row_only = zip(*texts, strict=True)
    if not np.array_equal(columns["round_id"], np.asarray(ids, dtype=object)):
        raise ChunkError("the rows' round ids are not the chunks' (rows were rewritten)")
    columns.update(zip(ROW_ONLY_COLUMNS, row_only, strict=True))
    return _frame(columns)


def _frame(columns: dict[str, Any]) -> pd.DataFrame:
    """The log's DataFrame from each column's values: sequences as read from rows, or the
    numpy arrays of column chunks (times as ``datetime64[us]`` in UTC)."""
    import pandas as pd

    data: dict[str, Any] = {}
    for name in ROUND_COLUMNS:
        values = columns[name]
        if name in TIME_COLUMNS and getattr(values, "dtype", None) == "datetime64[us]":
            data[name] = pd.Series(values, copy=False).dt.tz_localize("UTC")
        elif name in TIME_COLUMNS:
            data[name] = _typed(values, _times, lambda v: _times(v, errors="coerce"))
        elif name in (*FLOAT_COLUMNS, *COUNT_COLUMNS, *MONEY_COLUMNS):
            data[name] = _typed(
                values,
                lambda v: pd.Series(v, dtype="float64"),
                lambda v: pd.to_numeric(pd.Series(v, dtype=object), errors="coerce").astype(
                    "float64"
                ),
            )
        elif name in INT_COLUMNS:
            data[name] = _typed(
                values,
                lambda v: pd.Series(v, dtype="int64"),
                lambda v: pd.Series(object_array(list(v)), dtype=object),
            )
        elif name == "meta":
            # Each row's own text parsed alone: joined, one row's "{…},{…}" shifts the rest.
            data[name] = _object_series(_meta_column(values))
        else:
            data[name] = pd.Series(values, dtype=object, copy=False)
    return pd.DataFrame(data, columns=list(ROUND_COLUMNS), copy=False)


def _typed(
    values: Any,
    convert: Callable[[Any], pd.Series],
    otherwise: Callable[[Any], pd.Series],
) -> pd.Series:
    """``convert(values)``, the column's dtype; ``otherwise(values)`` when a row holds a value
    of another type (another program's file): ``df`` never fails on one."""
    try:
        return convert(values)
    except (ValueError, TypeError, OverflowError, ArithmeticError):
        return otherwise(values)


def _times(values: Any, errors: str = "raise") -> pd.Series:
    """ISO 8601 text as UTC times (``errors="coerce"``: NaT where a row holds no time)."""
    import pandas as pd

    raw = pd.Series(values, dtype=object)
    return pd.to_datetime(raw, format="ISO8601", utc=True, errors=errors).astype(TIME_DTYPE)  # type: ignore[call-overload]


def _appended(frame: pd.DataFrame, more: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the rows of ``more`` (the same columns and dtypes) after it, renumbered."""
    import pandas as pd

    return pd.concat([frame, more], ignore_index=True) if len(frame) else more


def _copy_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy the caller may change without changing ``frame``.

    With copy-on-write (always on from pandas 3) a shallow copy is enough and
    costs nothing; before it, the values are copied.
    """
    import pandas as pd

    if int(pd.__version__.split(".")[0]) >= 3:
        return frame.copy(deep=False)
    return frame.copy(deep=pd.get_option("mode.copy_on_write") is not True)  # "warn" is not on


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building millions of short-lived objects.

    Reading 100k rounds creates millions of cells; in a kernel full of live
    objects the collector's passes over them cost a quarter of the time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _object_series(values: list[Any]) -> pd.Series:
    """An object Series holding ``values`` as they are (dicts stay dicts)."""
    import pandas as pd

    return pd.Series(object_array(values), dtype=object)


def _meta_column(values: Iterable[Any]) -> list[dict[str, Any] | None]:
    """Each row's meta, parsed alone, each row with a dict of its own.

    Each distinct text is parsed once; its rows get a copy of the dict (values plain)
    or a parse of their own (values nested): 100,000 rows with a few hundred distinct
    metas cost about what one ``json.loads`` of the whole column did.
    """
    values = list(values)
    make: dict[Any, Callable[[], dict[str, Any] | None]] = {}
    for text in dict.fromkeys(values):
        meta = parse_meta(text)
        if meta is None:
            make[text] = _no_meta
        elif any(isinstance(v, (dict, list)) for v in meta.values()):
            make[text] = functools.partial(parse_meta, text)
        else:
            make[text] = meta.copy
    return [make[text]() for text in values]


def _no_meta() -> None:
    return None
