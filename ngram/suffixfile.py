"""Saving and loading the suffix drafter's global structure (``SuffixStore``) across restarts.

Format: ``b"SSSUFFIX"`` + msgpack header ``{version, fingerprint, span, n_requests, n_tokens, crc32}``
+ four msgpack bin32 objects, little-endian: ``n_requests`` int32 request lengths (oldest first),
``n_tokens`` int32 tokens, ``n_tokens`` int32 sorted starts and ``n_tokens`` uint8 LCPs (the index,
``ngram/suffix_index.py``): 9 bytes per token.

The index is saved because sorting again takes seconds and about 130 bytes per token of memory at
its peak (gigabytes for a full default budget); loaded with the same ``span`` it is checked (a
permutation of the token positions, LCPs within the span) and taken as it is, otherwise it is
rebuilt from the requests, so a changed ``depth`` or ``n_max`` still loads. Its order is not
re-verified: the CRC-32 over all four arrays catches corruption, and a wrong order could only give
bad drafts, never a wrong token id. The parts are written and read without joining or copying the
arrays (``atomic_write_bytes`` takes them one by one). A store larger than the budget loads its
newest requests that fit.

Errors are ``CacheFileError`` (a ValueError) with path and byte offset, as for the other n-gram
files; the save is atomic (temporary file, fsync, rename). ``snapshot_store`` copies a live store
(a few memcpys) so that it can be saved on another thread while the original keeps learning.
"""

from __future__ import annotations

import copy
import os
import zlib
from collections import deque
from typing import Any

import msgpack
import numpy as np

from ngram.fileio import (
    INT32_LE,
    CacheFileError,
    atomic_write_bytes,
    check_fingerprint,
    check_n_vocab,
    check_token_ids,
    read_file,
)
from ngram.suffix_sort import SEP, SPAN_MAX
from ngram.suffix_store import SuffixStore

SUFFIX_MAGIC = b"SSSUFFIX"
SUFFIX_VERSION = 1
BIN32 = 0xC6  # msgpack's bin 32 marker, followed by the payload size (uint32, big-endian)
HEADER_MAX = 4096  # bytes the msgpack header may take
HEADER_FIELDS = {"version": int, "fingerprint": (str, type(None)), "span": int, "n_requests": int,
                 "n_tokens": int, "crc32": int}
UINT8 = np.dtype(np.uint8)


def snapshot_store(store: SuffixStore) -> SuffixStore:
    """An independent copy of ``store`` for saving: later updates of ``store`` do not reach it."""
    snap = copy.copy(store)
    snap.lengths = deque(store.lengths)
    snap.index = store.index.copy()
    return snap


def encode_store(store: SuffixStore, fingerprint: str | None = None) -> list[bytes | memoryview]:
    """The file's bytes, as parts to write one after the other (``b"".join`` them for one bytes).

    The parts view the store's arrays: write them before the store changes (it cannot grow while
    they exist), or encode a ``snapshot_store``.
    """
    ix = store.index
    vals = ix.vals
    arrays = [
        np.array(store.lengths, dtype=INT32_LE),
        (vals[vals != SEP].astype(np.int64) - 1).astype(INT32_LE),
        ix.sa.astype(INT32_LE, copy=False),
        ix.lcp,
    ]
    header = {
        "version": SUFFIX_VERSION,
        "fingerprint": fingerprint,
        "span": store.span,
        "n_requests": len(store.lengths),
        "n_tokens": store.n_tokens,
        "crc32": checksum(arrays),
    }
    parts: list[bytes | memoryview] = [SUFFIX_MAGIC, msgpack.packb(header, use_bin_type=True)]
    for arr in arrays:
        parts += [bytes([BIN32]) + arr.nbytes.to_bytes(4, "big"), memoryview(arr).cast("B")]
    return parts


def checksum(arrays: list[np.ndarray]) -> int:
    """CRC-32 over the bytes of ``arrays`` in order."""
    crc = 0
    for arr in arrays:
        crc = zlib.crc32(memoryview(arr).cast("B"), crc)
    return crc


def decode_store(
    data: bytes,
    span: int,
    max_bytes: int,
    path: str | os.PathLike = "<bytes>",
    expected_fingerprint: str | None = None,
    *,
    n_vocab: int | None = None,
) -> SuffixStore:
    """The store in ``data``, indexed for ``span`` (depth + n_max) within ``max_bytes``;
    ``n_vocab`` (the model's vocabulary size) refuses larger token ids."""
    check_n_vocab(n_vocab)
    path = os.fspath(path)
    header, offset = _header(path, data)
    if header["version"] != SUFFIX_VERSION:
        raise CacheFileError(path, len(SUFFIX_MAGIC), f"unsupported version {header['version']} (expected {SUFFIX_VERSION})")
    check_fingerprint(path, len(SUFFIX_MAGIC), header["fingerprint"], expected_fingerprint)
    n_requests, n_tokens, saved_span = header["n_requests"], header["n_tokens"], header["span"]
    if n_requests < 0 or n_tokens < n_requests or not 1 <= saved_span <= SPAN_MAX:
        raise CacheFileError(path, len(SUFFIX_MAGIC), f"invalid header values n_requests={n_requests} "
                             f"n_tokens={n_tokens} span={saved_span}")
    arrays = []
    offsets = []
    for what, count, dtype in [("request lengths", n_requests, INT32_LE), ("tokens", n_tokens, INT32_LE),
                               ("starts", n_tokens, INT32_LE), ("LCPs", n_tokens, UINT8)]:
        arr, offset = _bin(path, data, offset, what, count, dtype)
        arrays.append(arr)
        offsets.append(offset - arr.nbytes)
    if offset != len(data):
        raise CacheFileError(path, offset, f"{len(data) - offset} unexpected trailing bytes")
    if checksum(arrays) != header["crc32"]:
        raise CacheFileError(path, offsets[0], "checksum mismatch: the file is corrupt")
    lengths, tokens, sa, lcp = arrays
    l_off, t_off, s_off, c_off = offsets
    bad = np.flatnonzero(lengths < 1)
    if bad.size:
        raise CacheFileError(path, l_off + 4 * int(bad[0]), f"invalid request length {int(lengths[bad[0]])}")
    if int(lengths.sum(dtype=np.int64)) != n_tokens:
        raise CacheFileError(path, l_off, f"request lengths add up to {int(lengths.sum(dtype=np.int64))}, "
                             f"header n_tokens={n_tokens}")
    bad = np.flatnonzero(tokens < 0)
    if bad.size:
        raise CacheFileError(path, t_off + 4 * int(bad[0]), f"invalid token {int(tokens[bad[0]])}")
    check_token_ids(path, t_off, tokens, n_vocab, "token id")
    order = None
    if saved_span == span:
        _check_order(path, lengths, sa, lcp, span, s_off, c_off)
        order = (sa, lcp)
    return SuffixStore.from_arrays(span, max_bytes, lengths, tokens, order)


def _header(path: str, data: bytes) -> tuple[dict[str, Any], int]:
    """The header map and the offset after it."""
    if data[: len(SUFFIX_MAGIC)] != SUFFIX_MAGIC:
        raise CacheFileError(path, 0, f"bad magic {data[:len(SUFFIX_MAGIC)]!r}, expected {SUFFIX_MAGIC!r}")
    start = len(SUFFIX_MAGIC)
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=HEADER_MAX)
    unpacker.feed(data[start : start + HEADER_MAX])
    try:
        header = unpacker.unpack()
    except msgpack.OutOfData:
        raise CacheFileError(path, start, "truncated file: header missing or incomplete") from None
    except Exception as e:  # msgpack raises several types for malformed input
        raise CacheFileError(path, start, f"malformed header: {e}") from None
    if not isinstance(header, dict):
        raise CacheFileError(path, start, f"header is a {type(header).__name__}, expected a map")
    for name, kind in HEADER_FIELDS.items():
        if name not in header or not isinstance(header[name], kind) or isinstance(header[name], bool):
            raise CacheFileError(path, start, f"header field {name!r} missing or of the wrong type")
    return header, start + unpacker.tell()


def _bin(path: str, data: bytes, offset: int, what: str, count: int, dtype: np.dtype) -> tuple[np.ndarray, int]:
    """The bin32 at ``offset`` as ``count`` items of ``dtype`` (a view, no copy) and the offset after it."""
    size = count * np.dtype(dtype).itemsize
    if offset + 5 > len(data):
        raise CacheFileError(path, offset, f"truncated file: {what} missing")
    if data[offset] != BIN32 or int.from_bytes(data[offset + 1 : offset + 5], "big") != size:
        raise CacheFileError(path, offset, f"{what}: expected a bin of {size} bytes")
    if offset + 5 + size > len(data):
        raise CacheFileError(path, offset, f"truncated file: {what} incomplete")
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset + 5), offset + 5 + size


def _check_order(path: str, lengths: np.ndarray, sa: np.ndarray, lcp: np.ndarray, span: int,
                 s_off: int, c_off: int) -> None:
    """The saved starts must be each token position of the store's layout exactly once."""
    n_slots = int(lengths.sum(dtype=np.int64)) + span * len(lengths)
    if len(sa) and (int(sa.min()) < 0 or int(sa.max()) >= n_slots):
        raise CacheFileError(path, s_off, "a start lies outside the stored requests")
    seen = np.zeros(n_slots, dtype=bool)
    seen[sa] = True
    # Token positions: request r's tokens come after r blocks of separators.
    positions = np.arange(len(sa), dtype=np.int64) + span * np.repeat(np.arange(len(lengths)), lengths)
    if int(seen.sum()) != len(sa) or not seen[positions].all():
        raise CacheFileError(path, s_off, "the starts are not the token positions, each once")
    bad = np.flatnonzero(lcp > span)
    if bad.size or (len(lcp) and lcp[0] != 0):
        raise CacheFileError(path, c_off + (int(bad[0]) if bad.size else 0), "an LCP out of range")


def read_store_header(path: str | os.PathLike) -> dict[str, Any]:
    """A saved store's header (``HEADER_FIELDS``), read without the arrays: what the file was built
    for (its span, fingerprint and counts) before, or instead of, loading it."""
    with open(path, "rb") as f:
        data = f.read(len(SUFFIX_MAGIC) + HEADER_MAX)
    return _header(os.fspath(path), data)[0]


def save_store(store: SuffixStore, path: str | os.PathLike, fingerprint: str | None = None) -> None:
    atomic_write_bytes(path, encode_store(store, fingerprint))


def load_store(
    path: str | os.PathLike,
    span: int,
    max_bytes: int,
    expected_fingerprint: str | None = None,
    *,
    n_vocab: int | None = None,
) -> SuffixStore:
    return decode_store(read_file(path), span, max_bytes, path, expected_fingerprint, n_vocab=n_vocab)
