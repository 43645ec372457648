"""ngram-mod: drafts by chaining lookups in one hash pool shared by every slot.

After llama.cpp ``common_speculative_impl_ngram_mod`` (``common/speculative.cpp``, PR #19164).
The pool is shared by all slots and survives across requests; per-slot state is where to resume
hashing, how the last draft fared, and (ours, not llama.cpp's) a short-match index of the slot's
own history: when the pool has no draft, a repeat of the last ``n_match_cold`` tokens in the
slot's history gives one, so a cold pool or a short answer still drafts its own repetitions. Failing
that, a repeat of the last ``n_match_cold // 2`` (at least 2) does, tagged apart (``TAG_COLD_SHORT``)
so that the chain learns how far such shorter matches are right and the selection verifies them only
as far as they pay: an answer that copies a sentence of its prompt drafts, cold, after 4 tokens
instead of 8 (what that gained in an offline replay: docs/measurements.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ngram.pool import POOL_SIZE, HashPool
from ngram.short_match import ShortMatchIndex

# Reset the shared pool when more than this share of its entries is used (after a begin()).
OCCUPANCY_RESET = 0.25
# A draft with acceptance below this ratio counts as a low-acceptance round...
LOW_ACCEPTANCE_RATIO = 0.25
# ...and this many consecutive low rounds of one slot reset the shared pool.
LOW_ACCEPTANCE_STREAK = 5
# A pool draft verified for fewer tokens (cut by the selection) is no round at all.
LOW_MIN_VERIFIED = 4
# New history is hashed into the pool once more than this many tokens are pending.
UPDATE_CHUNK = 32
# draft_tag() values: which source the slot's last draft came from ("" for no draft).
TAG_POOL = "pool"
TAG_COLD = "cold"
TAG_COLD_SHORT = "cold-short"


@dataclass(slots=True)
class NgramModConfig:
    n_match: int = 24  # tokens hashed per window
    n_min: int = 48  # a chain shorter than this is no draft
    n_max: int = 64  # longest draft
    n_match_cold: int = 8  # shortest repeat in the slot's own history drafted without the pool; 0 = off

    def __post_init__(self) -> None:
        if not 1 <= self.n_match <= 1024:
            raise ValueError("ngram-mod n_match must be in 1..1024")
        if not (0 <= self.n_min <= 1024 and 0 <= self.n_max <= 1024):
            raise ValueError("ngram-mod n_min and n_max must be in 0..1024")
        if not 0 <= self.n_match_cold <= 1024:
            raise ValueError("ngram-mod n_match_cold must be in 0..1024 (0: no fallback)")


def cold_lengths(config: NgramModConfig) -> tuple[int, ...]:
    """Match lengths of the fallback, longest first: ``n_match_cold``, then half of it if that is 2 or more."""
    n = config.n_match_cold
    return () if n == 0 else (n, n // 2) if n // 2 >= 2 else (n,)


@dataclass(slots=True)
class SlotInfo:
    i_last: int = 0  # history index from which windows are still to be hashed
    n_draft_last: int = 0  # length of this slot's last draft
    n_low: int = 0  # consecutive low-acceptance rounds
    tag: str = ""  # source of the last draft: TAG_POOL, TAG_COLD, TAG_COLD_SHORT or "" (none)
    short: tuple[ShortMatchIndex, ...] = ()  # the fallback's indexes, longest match first; () when off


class NgramMod:

    def __init__(self, config: NgramModConfig | None = None, pool_size: int = POOL_SIZE) -> None:
        self.config = config or NgramModConfig()
        self.pool = HashPool(self.config.n_match, pool_size)  # shared by all slots
        self.slots: dict[int, SlotInfo] = {}
        self.n_resets = 0

    def _info(self, slot: int) -> SlotInfo:
        info = self.slots.get(slot)
        if info is None:
            info = self.slots[slot] = SlotInfo(short=tuple(ShortMatchIndex(n) for n in cold_lengths(self.config)))
        return info

    def _reset_pool(self) -> None:
        self.pool.reset()
        self.n_resets += 1
        for info in self.slots.values():
            info.i_last = 0

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        info = self._info(slot)
        info.i_last = 0
        info.n_draft_last = 0
        info.tag = ""
        for index in info.short:
            index.rebuild(prompt)
        n = self.pool.n
        if len(prompt) < n:
            return
        self.pool.add_all(prompt)
        info.i_last = len(prompt) - n
        if self.pool.occupancy > OCCUPANCY_RESET:
            self._reset_pool()

    def draft(self, slot: int, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        info = self._info(slot)
        draft = self._pool_draft(info, history, last_token)[:n_max]
        info.tag = TAG_POOL if draft else ""
        # No n_min for the fallback: a short repeat is worth a short draft.
        for index, tag in zip(info.short, (TAG_COLD, TAG_COLD_SHORT)):
            if draft:
                break
            cap = self.config.n_max if tag == TAG_COLD else 2 * index.n
            draft = index.draft(history, last_token, min(n_max, cap))
            info.tag = tag if draft else ""
        # Unlike llama.cpp we judge acceptance against what was verified (after the cut).
        info.n_draft_last = len(draft)
        return draft

    def draft_tag(self, slot: int) -> str:
        """Where the slot's last draft came from, so the caller can estimate acceptance per kind."""
        info = self.slots.get(slot)
        return info.tag if info is not None else ""

    def _pool_draft(self, info: SlotInfo, history: Sequence[int], last_token: int) -> list[int]:
        """The pool's chain after the last ``n_match`` tokens (new history hashed in first); [] below n_min."""
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
        return draft

    def cut(self, slot: int, n_verified: int) -> None:
        """The step verified only the first ``n_verified`` tokens of the slot's last draft (the
        selection's cut): acceptance is judged against those."""
        info = self.slots.get(slot)
        if info is not None:
            info.n_draft_last = min(info.n_draft_last, n_verified)

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        if is_other:
            return
        info = self._info(slot)
        # Only pool drafts count towards the reset streak: a wrong short-match guess (a cold draft)
        # says nothing about the pool, and neither does a draft cut to a probe's few tokens.
        if info.tag != TAG_POOL or info.n_draft_last < LOW_MIN_VERIFIED:
            return
        if n_accepted / info.n_draft_last < LOW_ACCEPTANCE_RATIO:
            info.n_low += 1
            if info.n_low >= LOW_ACCEPTANCE_STREAK:
                self._reset_pool()
                info.n_low = 0
        else:
            info.n_low = 0
