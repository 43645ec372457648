"""The short-match index (ngram-mod's cold fallback) against a backward scan, as the history grows."""

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from ngram.short_match import ShortMatchIndex
from tests.ngram.reference_impl import short_match_draft

# A tiny alphabet, so short random sequences repeat themselves often.
TOKENS = st.lists(st.integers(0, 3), max_size=60)
# Upper bound on one draft call on a 32k-token history (typically a few µs; generous for a busy CI).
AMORTISED_BUDGET_S = 1e-3


def test_hand_written_repeats():
    idx = ShortMatchIndex(2)
    # The latest earlier [1, 2] wins (at 4, not 0); its continuation is capped by n_max.
    # A continuation that reaches the end of the text copies on at the same distance (period 4).
    assert idx.draft([1, 2, 7, 8, 1, 2, 9, 5, 1], 2, 8) == [9, 5, 1, 2, 9, 5, 1, 2]
    assert idx.draft([1, 2, 7, 8, 1, 2, 9, 5, 1], 2, 1) == [9]
    # Overlapping occurrence: in [5, 5, 5] + [5] the suffix [5, 5] last occurred at 1, followed by
    # the last token itself (the continuation runs into the suffix and ends with it), then on.
    assert ShortMatchIndex(2).draft([5, 5, 5], 5, 8) == [5] * 8
    # The suffix never matches itself; too short a history gives nothing.
    assert ShortMatchIndex(2).draft([1, 2, 3], 4, 8) == []
    assert ShortMatchIndex(3).draft([1, 2], 1, 8) == []
    assert ShortMatchIndex(1).draft([4, 6], 4, 8) == [6, 4] * 4
    assert ShortMatchIndex(2).draft([1, 2, 1], 2, 0) == []


@settings(max_examples=300, deadline=None)
@given(tokens=TOKENS, n=st.integers(1, 4), n_max=st.integers(1, 6))
def test_every_step_of_a_growing_history_matches_the_scan(tokens, n, n_max):
    idx = ShortMatchIndex(n)
    for size in range(len(tokens)):
        history, last = tokens[:size], tokens[size]
        assert idx.draft(history, last, n_max) == short_match_draft(history, last, n, n_max), size


@settings(max_examples=200, deadline=None)
@given(first=TOKENS, second=TOKENS, n=st.integers(1, 3), step=st.integers(1, 5))
def test_a_history_that_shrinks_or_changes_is_indexed_anew(first, second, n, step):
    # Growth in jumps of `step` tokens, then an unrelated history (shorter, longer or the same
    # length), passed with and without rebuild() (a new request's begin()).
    for rebuild in (False, True):
        idx = ShortMatchIndex(n)
        for stream in (first, second):
            if rebuild:
                idx.rebuild(stream[:1])
            for size in range(0, len(stream) - 1, step):
                history, last = stream[:size], stream[size]
                assert idx.draft(history, last, 4) == short_match_draft(history, last, n, 4)


def test_rebuild_forgets_the_old_history():
    idx = ShortMatchIndex(2)
    idx.rebuild([1, 2, 3, 9])
    assert idx.draft([1, 2, 3, 9, 1], 2, 4) == [3, 9, 1, 2]
    idx.rebuild([7, 8])
    assert idx.draft([7, 8, 1], 2, 4) == [] and idx.size == 3


def test_a_history_replaced_without_rebuild_is_caught_by_its_first_or_last_token():
    idx = ShortMatchIndex(2)
    # Each time a stale index would still know the suffix (and draft what followed it there).
    assert idx.draft([1, 2, 3, 1], 2, 4) == [3, 1, 2, 3]
    assert idx.draft([9, 9, 9, 9, 1], 2, 4) == []  # longer, other first token: [1, 2] is gone
    assert idx.draft([9, 5, 1, 8, 9], 1, 4) == []  # same length, other last token: [9, 1] is gone


def test_draft_calls_on_a_long_history_index_only_the_new_tokens():
    # 32k tokens indexed once; then each call indexes the one token appended since the last call,
    # so 200 calls cost well under 1 ms each (a rescan of the history would cost milliseconds each).
    history = [(i * 7919) % 1000 for i in range(32768)]
    idx = ShortMatchIndex(8)
    idx.rebuild(history)
    t0 = time.perf_counter()
    for t in range(200):
        idx.draft(history, t, 16)
        history.append(t)
    assert (time.perf_counter() - t0) / 200 < AMORTISED_BUDGET_S
    assert idx.size == len(history) - 1
