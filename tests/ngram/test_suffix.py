"""The suffix drafter against a brute-force reference: matches, drafts, probability estimates,
the canonical index order, eviction under the budget."""

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ngram import suffix_index
from ngram.suffix import TAG_GLOBAL, TAG_LOCAL, SuffixConfig, SuffixDrafter
from ngram.suffix_local import LocalIndex
from ngram.suffix_store import EVICT_TO, SuffixStore
from ngram.suffix_walk import walk
from tests.ngram import suffix_reference as ref

BIG = 1 << 30  # a budget nothing here reaches
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Tiny vocabularies: 3 tokens repeat everything, 12 make matches rarer and shorter.
tokens_small = st.lists(st.integers(0, 2), max_size=40)
tokens_wide = st.lists(st.integers(0, 11), max_size=40)
request_lists = st.lists(st.one_of(tokens_small, tokens_wide), max_size=6)
knobs = st.tuples(
    st.integers(1, 6),  # depth
    st.integers(1, 8),  # n_max
    st.sampled_from([0.5, 1.0, 2.0, 3.5]),  # factor
    st.sampled_from([0.0, 0.1, 0.3, 0.6]),  # min_prob
)


def encode_context(context, depth):
    tail = context[len(context) - min(depth, len(context)) :]
    return b"".join((t + 1).to_bytes(4, "big") for t in tail)


def assert_same_index(a, b):
    assert np.array_equal(a.index.vals, b.index.vals)
    assert np.array_equal(a.index.sa, b.index.sa)
    assert np.array_equal(a.index.lcp, b.index.lcp)
    assert a.index.raw == b.index.raw
    assert list(a.lengths) == list(b.lengths)


def continuing(requests, context, cut):
    """Often a context that continues a stored request (long matches): its first ``cut`` tokens
    (modulo its length), then two of ``context``."""
    if requests and requests[0]:
        return requests[0][: cut % (len(requests[0]) + 1)] + context[:2]
    return context


def filled_store(requests, span, max_bytes=BIG):
    store = SuffixStore(span, max_bytes)
    for r in requests:
        store.add(r)
    return store


# --- the index ---------------------------------------------------------------------------------


@SETTINGS
@given(request_lists, st.integers(1, 12), st.booleans())
def test_inserting_requests_gives_the_sorted_index(requests, span, merge):
    with pytest.MonkeyPatch.context() as mp:
        if merge:  # the numpy merge instead of inserts one by one
            mp.setattr(suffix_index, "ONE_BY_ONE_MOVES", 0)
        store = filled_store(requests, span)
    assert_same_index(store, SuffixStore.from_requests(span, BIG, requests))
    # The order: windows (a separator ends one), then position; LCPs of neighbours.
    vals, sa = store.index.vals.tolist(), store.index.sa.tolist()

    def window(p):
        w = vals[p : p + span]
        return w[: w.index(0)] if 0 in w else w

    keys = [(window(p) + [-1], p) for p in sa]  # -1: the end of a window sorts first
    assert keys == sorted(keys)
    for i in range(1, len(sa)):
        a, b = window(sa[i - 1]), window(sa[i])
        common = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        assert store.index.lcp[i] == common


@SETTINGS
@given(st.lists(st.integers(0, 3), max_size=200), st.integers(1, 10), st.integers(0, 200), st.booleans())
def test_local_index_grown_equals_one_built_at_once(history, span, cut, merge):
    grown = LocalIndex(span, depth=1)
    grown.reset(history[:cut])
    with pytest.MonkeyPatch.context() as mp:
        if merge:
            mp.setattr(suffix_index, "ONE_BY_ONE_MOVES", 0)
        for end in range(cut, len(history) + 1, 7):
            grown.sync(history[:end])
        grown.sync(history)
    n = grown.n_done
    assert n == max(0, len(history) - span + 1)
    fresh = LocalIndex(span, depth=1)
    fresh.reset(history[: n + span - 1] if n else [])
    assert fresh.n_done == n
    assert np.array_equal(grown.index.sa, fresh.index.sa)
    assert np.array_equal(grown.index.lcp, fresh.index.lcp)


# --- drafts against the reference --------------------------------------------------------------


@SETTINGS
@given(request_lists, st.one_of(tokens_small, tokens_wide), knobs, st.integers(0, 40))
def test_global_draft_equals_reference(requests, context, knob, cut):
    depth, n_max, factor, min_prob = knob
    context = continuing(requests, context, cut)
    if not context:
        return
    store = filled_store(requests, depth + n_max)
    got = store.draft(encode_context(context, depth), len(context), depth, n_max, factor, min_prob)
    assert got == ref.draft([r for r in requests if r], context, depth, n_max, factor, min_prob)


@SETTINGS
@given(st.one_of(st.lists(st.integers(0, 2), min_size=1, max_size=160), st.lists(st.integers(0, 9), min_size=1, max_size=160)),
       knobs, st.integers(0, 160))
def test_local_draft_equals_reference(context, knob, split):
    depth, n_max, factor, min_prob = knob
    history, last = context[:-1], context[-1]
    local = LocalIndex(depth + n_max, depth)
    local.reset(history[: split % (len(history) + 1)])
    local.sync(history)
    got = local.draft(last, encode_context(context, depth), n_max, factor, min_prob)
    assert got == ref.draft([context], context, depth, n_max, factor, min_prob)


def test_walk_probabilities_by_hand():
    # After [1]: 2 follows three times, 3 once; after [1, 2]: 4 twice, 5 once.
    store = filled_store([[1, 2, 4], [1, 2, 4], [1, 2, 5], [1, 3]], span=8)
    m, tokens, probs = store.draft(encode_context([1], 4), 1, 4, 4, 4.0, 0.0)
    assert (m, tokens) == (1, [2, 4])
    assert probs == [0.75, 0.75 * (2 / 3)]
    # min_prob cuts before the token whose estimate falls below it.
    assert store.draft(encode_context([1], 4), 1, 4, 4, 4.0, 0.6)[1] == [2]
    # factor: match length 1 x 1.0 allows one token.
    assert store.draft(encode_context([1], 4), 1, 4, 4, 1.0, 0.0)[1] == [2]


def test_a_match_of_the_full_depth_is_censored_so_only_n_max_bounds_its_draft():
    # A passage seen once: after a match of depth 2 (x factor 1.0 = 2 tokens) the draft goes on to
    # n_max, because the context may agree for much longer than the depth looked at.
    store = filled_store([[1, 2, 3, 4, 5, 6, 7]], span=8)
    assert store.draft(encode_context([1, 2], 2), 2, 2, 5, 1.0, 0.0)[:2] == (2, [3, 4, 5, 6, 7])
    # A shorter match than the depth is bounded by match x factor as before.
    assert store.draft(encode_context([9, 2], 3), 2, 3, 5, 1.0, 0.0)[:2] == (1, [3])


def test_the_worked_example_of_the_docs():
    x, q, a, b, c, d, e, y = range(8)
    store = filled_store([[x, a, b, c, d], [a, b, c, d, y], [a, b, c, e]], span=8)
    m, tokens, probs = store.draft(encode_context([q, a, b, c], 4), 4, 4, 4, 1.0, 0.1)
    assert (m, tokens, probs) == (3, [d, y], [2 / 3, 2 / 3])


def test_ends_of_requests_and_the_context_itself_are_no_occurrences():
    store = filled_store([[7, 8], [5, 7]], span=6)  # 7 ends the second request
    assert store.draft(encode_context([7], 3), 1, 3, 3, 3.0, 0.0) == (1, [8], [1.0])
    local = LocalIndex(6, 3)
    local.reset([4, 5, 6, 9])
    # The context [4 5 6 9 | 5 6] matches [5 6] once, at 1 (not itself at 4).
    local.sync([4, 5, 6, 9, 5])
    assert local.draft(6, encode_context([4, 5, 6, 9, 5, 6], 3), 3, 3.0, 0.0) == (2, [9, 5, 6], [1.0] * 3)


def test_a_tie_goes_to_the_smallest_token():
    store = filled_store([[1, 9], [1, 3]], span=4)
    assert store.draft(encode_context([1], 2), 1, 2, 2, 2.0, 0.0)[1:] == ([3], [0.5])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), knobs, st.booleans())
def test_drafter_equals_reference_over_requests(rnd, knob, learn_prompts):
    depth, n_max, factor, min_prob = knob
    config = SuffixConfig(depth=depth, n_max=n_max, factor=factor, min_prob=min_prob, learn_prompts=learn_prompts)
    drafter = SuffixDrafter(config)
    reference = ref.RefSuffixDrafter(depth, n_max, factor, min_prob, learn_prompts)
    motifs = [[rnd.randrange(6) for _ in range(rnd.randint(2, 9))] for _ in range(3)]

    def text(n):  # repeats motifs, with noise
        out = []
        while len(out) < n:
            out += rnd.choice(motifs) if rnd.random() < 0.7 else [rnd.randrange(6)]
        return out[:n]

    for _ in range(5):
        slot = rnd.randrange(2)
        prompt = text(rnd.randint(0, 70))
        drafter.begin(slot, prompt)
        reference.begin(slot, prompt)
        stream = prompt + text(rnd.randint(1, 90))
        pos = len(prompt)
        while pos < len(stream):
            n_call = rnd.choice([n_max, max(1, n_max // 2), 0])
            history, last = stream[:pos], stream[pos]
            got = drafter.draft(slot, history, last, n_call)
            tag, tokens, probs = reference.draft(slot, history, last, n_call)
            assert (drafter.draft_tag(slot), got, drafter.draft_probs(slot)) == (tag, tokens, probs)
            accepted = 0
            while accepted < len(got) and pos + 1 + accepted < len(stream) and got[accepted] == stream[pos + 1 + accepted]:
                accepted += 1
            drafter.accept(slot, accepted, False)
            pos += 1 + accepted
    assert drafter.store.requests() == reference.requests


def test_drafter_prefers_the_better_structure_and_tags_it():
    drafter = SuffixDrafter(SuffixConfig(depth=4, n_max=8, factor=2.0, min_prob=0.0))
    drafter.begin(0, [1, 2, 3, 4, 5, 6])
    assert drafter.draft(0, [1, 2, 3, 4, 5, 6], 7, 8) == [] and drafter.draft_tag(0) == ""
    drafter.begin(0, [9])  # stores [7], the output of the request before
    drafter.draft(0, [9, 1, 2, 3, 4, 5, 6, 7], 8, 8)
    drafter.finish(0)  # stores [1 .. 8]
    assert drafter.store.requests() == [[7], [1, 2, 3, 4, 5, 6, 7, 8]]
    drafter.begin(1, [1, 2])
    assert drafter.draft(1, [1, 2], 3, 8) == [4, 5, 6, 7, 8] and drafter.draft_tag(1) == TAG_GLOBAL
    assert drafter.draft_probs(1) == [1.0] * 5
    drafter.begin(2, [20, 21, 0, 20])
    assert drafter.draft(2, [20, 21, 0, 20], 21, 8) == [0, 20, 21] and drafter.draft_tag(2) == TAG_LOCAL
    # Local [0 3 4] (3 expected tokens) loses to global [5 6 7 8] (4).
    drafter.begin(3, [3, 4, 0, 3])
    assert drafter.draft(3, [3, 4, 0, 3], 4, 8) == [5, 6, 7, 8] and drafter.draft_tag(3) == TAG_GLOBAL


def test_context_shift_rebuilds_the_local_index():
    drafter = SuffixDrafter(SuffixConfig(depth=3, n_max=4))
    drafter.begin(0, [1, 2, 3, 1, 2])
    assert drafter.draft(0, [1, 2, 3, 1, 2], 3, 4) == [1, 2, 3]
    # Tokens removed from the middle: the history did not just grow.
    assert drafter.draft(0, [1, 5, 6, 5], 6, 4) == [5, 6]
    assert drafter.slots[0].local.tokens == [1, 5, 6, 5]


# --- eviction ----------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=30), max_size=25), st.integers(200, 2000),
       st.integers(1, 8))
def test_eviction_keeps_the_budget_and_equals_a_store_of_the_rest(requests, budget, span):
    store = SuffixStore(span, budget)
    for r in requests:
        store.add(r)
        assert store.memory_bytes <= budget
    kept = store.requests()
    assert_same_index(store, SuffixStore.from_requests(span, BIG, kept))
    fitting = [r for r in requests if r and store.cost(len(r)) <= budget]
    # The newest requests survive, in order, and at least all that fit the evicted share.
    assert kept == fitting[len(fitting) - len(kept) :]
    if fitting and kept != fitting:
        dropped = fitting[len(fitting) - len(kept) - 1]
        assert store.memory_bytes + store.cost(len(dropped)) > EVICT_TO * budget


def test_a_request_larger_than_the_budget_is_not_stored():
    store = SuffixStore(4, 200)
    assert store.add([1] * 5)
    assert not store.add(list(range(100)))
    assert store.requests() == [[1] * 5]


def test_walk_stops_at_limit_and_with_no_cursor():
    assert walk([], 5, 0.0) == ([], [])


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [dict(depth=0), dict(depth=255), dict(n_max=0), dict(depth=200, n_max=60), dict(min_prob=1.5),
     dict(min_prob=-0.1), dict(factor=0.0), dict(max_mb=0.0), dict(max_mb=1e9)],
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        SuffixConfig(**kwargs)


def test_config_defaults_follow_the_issue():
    c = SuffixConfig()
    assert (c.depth, c.min_prob, c.factor, c.max_mb, c.n_max, c.learn_prompts) == (24, 0.1, 1.0, 256.0, 64, False)
    assert c.span == 88 and c.max_bytes == 256 << 20


def test_store_span_must_match_the_config():
    with pytest.raises(ValueError, match="span"):
        SuffixDrafter(SuffixConfig(depth=4, n_max=4), store=SuffixStore(9, BIG))


def test_a_large_random_corpus_matches_the_reference_on_samples():
    rnd = random.Random(5)
    requests = [[rnd.randrange(8) for _ in range(rnd.randint(50, 300))] for _ in range(12)]
    store = filled_store(requests, span=12)
    for _ in range(40):
        r = rnd.choice(requests)
        cut = rnd.randint(1, len(r))
        context = r[:cut] + [rnd.randrange(8) for _ in range(rnd.randint(0, 2))]
        got = store.draft(encode_context(context, 6), len(context), 6, 6, 2.0, 0.05)
        assert got == ref.draft(requests, context, 6, 6, 2.0, 0.05)


def test_lcp_stops_at_a_separator_not_at_zero_bytes_across_values():
    # Values 0x100 then 0x1 are bytes 00 00 01 00 00 00 00 01: four zero bytes, not aligned.
    store = filled_store([[255, 0, 7], [255, 0, 7]], span=5)
    assert store.index.lcp.tolist()[1:].count(3) == 1  # the two [255 0 7] windows share 3 tokens
    assert_same_index(store, SuffixStore.from_requests(5, BIG, [[255, 0, 7], [255, 0, 7]]))


def test_finish_learns_the_whole_request_including_the_last_step():
    d = SuffixDrafter(SuffixConfig(depth=4, n_max=8))
    prompt = [1, 2, 3]
    d.begin(0, prompt)
    d.draft(0, prompt, 10, 8)  # the last draft call saw the output up to 10
    final = prompt + [10, 11, 12, 13]  # the last step accepted 11, 12 and sampled 13
    d.finish(0, final)
    assert d.store.requests() == [[10, 11, 12, 13]]
    d.finish(0, final)  # a second finish has nothing left to learn
    assert d.store.requests() == [[10, 11, 12, 13]]
    d.begin(1, [7, 8])
    d.finish(1, [7, 8, 9])  # no draft call at all: the output is still learned
    assert d.store.requests() == [[10, 11, 12, 13], [9]]


def test_finish_after_the_history_was_replaced_learns_what_the_drafter_saw():
    d = SuffixDrafter(SuffixConfig(depth=4, n_max=8))
    d.begin(0, [1, 2, 3])
    d.draft(0, [1, 2, 3, 4], 5, 8)
    d.finish(0, [9, 9])  # not the history the slot started with: fall back to the drafter's view
    assert d.store.requests() == [[4, 5]]


def test_finished_output_drafts_for_another_slot_at_once():
    d = SuffixDrafter(SuffixConfig(depth=4, n_max=8))
    d.begin(0, [1, 2])
    d.finish(0, [1, 2, 20, 21, 22, 23, 24])
    d.begin(1, [5, 6])  # slot 1, another prompt; its output starts like slot 0's
    assert d.draft(1, [5, 6, 20], 21, 8) == [22, 23]  # match [20, 21]: 2 tokens x factor 1
    assert d.draft_tag(1) == TAG_GLOBAL
