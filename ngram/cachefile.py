"""Reading and writing n-gram caches: llama.cpp's lookup-cache format and our msgpack format.

**llama.cpp format** (``common_ngram_cache_save`` / ``_load``, ``common/ngram-cache.cpp``): no
header; a concatenation of records, little-endian::

    int32 tokens[4]      the n-gram, unused trailing tokens = -1
    int32 ntokens        > 0
    (int32 token, int32 count > 0) x ntokens

llama.cpp writes records in hash-map order; we write n-grams and tokens sorted, so equal caches
give identical bytes. As in llama.cpp's loader, a repeated n-gram or token keeps the first one.
We also reject what llama.cpp would not produce (negative tokens, -1 inside an n-gram), which
catches most foreign files.

**Vocabulary check**: with ``n_vocab`` (the model's vocabulary size), a token id ``>= n_vocab``
in an n-gram or among the followers is refused with its byte offset: a cache built for a larger
vocabulary would otherwise draft tokens that make ``llama_decode`` fail for every slot in the
batch. The -1 padding of n-grams is not a token and is valid.

**msgpack format**: ``b"SSNGRAM"`` + header ``{version, fingerprint, n_ngrams, n_entries}`` +
four int32 bins (n-grams x4, ntokens, tokens, counts). A file made for another tokenizer
(fingerprint differs from the expected one) is refused. ``load_cache`` detects the format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ngram.cache_data import NGRAM_MAX, TOKEN_NULL, Ngram, NgramCache
from ngram.fileio import (
    INT32_LE,
    CacheFileError,
    HeadedReader,
    atomic_write_bytes,
    check_fingerprint,
    check_n_vocab,
    check_token_ids,
    out_of_vocab,
    pack_headed,
    read_file,
)

FORMAT_LLAMACPP = "llamacpp"
FORMAT_MSGPACK = "msgpack"
FORMATS = (FORMAT_LLAMACPP, FORMAT_MSGPACK)
MAGIC = b"SSNGRAM"
POOL_MAGIC = b"SSNGMOD"
VERSION = 1
_RECORD_HEAD = NGRAM_MAX + 1  # int32s before the (token, count) pairs
_NO_VOCAB_LIMIT = 2**31  # n_vocab=None: any int32 token id passes


@dataclass(slots=True)
class LoadedCache:
    cache: NgramCache
    format: str
    fingerprint: str | None  # None for llama.cpp files (they carry none)


def _sorted_rows(cache: NgramCache) -> tuple[list[int], list[int], list[int], list[int]]:
    ngrams: list[int] = []
    ntokens: list[int] = []
    tokens: list[int] = []
    counts: list[int] = []
    for ngram in sorted(cache.parts):
        part = cache.parts[ngram]
        assert part, "an n-gram with no followers cannot be written"
        ngrams.extend(ngram)
        ntokens.append(len(part))
        for token in sorted(part):
            tokens.append(token)
            counts.append(part[token])
    return ngrams, ntokens, tokens, counts


def encode_llamacpp(cache: NgramCache) -> bytes:
    flat: list[int] = []
    for ngram in sorted(cache.parts):
        part = cache.parts[ngram]
        flat.extend(ngram)
        flat.append(len(part))
        for token in sorted(part):
            flat.append(token)
            flat.append(part[token])
    return np.asarray(flat, dtype=INT32_LE).tobytes()


def _check_ngram(path: str, offset: int, ngram: Ngram, limit: int = _NO_VOCAB_LIMIT) -> None:
    size = 0
    while size < NGRAM_MAX and ngram[size] >= 0:
        size += 1
    if size == 0 or any(t != TOKEN_NULL for t in ngram[size:]):
        raise CacheFileError(path, offset, f"invalid n-gram {list(ngram)} (not a 1..4-gram padded with -1)")
    for j in range(size):
        if ngram[j] >= limit:
            raise CacheFileError(path, offset + 4 * j, out_of_vocab("n-gram token id", ngram[j], limit))


def decode_llamacpp(data: bytes, path: str | os.PathLike = "<bytes>", *, n_vocab: int | None = None) -> NgramCache:
    """The cache in ``data``; ``n_vocab`` (the model's vocabulary size) refuses larger token ids."""
    check_n_vocab(n_vocab)
    limit = _NO_VOCAB_LIMIT if n_vocab is None else n_vocab
    path = os.fspath(path)
    if data[: len(POOL_MAGIC)] == POOL_MAGIC:
        raise CacheFileError(path, 0, "this is an ngram-mod pool file, not an n-gram cache")
    n_ints = len(data) // 4
    a = np.frombuffer(data, dtype=INT32_LE, count=n_ints).tolist()
    parts: dict[Ngram, dict[int, int]] = {}
    pos = 0
    while pos < n_ints:
        rec = 4 * pos
        if pos + _RECORD_HEAD > n_ints:
            raise CacheFileError(path, rec, f"truncated record: {len(data) - rec} of at least 24 bytes")
        ngram: Ngram = tuple(a[pos : pos + NGRAM_MAX])  # type: ignore[assignment]
        _check_ngram(path, rec, ngram, limit)
        ntokens = a[pos + NGRAM_MAX]
        if ntokens <= 0:
            raise CacheFileError(path, rec + 16, f"ntokens must be > 0, got {ntokens}")
        end = pos + _RECORD_HEAD + 2 * ntokens
        if end > n_ints:
            need = 4 * (end - pos)
            raise CacheFileError(path, rec, f"truncated record: needs {need} bytes, {len(data) - rec} left")
        part: dict[int, int] = {}
        for k in range(pos + _RECORD_HEAD, end, 2):
            token, count = a[k], a[k + 1]
            if token < 0:
                raise CacheFileError(path, 4 * k, f"invalid token id {token}")
            if token >= limit:
                raise CacheFileError(path, 4 * k, out_of_vocab("token id", token, limit))
            if count <= 0:
                raise CacheFileError(path, 4 * k + 4, f"count must be > 0, got {count}")
            part.setdefault(token, count)
        parts.setdefault(ngram, part)
        pos = end
    if len(data) % 4:
        raise CacheFileError(path, 4 * n_ints, f"truncated record: {len(data) % 4} stray bytes")
    return NgramCache(parts)


def encode_msgpack(cache: NgramCache, fingerprint: str) -> bytes:
    ngrams, ntokens, tokens, counts = _sorted_rows(cache)
    header = {"version": VERSION, "fingerprint": fingerprint, "n_ngrams": len(ntokens), "n_entries": len(tokens)}
    arrays = [np.asarray(x, dtype=np.int64) for x in (ngrams, ntokens, tokens, counts)]
    for arr in arrays:
        if arr.size and (arr.min() < -(2**31) or arr.max() >= 2**31):
            raise OverflowError("n-gram cache value does not fit in int32")
    return pack_headed(MAGIC, header, arrays)


def decode_msgpack(
    data: bytes,
    path: str | os.PathLike = "<bytes>",
    expected_fingerprint: str | None = None,
    *,
    n_vocab: int | None = None,
) -> tuple[NgramCache, str]:
    check_n_vocab(n_vocab)
    path = os.fspath(path)
    reader = HeadedReader(path, data, MAGIC)
    header, h_off = reader.header({"version": int, "fingerprint": str, "n_ngrams": int, "n_entries": int})
    if header["version"] != VERSION:
        raise CacheFileError(path, h_off, f"unsupported version {header['version']} (expected {VERSION})")
    check_fingerprint(path, h_off, header["fingerprint"], expected_fingerprint)
    n_ngrams, n_entries = header["n_ngrams"], header["n_entries"]
    if n_ngrams < 0 or n_entries < 0:
        raise CacheFileError(path, h_off, "negative counts in header")
    ngrams, ng_off = reader.int32_array("n-grams", NGRAM_MAX * n_ngrams)
    ntokens, nt_off = reader.int32_array("ntokens", n_ngrams)
    tokens, tk_off = reader.int32_array("tokens", n_entries)
    counts, ct_off = reader.int32_array("counts", n_entries)
    reader.expect_end()
    _check_positive(path, ntokens, nt_off, "ntokens")
    _check_positive(path, counts, ct_off, "count")
    if int(ntokens.sum(dtype=np.int64)) != n_entries:
        raise CacheFileError(path, nt_off, f"ntokens add up to {int(ntokens.sum())}, header says {n_entries}")
    bad = np.flatnonzero(tokens < 0)
    if bad.size:
        raise CacheFileError(path, tk_off + 4 * int(bad[0]), f"invalid token id {int(tokens[bad[0]])}")
    check_token_ids(path, ng_off, ngrams, n_vocab, "n-gram token id")  # the -1 padding passes
    check_token_ids(path, tk_off, tokens, n_vocab, "token id")
    return _build(path, ng_off, ngrams.tolist(), ntokens.tolist(), tokens.tolist(), counts.tolist()), header["fingerprint"]


def _check_positive(path: str, arr: np.ndarray, offset: int, what: str) -> None:
    bad = np.flatnonzero(arr <= 0)
    if bad.size:
        raise CacheFileError(path, offset + 4 * int(bad[0]), f"{what} must be > 0, got {int(arr[bad[0]])}")


def _build(path: str, ng_off: int, ngrams: list, ntokens: list, tokens: list, counts: list) -> NgramCache:
    parts: dict[Ngram, dict[int, int]] = {}
    e = 0
    for i, nt in enumerate(ntokens):
        ngram: Ngram = tuple(ngrams[NGRAM_MAX * i : NGRAM_MAX * i + NGRAM_MAX])  # type: ignore[assignment]
        _check_ngram(path, ng_off + 16 * i, ngram)
        part = parts.setdefault(ngram, {})
        for token, count in zip(tokens[e : e + nt], counts[e : e + nt]):
            part.setdefault(token, count)
        e += nt
    return NgramCache(parts)


def save_cache(
    cache: NgramCache, path: str | os.PathLike, format: str = FORMAT_LLAMACPP, fingerprint: str | None = None
) -> None:
    """Save atomically. The msgpack format needs the tokenizer ``fingerprint``."""
    if format == FORMAT_LLAMACPP:
        data = encode_llamacpp(cache)
    elif format == FORMAT_MSGPACK:
        if not fingerprint:
            raise ValueError("the msgpack format needs a tokenizer fingerprint")
        data = encode_msgpack(cache, fingerprint)
    else:
        raise ValueError(f"unknown cache format {format!r}; expected one of {FORMATS}")
    atomic_write_bytes(path, data)


def load_cache(
    path: str | os.PathLike, expected_fingerprint: str | None = None, *, n_vocab: int | None = None
) -> LoadedCache:
    """Load either format (detected by magic). ``expected_fingerprint`` is checked for msgpack
    files; llama.cpp files carry no fingerprint, so the caller must vouch for them. ``n_vocab``
    (the model's vocabulary size) refuses token ids outside the vocabulary in both formats;
    ``None`` leaves them unchecked."""
    data = read_file(path)
    if data[: len(MAGIC)] == MAGIC:
        cache, fingerprint = decode_msgpack(data, path, expected_fingerprint, n_vocab=n_vocab)
        return LoadedCache(cache, FORMAT_MSGPACK, fingerprint)
    return LoadedCache(decode_llamacpp(data, path, n_vocab=n_vocab), FORMAT_LLAMACPP, None)
