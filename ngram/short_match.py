"""One slot's short-match index: where each n-gram of its history last started.

ngram-mod's shared pool needs a long match (``n_match``) and a long chain (``n_min``), so on a
cold pool or in a short answer it never drafts, even when the slot repeats itself at a shorter
scale: list items, code lines, a phrase copied from the prompt. This index is its fallback: the
tokens that followed the most recent earlier occurrence of the slot's last ``n`` tokens.

A backward scan per draft call would cost milliseconds on a 32k-token history in CPython, so
``last_start`` maps every n-gram (as a tuple) to the last position it started at and is extended
by the tokens appended since the previous call: a lookup is one dict access. The index keeps no
copy of the history; between ``rebuild`` calls the history must only grow, which ``sync`` checks
cheaply (length, first and last indexed token) before it indexes anew.
"""

from __future__ import annotations

from typing import Sequence

# Up to this many new windows are indexed one by one (zip's set-up costs more than it saves).
SMALL_APPEND = 16


class ShortMatchIndex:
    """``last_start[tuple(history[j:j+n])]`` = the largest such ``j`` over the indexed history."""

    def __init__(self, n: int) -> None:
        assert n >= 1
        self.n = n
        self.last_start: dict[tuple[int, ...], int] = {}
        self.size = 0  # tokens of the history indexed so far
        self._first = self._last = 0  # history[0] and history[size - 1] (when size > 0): the growth check

    def rebuild(self, history: Sequence[int]) -> None:
        """Index ``history`` from scratch (a new request, or a history that did not just grow)."""
        self.last_start = {}
        self.size = 0
        self._extend(history)

    def sync(self, history: Sequence[int]) -> None:
        """Catch up with ``history``: index its new tokens if it grew, else rebuild."""
        size = self.size
        if len(history) < size or (size and (history[0] != self._first or history[size - 1] != self._last)):
            self.rebuild(history)
        elif len(history) > size:
            self._extend(history)

    def _extend(self, history: Sequence[int]) -> None:
        n, size = self.n, len(history)
        start = max(0, self.size - n + 1)  # first window not complete at the previous size
        stop = size - n + 1  # windows start before this
        if stop - start <= SMALL_APPEND:
            for j in range(start, stop):
                self.last_start[tuple(history[j : j + n])] = j
        else:
            tokens = history[start:size]
            windows = zip(*(tokens[k:] for k in range(n)))  # tuple(tokens[i:i+n]) for each complete i
            self.last_start.update(zip(windows, range(start, stop)))  # later starts overwrite earlier ones
        self.size = size
        if size:
            self._first, self._last = history[0], history[size - 1]

    def draft(self, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        """Up to ``n_max`` tokens that followed the latest earlier occurrence of the last ``n`` tokens
        of ``history + [last_token]``; ``[]`` if they never occurred before.

        Every indexed window ends inside ``history``, so none is the suffix itself (which ends at
        ``last_token``); a continuation that reaches the suffix runs on into it and ends with
        ``last_token``.
        """
        self.sync(history)
        n, size = self.n, len(history)
        if n_max <= 0 or size < n:
            return []
        j = self.last_start.get((*history[size - n + 1 :], last_token))
        if j is None:
            return []
        start = j + n  # <= size: the draft has at least one token
        draft = [int(t) for t in history[start : start + n_max]]
        if start + n_max > size:
            draft.append(int(last_token))
            # The text repeats with period size + 1 - start: keep copying at that distance
            # (an overlapping copy, as LZ77's), so one period seen gives a draft of any length.
            period = len(draft)
            while len(draft) < n_max:
                draft.append(draft[len(draft) - period])
        return draft
