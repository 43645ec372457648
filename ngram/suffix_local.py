"""The suffix drafter's per-request structure: a suffix index over one slot's prompt and output.

The live context is ``history + [last_token]`` and grows every step. A start goes into the suffix
index once ``span`` tokens follow it (its window is final then), at the next ``sync``; the newest
``span - 1`` starts are the "open" ones and are matched token by token in Python. An occurrence
counts only if a token follows it inside the context, so the context's own suffix (which ends at
``last_token``) is never its own match.

The mirror of the history is kept only while the history grows; anything else (a context shift, a
restored slot) rebuilds it, checked cheaply as ``ShortMatchIndex`` does (length, first and last token).
"""

from __future__ import annotations

from typing import Sequence

from ngram.suffix_index import VALUE_BYTES, SuffixIndex
from ngram.suffix_sort import encode
from ngram.suffix_walk import Cursor, IndexCursor, OpenCursor, draft_limit, walk


class LocalIndex:
    """``tokens`` mirrors the slot's history; starts ``0..n_done-1`` are in ``index``."""

    def __init__(self, span: int, depth: int) -> None:
        self.span, self.depth = span, depth
        self.index = SuffixIndex(span)
        self.tokens: list[int] = []
        self.n_done = 0

    def reset(self, history: Sequence[int]) -> None:
        """Index ``history`` from scratch (one numpy sort)."""
        self.tokens = [int(t) for t in history]
        self.index = SuffixIndex(self.span)
        self.index.extend_corpus(encode(self.tokens))
        self.n_done = max(0, len(self.tokens) - self.span + 1)
        self.index.rebuild(range(self.n_done))

    def sync(self, history: Sequence[int]) -> bool:
        """Catch up with ``history``: mirror its new tokens if it grew (True), else rebuild (False)."""
        tokens, size = self.tokens, len(self.tokens)
        if len(history) < size or (size and (history[0] != tokens[0] or history[size - 1] != tokens[-1])):
            self.reset(history)
            return False
        tokens.extend(int(t) for t in history[size:])
        complete = len(tokens) - self.span + 1  # starts below this have their whole window
        if complete > self.n_done:
            self.index.extend_corpus(encode(tokens[len(self.index.vals_array) :]))
            self.index.insert(range(self.n_done, complete))
            self.n_done = complete
        return True

    def draft(self, last: int, context: bytes, cap: int, factor: float, min_prob: float,
              hint: int = 0) -> tuple[int, list[int], list[float]]:
        """Match length, draft and probabilities after ``tokens + [last]`` (``context``: its last
        ``depth`` tokens encoded) from the request's own context; ``hint``: a likely match length."""
        m, cursors = self.match(last, context, hint)
        if m == 0:
            return 0, [], []
        return (m, *walk(cursors, draft_limit(m, self.depth, cap, factor), min_prob))

    def match(self, last: int, context: bytes, hint: int = 0) -> tuple[int, list[Cursor]]:
        """Match length after ``tokens + [last]`` and cursors over its occurrences (none for 0)."""
        tokens, n_done = self.tokens, self.n_done
        n = len(tokens)  # the context has n + 1 tokens; an occurrence needs one after it
        depth = min(self.depth, n)
        # Open starts: for each end j (the position after an occurrence, j <= n) whose token before
        # is `last`, how far the occurrence matches the context backwards without starting before n_done.
        ends: list[tuple[int, int]] = []
        m_open = 0
        i = n_done - 1
        while True:
            try:
                i = tokens.index(last, i + 1)  # a C-speed scan to the next candidate
            except ValueError:
                break
            j = i + 1
            cap_j = min(depth, j - n_done)
            length = 1
            while length < cap_j and tokens[i - length] == tokens[n - length]:
                length += 1
            ends.append((j, length))
            m_open = max(m_open, length)
        m = self.index.longest(context, m_open, depth, hint) if depth > m_open else m_open
        if m == 0:
            return 0, []
        lo, hi = self.index.bounds(context[len(context) - VALUE_BYTES * m :])
        return m, [IndexCursor(self.index, lo, hi, m), OpenCursor(tokens, last, [j - m for j, k in ends if k >= m], m)]
