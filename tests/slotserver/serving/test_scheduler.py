"""Scheduler policy on plain values: batch planning, slot choice, draft budget (no model)."""

from slotserver.engine.batch import common_prefix, reusable_prefix
from slotserver.serving.scheduler import DecodeWork, IdleSlot, PrefillWork, draft_budget, pick_slot, plan_batch


def test_decode_tokens_come_first_then_prompt_chunks_fill_the_rest():
    plan = plan_batch(
        [DecodeWork(0, 10, 5, [6, 7])],
        [PrefillWork(1, 0, list(range(100)))],
        n_batch=16,
    )
    assert [e.slot_id for e in plan.entries] == [0, 1]
    assert plan.entries[0].tokens == [5, 6, 7] and plan.entries[0].is_decode
    assert plan.entries[1].tokens == list(range(13))  # 16 - 3 tokens of room
    assert not plan.entries[1].ends_prompt  # a long prefill is chunked, not finished
    assert plan.n_tokens == 16


def test_prefill_that_fits_ends_the_prompt_and_the_next_one_starts():
    plan = plan_batch([], [PrefillWork(0, 4, [1, 2]), PrefillWork(1, 0, [3, 4, 5])], n_batch=4)
    assert [(e.slot_id, e.tokens, e.ends_prompt) for e in plan.entries] == [(0, [1, 2], True), (1, [3, 4], False)]


def test_drafts_are_cut_so_every_generating_slot_keeps_its_token():
    plan = plan_batch([DecodeWork(0, 0, 1, [9] * 10), DecodeWork(1, 0, 2, [8] * 10)], [], n_batch=6)
    assert plan.entries[0].tokens == [1, 9, 9, 9, 9]  # 6 - 2 sampled tokens = 4 draft tokens
    assert plan.entries[1].tokens == [2]  # no room left for its draft, but it still decodes


def test_pinned_slot_waits_when_busy_and_wraps_modulo():
    idle = [IdleSlot(0, [], 0.0), IdleSlot(2, [], 0.0)]
    assert pick_slot(idle, [1], id_slot=5, n_slots=4) is None  # 5 % 4 = 1, busy
    assert pick_slot(idle, [1], id_slot=6, n_slots=4) == 2


def test_longest_cached_prefix_wins_else_least_recently_used():
    idle = [IdleSlot(0, [1, 2], 5.0), IdleSlot(1, [1, 2, 3, 4], 9.0), IdleSlot(2, [7], 1.0)]
    assert pick_slot(idle, [1, 2, 3, 9], -1, 3) == 1
    assert pick_slot(idle, [5, 5], -1, 3) == 2  # no prefix anywhere: LRU


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0


def test_draft_budget_respects_context_and_n_predict():
    assert draft_budget(n_ctx=100, n_cached=50, n_remaining=-1, n_max=64) == 48
    assert draft_budget(n_ctx=1000, n_cached=50, n_remaining=5, n_max=64) == 4
    assert draft_budget(n_ctx=1000, n_cached=50, n_remaining=1, n_max=64) == 0


def test_prefix_whose_sliding_window_entries_were_recycled_is_not_reused():
    assert reusable_prefix(n_keep=600, pos_min=0, n_swa=512) == 600  # nothing recycled
    assert reusable_prefix(n_keep=600, pos_min=80, n_swa=512) == 600  # lost only what no one needs
    assert reusable_prefix(n_keep=600, pos_min=200, n_swa=512) == 0  # the window of position 600 is gone
    assert reusable_prefix(n_keep=100, pos_min=5, n_swa=512) == 0
    assert reusable_prefix(n_keep=100, pos_min=5, n_swa=0) == 100  # no sliding window: full layers only


def test_only_the_cache_of_the_requests_own_tenant_counts():
    """--spec-learning per-key: key-2's request never goes to key-1's slot for its prefix (which would
    reveal that key-1 sent it); key-1's own prefix still wins."""
    idle = [IdleSlot(0, [1, 2, 3, 4], 9.0, owner="key key-1"), IdleSlot(1, [7], 1.0, owner="key key-2"),
            IdleSlot(2, [], 5.0, owner="")]
    assert pick_slot(idle, [1, 2, 3, 9], -1, 3, owner="key key-1") == 0
    assert pick_slot(idle, [1, 2, 3, 9], -1, 3, owner="key key-2") == 1  # no prefix of its own: LRU
    assert pick_slot(idle, [7, 8], -1, 3, owner="key key-2") == 1  # its own prefix
    assert pick_slot(idle, [7, 8], -1, 3, owner="key key-3") == 1  # LRU, as if every cache were empty
    assert pick_slot(idle, [1, 2], 0, 3, owner="key key-2") == 0  # a pinned slot is still the pinned slot
    shared = [IdleSlot(0, [1, 2, 3, 4], 9.0), IdleSlot(1, [7], 1.0)]
    assert pick_slot(shared, [1, 2, 3, 9], -1, 2) == 0  # shared (the default): every cache counts
