"""Suffix store files: round trip to an identical structure, refusal of corrupt or foreign files."""

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngram.fileio import CacheFileError
from ngram.pool import HashPool
from ngram.poolfile import encode_pool
from ngram.suffix_store import SuffixStore
from ngram.suffixfile import (
    SUFFIX_MAGIC,
    checksum,
    decode_store,
    encode_store,
    load_store,
    read_store_header,
    save_store,
    snapshot_store,
)

FP = "ab" * 32
SPAN = 10
BIG = 1 << 30


def sample_store():
    store = SuffixStore(SPAN, BIG)
    for r in ([1, 2, 3, 4, 1, 2, 5], [7, 7, 7], [1, 2, 3, 9]):
        store.add(r)
    return store


def encoded(store, fingerprint=None):
    return b"".join(encode_store(store, fingerprint))


def same(a, b):
    return (
        list(a.lengths) == list(b.lengths)
        and a.span == b.span
        and a.n_tokens == b.n_tokens
        and np.array_equal(a.index.vals, b.index.vals)
        and np.array_equal(a.index.sa, b.index.sa)
        and np.array_equal(a.index.lcp, b.index.lcp)
        and a.index.raw == b.index.raw
        and a.memory_bytes == b.memory_bytes
    )


def test_roundtrip(tmp_path):
    store = sample_store()
    path = tmp_path / "suffix.bin"
    save_store(store, path, FP)
    back = load_store(path, SPAN, BIG, expected_fingerprint=FP)
    assert same(back, store)
    assert encoded(back, FP) == path.read_bytes()
    back.add([4, 4, 4])  # the loaded store keeps learning
    assert back.requests()[-1] == [4, 4, 4]


def test_header_is_read_without_the_arrays(tmp_path):
    path = tmp_path / "suffix.bin"
    save_store(sample_store(), path, FP)
    header = read_store_header(path)
    assert (header["fingerprint"], header["span"], header["n_requests"], header["n_tokens"]) == (FP, SPAN, 3, 14)
    path.write_bytes(b"SSNGRAM\x00")
    with pytest.raises(CacheFileError, match="bad magic"):
        read_store_header(path)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), max_size=25), max_size=8), st.integers(1, 12), st.integers(150, 3000))
def test_roundtrip_after_evictions_is_identical(requests, span, budget):
    store = SuffixStore(span, budget)
    for r in requests:
        store.add(r)
    assert same(decode_store(encoded(store), span, budget), store)
    # Another span (depth or n_max changed): the index is sorted again for it.
    other = span % 12 + 1
    assert same(decode_store(encoded(store), other, budget), SuffixStore.from_requests(other, budget, store.requests()))


def test_load_with_a_smaller_budget_keeps_the_newest_requests():
    store = sample_store()
    for span in (SPAN, SPAN + 1):  # the saved index cut down, and a new one
        sized = SuffixStore(span, BIG)
        budget = sized.cost(3) + sized.cost(4)
        back = decode_store(encoded(store), span, budget)
        assert back.requests() == [[7, 7, 7], [1, 2, 3, 9]] and back.memory_bytes <= budget
        assert same(back, SuffixStore.from_requests(span, budget, back.requests()))


def test_snapshot_is_independent():
    store = sample_store()
    snap = snapshot_store(store)
    before = encoded(snap)
    store.add([5, 5, 5, 5])
    assert encoded(snap) == before and same(snap, sample_store())


def test_fingerprint_and_vocabulary_refused():
    data = encoded(sample_store(), FP)
    with pytest.raises(CacheFileError, match="fingerprint"):
        decode_store(data, SPAN, BIG, expected_fingerprint="cd" * 32)
    with pytest.raises(CacheFileError, match="vocabulary of 8"):
        decode_store(data, SPAN, BIG, n_vocab=8)


def forged(store, changes):
    """The file of ``store`` with arrays replaced (by index) and a matching checksum."""
    parts = encode_store(store)
    arrays = [np.frombuffer(bytes(p), dtype=np.uint8 if i == 3 else "<i4") for i, p in enumerate(parts[3::2])]
    for i, arr in changes.items():
        arrays[i] = arr
    header = msgpack.unpackb(parts[1])
    header["crc32"] = checksum(arrays)
    out = [SUFFIX_MAGIC, msgpack.packb(header)]
    for arr in arrays:
        out += [bytes([0xC6]) + arr.nbytes.to_bytes(4, "big"), arr.tobytes()]
    return b"".join(out)


def test_corrupt_and_foreign_files_are_refused(tmp_path):
    store = sample_store()
    good = encoded(store, FP)
    flipped = bytearray(good)
    flipped[-20] ^= 0x01  # a start changes: only the checksum notices
    sa = store.index.sa.astype("<i4")
    twice = sa.copy()
    twice[1] = twice[0]
    lcp = store.index.lcp.copy()
    lcp[2] = SPAN + 1
    path = tmp_path / "suffix.bin"
    for data, words in [
        (good[:-1], "truncated"),
        (b"SSNOTSUF" + good[len(SUFFIX_MAGIC) :], "bad magic"),
        (encode_pool(HashPool(2, 8)), "bad magic"),
        (bytes(flipped), "checksum"),
        (good + b"x", "trailing"),
        (good.replace(b"\xa7version\x01", b"\xa7version\x02"), "unsupported version"),
        (b"", "bad magic"),
        (SUFFIX_MAGIC + b"\x93\x01\x02\x03", "expected a map"),
        (forged(store, {0: np.array([7, 3, 0], dtype="<i4")}), "invalid request length 0"),
        (forged(store, {0: np.array([7, 3, 5], dtype="<i4")}), "add up to 15"),
        (forged(store, {2: twice}), "token positions, each once"),
        (forged(store, {2: sa + 100}), "outside"),
        (forged(store, {3: lcp}), "LCP out of range"),
    ]:
        path.write_bytes(data)
        with pytest.raises(ValueError, match=words) as info:
            load_store(path, SPAN, BIG)
        assert str(path) in str(info.value)
