"""A mirror of one slot's token history with a 32-bit hash per n-token window, for fast exact search.

llama.cpp's n-gram drafters (``common/ngram-map.cpp``) find a key n-gram by scanning the history
backwards token by token. In C that is cheap; in CPython a 32k-token scan costs tens of ms. This
mirror keeps ``hashes[j] = hash(tokens[j:j+n])`` up to date as the history grows, so a search
compares hashes with numpy (from the end, in chunks) and verifies candidates token by token. The
answer is therefore exactly the position the linear scan would find.

The hash is llama.cpp's ``common_ngram_map_hash``: ``h = h * 2654435761 + token`` in wrapping
32-bit arithmetic, so ngram-map-k can reuse it for its ``key_map`` slots.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

LCG_FACTOR_32 = 2654435761  # prime near (sqrt(5)-1)/2 * 2^32, as llama.cpp's ngram-map
MASK32 = 0xFFFFFFFF
# Backward searches compare this many hashes per numpy pass (one pass covers a 64k history).
SEARCH_CHUNK = 65536
# Appends of at most this many new windows are hashed in plain Python (numpy overhead dominates).
SMALL_APPEND = 32
_INITIAL_CAPACITY = 1024


def window_hash32(tokens: Sequence[int], start: int = 0, n: int | None = None) -> int:
    """llama.cpp's 32-bit LCG hash of ``tokens[start:start+n]`` (all of it if ``n`` is None)."""
    stop = len(tokens) if n is None else start + n
    h = 0
    for i in range(start, stop):
        h = (h * LCG_FACTOR_32 + (tokens[i] & MASK32)) & MASK32
    return h


class TokenWindows:
    """``ids`` mirrors the history; ``hashes[j]`` is the hash of window ``ids[j:j+n]``.

    Contract: between ``resync`` calls the history only grows (``sync`` checks this cheaply and
    falls back to ``resync``).
    """

    def __init__(self, n: int) -> None:
        assert n >= 1
        self.n = n
        self.ids: list[int] = []
        self._hashes = np.zeros(_INITIAL_CAPACITY, dtype=np.uint32)
        self._weights = np.array(
            [pow(LCG_FACTOR_32, n - 1 - k, 1 << 32) for k in range(n)], dtype=np.uint64
        )

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_windows(self) -> int:
        return max(0, len(self.ids) - self.n + 1)

    @property
    def hashes(self) -> np.ndarray:
        """Hashes of all complete windows (a view)."""
        return self._hashes[: self.n_windows]

    @property
    def size_bytes(self) -> int:
        return self._hashes.nbytes + 8 * len(self.ids)

    def resync(self, history: Sequence[int]) -> int:
        """Make the mirror equal ``history``; return the length of the prefix that was kept."""
        size = min(len(self.ids), len(history))
        lcp = size
        if size:
            a = np.asarray(self.ids[:size], dtype=np.int64)
            b = np.asarray(history[:size], dtype=np.int64)
            diff = np.flatnonzero(a != b)
            if diff.size:
                lcp = int(diff[0])
        del self.ids[lcp:]
        self._append(history[lcp:])
        return lcp

    def can_extend(self, history: Sequence[int]) -> bool:
        """Cheap check that ``history`` grew from the mirror (same length or longer, same last token)."""
        size = len(self.ids)
        return len(history) >= size and (size == 0 or history[size - 1] == self.ids[size - 1])

    def sync(self, history: Sequence[int]) -> bool:
        """Catch up with a grown ``history``. Returns False (and resyncs) if it did not just grow."""
        if self.can_extend(history):
            self._append(history[len(self.ids) :])
            return True
        self.resync(history)
        return False

    def _append(self, new_ids: Sequence[int]) -> None:
        if len(new_ids) == 0:
            return
        first = self.n_windows  # first window that becomes complete
        self.ids.extend(int(t) for t in new_ids)
        last = self.n_windows  # exclusive
        if last <= first:
            return
        if last > len(self._hashes):
            grown = np.zeros(max(last, 2 * len(self._hashes)), dtype=np.uint32)
            grown[: len(self._hashes)] = self._hashes
            self._hashes = grown
        if last - first <= SMALL_APPEND:
            for j in range(first, last):
                self._hashes[j] = window_hash32(self.ids, j, self.n)
            return
        arr = np.asarray(self.ids[first : last + self.n - 1], dtype=np.int64).astype(np.uint64)
        count = last - first
        h = np.zeros(count, dtype=np.uint64)
        for k in range(self.n):  # uint64 wraps mod 2^64, a multiple of 2^32
            h += arr[k : k + count] * self._weights[k]
        self._hashes[first:last] = (h & np.uint64(MASK32)).astype(np.uint32)

    def matches(self, j: int, key: Sequence[int]) -> bool:
        return self.ids[j : j + self.n] == list(key)

    def find_last(self, key: Sequence[int], key_hash: int, lo: int, hi: int) -> int:
        """Largest ``j`` in ``[lo, hi]`` with ``ids[j:j+n] == key``, or -1 (a backward linear scan)."""
        lo = max(lo, 0)
        hi = min(hi, self.n_windows - 1)
        hashes, key = self._hashes, list(key)
        top = hi
        while top >= lo:
            bottom = max(lo, top - SEARCH_CHUNK + 1)
            cand = np.flatnonzero(hashes[bottom : top + 1] == key_hash)
            for c in cand[::-1]:
                j = bottom + int(c)
                if self.ids[j : j + self.n] == key:
                    return j
            top = bottom - 1
        return -1

    def find_all(self, key: Sequence[int], key_hash: int, lo: int, hi: int) -> list[int]:
        """All ``j`` in ``[lo, hi]`` (ascending) with ``ids[j:j+n] == key``."""
        lo = max(lo, 0)
        hi = min(hi, self.n_windows - 1)
        if hi < lo:
            return []
        key = list(key)
        cand = np.flatnonzero(self._hashes[lo : hi + 1] == key_hash) + lo
        return [int(j) for j in cand if self.ids[j : j + self.n] == key]
