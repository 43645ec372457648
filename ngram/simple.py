"""ngram-simple: draft the tokens that followed the latest earlier occurrence of the last n tokens.

After llama.cpp ``common_ngram_simple_draft`` (``common/ngram-map.cpp``, PR #18471). llama.cpp is
stateless and scans the history backwards on every call; we keep a per-slot ``TokenWindows``
mirror so the same latest match is found with a hash comparison instead (see ``ngram/windows.py``).

Rules reproduced exactly (n = size_n, m = size_m, L = len(history)):

* no draft when ``L <= n + m + 1``;
* the pattern is ``history[L-n+1:] + [last_token]``; it is searched at ``j = L-n-1 .. 1``
  (index 0 never matches) and the latest occurrence wins;
* ``copy = min(m, L - (j + n))``; when ``copy < n`` there is no draft, even if an older
  occurrence would have allowed a longer one (llama.cpp stops at the first hit);
* ``min_hits`` is unused.
"""

from __future__ import annotations

from typing import Sequence

from ngram.map_state import NgramMapConfig
from ngram.windows import TokenWindows, window_hash32


class NgramSimple:

    def __init__(self, config: NgramMapConfig | None = None) -> None:
        self.config = config or NgramMapConfig()
        self.slots: dict[int, TokenWindows] = {}  # per-slot history mirror (llama.cpp has none)

    def _windows(self, slot: int) -> TokenWindows:
        win = self.slots.get(slot)
        if win is None:
            win = self.slots[slot] = TokenWindows(self.config.size_n)
        return win

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        self._windows(slot).resync(prompt)

    def draft(self, slot: int, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        n, m = self.config.size_n, self.config.size_m
        size = len(history)
        if size <= n + m + 1:
            return []
        win = self._windows(slot)
        win.sync(history)
        pattern = [int(t) for t in history[size - n + 1 :]]
        pattern.append(int(last_token))
        j = win.find_last(pattern, window_hash32(pattern), 1, size - n - 1)
        if j < 1:
            return []
        n_copy = min(m, size - (j + n))
        if n_copy < n:
            return []
        return win.ids[j + n : j + n + min(n_copy, n_max)]

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        return  # stateless in llama.cpp: nothing to adapt

    def size_bytes(self) -> int:
        return sum(w.size_bytes for w in self.slots.values())
