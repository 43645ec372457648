"""The suffix drafter's global structure: finished requests, shared by all slots, in a memory budget.

Each request is stored whole, followed by ``span`` separators (so no window of its suffixes ever
reaches the next request), and all its suffixes go into one suffix index. When adding a request
would take the memory estimate over the budget, whole oldest requests are evicted first (FIFO, as
SuffixDecoding's global tree). Eviction copies the whole corpus and index once, so it frees room for
more than the one request (down to ``EVICT_TO`` of the budget): with a full store that copy happens
every few tens of requests instead of at every one. A request larger than the whole budget is not
stored.

The estimate is what the arrays hold (``SuffixIndex.memory_bytes``) plus one length per request: a
function of the stored requests alone, so a store rebuilt from the same requests has the same one.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from ngram.suffix_index import BYTES_PER_SLOT, BYTES_PER_SUFFIX, VALUE_BYTES, SuffixIndex
from ngram.suffix_sort import encode
from ngram.suffix_walk import Cursor, IndexCursor, draft_limit, walk

EVICT_TO = 15 / 16  # an eviction frees room down to this share of the budget
BYTES_PER_REQUEST = 8  # its length


class SuffixStore:
    """Stored requests (oldest first) and the suffix index over all of them."""

    def __init__(self, span: int, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("the suffix store's budget must be at least 1 byte")
        self.index = SuffixIndex(span)
        self.max_bytes = max_bytes
        self.lengths: deque[int] = deque()
        self.n_tokens = 0  # stored request tokens (separators not counted)
        self.n_evicted = 0  # requests evicted so far

    @property
    def span(self) -> int:
        return self.index.span

    @property
    def memory_bytes(self) -> int:
        return self.index.memory_bytes + BYTES_PER_REQUEST * len(self.lengths)

    def cost(self, n: int) -> int:
        """The memory estimate of storing a request of ``n`` tokens."""
        return BYTES_PER_SLOT * (n + self.span) + BYTES_PER_SUFFIX * n + BYTES_PER_REQUEST

    def add(self, tokens: Sequence[int]) -> bool:
        """Store one finished request (evicting the oldest if needed); False if it cannot fit at all."""
        n = len(tokens)
        cost = self.cost(n)
        if n == 0 or cost > self.max_bytes:
            return False
        if self.memory_bytes + cost > self.max_bytes:
            self._evict(self.memory_bytes + cost - int(EVICT_TO * self.max_bytes))
        base = len(self.index.vals_array)
        self.index.extend_corpus(np.concatenate((encode(tokens), np.zeros(self.span, dtype=np.uint32))))
        self.index.insert(range(base, base + n))
        self.lengths.append(n)
        self.n_tokens += n
        return True

    def _evict(self, need: int) -> None:
        """Drop the oldest requests until at least ``need`` bytes are freed (or none is left)."""
        freed = dropped = 0
        for n in self.lengths:
            if freed >= need:
                break
            freed += self.cost(n)
            dropped += 1
        self._drop(dropped)

    def _drop(self, count: int) -> None:
        """Drop the ``count`` oldest requests."""
        cut = 0
        for _ in range(count):
            n = self.lengths.popleft()
            cut += n + self.span
            self.n_tokens -= n
        self.n_evicted += count
        self.index.drop_before(cut)

    def requests(self) -> list[list[int]]:
        """The stored requests' tokens, oldest first."""
        out, pos = [], 0
        tokens = self.index.vals.astype(np.int64) - 1
        for n in self.lengths:
            out.append(tokens[pos : pos + n].tolist())
            pos += n + self.span
        return out

    def draft(self, context: bytes, n_context: int, depth: int, cap: int, factor: float,
              min_prob: float, hint: int = 0) -> tuple[int, list[int], list[float]]:
        """Match length, draft and probabilities for the encoded ``context`` (its last ``depth``
        tokens, of ``n_context`` in all) from the stored requests; ``hint``: a likely match length."""
        m, cursors = self.match(context, n_context, depth, hint)
        if m == 0:
            return 0, [], []
        return (m, *walk(cursors, draft_limit(m, depth, cap, factor), min_prob))

    def match(self, context: bytes, n_context: int, depth: int, hint: int = 0) -> tuple[int, list[Cursor]]:
        """Match length of ``context`` in the stored requests and a cursor over its occurrences (none for 0)."""
        m = self.index.longest(context, 0, min(depth, n_context), hint)
        if m == 0:
            return 0, []
        lo, hi = self.index.bounds(context[len(context) - VALUE_BYTES * m :])
        return m, [IndexCursor(self.index, lo, hi, m)]

    @classmethod
    def from_requests(cls, span: int, max_bytes: int, requests: Sequence[Sequence[int]]) -> SuffixStore:
        """A store of the newest ``requests`` (oldest first) that fit the budget, indexed in one numpy
        sort: what ``add`` builds from them one by one when no eviction happens."""
        kept = [r for r in requests if len(r)]
        lengths = np.array([len(r) for r in kept], dtype=np.int64)
        tokens = np.concatenate([np.asarray(r, dtype=np.int64) for r in kept]) if kept else np.zeros(0, np.int64)
        return cls.from_arrays(span, max_bytes, lengths, tokens)

    @classmethod
    def from_arrays(cls, span: int, max_bytes: int, lengths: np.ndarray, tokens: np.ndarray,
                    order: tuple[np.ndarray, np.ndarray] | None = None) -> SuffixStore:
        """As ``from_requests``, for requests given as lengths (each >= 1) and their tokens end to end.

        ``order`` is the index's (sa, lcp) for exactly these requests, as a saved store holds it: taken
        as it is, sparing the sort and its memory (about 130 bytes per token at its peak).
        """
        store = cls(span, max_bytes)
        lengths = np.asarray(lengths, dtype=np.int64)
        n_drop = store._overflow(lengths)
        if order is None and n_drop:  # sort only what is kept
            tokens = tokens[int(lengths[:n_drop].sum()) :]
            lengths = lengths[n_drop:]
        # Request r's tokens move past the separators of the requests before it.
        request_of = np.repeat(np.arange(len(lengths)), lengths)
        starts = np.arange(len(tokens), dtype=np.int64) + span * request_of
        vals = np.zeros(len(tokens) + span * len(lengths), dtype=np.uint32)
        vals[starts] = encode(tokens)
        store.index.extend_corpus(vals)
        if order is None:
            store.index.rebuild(starts)
        else:
            store.index.set_order(*order)
        store.lengths.extend(lengths.tolist())
        store.n_tokens = len(tokens)
        if order is not None and n_drop:
            store._drop(n_drop)
            store.n_evicted = 0
        return store

    def _overflow(self, lengths: np.ndarray) -> int:
        """How many of the oldest of these requests must go for the rest to fit the budget."""
        costs = BYTES_PER_SLOT * (lengths + self.span) + BYTES_PER_SUFFIX * lengths + BYTES_PER_REQUEST
        fits = np.cumsum(costs[::-1]) <= self.max_bytes  # newest first
        return len(lengths) - int(fits.sum())
