"""ngram-map-k and ngram-map-k4v: n-gram map drafters with per-(key, value) draft-length adaptation.

After llama.cpp ``common_ngram_map_draft`` / ``common_ngram_map_accept`` (``common/ngram-map.cpp``)
and ``common_speculative_impl_ngram_map_k`` (``common/speculative.cpp``), PR #18471. One
``MapState`` per slot, as llama.cpp keeps one map per sequence.

* **map-k** (key only): after the key n-gram matched at ``match_pos``, draft the tokens that
  followed it, at most ``min(m, values[0].n_accepted)``. ``min_hits`` is not checked.
* **map-k4v**: needs ``key_num >= min_hits``; counts the m-grams that followed every earlier
  occurrence of the key (up to 4 distinct ones), and drafts only if the most frequent is at
  least twice the sum of the others (or the only one). Quirk kept from llama.cpp: the drafted
  tokens are the continuation of the *current* match position, not of the winning value.

``accept`` stores the accepted count in the (key, value) that produced the draft; the next draft
from it is capped to that count. Once it is 0 that key drafts nothing again (llama.cpp quirk).
"""

from __future__ import annotations

from typing import Sequence

from ngram.map_state import MapKey, MapState, NgramMapConfig, _count_up
from ngram.windows import window_hash32


class _NgramMapDrafter:
    key_only = True

    def __init__(self, config: NgramMapConfig | None = None) -> None:
        self.config = config or NgramMapConfig()
        self.slots: dict[int, MapState] = {}

    def _state(self, slot: int) -> MapState:
        st = self.slots.get(slot)
        if st is None:
            st = self.slots[slot] = MapState(self.config, self.key_only)
        return st

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        self._state(slot).begin(prompt)

    def draft(self, slot: int, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        st = self._state(slot)
        st.last_draft = None
        n, m = st.n, st.m
        size = len(history)
        if size < 2 * n + m:
            return []
        if size < st.idx_last_check or not st.windows.can_extend(history):
            st.begin(history)  # the history did not just grow: treat it as a new prompt
        else:
            st.windows.sync(history)
        st.idx_last_check = size
        key = st.windows.ids[size - n + 1 :]
        key.append(int(last_token))
        key_hash = window_hash32(key)
        match_pos = st.find_match(key, key_hash, size)
        st.update_key_map(size)
        if match_pos == 0:
            return []
        key_t = tuple(key)
        entry = st.keys.get(key_t) or st.new_key(key_t, match_pos)
        entry.key_num = _count_up(entry.key_num)
        slot_v = self._choose_value(st, entry, key, key_hash, match_pos)
        if slot_v < 0:
            return []
        st.last_draft = (entry, slot_v)
        n_draft = min(m, entry.values[slot_v].n_accepted, n_max)
        start = match_pos + n
        return st.windows.ids[start : start + max(0, n_draft)]

    def _choose_value(self, st: MapState, entry: MapKey, key: list[int], key_hash: int, match_pos: int) -> int:
        """The value slot to draft from, or -1 for no draft."""
        return 0

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        if is_other:
            return
        st = self.slots.get(slot)
        if st is None or st.last_draft is None:
            return
        entry, slot_v = st.last_draft
        entry.values[slot_v].n_accepted = n_accepted

    def size_bytes(self) -> int:
        return sum(st.size_bytes() for st in self.slots.values())


class NgramMapK(_NgramMapDrafter):
    key_only = True


class NgramMapK4v(_NgramMapDrafter):
    key_only = False

    def _choose_value(self, st: MapState, entry: MapKey, key: list[int], key_hash: int, match_pos: int) -> int:
        if entry.key_num < self.config.min_hits:
            return -1
        st.count_values(entry, key, key_hash, match_pos)
        max_occur, slot_max = 0, 0
        for v, value in enumerate(entry.values):
            if value.value_num > max_occur:  # strict: the first slot wins ties
                max_occur, slot_max = value.value_num, v
        sum_occur = sum(value.value_num for v, value in enumerate(entry.values) if v != slot_max)
        if sum_occur > 0 and max_occur < 2 * sum_occur:
            return -1  # the best continuation is not clearly dominant
        return slot_max
