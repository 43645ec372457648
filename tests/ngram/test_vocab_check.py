"""Token ids in pool and cache files are checked against the model's vocabulary size.

An id >= n_vocab makes a draft that llama_decode refuses, failing the batch for every slot, so
such a file is refused with its path and the byte offset of the first bad id. The -1 of n-gram
padding and empty pool entries is not a token and passes; ``n_vocab=None`` checks nothing.
"""

import struct

import numpy as np
import pytest

from ngram.cache_data import NgramCache, make_ngram
from ngram.cachefile import FORMAT_MSGPACK, MAGIC, encode_llamacpp, load_cache, save_cache
from ngram.fileio import CacheFileError
from ngram.pool import EMPTY, HashPool
from ngram.poolfile import load_pool, save_pool

FP = "cd" * 32
N_VOCAB = 1000


def record(ngram, pairs):
    padded = list(ngram) + [-1] * (4 - len(ngram))
    flat = [x for pair in pairs for x in pair]
    return struct.pack(f"<5i{len(flat)}i", *padded, len(pairs), *flat)


# ---- ngram-mod pool file ------------------------------------------------------------------------

def pool_with(entries: dict[int, int]) -> HashPool:
    pool = HashPool(3, 64)
    for i, token in entries.items():
        pool.entries[i] = token
    pool.n_used = int(np.count_nonzero(pool.entries != EMPTY))
    return pool


def entries_offset(path) -> int:
    """Byte offset of entry 0: the entries bin is the file's last 64 int32."""
    return path.stat().st_size - 4 * 64


def test_pool_entry_outside_the_vocabulary_is_refused_with_its_offset(tmp_path):
    path = tmp_path / "mod.pool"
    save_pool(pool_with({5: 7, 9: N_VOCAB, 11: N_VOCAB + 5}), path, FP)
    with pytest.raises(CacheFileError, match=f"{N_VOCAB} is out of range .* {N_VOCAB} tokens") as info:
        load_pool(path, FP, n_vocab=N_VOCAB)
    assert info.value.path == str(path) and str(path) in str(info.value)
    assert info.value.offset == entries_offset(path) + 4 * 9  # the first bad entry
    assert f"byte offset {info.value.offset}" in str(info.value)


def test_pool_within_the_vocabulary_loads_and_none_checks_nothing(tmp_path):
    path = tmp_path / "mod.pool"
    save_pool(pool_with({0: 0, 3: N_VOCAB - 1}), path, FP)  # empty entries (-1) are fine
    assert load_pool(path, FP, n_vocab=N_VOCAB).n_used == 2
    save_pool(pool_with({3: 10**6}), path, FP)
    assert load_pool(path, FP).n_used == 1  # ngram_tool and other model-less readers
    with pytest.raises(CacheFileError):
        load_pool(path, FP, n_vocab=N_VOCAB)


def test_n_vocab_must_be_positive(tmp_path):
    path = tmp_path / "mod.pool"
    save_pool(pool_with({}), path, FP)
    with pytest.raises(ValueError):
        load_pool(path, FP, n_vocab=0)


# ---- llama.cpp's cache format ------------------------------------------------------------------

def test_llamacpp_follower_outside_the_vocabulary_is_refused_with_its_offset(tmp_path):
    path = tmp_path / "lookup.bin"
    first = record([7], [(3, 2)])
    second = record([1, 2], [(5, 1), (N_VOCAB, 4)])
    path.write_bytes(first + second)
    with pytest.raises(CacheFileError, match=f"token id {N_VOCAB} is out of range") as info:
        load_cache(path, n_vocab=N_VOCAB)
    # second record: 4 n-gram ints, ntokens, (5, 1), then the bad token
    assert info.value.offset == len(first) + 4 * (4 + 1 + 2)
    assert str(path) in str(info.value)
    assert load_cache(path).cache.n_ngrams == 2  # unchecked without n_vocab
    assert load_cache(path, n_vocab=N_VOCAB + 1).cache.n_ngrams == 2


def test_llamacpp_ngram_token_outside_the_vocabulary_is_refused_with_its_offset(tmp_path):
    path = tmp_path / "lookup.bin"
    first = record([7], [(3, 2)])
    path.write_bytes(first + record([1, 2, N_VOCAB + 9], [(5, 1)]))
    with pytest.raises(CacheFileError, match=f"n-gram token id {N_VOCAB + 9} is out of range") as info:
        load_cache(path, n_vocab=N_VOCAB)
    assert info.value.offset == len(first) + 4 * 2  # the third token of the second n-gram


def test_llamacpp_padding_is_not_a_token(tmp_path):
    # 1- to 4-grams padded with -1, ids up to n_vocab - 1: all valid.
    c = NgramCache()
    c.update([N_VOCAB - 1, 0, 5, N_VOCAB - 1, 0, 6], 1, 4)
    path = tmp_path / "lookup.bin"
    path.write_bytes(encode_llamacpp(c))
    assert load_cache(path, n_vocab=N_VOCAB).cache == c


# ---- our msgpack cache format ------------------------------------------------------------------

def msgpack_file(tmp_path, tokens):
    c = NgramCache()
    c.update(tokens, 1, 4)
    path = tmp_path / "lookup.ssngram"
    save_cache(c, path, FORMAT_MSGPACK, FP)
    return c, path


def test_msgpack_follower_outside_the_vocabulary_is_refused_with_its_offset(tmp_path):
    c, path = msgpack_file(tmp_path, [1, 2, 3, N_VOCAB + 1])
    data = path.read_bytes()
    with pytest.raises(CacheFileError, match=f"token id {N_VOCAB + 1} is out of range") as info:
        load_cache(path, FP, n_vocab=N_VOCAB)
    assert str(path) in str(info.value)
    assert info.value.offset > len(MAGIC)
    assert struct.unpack_from("<i", data, info.value.offset)[0] == N_VOCAB + 1  # points at the id


def test_msgpack_ngram_token_outside_the_vocabulary_is_refused_with_its_offset(tmp_path):
    c = NgramCache({make_ngram([4, N_VOCAB + 2]): {3: 1}, make_ngram([4]): {3: 1}})
    path = tmp_path / "lookup.ssngram"
    save_cache(c, path, FORMAT_MSGPACK, FP)
    with pytest.raises(CacheFileError, match=f"n-gram token id {N_VOCAB + 2} is out of range") as info:
        load_cache(path, FP, n_vocab=N_VOCAB)
    assert struct.unpack_from("<i", path.read_bytes(), info.value.offset)[0] == N_VOCAB + 2


def test_msgpack_within_the_vocabulary_loads(tmp_path):
    c, path = msgpack_file(tmp_path, [1, 2, 3, N_VOCAB - 1, 1, 2])
    assert load_cache(path, FP, n_vocab=N_VOCAB).cache == c
