"""Aho–Corasick automaton over one request's stop strings (pure, no model).

Built once per request, then fed the generated text piece by piece with its state carried across
pieces, so finding stop strings costs amortized O(1) per new character whatever the number and
length of the stop strings or the length of the text so far. (Re-searching each stop string per
token cost O(stops x stop length) per step, stalling every slot of the shared engine step.)

The state is always the node of the longest suffix of the text fed so far that is a prefix of some
stop string; from it ``withheld`` gives the longest suffix that is a *proper* prefix of one, i.e.
what a stream must hold back until the next pieces tell whether it is the start of a stop string.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        # Per node (0 is the root, the empty string): children, failure link (the node of the
        # longest proper suffix that is also a node), depth (length of the node's string).
        self._next: list[dict[str, int]] = [{}]
        self._fail = [0]
        self._depth = [0]
        # Per node, the longest stop string that is a suffix of the node's string, as
        # (index in ``stops``, or -1 for none). The longest one starts earliest, the only one that
        # matters for the earliest-starting match; equal strings keep their first index.
        self._match = [-1]
        # Per node, the length of the longest suffix of its string that is a proper prefix of a
        # stop string (a node is a proper prefix iff it has children).
        self._withheld = [0]
        self._stop_len = [len(s) for s in stops]
        self.max_len = max(self._stop_len, default=0)
        self.state = 0
        self.n_steps = 0  # transitions taken, goto and failure alike: the cost, observable by tests
        for index, stop in enumerate(stops):
            if stop:  # an empty stop string would match everywhere; callers drop them
                self._insert(stop, index)
        self._link()

    def _insert(self, stop: str, index: int) -> None:
        node = 0
        for ch in stop:
            child = self._next[node].get(ch)
            if child is None:
                child = len(self._next)
                self._next[node][ch] = child
                self._next.append({})
                self._fail.append(0)
                self._depth.append(self._depth[node] + 1)
                self._match.append(-1)
                self._withheld.append(0)
            node = child
        if self._match[node] == -1:
            self._match[node] = index

    def _link(self) -> None:
        """Failure links, matches and withheld lengths, breadth-first so a node's failure is done first."""
        queue = deque(self._next[0].values())
        while queue:
            node = queue.popleft()
            if self._match[node] == -1:
                self._match[node] = self._match[self._fail[node]]
            self._withheld[node] = self._depth[node] if self._next[node] else self._withheld[self._fail[node]]
            for ch, child in self._next[node].items():
                fail = self._fail[node]
                while fail and ch not in self._next[fail]:
                    fail = self._fail[fail]
                target = self._next[fail].get(ch, 0)
                self._fail[child] = target if target != child else 0
                queue.append(child)

    def _step(self, ch: str) -> int:
        node = self.state
        while node and ch not in self._next[node]:
            node = self._fail[node]
            self.n_steps += 1
        self.n_steps += 1
        self.state = self._next[node].get(ch, 0)
        return self.state

    def feed(self, text: str, base: int) -> tuple[int, int] | None:
        """Advance over ``text``, whose first character is at offset ``base`` of the whole text.

        Returns ``(start, index)`` of the earliest-starting stop string ending inside ``text``
        (ties: the one first in ``stops``), or None. A match may start before ``text``.
        """
        if not self.max_len:
            return None  # no stop strings: nothing to track
        best: tuple[int, int] | None = None
        for i, ch in enumerate(text):
            index = self._match[self._step(ch)]
            if index != -1:
                hit = (base + i + 1 - self._stop_len[index], index)
                if best is None or hit < best:
                    best = hit
        return best

    def reset(self, text: str) -> None:
        """Resynchronise with ``text`` after the caller cut its text: only its last max_len characters matter."""
        self.state = 0
        for ch in text[-self.max_len :] if self.max_len else "":
            self._step(ch)

    @property
    def withheld(self) -> int:
        """Length of the longest suffix of the text fed that is a proper prefix of a stop string."""
        return self._withheld[self.state]
