"""ngram-simple: worked examples pinning llama.cpp's rules, plus a cross-check against a naive scan."""

import random

from reference_impl import simple_draft

from ngram.map_state import NgramMapConfig
from ngram.simple import NgramSimple


def drafter(n=2, m=2):
    return NgramSimple(NgramMapConfig(size_n=n, size_m=m))


def test_latest_occurrence_wins():
    # [1,2] occurs at j=1 (then 7,8) and j=5 (then 5,6): the later one is drafted.
    h = [0, 1, 2, 7, 8, 1, 2, 5, 6, 3, 4, 9, 1]
    d = drafter()
    d.begin(0, h)
    assert d.draft(0, h, 2, 16) == [5, 6]


def test_index_zero_never_matches():
    # The only earlier [1,2] starts at index 0, which llama.cpp's scan never visits.
    h = [1, 2, 5, 6, 3, 4, 9, 1]
    assert drafter().draft(0, h, 2, 16) == []


def test_too_close_latest_match_blocks_older_one():
    # Latest [5,5] is at j=L-n-1 so only 1 token could be copied (< n): no draft, although the
    # older occurrence at j=1 would have offered [1,2].
    h = [7, 5, 5, 1, 2, 3, 5, 5, 5]
    assert drafter().draft(0, h, 5, 16) == []


def test_needs_more_than_n_plus_m_plus_one_tokens():
    # L = 5 = n+m+1: no draft even though [1,2] matches at j=1; one token more and it drafts.
    d = drafter()
    assert d.draft(0, [9, 1, 2, 3, 1], 2, 16) == []
    assert d.draft(0, [9, 1, 2, 3, 4, 1], 2, 16) == [3, 4]


def test_copy_capped_by_m_and_n_max():
    # m = 3 caps the copy at 3 tokens; n_max = 2 cuts it further.
    h = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1]
    d = drafter(n=2, m=3)
    assert d.draft(0, h, 2, 16) == [3, 4, 5]
    assert d.draft(0, h, 2, 2) == [3, 4]


def test_growing_history_and_new_prompt():
    # Incremental indexing: a match created by appended tokens is found; a new, different
    # prompt through begin() forgets the old history.
    d = drafter()
    h = [0, 4, 4, 4, 4, 4, 1, 2, 8, 9]
    d.begin(0, h)
    assert d.draft(0, h, 3, 8) == []
    h = h + [3, 1]
    assert d.draft(0, h, 2, 8) == [8, 9]
    d.begin(0, [5, 5, 5, 5, 5, 5, 5])
    assert d.draft(0, [5, 5, 5, 5, 5, 5, 5, 1], 2, 8) == []


def test_matches_naive_scan_on_random_histories():
    # Cross-check the hash index against llama.cpp's backward scan (small vocab => many matches).
    rng = random.Random(1)
    for n, m in ((1, 1), (2, 3), (3, 2), (4, 6)):
        d = drafter(n, m)
        h = [rng.randrange(4) for _ in range(30)]
        d.begin(0, h)
        for _ in range(300):
            last = rng.randrange(4)
            assert d.draft(0, h, last, 64) == simple_draft(h, last, n, m)
            h = h + [last] + [rng.randrange(4) for _ in range(rng.randrange(3))]
