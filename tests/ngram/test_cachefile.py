"""Cache files: llama.cpp's headerless format bit-exact, our msgpack format, and every error path."""

import os
import struct

import pytest

from ngram.cache_data import NgramCache, make_ngram
from ngram.cachefile import (
    FORMAT_LLAMACPP,
    FORMAT_MSGPACK,
    MAGIC,
    decode_llamacpp,
    encode_llamacpp,
    encode_msgpack,
    load_cache,
    save_cache,
)
from ngram.fileio import CacheFileError

FP = "ab" * 32


def sample_cache():
    # Every n-gram size 1..4, several followers, counts > 1, a large token id.
    c = NgramCache()
    c.update([5, 6, 7, 5, 6, 8, 5, 6, 7, 262143], 1, 4)
    return c


def record(ngram, pairs):
    padded = list(ngram) + [-1] * (4 - len(ngram))
    flat = [x for pair in pairs for x in pair]
    return struct.pack(f"<5i{len(flat)}i", *padded, len(pairs), *flat)


def test_roundtrip_bit_exact(tmp_path):
    # write -> bytes -> read -> write gives identical bytes; reading restores the cache.
    c = sample_cache()
    assert {sum(t >= 0 for t in ng) for ng in c.parts} == {1, 2, 3, 4}
    data = encode_llamacpp(c)
    back = decode_llamacpp(data)
    assert back == c and encode_llamacpp(back) == data
    path = tmp_path / "c.bin"
    save_cache(c, path)
    assert path.read_bytes() == data
    loaded = load_cache(path)
    assert loaded.format == FORMAT_LLAMACPP and loaded.fingerprint is None and loaded.cache == c


def test_hand_built_file_parses():
    # Two records built with struct: (7)->{3:2, 9:1} and (1,2,3,4)->{5:1}; little-endian int32.
    data = record([7], [(3, 2), (9, 1)]) + record([1, 2, 3, 4], [(5, 1)])
    assert len(data) == (20 + 16) + (20 + 8)
    c = decode_llamacpp(data)
    assert c.parts == {make_ngram([7]): {3: 2, 9: 1}, (1, 2, 3, 4): {5: 1}}


def test_written_records_are_sorted():
    # Records sorted by n-gram, followers by token: (1)->... before (2)->..., 3 before 4.
    c = NgramCache({make_ngram([2]): {4: 1, 3: 1}, make_ngram([1]): {9: 2}})
    assert encode_llamacpp(c) == record([1], [(9, 2)]) + record([2], [(3, 1), (4, 1)])


def test_duplicates_keep_the_first_like_llama_cpp():
    data = record([7], [(3, 2), (3, 5)]) + record([7], [(4, 1)])
    assert decode_llamacpp(data).parts == {make_ngram([7]): {3: 2}}


def test_empty_file_is_an_empty_cache(tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    assert load_cache(path).cache.n_ngrams == 0


@pytest.mark.parametrize(
    "data, offset, words",
    [
        (record([7], [(3, 2)])[:-4], 0, "truncated record"),  # last count missing
        (record([7], [(3, 2)]) + b"\x01\x02", 28, "stray bytes"),  # partial int32 at the end
        (record([7], [(3, 2)]) + record([1], [(2, 1)])[:12], 28, "truncated record"),
        (record([7], []), 16, "ntokens must be > 0"),
        (record([7], [(3, 2), (4, 0)]), 32, "count must be > 0"),
        (record([7], [(-5, 1)]), 20, "invalid token"),
        (record([7, -1, 4], [(3, 1)]), 0, "invalid n-gram"),
        (b"hello world, this is not a cache!!!!", 0, "truncated record"),
        (b"SSNGMOD" + b"\x00" * 21, 0, "pool file"),
    ],
)
def test_corrupt_files_name_path_and_offset(tmp_path, data, offset, words):
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    with pytest.raises(CacheFileError) as info:
        load_cache(path)
    assert info.value.offset == offset and words in str(info.value)
    assert str(path) in str(info.value) and f"offset {offset}" in str(info.value)


def test_msgpack_roundtrip_and_fingerprint(tmp_path):
    c = sample_cache()
    path = tmp_path / "c.ssng"
    save_cache(c, path, FORMAT_MSGPACK, fingerprint=FP)
    assert path.read_bytes().startswith(MAGIC)
    loaded = load_cache(path, expected_fingerprint=FP)
    assert loaded.format == FORMAT_MSGPACK and loaded.fingerprint == FP and loaded.cache == c
    assert encode_msgpack(loaded.cache, FP) == path.read_bytes()
    with pytest.raises(CacheFileError, match="fingerprint"):
        load_cache(path, expected_fingerprint="cd" * 32)
    with pytest.raises(ValueError):
        save_cache(c, path, FORMAT_MSGPACK)  # no fingerprint


def test_msgpack_corruption(tmp_path):
    good = encode_msgpack(sample_cache(), FP)
    path = tmp_path / "c.ssng"
    cases = [good[: len(good) - 3], good + b"\x00", good[:7] + b"\xc1" + good[8:]]
    for data in cases:
        path.write_bytes(data)
        with pytest.raises(CacheFileError) as info:
            load_cache(path)
        assert str(path) in str(info.value) and info.value.offset > 0
    bumped = good.replace(b"\xa7version\x01", b"\xa7version\x02")
    path.write_bytes(bumped)
    with pytest.raises(CacheFileError, match="unsupported version"):
        load_cache(path)


def test_atomic_save_leaves_no_temp_files(tmp_path):
    path = tmp_path / "c.bin"
    path.write_bytes(b"old")
    save_cache(sample_cache(), path)
    assert os.listdir(tmp_path) == ["c.bin"] and load_cache(path).cache == sample_cache()
