"""The ngram-mod hash pool: a fixed table mapping the hash of the last n tokens to the next token.

After llama.cpp ``common/ngram-mod.{h,cpp}`` (PR #19164). The hash is a 64-bit wrapping LCG-style
polynomial ``h = h * 6364136223846793005 + token`` over the n tokens, reduced modulo the table
size. Since it is a polynomial hash it can be rolled: this gives exactly llama.cpp's values while
hashing a whole prompt in a few numpy passes. Collisions are not detected: the last writer wins.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

LCG_MULTIPLIER = 6364136223846793005
POOL_SIZE = 4 * 1024 * 1024  # entries (int32): 16 MiB, as llama.cpp
EMPTY = -1
_MASK64 = (1 << 64) - 1


def window_hash(tokens: Sequence[int]) -> int:
    """llama.cpp's hash of one window (all of ``tokens``), as an unsigned 64-bit integer."""
    h = 0
    for t in tokens:
        h = (h * LCG_MULTIPLIER + (t & _MASK64)) & _MASK64
    return h


class HashPool:
    """``entries[hash(window) % size]`` = the token that followed ``window`` when it was last seen."""

    def __init__(self, n: int, size: int = POOL_SIZE) -> None:
        assert n >= 1 and size >= 1
        self.n = n
        self.size = size
        self.entries = np.full(size, EMPTY, dtype=np.int32)
        self.n_used = 0
        # M^(n-1) mod 2^64: the weight of the oldest token, removed when the window rolls.
        self._m_top = pow(LCG_MULTIPLIER, n - 1, 1 << 64)
        # weights[j] = M^(n-1-j) mod 2^64 for the vectorised hash.
        self._weights = np.array(
            [pow(LCG_MULTIPLIER, n - 1 - j, 1 << 64) for j in range(n)], dtype=np.uint64
        )

    @property
    def occupancy(self) -> float:
        return self.n_used / self.size

    @property
    def size_bytes(self) -> int:
        return self.entries.nbytes

    def index(self, window: Sequence[int]) -> int:
        assert len(window) == self.n
        return window_hash(window) % self.size

    def get(self, window: Sequence[int]) -> int:
        return int(self.entries[self.index(window)])

    def add_all(self, tokens: Sequence[int], start: int = 0) -> None:
        """Add every window ``tokens[i:i+n] -> tokens[i+n]`` for ``start <= i < len(tokens) - n``."""
        stop = len(tokens) - self.n
        if stop <= start:
            return
        arr = np.asarray(tokens[start:], dtype=np.int64).astype(np.uint64)
        count = stop - start
        h = np.zeros(count, dtype=np.uint64)
        for j in range(self.n):  # uint64 arithmetic wraps modulo 2^64, like size_t in C++
            h += arr[j : j + count] * self._weights[j]
        idx = (h % np.uint64(self.size)).astype(np.int64)
        nxt = np.asarray(tokens[start + self.n : start + self.n + count], dtype=np.int32)
        # Sequential "last writer wins" semantics: for duplicate indices keep the last value.
        rev_idx = idx[::-1]
        uniq, first_in_rev = np.unique(rev_idx, return_index=True)
        was_empty = self.entries[uniq] == EMPTY
        self.n_used += int(was_empty.sum())
        self.entries[uniq] = nxt[::-1][first_in_rev]

    def reset(self) -> None:
        self.entries.fill(EMPTY)
        self.n_used = 0

    def follow(self, window: Sequence[int], n_max: int) -> list[int]:
        """Chain lookups from ``window``: each found token extends the window. Stops at an empty entry."""
        h = window_hash(window)
        out: list[int] = []
        entries, size, m_top = self.entries, self.size, self._m_top
        oldest = list(window)
        for i in range(n_max):
            t = int(entries[h % size])
            if t == EMPTY:
                break
            out.append(t)
            # roll: drop the oldest token's contribution, shift, add the new token
            old = oldest[i] & _MASK64
            h = (((h - old * m_top) & _MASK64) * LCG_MULTIPLIER + t) & _MASK64
            oldest.append(t)
        return out
