"""A suffix index: suffix starts of a token corpus in sorted order, with the LCP of neighbours.

This is the compact form of SuffixDecoding's suffix tree (Oliaro et al., arXiv 2411.04975). A node of
the tree is a string s; its count is the number of occurrences of s, and those occurrences are one
contiguous range of the sorted starts. Its children are the runs of that range that agree on the
next token, and the LCP array marks where they begin, so counting children is a scan of one byte
per occurrence and descending to a child narrows the range. Where every occurrence agrees on the
next tokens (the tree's compressed edges) the smallest LCP in the range says how far at once.

Starts are ordered by their first ``span`` tokens (the deepest a match plus a draft can reach), then
by position: a total order, so the index of a given corpus is unique and a loaded or rebuilt one is
identical to the one that was saved. Every start's window must lie in the corpus: the global store
writes ``span`` separators after each request, the per-request index inserts a start once ``span``
tokens follow it. Windows then never change, so new starts are inserted by binary search and old
ones dropped without sorting again.

Storage is ``array.array`` (growable in place, Python ints on indexing) with numpy views made on
demand for the vectorised paths; a view must not outlive the next change (a resize is refused while
one exists). A few new starts go in one by one (``insert`` into the arrays, a C memmove); many, or
into a large index, in one numpy merge.

Memory: the corpus twice (uint32 values, and big-endian bytes whose slices compare like the values
for Python's bisect), an int32 start and a uint8 LCP per indexed suffix: 13 bytes per token.
"""

from __future__ import annotations

import copy
from array import array
from bisect import bisect_left, bisect_right
from typing import Iterable

import numpy as np

from ngram.suffix_sort import SEP, SPAN_MAX, build, pair_lcp

VALUE_BYTES = 4  # one corpus value in the bytes mirror
BYTES_PER_SLOT = 2 * VALUE_BYTES  # a corpus value held as uint32 and as bytes
BYTES_PER_SUFFIX = 5  # its int32 start and uint8 LCP
SEP_BYTES = SEP.to_bytes(VALUE_BYTES, "big")
FIRST_TOKEN = (SEP + 1).to_bytes(VALUE_BYTES, "big")  # the smallest value that is a token
CACHE_CHILDREN = 1 << 18  # children of long ranges kept at most (24 bytes each): see cache_children
# New starts go in one by one while (new starts) x (indexed starts) stays within this many moved
# entries; beyond, one numpy merge (a fixed cost, then linear: docs/measurements.md) is cheaper.
ONE_BY_ONE_MOVES = 1 << 20


class SuffixIndex:
    """``sa`` = indexed starts in window order; ``lcp[i]`` = common tokens of entries i-1 and i."""

    def __init__(self, span: int) -> None:
        if not 1 <= span <= SPAN_MAX:
            raise ValueError(f"suffix index span must be in 1..{SPAN_MAX}")
        self.span = span
        self.raw = bytearray()
        self.vals_array = array("I")
        self.sa_array = array("i")
        self.lcp_array = array("B")
        # Children of long ranges (``suffix_walk``), valid until the order changes: the global index
        # changes only when a request ends, and short common matches recur every few calls.
        self._children: dict[tuple[int, int, int], tuple[np.ndarray, ...]] = {}
        self._n_children = 0

    # numpy views: valid until the next change of the index.
    @property
    def vals(self) -> np.ndarray:
        return np.frombuffer(self.vals_array, dtype=np.uint32)

    @property
    def sa(self) -> np.ndarray:
        return np.frombuffer(self.sa_array, dtype=np.int32)

    @property
    def lcp(self) -> np.ndarray:
        return np.frombuffer(self.lcp_array, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.sa_array)

    @property
    def memory_bytes(self) -> int:
        return BYTES_PER_SLOT * len(self.vals_array) + BYTES_PER_SUFFIX * len(self.sa_array)

    def extend_corpus(self, values: np.ndarray) -> None:
        """Append corpus values (``encode``d tokens or separators)."""
        values = np.asarray(values, dtype=np.uint32)
        self.vals_array.frombytes(_bytes_of(values, np.uint32))
        self.raw += values.astype(">u4").tobytes()

    def copy(self) -> SuffixIndex:
        """An independent copy (a few memcpys), e.g. to save while the original keeps learning."""
        out = SuffixIndex(self.span)
        out.raw, out.vals_array = bytearray(self.raw), copy.copy(self.vals_array)
        out.sa_array, out.lcp_array = copy.copy(self.sa_array), copy.copy(self.lcp_array)
        return out

    def cached_children(self, lo: int, hi: int, depth: int) -> tuple[np.ndarray, ...] | None:
        return self._children.get((lo, hi, depth))

    def cache_children(self, lo: int, hi: int, depth: int, runs: tuple[np.ndarray, ...]) -> None:
        """Keep the children of a range (arrays of equal length) until the order changes, up to
        ``CACHE_CHILDREN`` children in all (24 bytes each): then start afresh."""
        if self._n_children + len(runs[0]) > CACHE_CHILDREN:
            self._changed()
        self._children[(lo, hi, depth)] = runs
        self._n_children += len(runs[0])

    def _changed(self) -> None:
        self._children.clear()
        self._n_children = 0

    def _set(self, sa: np.ndarray, lcp: np.ndarray) -> None:
        self._changed()
        self.sa_array, self.lcp_array = array("i"), array("B")
        self.sa_array.frombytes(_bytes_of(sa, np.int32))
        self.lcp_array.frombytes(_bytes_of(lcp, np.uint8))

    def set_order(self, sa: np.ndarray, lcp: np.ndarray) -> None:
        """Take ``sa`` and ``lcp`` as computed elsewhere for this corpus (a saved index)."""
        self._set(np.asarray(sa), np.asarray(lcp))

    def rebuild(self, starts: Iterable[int]) -> None:
        """Index exactly ``starts`` (ascending), sorted with numpy in one go."""
        self._set(*build(self.vals, np.fromiter(starts, dtype=np.int64), self.span))

    def insert(self, starts: Iterable[int]) -> None:
        """Add ``starts`` (ascending, all after every indexed start) by binary search."""
        raw, w = self.raw, VALUE_BYTES * self.span
        new = sorted(starts, key=lambda p: raw[4 * p : 4 * p + w])  # stable: equal windows by position
        if len(new) * len(self.sa_array) <= ONE_BY_ONE_MOVES:
            self._insert_each(new)
        else:
            self._merge(new)

    def _insert_each(self, new: list[int]) -> None:
        self._changed()
        raw, w, sa, lcp = self.raw, VALUE_BYTES * self.span, self.sa_array, self.lcp_array
        key = lambda q: raw[4 * q : 4 * q + w]  # noqa: E731 - one closure for all searches
        for p in new:
            # An indexed start precedes a new one with an equal window: bisect_right.
            i = bisect_right(sa, raw[4 * p : 4 * p + w], key=key)
            sa.insert(i, p)
            lcp.insert(i, self._lcp_of(sa[i - 1], p) if i else 0)
            if i + 1 < len(sa):
                lcp[i + 1] = self._lcp_of(p, sa[i + 1])

    def _lcp_of(self, a: int, b: int) -> int:
        """LCP of the windows at ``a`` and ``b``: bisect the longest equal prefix, then stop at a separator."""
        raw, lo, hi = self.raw, 0, self.span
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if raw[4 * a : 4 * a + 4 * mid] == raw[4 * b : 4 * b + 4 * mid]:
                lo = mid
            else:
                hi = mid - 1
        # The first separator among those lo values: an aligned run of four zero bytes.
        i = raw.find(SEP_BYTES, 4 * a, 4 * (a + lo))
        while i >= 0 and (i - 4 * a) % VALUE_BYTES:
            i = raw.find(SEP_BYTES, i + 1, 4 * (a + lo))
        return lo if i < 0 else (i - 4 * a) // VALUE_BYTES

    def _merge(self, new: list[int]) -> None:
        """Insert many starts in one pass: copy the old arrays in the stretches between them."""
        raw, w, old_sa = self.raw, VALUE_BYTES * self.span, self.sa_array
        key = lambda q: raw[4 * q : 4 * q + w]  # noqa: E731
        at = [bisect_right(old_sa, raw[4 * p : 4 * p + w], key=key) for p in new]
        sa, lcp = array("i"), array("B")
        old_sa_bytes, old_lcp = memoryview(old_sa).cast("B"), memoryview(self.lcp_array)
        prev = 0
        for i, p in zip(at, new):
            sa.frombytes(old_sa_bytes[4 * prev : 4 * i])
            lcp.frombytes(old_lcp[prev:i])
            sa.append(p)
            lcp.append(0)
            prev = i
        sa.frombytes(old_sa_bytes[4 * prev :])
        lcp.frombytes(old_lcp[prev:])
        del old_sa_bytes, old_lcp
        self._changed()
        self.sa_array, self.lcp_array = sa, lcp
        # New LCPs: each new entry with the one before it, and the entry after each new one.
        placed = np.array(at, dtype=np.int64) + np.arange(len(new))
        redo = np.sort(np.concatenate((placed, placed + 1)))
        redo = redo[(redo >= 1) & (redo < len(sa)) & np.append(True, redo[1:] != redo[:-1])]
        starts = self.sa
        np.frombuffer(lcp, dtype=np.uint8)[redo] = pair_lcp(self.vals, starts[redo], starts[redo - 1], self.span)

    def drop_before(self, cut: int) -> None:
        """Forget the first ``cut`` corpus values and every start among them; positions shift by -cut."""
        if cut <= 0:
            return
        old_sa, old_lcp = self.sa, self.lcp
        kept = np.flatnonzero(old_sa >= cut)
        lcp = np.zeros(len(kept), dtype=np.uint8)
        if len(kept) > 1:
            # The LCP of two survivors is the smallest LCP between them in the old order.
            lcp[1:] = np.minimum.reduceat(old_lcp[: kept[-1] + 1], kept[:-1] + 1)
        sa = old_sa[kept] - np.int32(cut)
        del old_sa, old_lcp  # release the views before the arrays change
        self._set(sa, lcp)
        del self.vals_array[:cut]
        del self.raw[: VALUE_BYTES * cut]

    def bounds(self, pattern: bytes) -> tuple[int, int]:
        """Entries whose window starts with ``pattern`` (encoded bytes) and goes on with a token."""
        raw, w, sa = self.raw, len(pattern), self.sa_array
        hi = bisect_right(sa, pattern, key=lambda q: raw[4 * q : 4 * q + w])
        lo = bisect_left(sa, pattern + FIRST_TOKEN, 0, hi, key=lambda q: raw[4 * q : 4 * q + w + 4])
        return lo, hi

    def occurs(self, pattern: bytes) -> bool:
        """Whether ``pattern`` occurs followed by a token: the first window at or after ``pattern`` +
        the smallest token starts with ``pattern`` (one search where ``bounds`` needs two)."""
        raw, w, sa = self.raw, len(pattern), self.sa_array
        i = bisect_left(sa, pattern + FIRST_TOKEN, key=lambda q: raw[4 * q : 4 * q + w + 4])
        if i == len(sa):
            return False
        q = 4 * sa[i]
        return raw[q : q + w] == pattern

    def longest(self, context: bytes, low: int, high: int, hint: int = 0) -> int:
        """The largest m in ``low..high`` whose last-m-token pattern of ``context`` occurs followed by
        a token, given that ``low`` does (or is 0). Such occurrence is monotone in m, so bisect it,
        trying ``hint`` first (the last match grown by the tokens since: one search when it holds)."""
        hint = min(hint, high)
        if low < hint:
            if self.occurs(context[len(context) - VALUE_BYTES * hint :]):
                low = hint
            else:
                high = hint - 1
        while low < high:
            m = (low + high + 1) // 2
            if self.occurs(context[len(context) - VALUE_BYTES * m :]):
                low = m
            else:
                high = m - 1
        return low


def _bytes_of(arr: np.ndarray, dtype: type) -> memoryview:
    """The bytes of ``arr`` as ``dtype`` (no copy when it already is), for ``array.frombytes``."""
    return memoryview(np.ascontiguousarray(arr, dtype=dtype)).cast("B")
