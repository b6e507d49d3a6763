"""Column chunks of the round log: every ``CHUNK_ROWS`` rounds also stored column by column.

Reading 100,000 rounds row by row through ``sqlite3`` makes one Python object per
cell (3.6 million), which alone costs more than building the DataFrame. So each
time an append completes a block of ``CHUNK_ROWS`` rounds, the same transaction
packs that block's columns into one BLOB (a row of ``frame_chunks``): numbers as
little-endian arrays, times as microseconds since the epoch, repeated text as a
small dictionary and codes, other text joined. ``RoundLog.df`` then reads a few
BLOBs and turns each column into one numpy array.

The rows stay the source of truth. The two free-text columns (``extracted``,
``prompt``) are not packed (they would double the file); they are read from the
rows. A block that cannot be packed (an odd value from another writer) is
skipped, and the rows past the first missing block are read row by row.

Packing needs only the standard library (it runs on the engine thread at
append); unpacking uses numpy, which ``df`` loads anyway. No BLOB is ever
unpickled: a log file may come from anyone.

Trust: a chunk is only a copy of its rows, and ``df`` must never show what the rows
do not hold. Each chunk is sealed with an HMAC under a key private to this user
(``chunk_key_path()``, 0600, made on the first pack) over its rowids and bytes, so a
chunk written by someone else (a crafted or shared log) is not read: its rows are.
Rows changed or deleted after packing drop their chunk in the same statement (the
triggers of ``CHUNK_TRIGGERS_SQL``). Anything odd in a chunk is a ``ChunkError``,
and ``df`` falls back to the rows.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from array import array
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import numpy as np

CHUNK_ROWS: Final = 1024
"""Rounds per chunk: one append in this many also packs a chunk (a few ms)."""
CHUNK_MAGIC: Final = b"MHC1"
CHUNK_TABLE_SQL: Final = (
    "CREATE TABLE IF NOT EXISTS frame_chunks ("
    "first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, data BLOB NOT NULL)"
)
CHUNK_TRIGGERS_SQL: Final = (
    "CREATE TRIGGER IF NOT EXISTS rounds_update_drops_chunk AFTER UPDATE ON rounds BEGIN "
    "DELETE FROM frame_chunks WHERE OLD.seq BETWEEN first_seq AND last_seq "
    "OR NEW.seq BETWEEN first_seq AND last_seq; END",
    "CREATE TRIGGER IF NOT EXISTS rounds_delete_drops_chunk AFTER DELETE ON rounds BEGIN "
    "DELETE FROM frame_chunks WHERE OLD.seq BETWEEN first_seq AND last_seq; END",
)
"""A row changed or deleted (by any SQLite client) takes the chunk that copied it along."""
SEAL_MAGIC: Final = b"MHS1"
_MAC_BYTES: Final = 32
KEY_BYTES: Final = 32
KINDS: Final = ("int", "float", "time", "text")
"""How a packed column is stored: int64, float64 (missing: NaN), µs since the epoch, text."""
_NAT: Final = -(2**63)  # numpy's NaT in a datetime64 array
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND: Final = datetime.resolution
_DICT_SHARE: Final = 4
"""Text with at most rows / _DICT_SHARE distinct values is stored as dictionary and codes."""


class ChunkError(ValueError):
    """A block of rows holds a value a chunk cannot store; the rows are read row by row."""


# The seal ----------------------------------------------------------------------------


def chunk_key_path() -> Path:
    """This user's chunk key: ``$XDG_DATA_HOME/madohub_nb/chunk-key`` (else ``~/.local/share``)."""
    data_home = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(data_home) if data_home and Path(data_home).is_absolute() else None
    return (base or Path.home() / ".local" / "share") / "madohub_nb" / "chunk-key"


def chunk_key(*, create: bool) -> bytes | None:
    """The key that seals this user's chunks; None when there is none (and ``create`` is
    False) or it cannot be read or made: then no chunk is written or trusted."""
    path = chunk_key_path()
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
        key = _new_key(path)
    except OSError:
        return None
    return key if len(key) == KEY_BYTES else None


def _new_key(path: Path) -> bytes:
    """Write a new key (0600, folder 0700) unless another process just did; return the file's."""
    import secrets

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(temp, path)  # fails if another process made it meanwhile: its key wins
        except FileExistsError:
            pass
        finally:
            temp.unlink()
        return path.read_bytes()
    except OSError:
        return b""


def seal_chunk(body: bytes, first: int, last: int, key: bytes) -> bytes:
    """``body`` (a ``pack_chunk`` BLOB) sealed for rowids ``first``..``last`` under ``key``."""
    return SEAL_MAGIC + _mac(body, first, last, key) + body


def open_chunk(blob: object, first: int, last: int, key: bytes | None) -> bytes:
    """The body of a chunk sealed for ``first``..``last`` under ``key``; else ``ChunkError``."""
    import hmac

    if key is None:
        raise ChunkError("no chunk key of this user to check chunks with")
    if not isinstance(blob, bytes) or not blob.startswith(SEAL_MAGIC):
        raise ChunkError("not a sealed madohub column chunk")
    start = len(SEAL_MAGIC) + _MAC_BYTES
    body = blob[start:]
    if not hmac.compare_digest(blob[len(SEAL_MAGIC) : start], _mac(body, first, last, key)):
        raise ChunkError(f"the chunk of rounds {first}-{last} was not packed by this user")
    return body


def _mac(body: bytes, first: int, last: int, key: bytes) -> bytes:
    import hashlib
    import hmac

    rowids = struct.pack("<qq", first, last)
    return hmac.new(key, rowids + body, hashlib.sha256).digest()


# Packing (standard library only) ----------------------------------------------------


def pack_chunk(rows: Sequence[Sequence[Any]], columns: Sequence[tuple[str, str]]) -> bytes:
    """``rows`` (values in ``columns`` order) as one chunk BLOB; ``columns``: (name, kind)."""
    described: list[list[Any]] = []
    payloads: list[bytes] = []
    offset = 0
    for i, (name, kind) in enumerate(columns):
        encoding, extra, payload = _pack_column([row[i] for row in rows], kind, name)
        described.append([name, encoding, offset, len(payload), extra])
        payloads.append(payload)
        offset += len(payload)
    header = json.dumps({"rows": len(rows), "columns": described}).encode()
    return CHUNK_MAGIC + struct.pack("<I", len(header)) + header + b"".join(payloads)


def _pack_column(values: list[Any], kind: str, name: str) -> tuple[str, Any, bytes]:
    if kind == "int":
        if not all(type(v) is int for v in values):
            raise ChunkError(f"{name}: not every value is a whole number")
        return "i8", None, _little(array("q", values))
    if kind == "float":
        try:
            return "f8", None, _little(array("d", [_float(v) for v in values]))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ChunkError(f"{name}: {exc}") from None
    if kind == "time":
        return "t8", None, _little(array("q", [_epoch_us(v, name) for v in values]))
    if not all(v is None or type(v) is str for v in values):
        raise ChunkError(f"{name}: not every value is text")
    distinct = list(dict.fromkeys(values))
    if len(distinct) <= max(1, len(values) // _DICT_SHARE):
        index = {v: n for n, v in enumerate(distinct)}
        return "dict", distinct, _little(array("I", [index[v] for v in values]))
    if any(v is not None and "\0" in v for v in values):
        return "json", None, json.dumps(values).encode()
    nulls = [n for n, v in enumerate(values) if v is None]
    try:
        joined = "\0".join("" if v is None else v for v in values).encode()
    except UnicodeEncodeError as exc:
        raise ChunkError(f"{name}: {exc}") from None
    return "text", nulls, joined


def _float(value: Any) -> float:
    if value is None:
        return float("nan")
    if isinstance(value, str):
        raise ChunkError("text in a number column")
    return float(value)


def _epoch_us(value: Any, name: str) -> int:
    """An ISO 8601 time as µs since the epoch (no offset: UTC, as ``pd.to_datetime(utc=True)``)."""
    if value is None:
        return _NAT
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise ChunkError(f"{name}: {exc}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // _MICROSECOND


def _little(values: array[Any]) -> bytes:
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


# Unpacking (numpy) --------------------------------------------------------------------


def unpack_chunks(blobs: Sequence[bytes], columns: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The chunks' columns joined in order: name → numpy array.

    ``int`` → int64, ``float`` → float64, ``time`` → ``datetime64[us]`` (UTC, no
    zone), ``text`` → object array of ``str`` (missing: None). ``ChunkError`` when a
    BLOB is not a chunk of these columns.
    """
    import numpy as np

    parsed = [_parse(blob, columns) for blob in blobs]
    out: dict[str, Any] = {}
    for name, kind in columns:
        pieces = [(rows, table[name], payload) for rows, table, payload in parsed]
        if kind in ("int", "float", "time"):
            dtype = "<f8" if kind == "float" else "<i8"
            joined = b"".join(payload[o : o + n] for _, (_, o, n, _), payload in pieces)
            values = np.frombuffer(joined, dtype=dtype).astype(dtype[1:], copy=False)
            out[name] = values.view("datetime64[us]") if kind == "time" else values
            continue
        try:
            out[name] = _text_column(pieces, np)
        except (ValueError, TypeError, IndexError) as exc:  # bad UTF-8, JSON or null list
            raise ChunkError(f"column chunk's {name!r} is unreadable: {exc}") from None
    return out


_ENCODINGS: Final = {
    "int": ("i8",),
    "float": ("f8",),
    "time": ("t8",),
    "text": ("dict", "text", "json"),
}
"""The encodings a chunk may store each kind of column in."""


def object_array(values: Sequence[Any]) -> Any:
    """A numpy object array holding ``values`` as they are (strings, dicts, None)."""
    import numpy as np

    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _parse(blob: bytes, columns: Sequence[tuple[str, str]]) -> tuple[int, dict[str, Any], bytes]:
    """One chunk's rows, column table (name → (encoding, offset, length, extra)) and payload.

    Every field of the header is checked for its type and range before use: a log
    file may come from anyone, and a wrong type must be a ``ChunkError``, never a
    ``TypeError`` or a slice that reads another column's bytes.
    """
    try:
        if not isinstance(blob, bytes) or not blob.startswith(CHUNK_MAGIC):
            raise ChunkError("not a madohub column chunk")
        (size,) = struct.unpack_from("<I", blob, len(CHUNK_MAGIC))
        start = len(CHUNK_MAGIC) + 4
        header = json.loads(blob[start : start + size])
        payload = blob[start + size :]
        table = {c[0]: (c[1], c[2], c[3], c[4]) for c in header["columns"]}
        rows = header["rows"]
    except (struct.error, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ChunkError(f"unreadable column chunk: {exc}") from None
    if not _whole(rows):
        raise ChunkError(f"column chunk's row count {rows!r} is not a whole number")
    for name, kind in columns:
        found = table.get(name)
        if (
            found is None
            or found[0] not in _ENCODINGS[kind]
            or not _whole(found[1])
            or not _whole(found[2])
            or found[1] + found[2] > len(payload)
        ):
            raise ChunkError(f"column chunk has no readable {name!r}")
        if kind != "text" and found[2] != rows * 8:
            raise ChunkError(f"column chunk's {name!r} does not hold {rows} values")
        if kind == "text" and not _extra_fits(found[0], found[3], rows):
            raise ChunkError(f"column chunk's {name!r} has a malformed value list")
    return rows, table, payload


def _whole(value: object) -> bool:
    """A whole number >= 0 (JSON gives int; bool is no count)."""
    return type(value) is int and value >= 0


def _extra_fits(encoding: str, extra: object, rows: int) -> bool:
    """A text column's extra: the dictionary's values (text or None), or the rows that are None."""
    if encoding == "dict":
        return isinstance(extra, list) and all(v is None or type(v) is str for v in extra)
    if encoding == "text":  # rows that are None: checked as an array in _text_column
        return extra is None or isinstance(extra, list)
    return extra is None


def _text_column(pieces: list[tuple[int, Any, bytes]], np: Any) -> np.ndarray:
    """Object arrays of each chunk's text, joined: dictionary codes index their values."""
    parts = []
    for rows, (encoding, offset, length, extra), payload in pieces:
        data = payload[offset : offset + length]
        if encoding == "dict":
            codes = np.frombuffer(data, dtype="<u4")
            if len(codes) != rows:
                raise ChunkError(f"column chunk's text codes are {len(codes)}, not {rows}")
            distinct = object_array(extra)
            if len(codes) and int(codes.max()) >= len(distinct):
                raise ChunkError("column chunk's text codes point past its values")
            parts.append(distinct[codes])
            continue
        if encoding == "json":
            values = json.loads(data)
            if not isinstance(values, list) or not all(v is None or type(v) is str for v in values):
                raise ChunkError("column chunk's text is not a list of text")
        else:
            values = data.decode().split("\0")
        part = object_array(values)
        if len(part) != rows:
            raise ChunkError(f"column chunk's text holds {len(part)} values, not {rows}")
        if encoding == "text" and extra:
            nulls = np.asarray(extra)
            if nulls.dtype.kind not in "iu" or int(nulls.min()) < 0 or int(nulls.max()) >= rows:
                raise ChunkError("column chunk's missing rows are not rows of the chunk")
            part[nulls] = None
        parts.append(part)
    return np.concatenate(parts) if parts else np.empty(0, dtype=object)
