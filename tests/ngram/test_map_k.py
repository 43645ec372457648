"""ngram-map-k / ngram-map-k4v: worked examples and a cross-check against a naive port."""

import random

import pytest
from reference_impl import RefMap

from ngram.map_k import NgramMapK, NgramMapK4v
from ngram.map_state import MAX_VALUE_COUNT, MapState, NgramMapConfig, _count_up
from ngram.simple import NgramSimple
from ngram.windows import window_hash32


def cfg(n=2, m=2, min_hits=1):
    return NgramMapConfig(size_n=n, size_m=m, min_hits=min_hits)


def test_config_validation():
    with pytest.raises(ValueError):
        NgramMapConfig(size_n=0)
    with pytest.raises(ValueError):
        NgramMapConfig(size_m=1025)
    with pytest.raises(ValueError):
        NgramMapConfig(min_hits=0)


def test_k_drafts_continuation_and_adapts_length():
    # Key [1,2] at j=1 is followed by [3,4]. After 1 accepted token the same key drafts 1 token;
    # after 0 accepted it drafts nothing any more (llama.cpp quirk).
    d = NgramMapK(cfg())
    h = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1]
    d.begin(0, h)
    assert d.draft(0, h, 2, 16) == [3, 4]
    d.accept(0, 1, False)
    h = h + [2, 3, 9, 1]
    assert d.draft(0, h, 2, 16) == [3]
    d.accept(0, 0, False)
    h = h + [2, 3, 7, 7, 1]
    assert d.draft(0, h, 2, 16) == []


def test_k_ignores_other_drafters_accepts_and_min_hits():
    # is_other accepts do not touch the adaptation; min_hits is not checked by map-k.
    d = NgramMapK(cfg(min_hits=5))
    h = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1]
    d.begin(0, h)
    assert d.draft(0, h, 2, 16) == [3, 4]
    d.accept(0, 0, True)
    h = h + [2, 3, 9, 1]
    assert d.draft(0, h, 2, 16) == [3, 4]


def test_k_hashed_earliest_occurrence_beats_latest():
    # Once positions are in key_map (first writer wins), the earliest occurrence [1,2]->[3,4]
    # is used, while ngram-simple drafts the latest one [1,2]->[5,6].
    h = [0, 1, 2, 3, 4, 0, 0, 0, 0, 0]
    d, s = NgramMapK(cfg()), NgramSimple(cfg())
    d.begin(0, h)
    assert d.draft(0, h, 9, 16) == []  # hashes the prompt positions
    h = h + [9, 1, 2, 5, 6, 0, 0, 0, 0, 1]
    assert d.draft(0, h, 2, 16) == [3, 4]
    assert s.draft(0, h, 2, 16) == [5, 6]


def test_k4v_two_to_one_rule_and_quirk():
    # n=m=1, key [1]: continuations 5,5,6 -> max 2 >= 2*1, drafts; the tokens come from the
    # current match (j=5, followed by 6), not from the winning value 5 (llama.cpp quirk).
    h = [0, 1, 5, 1, 5, 1, 6, 9, 9, 9]
    d = NgramMapK4v(cfg(1, 1))
    d.begin(0, h)
    assert d.draft(0, h, 1, 16) == [6]


def test_k4v_no_dominant_continuation():
    # Continuations 5 and 6 once each: 1 < 2*1, no draft.
    h = [0, 1, 5, 1, 6, 9, 9, 9]
    d = NgramMapK4v(cfg(1, 1))
    d.begin(0, h)
    assert d.draft(0, h, 1, 16) == []


def test_k4v_min_hits():
    # min_hits=2: the first hit of key [1] only counts; the second drafts.
    h = [0, 1, 5, 9, 9, 9]
    d = NgramMapK4v(cfg(1, 1, min_hits=2))
    d.begin(0, h)
    assert d.draft(0, h, 1, 16) == []
    h = h + [1, 5, 9, 9, 9]
    assert d.draft(0, h, 1, 16) == [5]


def test_k4v_adapts_per_value():
    # The (key, value) that drafted gets the accepted count as its new cap.
    h = [0, 1, 2, 3, 4, 8, 8, 8, 8, 8, 1]
    d = NgramMapK4v(cfg(2, 3))
    d.begin(0, h)
    assert d.draft(0, h, 2, 16) == [3, 4, 8]
    d.accept(0, 2, False)
    h = h + [2, 3, 4, 7, 7, 7, 7, 7, 1]
    assert d.draft(0, h, 2, 16) == [3, 4]


def test_k4v_four_value_slots_and_saturation():
    # Five distinct continuations of key [1]: the fifth finds no slot and is ignored.
    st = MapState(cfg(1, 1), key_only=False)
    h = [0, 1, 5, 1, 6, 1, 7, 1, 8, 1, 9, 1]
    st.windows.resync(h)
    entry = st.new_key((1,), 11)
    st.count_values(entry, [1], window_hash32([1]), 11)
    assert [(v.value_idx, v.value_num) for v in entry.values] == [(2, 1), (4, 1), (6, 1), (8, 1)]
    assert entry.stat_idx == 11
    assert _count_up(MAX_VALUE_COUNT) == MAX_VALUE_COUNT == 16380


def test_shrunk_prompt_cleans_up_keys_and_key_map():
    # A shorter prompt (8 < 10) sets the cleanup boundary to 8-n-m = 4: the key created at
    # j=12 goes, the key at j=1 stays, key_map keeps only indexes < 4. A prompt of <= n+m
    # tokens clears everything.
    d = NgramMapK(cfg())
    h = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1]
    d.begin(0, h)
    assert d.draft(0, h, 2, 16) == [3, 4]
    h2 = h + [2, 3, 5, 5, 4, 4, 4, 4, 4, 5]
    assert d.draft(0, h2, 5, 16) == [4, 4]
    st = d.slots[0]
    assert set(st.keys) == {(1, 2), (5, 5)}
    d.begin(0, h2[:8])
    assert set(st.keys) == {(1, 2)}
    assert int(st.key_map.max()) < 4 and st.key_map_last_idx == 3
    d.begin(0, h2[:3])
    assert st.keys == {} and not st.key_map.any() and st.key_map_last_idx == 0


def test_blind_spot_after_prompt_end_is_kept():
    # llama.cpp never scans positions (size_last_begin-n-m-1, size_last_begin]: [7,8] at j=7
    # (prompt of 10 tokens, n=m=2) is not found later, while ngram-simple finds it.
    h = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1]
    d = NgramMapK(cfg())
    d.begin(0, h)
    d.draft(0, h, 2, 16)
    h2 = h + [2, 3, 9, 9, 9, 9, 9, 6, 7]
    assert d.draft(0, h2, 8, 16) == []
    assert NgramSimple(cfg()).draft(0, h2, 8, 16) == [1, 2]


@pytest.mark.parametrize("key_only", [True, False])
def test_matches_naive_port_on_random_histories(key_only):
    rng = random.Random(7)
    for n, m, min_hits in ((1, 1, 1), (2, 2, 1), (2, 3, 2), (3, 2, 1)):
        c = cfg(n, m, min_hits)
        d = NgramMapK(c) if key_only else NgramMapK4v(c)
        ref = RefMap(n, m, key_only, min_hits)
        h = [rng.randrange(3) for _ in range(40)]
        d.begin(0, h)
        ref.begin(h)
        for _ in range(250):
            last = rng.randrange(3)
            got = d.draft(0, h, last, 1024)
            assert got == ref.draft(h, last)
            n_acc = rng.randrange(len(got) + 1) if got else 0
            if got:
                d.accept(0, n_acc, False)
                ref.accept(n_acc)
            h = h + [last] + [rng.randrange(3) for _ in range(n_acc)]
