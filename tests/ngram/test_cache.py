"""ngram-cache: the data structure, the lax/strict thresholds, static weighting and the drafter."""

from ngram.cache import NgramCacheConfig, NgramCacheDrafter, cache_draft
from ngram.cache_data import NgramCache, make_ngram, ngram_size


def cache(*entries):
    """entries: (ngram tokens, {token: count})"""
    c = NgramCache()
    for tokens, part in entries:
        c.parts[make_ngram(tokens)] = dict(part)
    return c


EMPTY = NgramCache()


def draft(inp, context=EMPTY, dynamic=EMPTY, static=EMPTY, n=8):
    return cache_draft(inp, n, context, dynamic, static)


def test_update_counts_all_sizes_padded():
    # [1,2,1,2]: 1-grams (1)->2 x2, (2)->1; 2-grams (1,2)->1, (2,1)->2; 3-gram (1,2,1)->2.
    c = NgramCache()
    c.update([1, 2, 1, 2], 1, 4)
    assert c.parts == {
        (1, -1, -1, -1): {2: 2},
        (2, -1, -1, -1): {1: 1},
        (1, 2, -1, -1): {1: 1},
        (2, 1, -1, -1): {2: 1},
        (1, 2, 1, -1): {2: 1},
    }
    assert (c.n_ngrams, c.n_entries) == (5, 5)
    assert ngram_size((1, 2, -1, -1)) == 2


def test_incremental_update_counts_boundary_ngrams():
    # Counting [1,2,3] then the new chunk [4,5] with the whole sequence counts (2,3)->4 too.
    whole, inc = NgramCache(), NgramCache()
    whole.update([1, 2, 3, 4, 5], 1, 4)
    inc.update([1, 2, 3], 1, 4)
    inc.update([1, 2, 3, 4, 5], 1, 4, n_new=2)
    assert inc == whole


def test_merge_adds_counts():
    a = cache(([1], {2: 1}))
    a.merge(cache(([1], {2: 2, 3: 1}), ([4], {5: 1})))
    assert a == cache(([1], {2: 3, 3: 1}), ([4], {5: 1}))


def test_lax_one_gram_needs_two_samples():
    # Context (5)->{6:1}: sample size 1 < 2 => nothing; (5)->{6:2} => 6, then (6) is unknown.
    assert draft([9, 5], context=cache(([5], {6: 1}))) == []
    assert draft([9, 5], context=cache(([5], {6: 2}))) == [6]


def test_lax_percentages():
    # 1-grams need 66%: 2 of 3 passes (200 >= 198), 2 of 4 fails. 2-grams need 50%: a 1:1 tie
    # passes and the first-inserted token wins.
    assert draft([9, 5], context=cache(([5], {6: 2, 7: 1}))) == [6]
    assert draft([9, 5], context=cache(([5], {6: 2, 7: 2}))) == []
    assert draft([4, 5], context=cache(([4, 5], {6: 1, 7: 1}))) == [6]


def test_longest_ngram_first():
    # The 3-gram (1,2,3)->4 (1 sample is enough for n=3) beats the confident 1-gram (3)->9.
    ctx = cache(([1, 2, 3], {4: 1}), ([3], {9: 5}))
    assert draft([1, 2, 3], context=ctx, n=1) == [4]


def test_dynamic_uses_strict_thresholds():
    # Dynamic 1-gram needs 4 samples and 75%: {6:2} no, {6:4} yes, {6:3,7:1} yes, {6:5,7:2} no.
    assert draft([9, 5], dynamic=cache(([5], {6: 2}))) == []
    assert draft([9, 5], dynamic=cache(([5], {6: 4}))) == [6]
    assert draft([9, 5], dynamic=cache(([5], {6: 3, 7: 1}))) == [6]
    assert draft([9, 5], dynamic=cache(([5], {6: 5, 7: 2}))) == []


def test_context_before_dynamic():
    # Both confident enough: the context cache answers first, even from a smaller sample.
    ctx, dyn = cache(([3, 4, 5], {6: 1})), cache(([4, 5], {7: 9}))
    assert draft([3, 4, 5], context=ctx, dynamic=dyn, n=1) == [6]
    assert draft([3, 4, 5], dynamic=dyn, n=1) == [7]


def test_static_weighting_changes_the_winner():
    # Context (4,5)->{6:2,7:2} is a tie (6 wins); static (4,5)->{7:1} weighs 7 by 100 => 7.
    ctx = cache(([4, 5], {6: 2, 7: 2}))
    assert draft([4, 5], context=ctx, n=1) == [6]
    assert draft([4, 5], context=ctx, static=cache(([4, 5], {7: 1})), n=1) == [7]


def test_static_only():
    # Static alone needs 2 samples and 50% on the 2-gram; drafting continues from drafted tokens.
    assert draft([4, 5], static=cache(([4, 5], {7: 1}))) == []
    assert draft([4, 5], static=cache(([4, 5], {7: 2, 8: 1}))) == [7]
    chain = cache(([4, 5], {7: 2}), ([5, 7], {1: 3}))
    assert draft([4, 5], static=chain) == [7, 1]


def test_short_input_and_n_draft():
    # Fewer than 2 tokens: nothing. n_draft caps the loop.
    loop = cache(([1], {1: 5}))
    assert draft([1], context=loop) == []
    assert draft([1, 1], context=loop, n=3) == [1, 1, 1]


def test_drafter_learns_into_dynamic_at_next_begin():
    # Request 1 on slot 0 sees 5->6 twice; only after begin() of request 2 does the dynamic
    # cache hold it (and slot 1, with an empty context, can use it: 5->6 x2 ... strict needs 4).
    d = NgramCacheDrafter()
    d.begin(0, [5, 6, 5, 6, 5, 6, 5, 6, 9])
    assert d.dynamic.n_ngrams == 0
    assert d.draft(0, [5, 6, 5, 6, 5, 6, 5, 6, 9], 5, 8)[:1] == [6]
    d.begin(0, [1])
    assert d.dynamic.get(make_ngram([5]))[6] == 4
    d.begin(1, [3, 3])
    assert d.draft(1, [3, 3], 5, 1) == [6]


def test_sources_say_which_cache_gave_each_token():
    # 5 -> 6 from the context cache, then 6 -> 7 only in the dynamic one, then 7 -> 1 from static.
    ctx, dyn, static = cache(([5], {6: 2})), cache(([6], {7: 4})), cache(([6, 7], {1: 2}))
    sources = []
    assert cache_draft([9, 5], 8, ctx, dyn, static, sources=sources) == [6, 7, 1]
    assert sources == ["context", "dynamic", "static"]


def test_drafter_tags_a_draft_by_the_cache_of_its_first_token():
    # The chain learns this request's n-grams and earlier requests' apart (draft_tag).
    d = NgramCacheDrafter()
    d.begin(0, [5, 6, 5, 6, 5, 6, 5, 6, 9])
    assert d.draft_tag(0) == ""
    assert d.draft(0, [5, 6, 5, 6, 5, 6, 5, 6, 9], 5, 8)[:1] == [6]
    assert d.draft_tag(0) == "context"
    d.begin(0, [1])  # the dynamic cache learns request 1; slot 1 only knows it from there
    d.begin(1, [3, 3])
    assert d.draft(1, [3, 3], 5, 1) == [6] and d.draft_tag(1) == "dynamic"
    assert d.draft(1, [3, 3, 5, 6], 8, 1) == [] and d.draft_tag(1) == ""


def test_drafter_counts_stream_incrementally_and_honours_n_max():
    # history + [last] is counted once, across calls; n_max cuts the default 8.
    d = NgramCacheDrafter(NgramCacheConfig())
    d.begin(0, [1, 2, 3])
    d.draft(0, [1, 2, 3], 1, 8)
    d.draft(0, [1, 2, 3, 1, 2], 3, 8)
    whole = NgramCache()
    whole.update([1, 2, 3, 1, 2, 3], 1, 4)
    assert d.slots[0].context == whole
    assert len(d.draft(0, [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3], 1, 2)) == 2
