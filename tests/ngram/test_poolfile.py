"""ngram-mod pool files: round trip, fingerprint refusal, corruption."""

import pytest

from ngram.fileio import CacheFileError
from ngram.pool import HashPool
from ngram.poolfile import POOL_MAGIC, encode_pool, load_pool, save_pool

FP = "12" * 32


def sample_pool():
    pool = HashPool(3, 64)
    pool.add_all([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 9])
    return pool


def test_roundtrip(tmp_path):
    pool = sample_pool()
    path = tmp_path / "mod.pool"
    save_pool(pool, path, FP)
    back = load_pool(path, expected_fingerprint=FP)
    assert (back.n, back.size, back.n_used) == (3, 64, pool.n_used)
    assert (back.entries == pool.entries).all() and back.get([1, 2, 3]) == 9
    assert encode_pool(back, FP) == path.read_bytes()
    back.add_all([4, 4, 4, 4])  # the loaded entries are writable


def test_fingerprint_mismatch_refused(tmp_path):
    path = tmp_path / "mod.pool"
    save_pool(sample_pool(), path, FP)
    with pytest.raises(CacheFileError, match="fingerprint") as info:
        load_pool(path, expected_fingerprint="34" * 32)
    assert info.value.offset == len(POOL_MAGIC)


def test_corrupt_pool_files(tmp_path):
    pool = sample_pool()
    good = encode_pool(pool, FP)
    path = tmp_path / "mod.pool"
    field = b"\xa6n_used" + bytes([pool.n_used])  # msgpack fixstr key + positive fixint
    bad_used = good.replace(field, b"\xa6n_used" + bytes([pool.n_used + 1]))
    assert bad_used != good
    for data, words in [
        (good[:-1], "truncated"),
        (b"SSNGRAM" + good[7:], "bad magic"),
        (bad_used, "n_used"),
        (good + b"x", "trailing"),
    ]:
        path.write_bytes(data)
        with pytest.raises(CacheFileError, match=words) as info:
            load_pool(path)
        assert str(path) in str(info.value)
