"""ngram-mod: drafts by chaining lookups in one hash pool shared by every slot.

After llama.cpp ``common_speculative_impl_ngram_mod`` (``common/speculative.cpp``, PR #19164).
The pool is shared by all slots and survives across requests; per-slot state is only where to
resume hashing and how the last draft fared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ngram.pool import POOL_SIZE, HashPool

# Reset the shared pool when more than this share of its entries is used (after a begin()).
OCCUPANCY_RESET = 0.25
# A draft with acceptance below this ratio counts as a low-acceptance round...
LOW_ACCEPTANCE_RATIO = 0.25
# ...and this many consecutive low rounds of one slot reset the shared pool.
LOW_ACCEPTANCE_STREAK = 5
# New history is hashed into the pool once more than this many tokens are pending.
UPDATE_CHUNK = 32


@dataclass(slots=True)
class NgramModConfig:
    n_match: int = 24  # tokens hashed per window
    n_min: int = 48  # a chain shorter than this is no draft
    n_max: int = 64  # longest draft

    def __post_init__(self) -> None:
        if not 1 <= self.n_match <= 1024:
            raise ValueError("ngram-mod n_match must be in 1..1024")
        if not (0 <= self.n_min <= 1024 and 0 <= self.n_max <= 1024):
            raise ValueError("ngram-mod n_min and n_max must be in 0..1024")


@dataclass(slots=True)
class SlotInfo:
    i_last: int = 0  # history index from which windows are still to be hashed
    n_draft_last: int = 0  # length of this slot's last draft
    n_low: int = 0  # consecutive low-acceptance rounds


class NgramMod:

    def __init__(self, config: NgramModConfig | None = None, pool_size: int = POOL_SIZE) -> None:
        self.config = config or NgramModConfig()
        self.pool = HashPool(self.config.n_match, pool_size)  # shared by all slots
        self.slots: dict[int, SlotInfo] = {}
        self.n_resets = 0

    def _info(self, slot: int) -> SlotInfo:
        return self.slots.setdefault(slot, SlotInfo())

    def _reset_pool(self) -> None:
        self.pool.reset()
        self.n_resets += 1
        for info in self.slots.values():
            info.i_last = 0

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        info = self._info(slot)
        info.i_last = 0
        info.n_draft_last = 0
        n = self.pool.n
        if len(prompt) < n:
            return
        self.pool.add_all(prompt)
        info.i_last = len(prompt) - n
        if self.pool.occupancy > OCCUPANCY_RESET:
            self._reset_pool()

    def draft(self, slot: int, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        info = self._info(slot)
        info.n_draft_last = 0
        n = self.pool.n
        size = len(history)
        if size < n:
            return []
        if info.i_last + UPDATE_CHUNK < size:
            self.pool.add_all(history, info.i_last)
            info.i_last = size - n
        window = list(history[size - n + 1 :])
        window.append(last_token)
        draft = self.pool.follow(window, self.config.n_max)
        if len(draft) < self.config.n_min:  # as llama.cpp: n_min applies before the slot's cut
            return []
        draft = draft[:n_max]
        # Unlike llama.cpp we judge acceptance against what was verified (after the cut).
        info.n_draft_last = len(draft)
        return draft

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        if is_other:
            return
        info = self._info(slot)
        if info.n_draft_last <= 0:
            return
        if n_accepted / info.n_draft_last < LOW_ACCEPTANCE_RATIO:
            info.n_low += 1
            if info.n_low >= LOW_ACCEPTANCE_STREAK:
                self._reset_pool()
                info.n_low = 0
        else:
            info.n_low = 0
