"""The n-gram cache data structure: n-gram (4 tokens, -1 padded) -> {next token: count}.

After llama.cpp ``common_ngram_cache`` (``common/ngram-cache.{h,cpp}``, lookup decoding). Only the
data structure lives here (update, merge, lookups, the memory estimate and the bounded variant);
the drafting policy is in ``ngram/cache.py`` and the file formats in ``ngram/cachefile.py``.

``BoundedNgramCache`` keeps its estimated memory under a budget (llama.cpp's caches grow without
bound). Eviction rule: when an update takes the estimate over the budget, whole n-grams are
dropped in increasing order of *value per byte*, the count of their most frequent follower (how
often the token they would draft was right) divided by their estimated bytes, and among equal
values the one learned first, until the estimate is at most ``EVICT_TO_FRACTION`` of the
budget. So n-grams seen once go first (they cannot pass ``MIN_SAMPLE_STRICT`` in
``ngram/cache.py``), and so do n-grams with hundreds of followers none of which dominates (they
cost hundreds of entries and cannot pass ``MIN_PERCENT_STRICT``). One pass costs O(n log n) for n
n-grams and is followed by at least a quarter of the budget of new entries before the next:
O(log n) amortised per update, never a scan per token.
"""

from __future__ import annotations

import sys
from collections import Counter
from itertools import repeat
from typing import Iterable, Sequence

import numpy as np

NGRAM_MIN = 1  # LLAMA_NGRAM_MIN
NGRAM_MAX = 4  # LLAMA_NGRAM_MAX: n-grams are stored as 4 tokens
NGRAM_STATIC = 2  # LLAMA_NGRAM_STATIC: the static (corpus) cache uses 2-grams
TOKEN_NULL = -1  # LLAMA_TOKEN_NULL pads n-grams shorter than NGRAM_MAX

Ngram = tuple[int, int, int, int]

# Memory estimate, measured with tracemalloc on CPython 3.11 (tests/ngram/test_cache_budget.py
# measures it again). Per n-gram: the 4-tuple key (72 B), up to 4 token ints outside CPython's
# small-int cache (28 B each), the follower dict (224 B) and its first follower's token (28 B):
# 436 B measured with every int distinct, as after loading a file. Per further follower: its
# token (28 B) plus the follower dict's table growth, 42-81 B amortised and 81 B just after the
# table doubled. A count above 256 is one more int (28 B, uncounted: only frequent n-grams have
# one). The outer dict's table is taken from sys.getsizeof (30-60 B per n-gram). Caches learned
# from Zipf-distributed text measure 350 B (learned) to 398 B (loaded) per n-gram all included, at
# 1.3 followers per n-gram, against ~510 B estimated: an upper bound, 25-45% above typical.
BYTES_PER_NGRAM = 440
BYTES_PER_ENTRY = 80  # each follower after an n-gram's first
DICT_SLOT_MAX = 60  # bytes per key of a dict table just after it doubled (2/3 load, 24 B entries + index)
EVICT_TO_FRACTION = 0.75  # an eviction pass frees down to this share of the budget (see the module doc)


def estimate_bytes(n_ngrams: int, n_entries: int, table_bytes: int) -> int:
    """Upper bound of a cache's CPython memory; ``table_bytes`` is ``sys.getsizeof(parts)``."""
    return table_bytes + BYTES_PER_NGRAM * n_ngrams + BYTES_PER_ENTRY * (n_entries - n_ngrams)


def make_ngram(tokens: Sequence[int]) -> Ngram:
    """Pad 1..4 tokens with ``TOKEN_NULL`` to a 4-token n-gram, as ``common_ngram(ptr, size)``."""
    size = len(tokens)
    assert NGRAM_MIN <= size <= NGRAM_MAX
    return tuple(tokens) + (TOKEN_NULL,) * (NGRAM_MAX - size)  # type: ignore[return-value]


def ngram_size(ngram: Ngram) -> int:
    """Number of real tokens (padding is trailing)."""
    size = NGRAM_MAX
    while size > 0 and ngram[size - 1] == TOKEN_NULL:
        size -= 1
    return size


class NgramCache:
    """``parts[ngram][token] = count``: how often ``token`` followed ``ngram``."""

    def __init__(self, parts: dict[Ngram, dict[int, int]] | None = None) -> None:
        self.parts: dict[Ngram, dict[int, int]] = parts if parts is not None else {}

    def __len__(self) -> int:
        return len(self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NgramCache) and self.parts == other.parts

    @property
    def n_ngrams(self) -> int:
        return len(self.parts)

    @property
    def n_entries(self) -> int:
        return sum(len(part) for part in self.parts.values())

    def get(self, ngram: Ngram) -> dict[int, int] | None:
        return self.parts.get(ngram)

    def add_counts(self, items: Iterable[tuple[tuple[Ngram, int], int]]) -> None:
        parts = self.parts
        for (ngram, token), count in items:
            part = parts.get(ngram)
            if part is None:
                parts[ngram] = {token: count}
            else:
                part[token] = part.get(token, 0) + count

    def update(self, tokens: Sequence[int], nmin: int, nmax: int, n_new: int | None = None) -> None:
        """``common_ngram_cache_update``: count, for each size s in [nmin, nmax] and each
        ``i in [max(len - n_new, s), len)``, the n-gram ``tokens[i-s:i]`` followed by ``tokens[i]``.

        ``tokens`` is the whole (append-only) sequence, so n-grams that straddle the boundary of
        the new chunk are counted too.
        """
        tokens = list(tokens)
        size = len(tokens)
        n_new = size if n_new is None else n_new
        for s in range(nmin, nmax + 1):
            start = max(size - n_new, s)
            if start >= size:
                continue
            cols = [tokens[start - s + k : size - s + k] for k in range(s)]
            pads = [repeat(TOKEN_NULL)] * (NGRAM_MAX - s)
            self.add_counts(Counter(zip(zip(*cols, *pads), tokens[start:])).items())

    def copy(self) -> "NgramCache":
        """An independent plain copy (e.g. a snapshot to save on another thread)."""
        parts = self.parts
        return NgramCache(dict(zip(parts.keys(), map(dict.copy, parts.values()))))  # faster than merge

    def merge(self, other: "NgramCache") -> None:
        """``common_ngram_cache_merge``: add every count of ``other`` into this cache."""
        parts = self.parts
        for ngram, part_add in other.parts.items():
            part = parts.get(ngram)
            if part is None:
                parts[ngram] = dict(part_add)
                continue
            for token, count in part_add.items():
                part[token] = part.get(token, 0) + count

    def size_bytes(self) -> int:
        """Estimated CPython memory (an upper bound, see ``BYTES_PER_NGRAM``)."""
        return estimate_bytes(self.n_ngrams, self.n_entries, sys.getsizeof(self.parts))


class BoundedNgramCache(NgramCache):
    """An ``NgramCache`` whose ``size_bytes()`` stays at most ``max_bytes`` (eviction rule: module doc).

    Change it only through ``add_counts``, ``update`` and ``merge``: they count new entries as
    they go, so the estimate is O(1). ``n_evicted`` counts the n-grams dropped so far.
    """

    def __init__(self, parts: dict[Ngram, dict[int, int]] | None = None, *, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        super().__init__(parts)
        self.max_bytes = max_bytes
        self._n_entries = sum(map(len, self.parts.values()))
        self.n_evicted = 0
        self.n_eviction_passes = 0
        self._enforce()

    @property
    def n_entries(self) -> int:
        return self._n_entries

    def size_bytes(self) -> int:
        return estimate_bytes(len(self.parts), self._n_entries, sys.getsizeof(self.parts))

    def add_counts(self, items: Iterable[tuple[tuple[Ngram, int], int]]) -> None:
        parts = self.parts
        n_new = 0
        for (ngram, token), count in items:
            part = parts.get(ngram)
            if part is None:
                parts[ngram] = {token: count}
                n_new += 1
            elif token in part:
                part[token] += count
            else:
                part[token] = count
                n_new += 1
        self._n_entries += n_new
        self._enforce()

    def merge(self, other: NgramCache) -> None:
        self.add_counts(((ngram, token), count) for ngram, part in other.parts.items() for token, count in part.items())

    def _enforce(self) -> None:
        if self.size_bytes() > self.max_bytes:
            self._evict(int(self.max_bytes * EVICT_TO_FRACTION))

    def _evict(self, target: int) -> None:
        """Keep the n-grams of most value per byte (the latest learned among equals) that fit in
        ``target`` bytes."""
        parts = self.parts
        n = len(parts)
        sizes = np.fromiter(map(len, parts.values()), dtype=np.int64, count=n)
        best = np.fromiter(map(max, map(dict.values, parts.values())), dtype=np.float64, count=n)
        # Worst-case bytes of each n-gram once in the rebuilt dict (its table slot included).
        cost = BYTES_PER_NGRAM + DICT_SLOT_MAX + BYTES_PER_ENTRY * (sizes - 1)
        order = np.argsort(best / cost, kind="stable")  # least value per byte first; equals in learning order
        n_keep = int(np.searchsorted(np.cumsum(cost[order][::-1]), target - sys.getsizeof({}), side="right"))
        keep = np.zeros(n, dtype=bool)
        keep[order[n - n_keep :]] = True
        # A new dict, not deletions: a dict's table never shrinks when keys are deleted.
        self.parts = {ngram: part for (ngram, part), k in zip(parts.items(), keep.tolist()) if k}
        self._n_entries = int(sizes[keep].sum())
        self.n_evicted += n - n_keep
        self.n_eviction_passes += 1
