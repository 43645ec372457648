"""Scheduling policy: which slot a request gets and what goes into the next batch.

Pure functions over plain values: no llama.cpp here, so every rule is tested without a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from slotserver.engine.batch import BatchEntry, BatchPlan, common_prefix


@dataclass(slots=True)
class DecodeWork:
    slot_id: int
    pos0: int
    sampled: int
    draft: list[int]


@dataclass(slots=True)
class PrefillWork:
    slot_id: int
    pos0: int
    pending: list[int]  # prompt tokens not yet in the KV cache


def plan_batch(decodes: Sequence[DecodeWork], prefills: Sequence[PrefillWork], n_batch: int) -> BatchPlan:
    """Fill one batch of at most ``n_batch`` tokens.

    Every generating slot gets its sampled token; drafts share what is left in order, so a draft
    is cut rather than a slot starved. Prompt chunks (FIFO order) take the remaining room, so a
    long prefill never stalls generation.
    """
    assert n_batch >= len(decodes), "n_batch must hold one token per slot"
    plan = BatchPlan()
    room = n_batch - len(decodes)
    for w in decodes:
        n_draft = min(len(w.draft), room)
        room -= n_draft
        plan.entries.append(BatchEntry(w.slot_id, w.pos0, [w.sampled, *w.draft[:n_draft]], True))
    for w in prefills:
        if room <= 0:
            break
        chunk = w.pending[:room]
        room -= len(chunk)
        plan.entries.append(BatchEntry(w.slot_id, w.pos0, chunk, False, len(chunk) == len(w.pending)))
    return plan


@dataclass(slots=True)
class IdleSlot:
    slot_id: int
    cache: Sequence[int]  # tokens whose KV the slot holds
    t_last_used: float
    owner: str = ""  # the tenant whose prompts ``cache`` holds (``Slot.kv_owner``)


def pick_slot(idle: Sequence[IdleSlot], prompt: Sequence[int], id_slot: int, n_slots: int,
              owner: str = "") -> int | None:
    """Slot for a new request of the cache tenant ``owner``, or None to keep it waiting.

    A pinned ``id_slot`` (wrapped modulo the slot count, as llama.cpp) waits for that slot. Else the
    idle slot sharing the longest cached prefix with the prompt wins, else the least recently used.
    Only caches ``owner`` left count: another tenant's cache is as good as empty (``LearningScopes.kv_owner``),
    so which slot a request gets never depends on the text another tenant sent.
    """
    if id_slot >= 0:
        want = id_slot % n_slots
        return want if any(s.slot_id == want for s in idle) else None
    if not idle:
        return None

    def n_common(s: IdleSlot) -> int:
        return common_prefix(s.cache, prompt) if s.owner == owner else 0

    best = max(idle, key=lambda s: (n_common(s), -s.t_last_used))
    if n_common(best) > 0:
        return best.slot_id
    return min(idle, key=lambda s: s.t_last_used).slot_id


def draft_budget(n_ctx: int, n_cached: int, n_remaining: int, n_max: int) -> int:
    """Longest useful draft: the context left after the sampled token, and the tokens still wanted.

    ``n_remaining`` < 0 means no n_predict limit. As llama.cpp's ``get_n_draft_max``.
    """
    budget = min(n_max, n_ctx - n_cached - 2)
    if n_remaining >= 0:
        budget = min(budget, n_remaining - 1)
    return max(budget, 0)
