"""ngram-mod drafter: named thresholds, n_min, shared pool, acceptance streak, cold fallback."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngram.mod import (
    LOW_ACCEPTANCE_RATIO,
    LOW_ACCEPTANCE_STREAK,
    LOW_MIN_VERIFIED,
    OCCUPANCY_RESET,
    TAG_COLD,
    TAG_COLD_SHORT,
    TAG_POOL,
    NgramMod,
    NgramModConfig,
    cold_lengths,
)
from tests.ngram.reference_impl import short_match_draft

PROMPT = [10, 11, 12, 13, 14, 15, 16, 17]  # each 2-gram unique: a chain of 6 successors


def mod(n_match=2, n_min=1, n_max=4, pool_size=1 << 12, n_match_cold=0):
    """The fallback is off unless asked for: most tests here are about the pool alone."""
    config = NgramModConfig(n_match=n_match, n_min=n_min, n_max=n_max, n_match_cold=n_match_cold)
    return NgramMod(config, pool_size=pool_size)


def test_constants_match_llama_cpp_code():
    # The code uses 0.25 although a llama.cpp comment says 0.5.
    assert (OCCUPANCY_RESET, LOW_ACCEPTANCE_RATIO, LOW_ACCEPTANCE_STREAK) == (0.25, 0.25, 5)


def test_config_validation():
    with pytest.raises(ValueError):
        NgramModConfig(n_match=0)
    with pytest.raises(ValueError):
        NgramModConfig(n_min=-1)
    for bad in (-1, 1025):
        with pytest.raises(ValueError):
            NgramModConfig(n_match_cold=bad)
    assert NgramModConfig(n_match_cold=0).n_match_cold == 0 and NgramModConfig().n_match_cold == 8


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


def test_acceptance_is_judged_against_the_verified_part_of_a_cut_draft():
    # The selection verified 4 of a 64-token pool draft and all 4 were accepted: a good round, not
    # 4/64 (which, five times over, reset the shared pool and every slot's warm drafts with it).
    d = mod(n_max=64)
    d.begin(0, PROMPT)
    for _ in range(2 * LOW_ACCEPTANCE_STREAK):
        assert len(d.draft(0, [9, 10], 11, 64)) == 6
        d.cut(0, 4)
        d.accept(0, 4, False)
    assert d.n_resets == 0 and d.slots[0].n_low == 0
    # A draft cut to a probe's few tokens is no round at all, however it fared.
    for _ in range(2 * LOW_ACCEPTANCE_STREAK):
        d.draft(0, [9, 10], 11, 64)
        d.cut(0, LOW_MIN_VERIFIED - 1)
        d.accept(0, 0, False)
    assert d.n_resets == 0 and d.slots[0].n_low == 0
    # Verified for LOW_MIN_VERIFIED tokens and all rejected: low rounds, as llama.cpp counts them.
    for _ in range(LOW_ACCEPTANCE_STREAK):
        d.draft(0, [9, 10], 11, 64)
        d.cut(0, LOW_MIN_VERIFIED)
        d.accept(0, 0, False)
    assert d.n_resets == 1


def test_incremental_update_after_chunk():
    # Generated tokens are hashed once more than 32 are pending.
    d = mod()
    d.begin(0, PROMPT)
    hist = PROMPT + [50 + i for i in range(40)]
    d.draft(0, hist, 1, 4)
    assert d.draft(0, [9, 50], 51, 3) == [52, 53, 54]


# --- cold fallback: a repeat in the slot's own history when the pool has no draft ---


def test_pool_draft_wins_over_a_cold_one():
    # [10, 11] repeats in the slot's history (a cold draft would be [12, 99, 9, 10]), but the pool
    # has a chain for it.
    d = mod(n_match_cold=2)
    d.begin(0, PROMPT)
    assert d.draft(0, [10, 11, 12, 99, 9, 10], 11, 8) == [12, 13, 14, 15]
    assert d.draft_tag(0) == TAG_POOL


def test_cold_draft_when_the_pool_chain_is_too_short():
    # The pool's chain from [14, 15] is [16, 17] < n_min=3; the slot's own history had [14, 15]
    # followed by 7: the cold draft runs on into the repeat and is cut by the config's n_max (4).
    d = mod(n_min=3, n_match_cold=2)
    d.begin(0, PROMPT)
    assert d.draft(0, [14, 15, 7, 8, 14], 15, 8) == [7, 8, 14, 15]  # capped by the drafter's n_max
    assert d.draft_tag(0) == TAG_COLD
    assert d.draft(0, [14, 15, 7, 8, 14], 15, 2) == [7, 8]  # and by the caller's
    assert d.draft(0, [14, 15, 7, 8, 14, 15, 7], 3, 8) == [] and d.draft_tag(0) == ""


def test_cold_draft_on_an_empty_pool_from_the_prompt():
    # A cold pool (nothing learned, history shorter than n_match): the prompt's own repeat drafts.
    d = mod(n_match=24, n_min=48, n_max=64, n_match_cold=3)
    prompt = [1, 2, 3, 4, 5, 6, 1, 2]
    d.begin(0, prompt)
    assert d.draft(0, prompt, 3, 16) == [4, 5, 6, 1, 2, 3] * 2 + [4, 5, 6, 1]  # period 6, copied on
    assert d.draft_tag(0) == TAG_COLD


def test_a_shorter_cold_match_drafts_apart_and_at_most_twice_its_length():
    # n_match_cold=8: the last 8 tokens never occurred before, their last 4 did (followed by
    # 20..29): a draft of the shorter match, tagged apart, capped at 2 * 4 tokens.
    d = mod(n_match=24, n_min=48, n_max=64, n_match_cold=8)
    assert cold_lengths(d.config) == (8, 4)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8] + list(range(20, 30)) + [9, 9, 9, 9, 5, 6, 7]
    d.begin(0, prompt)
    assert d.draft(0, prompt, 8, 64) == list(range(20, 28)) and d.draft_tag(0) == TAG_COLD_SHORT
    # The whole 8-token window repeats: the longer match wins and runs to the config's n_max.
    prompt = [1, 2, 3, 4, 5, 6, 7, 8] + list(range(20, 30)) + [1, 2, 3, 4, 5, 6, 7]
    d.begin(0, prompt)
    assert d.draft(0, prompt, 8, 64)[:10] == list(range(20, 30)) and d.draft_tag(0) == TAG_COLD
    assert cold_lengths(mod(n_match_cold=3).config) == (3,) and cold_lengths(mod(n_match_cold=0).config) == ()


def test_draft_tag_is_empty_without_a_draft():
    d = mod(n_match_cold=2)
    assert d.draft_tag(0) == ""  # a slot never seen
    d.begin(0, PROMPT)
    assert d.draft_tag(0) == ""
    assert d.draft(0, [1, 2, 3], 4, 8) == [] and d.draft_tag(0) == ""


def test_n_match_cold_zero_disables_the_fallback():
    d = mod(n_min=3)
    d.begin(0, PROMPT)
    assert d.draft(0, [14, 15, 7, 8, 14], 15, 8) == [] and d.draft_tag(0) == ""
    assert d.slots[0].short == ()


def test_cold_drafts_do_not_count_towards_the_pool_reset_streak():
    # Rejected cold drafts neither reset the pool nor break (or extend) a streak of low pool rounds.
    d = mod(n_min=3, n_match_cold=2)
    d.begin(0, PROMPT)
    for _ in range(LOW_ACCEPTANCE_STREAK - 1):
        assert d.draft(0, [9, 10], 11, 8) and d.draft_tag(0) == TAG_POOL
        d.accept(0, 0, False)
    for _ in range(2 * LOW_ACCEPTANCE_STREAK):
        assert d.draft(0, [14, 15, 7, 8, 14], 15, 8) and d.draft_tag(0) == TAG_COLD
        d.accept(0, 0, False)
    assert d.n_resets == 0 and d.slots[0].n_low == LOW_ACCEPTANCE_STREAK - 1
    d.draft(0, [9, 10], 11, 8)
    d.accept(0, 0, False)
    assert d.n_resets == 1


@settings(max_examples=200, deadline=None)
@given(
    streams=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=50), min_size=1, max_size=3),
    n_cold=st.integers(1, 4),
    n_max=st.integers(1, 6),
    prompt_len=st.integers(0, 20),
    step=st.integers(1, 4),
)
def test_cold_drafts_equal_a_scan_of_the_slots_history(streams, n_cold, n_max, prompt_len, step):
    # The pool never drafts here (n_min above its longest chain), so every draft is a cold one.
    # Each stream is one request: begin() on a prompt, then a history grown a few tokens a call.
    d = mod(n_match=3, n_min=1024, n_max=4, n_match_cold=n_cold)
    for stream in streams:
        prompt = stream[: min(prompt_len, len(stream) - 1)]
        d.begin(0, prompt)
        for size in range(len(prompt), len(stream) - 1, step):
            history, last = stream[:size], stream[size]
            expected, tag = short_match_draft(history, last, n_cold, min(n_max, 4)), TAG_COLD
            if not expected and n_cold // 2 >= 2:  # the shorter match, its draft at most twice as long
                half = n_cold // 2
                expected, tag = short_match_draft(history, last, half, min(n_max, 4, 2 * half)), TAG_COLD_SHORT
            assert d.draft(0, history, last, n_max) == expected
            assert d.draft_tag(0) == (tag if expected else "")
