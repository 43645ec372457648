"""The draft walk of the suffix drafter: follow the most frequent continuation of the match.

A structure offers the occurrences of the current path (the matched suffix, then the matched suffix
and the tokens drafted so far) through one or more cursors: an ``IndexCursor`` over a range of a
suffix index, and for the live request an ``OpenCursor`` over the few newest starts the index does
not hold yet. Only occurrences followed by a token count (an occurrence at the end of a stored
request, or of the live context, has nothing to draft from). At each step the walk takes the child
with the most occurrences (the smallest token on a tie) and multiplies the estimated probability by
child count / parent count; it stops before a token whose probability would fall below
``min_prob``, when nothing follows, or at ``limit`` tokens. Stretches where every occurrence agrees
have probability ratio 1 and are copied at once.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

import numpy as np

from ngram.suffix_index import SuffixIndex
from ngram.suffix_sort import SEP


def draft_limit(m: int, depth: int, cap: int, factor: float) -> int:
    """Longest draft after a match of ``m`` tokens: ``m x factor``, at most ``cap``. A match of the
    full ``depth`` is censored (the context agrees for at least that long, how much longer is never
    looked at), so ``m x factor`` says nothing about it and only ``cap`` bounds the draft: a copy of
    a long passage is drafted as far as the selection finds it pays, not cut at ``depth``."""
    return cap if m >= depth else min(cap, int(m * factor))


# Ranges of at most this many rows are scanned in Python; longer ones with numpy, and their
# children are cached in the index until it changes.
SMALL_RANGE = 16
# Next tokens (ascending) and their counts: lists, or numpy arrays when there are many.
Children = tuple[list[int], list[int]] | tuple[np.ndarray, np.ndarray]


class IndexCursor:
    """The occurrences of the path: rows ``lo..hi-1`` of a suffix index, ``depth`` tokens matched."""

    __slots__ = ("index", "lo", "hi", "depth", "_runs")

    def __init__(self, index: SuffixIndex, lo: int, hi: int, depth: int) -> None:
        self.index, self.lo, self.hi, self.depth = index, lo, hi, depth
        self._runs: tuple = ([], [], [])  # values, first and end row of each child of the last children()

    def alive(self) -> bool:
        return self.lo < self.hi

    def shared(self, limit: int) -> list[int]:
        """Up to ``limit`` next tokens that every row has (none past a separator)."""
        ix, lo, hi, d = self.index, self.lo, self.hi, self.depth
        start = ix.sa_array[lo]
        if hi - lo == 1:
            values = ix.vals_array[start + d : start + min(ix.span, d + limit)].tolist()
            if SEP in values:
                values = values[: values.index(SEP)]
        else:
            agree = min(ix.lcp_array[lo + 1 : hi]) if hi - lo <= SMALL_RANGE else int(ix.lcp[lo + 1 : hi].min())
            if agree <= d:
                return []
            values = ix.vals_array[start + d : start + min(agree, d + limit)].tolist()
        return [v - 1 for v in values]

    def advance(self, n: int) -> None:
        self.depth += n

    def children(self) -> Children:
        """Next tokens (ascending) and their counts; rows that end here are left out. Python lists
        for a short range, numpy arrays for a long one (a common short match: thousands of children)."""
        ix, lo, hi, d = self.index, self.lo, self.hi, self.depth
        if hi - lo <= SMALL_RANGE:
            lcp, sa, vals = ix.lcp_array, ix.sa_array, ix.vals_array
            firsts = [lo] + [i for i in range(lo + 1, hi) if lcp[i] <= d]  # rows that start a child
            lasts = firsts[1:] + [hi]
            runs = [(v, f, e) for v, f, e in zip([vals[sa[i] + d] for i in firsts], firsts, lasts) if v != SEP]
            self._runs = ([v for v, _, _ in runs], [f for _, f, _ in runs], [e for _, _, e in runs])
            return [v - 1 for v, _, _ in runs], [e - f for _, f, e in runs]
        runs = ix.cached_children(lo, hi, d)
        if runs is None:
            firsts = np.concatenate(([lo], np.flatnonzero(ix.lcp[lo + 1 : hi] <= d) + (lo + 1)))
            lasts = np.append(firsts[1:], hi)
            values = ix.vals[ix.sa[firsts].astype(np.int64) + d].astype(np.int64)
            keep = values != SEP
            runs = (values[keep], firsts[keep], lasts[keep])
            ix.cache_children(lo, hi, d, runs)
        self._runs = runs
        values, firsts, lasts = runs
        return values - 1, lasts - firsts

    def descend(self, token: int) -> None:
        """Narrow to the child ``token`` of the last ``children()`` (empty if it is not one)."""
        values, firsts, lasts = self._runs
        i = bisect_left(values, token + 1)
        if i < len(values) and values[i] == token + 1:
            self.lo, self.hi = int(firsts[i]), int(lasts[i])
        else:
            self.lo = self.hi
        self.depth += 1


class OpenCursor:
    """Occurrences of the path at starts of the live context ``tokens + [last]`` not yet indexed."""

    __slots__ = ("tokens", "last", "starts", "depth")

    def __init__(self, tokens: list[int], last: int, starts: list[int], depth: int) -> None:
        self.tokens, self.last, self.starts, self.depth = tokens, last, starts, depth

    def _next(self, p: int, ahead: int = 0) -> int | None:
        """The token ``ahead`` tokens after the path at start ``p``; None past the end of the context."""
        i = p + self.depth + ahead
        n = len(self.tokens)
        return self.tokens[i] if i < n else (self.last if i == n else None)

    def alive(self) -> bool:
        return bool(self.starts)

    def shared(self, limit: int) -> list[int]:
        out: list[int] = []
        while len(out) < limit:
            nexts = {self._next(p, len(out)) for p in self.starts}
            if len(nexts) != 1 or None in nexts:
                break
            out.append(nexts.pop())
        return out

    def advance(self, n: int) -> None:
        self.depth += n

    def children(self) -> tuple[list[int], list[int]]:
        counts: dict[int, int] = {}
        for p in self.starts:
            t = self._next(p)
            if t is not None:
                counts[t] = counts.get(t, 0) + 1
        tokens = sorted(counts)
        return tokens, [counts[t] for t in tokens]

    def descend(self, token: int) -> None:
        self.starts = [p for p in self.starts if self._next(p) == token]
        self.depth += 1


Cursor = IndexCursor | OpenCursor


def walk(cursors: Sequence[Cursor], limit: int, min_prob: float) -> tuple[list[int], list[float]]:
    """The draft and each token's cumulative probability estimate (see the module docstring)."""
    draft: list[int] = []
    probs: list[float] = []
    prob = 1.0
    live = [c for c in cursors if c.alive()]
    while live and len(draft) < limit:
        if len(live) == 1:
            run = live[0].shared(limit - len(draft))
            if run:  # ratio 1 all along: prob stays >= min_prob
                draft.extend(run)
                probs.extend([prob] * len(run))
                live[0].advance(len(run))
                continue
        tokens, counts = merged_children(live)
        if len(tokens) == 0:
            break
        best, total = _pick(counts)
        prob *= int(counts[best]) / total
        if prob < min_prob:
            break
        token = int(tokens[best])
        draft.append(token)
        probs.append(prob)
        for c in live:
            c.descend(token)
        live = [c for c in live if c.alive()]
    return draft, probs


def merged_children(cursors: Sequence[Cursor]) -> Children:
    """Children over all cursors: tokens ascending, counts summed."""
    if len(cursors) == 1:
        return cursors[0].children()
    parts = [c.children() for c in cursors]
    if all(isinstance(t, list) for t, _ in parts):
        merged: dict[int, int] = {}
        for tokens, counts in parts:
            for t, n in zip(tokens, counts):
                merged[t] = merged.get(t, 0) + n
        ordered = sorted(merged)
        return ordered, [merged[t] for t in ordered]
    tokens = np.concatenate([np.asarray(t, dtype=np.int64) for t, _ in parts])
    counts = np.concatenate([np.asarray(n, dtype=np.int64) for _, n in parts])
    order = np.argsort(tokens, kind="stable")
    tokens, counts = tokens[order], counts[order]
    firsts = np.flatnonzero(np.append(True, tokens[1:] != tokens[:-1]))
    return tokens[firsts], np.add.reduceat(counts, firsts)


def _pick(counts: list[int] | np.ndarray) -> tuple[int, int]:
    """The index of the first largest count (the smallest token among the most frequent) and the total."""
    if isinstance(counts, np.ndarray):
        return int(np.argmax(counts)), int(counts.sum())
    return max(range(len(counts)), key=counts.__getitem__), sum(counts)
