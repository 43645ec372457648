"""The dynamic n-gram cache's memory bound: an honest estimate, a bound kept, the useful n-grams kept.

Memory is measured with tracemalloc (what CPython allocated for the cache and nothing else) and
compared with ``size_bytes()``, the estimate the eviction works from.
"""

import gc
import tracemalloc

import numpy as np
import pytest

from ngram.cache import NgramCacheConfig, NgramCacheDrafter, cache_draft
from ngram.cache_data import EVICT_TO_FRACTION, BoundedNgramCache, NgramCache, make_ngram
from ngram.cachefile import decode_llamacpp, encode_llamacpp

MIB = 1024 * 1024


def zipf_tokens(n: int, seed: int) -> list[int]:
    """Text-like token ids: Zipf-distributed, all above 256 (outside CPython's small-int cache)."""
    z = np.random.default_rng(seed).zipf(1.2, size=n)
    return [int(t) % 50_000 + 300 for t in z]


def measured_bytes(build):
    """(result, bytes CPython holds for it once everything else ``build`` allocated is freed)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = build()
        gc.collect()
        return result, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def learned(n_tokens: int, seed: int = 1) -> NgramCache:
    c = NgramCache()
    c.update(zipf_tokens(n_tokens, seed), 1, 4)
    return c


@pytest.mark.parametrize("how", ["learned", "loaded"])
def test_estimate_is_an_upper_bound_near_the_measured_memory(how):
    data = encode_llamacpp(learned(20_000)) if how == "loaded" else None
    cache, n_bytes = measured_bytes(lambda: learned(20_000) if data is None else decode_llamacpp(data))
    estimate = cache.size_bytes()
    per_ngram = n_bytes / cache.n_ngrams
    print(f"{how}: {cache.n_ngrams} n-grams, {cache.n_entries} entries, measured {n_bytes} B "
          f"({per_ngram:.0f} B per n-gram), estimated {estimate} B")
    assert n_bytes <= estimate
    assert n_bytes >= 0.6 * estimate  # an upper bound, not a wild one


def test_memory_stays_under_the_budget_while_learning():
    budget = 2 * MIB
    n_requests = 30
    added = []  # estimated bytes of each request's context cache

    def build():
        cache = BoundedNgramCache(max_bytes=budget)
        for seed in range(n_requests):  # as the drafter learns: each request's context merged in
            ctx = NgramCache()
            ctx.update(zipf_tokens(300, seed), 1, 4)
            added.append(ctx.size_bytes())
            cache.merge(ctx)
            assert cache.size_bytes() <= budget
            assert cache.n_entries == sum(map(len, cache.parts.values()))
        return cache

    cache, n_bytes = measured_bytes(build)
    print(f"{cache.n_ngrams} n-grams kept, {cache.n_evicted} evicted in {cache.n_eviction_passes} passes "
          f"over {n_requests} merges, measured {n_bytes} B, estimated {cache.size_bytes()} B, budget {budget} B")
    assert cache.n_evicted > 0
    assert n_bytes <= budget
    # Each pass frees down to EVICT_TO_FRACTION of the budget, so a pass needs a quarter of the
    # budget learned anew first: passes are amortised over many updates.
    assert max(added) < (1 - EVICT_TO_FRACTION) * budget
    assert cache.n_eviction_passes <= sum(added) / ((1 - EVICT_TO_FRACTION) * budget)
    assert cache.n_eviction_passes < n_requests / 2


def test_update_is_bounded_too():
    cache = BoundedNgramCache(max_bytes=MIB)
    tokens = zipf_tokens(20_000, 3)
    for i in range(0, len(tokens), 500):
        cache.update(tokens[: i + 500], 1, 4, n_new=500)
        assert cache.size_bytes() <= MIB
    assert cache.n_evicted > 0 and cache.n_entries == sum(map(len, cache.parts.values()))


def test_eviction_keeps_the_most_useful_ngrams_and_drops_the_oldest_of_the_least_useful():
    cache = BoundedNgramCache(max_bytes=MIB)
    frequent = {make_ngram([1000 + i, 7]): {2000 + i: 10} for i in range(200)}
    cache.merge(NgramCache({ng: dict(part) for ng, part in frequent.items()}))
    # Seen 400 times, but with 400 different followers: 32 KB that can never draft.
    thin = make_ngram([3])
    cache.merge(NgramCache({thin: {4000 + i: 1 for i in range(398)} | {9: 2}}))
    rare = [make_ngram([10_000 + i, 9, 9]) for i in range(6_000)]  # seen once each, in this order
    for i in range(0, len(rare), 200):
        cache.merge(NgramCache({ng: {5: 1} for ng in rare[i : i + 200]}))
        assert cache.size_bytes() <= MIB
    assert cache.n_evicted > 0
    for ng, part in frequent.items():  # learned first, but most useful: all kept, counts intact
        assert cache.get(ng) == part
    assert thin not in cache.parts
    kept = [ng in cache.parts for ng in rare]
    assert not all(kept) and kept[-1]
    first_kept = kept.index(True)  # among equals, the first learned went first
    assert all(kept[first_kept:]) and not any(kept[:first_kept])
    # the kept frequent n-grams still draft from the dynamic cache
    ng = next(iter(frequent))
    draft = cache_draft([ng[0], ng[1]], 1, NgramCache(), cache, NgramCache(), 2, 2)
    assert draft == [next(iter(frequent[ng]))]


def test_drafter_bounds_its_dynamic_cache_learned_and_adopted():
    config = NgramCacheConfig(dynamic_max_bytes=MIB)
    d = NgramCacheDrafter(config)
    for seed in range(8):
        d.begin(0, zipf_tokens(3_000, seed))  # begin merges the previous request's context
        assert isinstance(d.dynamic, BoundedNgramCache) and d.dynamic.size_bytes() <= MIB
    assert d.dynamic.n_evicted > 0

    big = learned(20_000)
    assert big.size_bytes() > MIB
    n_ngrams = big.n_ngrams
    assert d.adopt_dynamic(big) > 0  # e.g. a file saved under a larger budget
    assert d.dynamic.size_bytes() <= MIB and d.dynamic.n_ngrams < n_ngrams
    assert NgramCacheDrafter(config, dynamic=learned(20_000)).dynamic.size_bytes() <= MIB


def test_budget_must_be_positive():
    with pytest.raises(ValueError):
        NgramCacheConfig(dynamic_max_bytes=0)
    with pytest.raises(ValueError):
        BoundedNgramCache(max_bytes=0)
