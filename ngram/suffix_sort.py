"""The canonical order of a suffix index, built for a whole corpus at once with numpy.

A suffix index (``ngram/suffix_index.py``) keeps suffix starts sorted by their first ``span`` tokens
and then by position. Inserting starts one by one costs a Python binary search each; to index a
long prompt or a loaded file we instead sort all windows in ceil(log2 span) numpy passes (prefix
doubling: the rank of a 2h-token window is the rank of its two h-token halves) and get each
entry's LCP with the entry before it from the same ranks (binary lifting), without comparing a
single pair token by token.

Corpus values are token + 1, so 0 is free for ``SEP``, the separator written after every stored
request. A window ends at its first separator: LCPs stop there, and two windows equal up to a
separator are ordered by position. For sorting, each separator gets its own rank below every token,
in position order, which gives exactly that order (the incremental insertion compares windows with
all separators equal and breaks ties by position, and a test checks the two agree).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

SEP = 0  # the separator value; tokens are stored as token + 1
SPAN_MAX = 255  # LCPs are stored in one byte (uint8)
MAX_TOKEN = 2**32 - 2  # the largest token id whose value (token + 1) fits in uint32
# Pairs of windows compared at once by ``pair_lcp`` (bounds its temporary arrays to a few MB).
LCP_CHUNK = 8192


def encode(tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """Corpus values (token + 1, uint32) of ``tokens``; ValueError for an id outside 0..MAX_TOKEN."""
    arr = np.asarray(tokens, dtype=np.int64)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > MAX_TOKEN):
        raise ValueError(f"token ids must be in 0..{MAX_TOKEN}")
    return (arr + 1).astype(np.uint32)


def pair_lcp(vals: np.ndarray, a: np.ndarray, b: np.ndarray, span: int) -> np.ndarray:
    """LCP (uint8) of the windows at starts ``a[i]`` and ``b[i]``: equal tokens before the first
    difference or separator, at most ``span``. Every window must lie inside ``vals``."""
    out = np.empty(len(a), dtype=np.uint8)
    cols = np.arange(span, dtype=np.int64)
    for lo in range(0, len(a), LCP_CHUNK):
        wa = vals[np.asarray(a[lo : lo + LCP_CHUNK], dtype=np.int64)[:, None] + cols]
        wb = vals[np.asarray(b[lo : lo + LCP_CHUNK], dtype=np.int64)[:, None] + cols]
        stop = (wa != wb) | (wa == SEP)
        out[lo : lo + LCP_CHUNK] = np.where(stop.any(axis=1), stop.argmax(axis=1), span)
    return out


def build(vals: np.ndarray, starts: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """``starts`` (ascending) sorted by window then position, and their LCPs with the entry before.

    Each window ``vals[p:p+span]`` must end inside ``vals`` or contain a separator before its end.
    """
    starts = np.asarray(starts, dtype=np.int64)
    if starts.size == 0:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.uint8)
    n = len(vals)
    v = vals.astype(np.int64)
    rank = _dense_rank(np.where(v == SEP, np.arange(n, dtype=np.int64), n + v))
    del v
    ranks = [rank]  # ranks[i]: rank (int32: < n) of the 2**i-token window at each position
    h = 1
    while 2 * h <= span:
        rank = _dense_rank(rank * np.int64(n + 1) + _shifted(rank, h))
        ranks.append(rank)
        h *= 2
    # A window of exactly span tokens: two overlapping windows of h tokens (span < 2h).
    final = rank if h == span else _dense_rank(rank * np.int64(n + 1) + _shifted(rank, span - h))
    sa = starts[np.argsort(final[starts], kind="stable")]
    return sa.astype(np.int32), _lcp_by_ranks(ranks, sa, span, n)


def _dense_rank(keys: np.ndarray) -> np.ndarray:
    """0 for the smallest key, +1 for each larger distinct key (np.unique's inverse, without its overhead)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    rank = np.empty(len(keys), dtype=np.int32)
    rank[order] = np.concatenate(([0], np.cumsum(ordered[1:] != ordered[:-1], dtype=np.int32)))
    return rank


def _shifted(rank: np.ndarray, h: int) -> np.ndarray:
    """``rank[p + h] + 1`` (int64), and 0 past the end (below every rank)."""
    out = np.zeros(len(rank), dtype=np.int64)
    if h < len(rank):
        out[: len(rank) - h] = rank[h:]
        out[: len(rank) - h] += 1
    return out


def _lcp_by_ranks(ranks: list[np.ndarray], sa: np.ndarray, span: int, n: int) -> np.ndarray:
    """Greedy binary lifting: extend the common prefix by 2**i tokens wherever those windows are equal.

    Separator ranks are unique, so no extension crosses one; nor can two windows that run past the
    end be equal (they would have to start at the same position).
    """
    lcp = np.zeros(len(sa), dtype=np.int64)
    a, b = sa[1:], sa[:-1]
    common = lcp[1:]
    for i in reversed(range(len(ranks))):
        h = 1 << i
        ok = common + h <= span
        ia = np.minimum(a + common, n - 1)
        ib = np.minimum(b + common, n - 1)
        ok &= ranks[i][ia] == ranks[i][ib]
        common += np.where(ok, h, 0)
    return lcp.astype(np.uint8)
