"""ngram-mod's hash pool: llama.cpp's hash, vectorised == rolled == reference, last writer wins."""

import random

import numpy as np

from ngram.pool import EMPTY, LCG_MULTIPLIER, HashPool, window_hash


def reference_hash(tokens):
    h = 0
    for t in tokens:
        h = (h * 6364136223846793005 + (t % 2**64)) % 2**64
    return h


def test_hash_is_the_reference_loop():
    assert LCG_MULTIPLIER == 6364136223846793005
    rng = random.Random(3)
    for n in (1, 2, 5, 24):
        w = [rng.randrange(260000) for _ in range(n)]
        assert window_hash(w) == reference_hash(w)
    assert window_hash([-1, 7]) == reference_hash([2**64 - 1, 7])  # int32 -1 promoted to size_t


def test_vectorised_add_matches_sequential_reference():
    # add_all (numpy) == a per-window loop with the reference hash, incl. collisions (size 61).
    rng = random.Random(5)
    n, size = 3, 61
    tokens = [rng.randrange(50) for _ in range(400)]
    pool = HashPool(n, size)
    pool.add_all(tokens)
    ref = [EMPTY] * size
    for i in range(len(tokens) - n):
        ref[reference_hash(tokens[i : i + n]) % size] = tokens[i + n]
    assert pool.entries.tolist() == ref
    assert pool.n_used == sum(e != EMPTY for e in ref)


def test_rolled_follow_matches_recomputed_hash():
    # follow() rolls the hash; recomputing each window from scratch gives the same chain.
    rng = random.Random(9)
    n, size = 4, 1 << 12
    pool = HashPool(n, size)
    pool.entries[:] = np.array([rng.randrange(30) for _ in range(size)], dtype=np.int32)
    window = [1, 2, 3, 4]
    got = pool.follow(window, 20)
    buf, expect = list(window), []
    for _ in range(20):
        t = int(pool.entries[reference_hash(buf[-n:]) % size])
        expect.append(t)
        buf.append(t)
    assert got == expect


def test_last_writer_wins_and_start():
    # [1,2,3]->9 then [1,2,3]->8: the later successor is kept; start skips earlier windows.
    pool = HashPool(3, 1 << 10)
    pool.add_all([1, 2, 3, 9, 1, 2, 3, 8])
    assert pool.get([1, 2, 3]) == 8
    pool.add_all([1, 2, 3, 7, 5], start=1)  # only windows from index 1: [2,3,7]->5
    assert pool.get([1, 2, 3]) == 8 and pool.get([2, 3, 7]) == 5


def test_reset_and_occupancy():
    pool = HashPool(1, 8)
    pool.add_all([1, 2, 3])
    assert pool.n_used == 2 and pool.occupancy == 0.25
    pool.reset()
    assert pool.n_used == 0 and (pool.entries == EMPTY).all()
