"""ngram-mod drafter: named thresholds, n_min, shared pool, acceptance streak."""

import pytest

from ngram.mod import (
    LOW_ACCEPTANCE_RATIO,
    LOW_ACCEPTANCE_STREAK,
    OCCUPANCY_RESET,
    NgramMod,
    NgramModConfig,
)

PROMPT = [10, 11, 12, 13, 14, 15, 16, 17]  # each 2-gram unique: a chain of 6 successors


def mod(n_match=2, n_min=1, n_max=4, pool_size=1 << 12):
    return NgramMod(NgramModConfig(n_match=n_match, n_min=n_min, n_max=n_max), pool_size=pool_size)


def test_constants_match_llama_cpp_code():
    # The code uses 0.25 although a llama.cpp comment says 0.5.
    assert (OCCUPANCY_RESET, LOW_ACCEPTANCE_RATIO, LOW_ACCEPTANCE_STREAK) == (0.25, 0.25, 5)


def test_config_validation():
    with pytest.raises(ValueError):
        NgramModConfig(n_match=0)
    with pytest.raises(ValueError):
        NgramModConfig(n_min=-1)


def test_chain_draft_and_n_max():
    # [10,11] -> 12 -> 13 ...: chained lookups up to config n_max, then the caller's n_max.
    d = mod()
    d.begin(0, PROMPT)
    assert d.draft(0, [9, 10], 11, 8) == [12, 13, 14, 15]
    assert d.draft(0, [9, 10], 11, 2) == [12, 13]


def test_n_min_rejects_short_chains():
    # The chain from [14,15] has only 2 known successors (16, 17) < n_min=3: no draft.
    d = mod(n_min=3)
    d.begin(0, PROMPT)
    assert d.draft(0, [9, 14], 15, 8) == []
    assert d.draft(0, [9, 12], 13, 8) == [14, 15, 16, 17]


def test_pool_is_shared_across_slots():
    # Slot 1 drafts from what slot 0's prompt taught the pool.
    d = mod()
    d.begin(0, PROMPT)
    d.begin(1, [1, 2])
    assert d.draft(1, [9, 10], 11, 8) == [12, 13, 14, 15]


def test_occupancy_reset_on_begin():
    # 7 windows in a 16-entry pool: occupancy > 0.25 => the shared pool is cleared.
    d = mod(pool_size=16)
    d.begin(0, PROMPT + [18])
    assert d.n_resets == 1 and d.pool.n_used == 0


def test_low_acceptance_streak_resets_pool():
    # 5 consecutive drafts with < 25% accepted reset the pool; a good round breaks the streak;
    # accepts of other drafters' drafts are ignored.
    d = mod()
    d.begin(0, PROMPT)
    for _ in range(LOW_ACCEPTANCE_STREAK - 1):
        assert d.draft(0, [9, 10], 11, 8)
        d.accept(0, 0, False)
    d.draft(0, [9, 10], 11, 8)
    d.accept(0, 1, False)  # 1/4 = 0.25: not low
    assert d.slots[0].n_low == 0
    for _ in range(LOW_ACCEPTANCE_STREAK - 1):
        d.draft(0, [9, 10], 11, 8)
        d.accept(0, 0, False)
        d.accept(0, 0, True)
    assert d.n_resets == 0
    d.draft(0, [9, 10], 11, 8)
    d.accept(0, 0, False)
    assert d.n_resets == 1 and d.pool.n_used == 0
    assert d.draft(0, [9, 10], 11, 8) == []


def test_incremental_update_after_chunk():
    # Generated tokens are hashed once more than 32 are pending.
    d = mod()
    d.begin(0, PROMPT)
    hist = PROMPT + [50 + i for i in range(40)]
    d.draft(0, hist, 1, 4)
    assert d.draft(0, [9, 50], 51, 3) == [52, 53, 54]
