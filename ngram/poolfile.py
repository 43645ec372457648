"""Saving and loading the ngram-mod hash pool (``HashPool``) so it survives restarts.

Format: ``b"SSNGMOD"`` + msgpack header ``{version, fingerprint, n_match, size, n_used}`` + one
bin of ``size`` little-endian int32 entries (-1 = empty). Same error rules as the n-gram cache
files (``CacheFileError`` with path and byte offset; a fingerprint mismatch is refused; with
``n_vocab`` an entry outside the model's vocabulary is refused). llama.cpp has no such file: its
ngram-mod pool lives only in memory.

``snapshot_pool`` copies a live pool (one memcpy of the entries) so that it can be encoded and
written on another thread while the original keeps learning.
"""

from __future__ import annotations

import copy
import os

import numpy as np

from ngram.fileio import (
    CacheFileError,
    HeadedReader,
    atomic_write_bytes,
    check_fingerprint,
    check_n_vocab,
    check_token_ids,
    pack_headed,
    read_file,
)
from ngram.pool import EMPTY, HashPool

POOL_MAGIC = b"SSNGMOD"
POOL_VERSION = 1
N_MATCH_MAX = 1024


def encode_pool(pool: HashPool, fingerprint: str | None = None) -> bytes:
    header = {
        "version": POOL_VERSION,
        "fingerprint": fingerprint,
        "n_match": pool.n,
        "size": pool.size,
        "n_used": pool.n_used,
    }
    return pack_headed(POOL_MAGIC, header, [pool.entries])


def snapshot_pool(pool: HashPool) -> HashPool:
    """An independent copy of ``pool`` for saving: later updates of ``pool`` do not reach it."""
    snap = copy.copy(pool)  # shares only the read-only hash weights
    snap.entries = pool.entries.copy()
    return snap


def decode_pool(
    data: bytes,
    path: str | os.PathLike = "<bytes>",
    expected_fingerprint: str | None = None,
    *,
    n_vocab: int | None = None,
) -> HashPool:
    """The pool in ``data``; ``n_vocab`` (the model's vocabulary size) refuses larger token ids."""
    check_n_vocab(n_vocab)
    path = os.fspath(path)
    reader = HeadedReader(path, data, POOL_MAGIC)
    header, h_off = reader.header(
        {"version": int, "fingerprint": (str, type(None)), "n_match": int, "size": int, "n_used": int}
    )
    if header["version"] != POOL_VERSION:
        raise CacheFileError(path, h_off, f"unsupported version {header['version']} (expected {POOL_VERSION})")
    check_fingerprint(path, h_off, header["fingerprint"], expected_fingerprint)
    n_match, size, n_used = header["n_match"], header["size"], header["n_used"]
    if not 1 <= n_match <= N_MATCH_MAX or size < 1 or not 0 <= n_used <= size:
        raise CacheFileError(path, h_off, f"invalid header values n_match={n_match} size={size} n_used={n_used}")
    entries, e_off = reader.int32_array("entries", size)
    reader.expect_end()
    bad = np.flatnonzero(entries < EMPTY)
    if bad.size:
        raise CacheFileError(path, e_off + 4 * int(bad[0]), f"invalid entry {int(entries[bad[0]])}")
    check_token_ids(path, e_off, entries, n_vocab, "entry: token id")
    used = int(np.count_nonzero(entries != EMPTY))
    if used != n_used:
        raise CacheFileError(path, h_off, f"header n_used={n_used} but {used} entries are used")
    pool = HashPool(n_match, size)
    pool.entries[:] = entries
    pool.n_used = used
    return pool


def save_pool(pool: HashPool, path: str | os.PathLike, fingerprint: str | None = None) -> None:
    atomic_write_bytes(path, encode_pool(pool, fingerprint))


def load_pool(
    path: str | os.PathLike, expected_fingerprint: str | None = None, *, n_vocab: int | None = None
) -> HashPool:
    return decode_pool(read_file(path), path, expected_fingerprint, n_vocab=n_vocab)
