"""Shared helpers for the n-gram file formats: the error type, atomic saves, msgpack-headed files.

Our own formats are ``MAGIC + msgpack(header map) + msgpack(bin) ...``: the magic identifies the
file, the header carries a version, the tokenizer fingerprint and counts, and the bins hold raw
little-endian int32 arrays. Every problem with a file's content is a ``CacheFileError`` naming
the file and the byte offset where it was found, including a token id outside the vocabulary of
the model (``check_token_ids``): llama_decode refuses such a token, so one bad draft would fail
the whole batch.

A save killed half-way (kill -9, power loss) leaves the previous file intact and a temporary file
``.NAME.XXXXXXXX.tmp`` next to it; ``remove_stale_temps`` deletes those at the next start.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Sequence

import msgpack
import numpy as np

INT32_LE = np.dtype("<i4")
TEMP_SUFFIX = ".tmp"
# tempfile.mkstemp names: prefix + 8 characters from this set + suffix.
_TEMP_RANDOM = r"[a-z0-9_]{8}"


class CacheFileError(ValueError):
    """A corrupt, truncated, foreign or mismatched n-gram file."""

    def __init__(self, path: str | os.PathLike, offset: int, problem: str) -> None:
        super().__init__(f"{os.fspath(path)}: byte offset {offset}: {problem}")
        self.path = os.fspath(path)
        self.offset = offset
        self.problem = problem


def atomic_write_bytes(path: str | os.PathLike, data: bytes | Sequence[bytes | memoryview]) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same dir, fsync, rename, fsync dir.

    ``data`` may be a list of parts, written one after the other: a large file need not be joined
    into one more copy in memory first.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=TEMP_SUFFIX, dir=directory)
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def stale_temp_files(path: str | os.PathLike) -> list[str]:
    """Temporary files an interrupted ``atomic_write_bytes(path, ...)`` left behind, sorted."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(re.escape(_temp_prefix(path)) + _TEMP_RANDOM + re.escape(TEMP_SUFFIX))
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(directory, n) for n in names if pattern.fullmatch(n))


def remove_stale_temps(path: str | os.PathLike) -> list[str]:
    """Delete what ``stale_temp_files`` finds (only one process may write ``path``); returns them."""
    removed = []
    for tmp in stale_temp_files(path):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            continue
        removed.append(tmp)
    return removed


def check_token_ids(path: str | os.PathLike, offset: int, ids: np.ndarray, n_vocab: int | None, what: str) -> None:
    """Refuse an id ``>= n_vocab`` in the int32 array ``ids`` stored from byte ``offset`` on.

    Negative ids are the callers' business (-1 is a filler in n-grams and pools). ``n_vocab=None``
    checks nothing (tools that read files without a model).
    """
    if n_vocab is None:
        return
    bad = np.flatnonzero(ids >= n_vocab)
    if bad.size:
        i = int(bad[0])
        raise CacheFileError(path, offset + 4 * i, out_of_vocab(what, int(ids[i]), n_vocab))


def out_of_vocab(what: str, token: int, n_vocab: int) -> str:
    return f"{what} {token} is out of range for the model's vocabulary of {n_vocab} tokens"


def check_n_vocab(n_vocab: int | None) -> None:
    if n_vocab is not None and (not isinstance(n_vocab, int) or n_vocab < 1):
        raise ValueError(f"n_vocab must be a positive int or None, got {n_vocab!r}")


def read_file(path: str | os.PathLike) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def pack_headed(magic: bytes, header: dict[str, Any], arrays: list[np.ndarray]) -> bytes:
    """``magic + msgpack(header) + msgpack(bin(int32 LE array)) for each array``."""
    parts = [magic, msgpack.packb(header, use_bin_type=True)]
    for arr in arrays:
        parts.append(msgpack.packb(np.ascontiguousarray(arr, dtype=INT32_LE).tobytes(), use_bin_type=True))
    return b"".join(parts)


class HeadedReader:
    """Reads the msgpack objects after ``magic`` one by one, tracking byte offsets."""

    def __init__(self, path: str | os.PathLike, data: bytes, magic: bytes) -> None:
        self.path = os.fspath(path)
        self.data = data
        if data[: len(magic)] != magic:
            raise CacheFileError(path, 0, f"bad magic {data[:len(magic)]!r}, expected {magic!r}")
        self.base = len(magic)
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=max(len(data), 1))
        self._unpacker.feed(memoryview(data)[self.base :])

    def offset(self) -> int:
        return self.base + self._unpacker.tell()

    def next(self, what: str) -> tuple[Any, int]:
        """The next object and its start offset."""
        start = self.offset()
        try:
            return self._unpacker.unpack(), start
        except msgpack.OutOfData:
            raise CacheFileError(self.path, start, f"truncated file: {what} missing or incomplete") from None
        except Exception as e:  # msgpack raises several types for malformed input
            raise CacheFileError(self.path, start, f"malformed {what}: {e}") from None

    def header(self, fields: dict[str, type | tuple[type, ...]]) -> tuple[dict[str, Any], int]:
        obj, start = self.next("header")
        if not isinstance(obj, dict):
            raise CacheFileError(self.path, start, f"header is a {type(obj).__name__}, expected a map")
        for name, kind in fields.items():
            if name not in obj or not isinstance(obj[name], kind) or isinstance(obj[name], bool):
                raise CacheFileError(self.path, start, f"header field {name!r} missing or of the wrong type")
        return obj, start

    def int32_array(self, what: str, count: int) -> tuple[np.ndarray, int]:
        """The next object as a bin of ``count`` int32; returns it and its payload offset."""
        obj, start = self.next(what)
        if not isinstance(obj, bytes):
            raise CacheFileError(self.path, start, f"{what}: expected binary data, got {type(obj).__name__}")
        payload = self.offset() - len(obj)
        if len(obj) != 4 * count:
            raise CacheFileError(self.path, payload, f"{what}: {len(obj)} bytes, expected {4 * count}")
        return np.frombuffer(obj, dtype=INT32_LE), payload

    def expect_end(self) -> None:
        end = self.offset()
        if end != len(self.data):
            raise CacheFileError(self.path, end, f"{len(self.data) - end} unexpected trailing bytes")


def check_fingerprint(path: str | os.PathLike, offset: int, found: str | None, expected: str | None) -> None:
    if expected is not None and found != expected:
        raise CacheFileError(
            path, offset, f"tokenizer fingerprint {found!r} does not match the expected {expected!r}"
        )
