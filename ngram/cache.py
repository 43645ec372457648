"""ngram-cache: lookup decoding from three n-gram caches (context, dynamic, static).

After llama.cpp ``common_ngram_cache_draft`` (``common/ngram-cache.cpp``) and
``common_speculative_impl_ngram_cache`` (``common/speculative.cpp``). Each draft token is taken
from the first cache that is confident enough: the slot's **context** cache (n-grams of this
request, lax thresholds), then the shared **dynamic** cache (earlier requests, strict
thresholds), then the read-only **static** corpus cache (2-grams). Context/dynamic candidates are
weighted by the static counts (x100 if the static 2-gram saw the token).

Differences from llama.cpp, on purpose:

* the context cache counts n-grams that span the boundary between two draft calls (llama.cpp's
  impl only counts inside each new chunk);
* the dynamic cache is shared by all slots and learns at ``begin()`` of the next request on a
  slot (the slot's previous context cache is merged into it); llama.cpp's server never learns;
* the dynamic cache is bounded: ``NgramCacheConfig.dynamic_max_bytes`` (a ``BoundedNgramCache``,
  eviction rule in ``ngram/cache_data.py``); llama.cpp's grows without bound;
* ties between equally scored tokens go to the token inserted first (llama.cpp: unspecified
  ``unordered_map`` order); n-gram sizes longer than the sequence are skipped (llama.cpp reads
  out of bounds); thresholds are indexed by n-gram size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ngram.cache_data import (
    NGRAM_MAX,
    NGRAM_MIN,
    NGRAM_STATIC,
    BoundedNgramCache,
    Ngram,
    NgramCache,
    make_ngram,
    ngram_size,
)

__all__ = ["NgramCache", "NgramCacheConfig", "NgramCacheDrafter", "cache_draft"]

# Which cache gave a draft token (NgramCacheDrafter.draft_tag: of the first one).
SOURCE_CONTEXT, SOURCE_DYNAMIC, SOURCE_STATIC = "context", "dynamic", "static"
SOURCES = (SOURCE_CONTEXT, SOURCE_DYNAMIC, SOURCE_STATIC)

# Thresholds indexed by n-gram size - 1: minimum sample size and minimum share (%) of the best token.
MIN_SAMPLE_LAX = (2, 2, 1, 1)
MIN_PERCENT_LAX = (66, 50, 50, 50)
MIN_SAMPLE_STRICT = (4, 3, 2, 2)
MIN_PERCENT_STRICT = (75, 66, 66, 66)
STATIC_WEIGHT = 100  # a candidate seen after the static 2-gram weighs 100 x its static count
N_DRAFT = 8  # llama.cpp's server hard-codes the ngram-cache draft length
# Default memory budget of the dynamic cache: ~130k n-grams at the estimated ~510 B each (the
# n-grams of ~45k tokens of fresh text; repeated text adds far fewer), small next to a model's
# weights and KV cache.
DYNAMIC_MAX_BYTES = 64 * 1024 * 1024


def try_draft_primary(
    primary: NgramCache,
    ngrams: Sequence[Ngram],
    part_static: dict[int, int],
    min_sample: Sequence[int],
    min_percent: Sequence[int],
) -> int | None:
    """Largest n-gram first: the best-scoring follower, if its n-gram passes the thresholds."""
    for ngram in reversed(ngrams):
        part = primary.parts.get(ngram)
        if part is None:
            continue
        best_token, best_count, best_score, total = None, 0, 0, 0
        for token, count in part.items():
            static = part_static.get(token)
            score = count * (STATIC_WEIGHT * static if static is not None else 1)
            if score > best_score:
                best_token, best_count, best_score = token, count, score
            total += count
        i = _size_index(ngram)
        if total < min_sample[i] or 100 * best_count < min_percent[i] * total:
            continue
        return best_token
    return None


def _size_index(ngram: Ngram) -> int:
    return ngram_size(ngram) - 1


def try_draft_static(part_static: dict[int, int]) -> int | None:
    """Static cache alone: its most frequent follower, with the lax 2-gram thresholds."""
    best_token, best_count, total = None, 0, 0
    for token, count in part_static.items():
        if count > best_count:
            best_token, best_count = token, count
        total += count
    i = NGRAM_STATIC - 1
    if total < MIN_SAMPLE_LAX[i] or 100 * best_count < MIN_PERCENT_LAX[i] * total:
        return None
    return best_token


def cache_draft(
    inp: Sequence[int],
    n_draft: int,
    context: NgramCache,
    dynamic: NgramCache,
    static: NgramCache,
    nmin: int = NGRAM_MIN,
    nmax: int = NGRAM_MAX,
    sources: list[str] | None = None,
) -> list[int]:
    """Up to ``n_draft`` tokens continuing ``inp`` (which ends with the last sampled token);
    ``sources``, if given, gets which cache gave each token (``SOURCES``)."""
    if len(inp) < NGRAM_STATIC:
        return []
    tail = list(inp[-NGRAM_MAX:])  # only the last NGRAM_MAX tokens are ever looked at
    n_seq = len(inp)
    draft: list[int] = []
    while len(draft) < n_draft:
        part_static = static.parts.get(make_ngram(tail[-NGRAM_STATIC:])) or {}
        ngrams = [make_ngram(tail[-s:]) for s in range(nmin, min(nmax, n_seq) + 1)]
        source = SOURCE_CONTEXT
        token = try_draft_primary(context, ngrams, part_static, MIN_SAMPLE_LAX, MIN_PERCENT_LAX)
        if token is None:
            source = SOURCE_DYNAMIC
            token = try_draft_primary(dynamic, ngrams, part_static, MIN_SAMPLE_STRICT, MIN_PERCENT_STRICT)
        if token is None:
            source = SOURCE_STATIC
            token = try_draft_static(part_static)
        if token is None:
            break
        draft.append(token)
        if sources is not None:
            sources.append(source)
        tail = (tail + [token])[-NGRAM_MAX:]
        n_seq += 1
    return draft


@dataclass(frozen=True, slots=True)
class NgramCacheConfig:
    n_draft: int = N_DRAFT  # longest draft (the chain's n_max may cut it further)
    ngram_min: int = NGRAM_MIN
    ngram_max: int = NGRAM_MAX
    dynamic_max_bytes: int = DYNAMIC_MAX_BYTES  # memory budget of the shared dynamic cache

    def __post_init__(self) -> None:
        if not NGRAM_MIN <= self.ngram_min <= self.ngram_max <= NGRAM_MAX:
            raise ValueError(f"n-gram sizes must satisfy {NGRAM_MIN} <= min <= max <= {NGRAM_MAX}")
        if self.n_draft < 0:
            raise ValueError("n_draft must be >= 0")
        if self.dynamic_max_bytes < 1:
            raise ValueError("the dynamic cache's memory budget must be > 0")


@dataclass(slots=True)
class SlotCache:
    tokens: list[int] = field(default_factory=list)  # history + [last token], all counted
    context: NgramCache = field(default_factory=NgramCache)
    tag: str = ""  # which cache gave the last draft's first token (draft_tag)


class NgramCacheDrafter:

    def __init__(
        self,
        config: NgramCacheConfig | None = None,
        static: NgramCache | None = None,
        dynamic: NgramCache | None = None,
    ) -> None:
        self.config = config or NgramCacheConfig()
        self.static = static if static is not None else NgramCache()  # read-only
        self.dynamic = BoundedNgramCache(max_bytes=self.config.dynamic_max_bytes)  # shared by all slots
        if dynamic is not None:
            self.adopt_dynamic(dynamic)
        self.slots: dict[int, SlotCache] = {}

    def adopt_dynamic(self, cache: NgramCache) -> int:
        """Make ``cache`` (e.g. loaded from a file) the dynamic cache, within the memory budget.
        Returns how many n-grams had to be evicted to fit."""
        self.dynamic = BoundedNgramCache(cache.parts, max_bytes=self.config.dynamic_max_bytes)
        return self.dynamic.n_evicted

    def _count(self, st: SlotCache, new_tokens: Sequence[int]) -> None:
        st.tokens.extend(int(t) for t in new_tokens)
        cfg = self.config
        st.context.update(st.tokens, cfg.ngram_min, cfg.ngram_max, len(new_tokens))

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        old = self.slots.get(slot)
        if old is not None:
            self.dynamic.merge(old.context)  # learn from the slot's previous request
        st = self.slots[slot] = SlotCache()
        self._count(st, prompt)

    def draft(self, slot: int, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        st = self.slots.get(slot)
        if st is None:
            st = self.slots[slot] = SlotCache()
        n_old = len(st.tokens)
        if len(history) < n_old or (n_old and history[n_old - 1] != st.tokens[n_old - 1]):
            # The history did not grow from what was counted: recount it from scratch.
            st.tokens, st.context = [], NgramCache()
            n_old = 0
        new = list(history[n_old:])
        new.append(int(last_token))
        self._count(st, new)
        cfg = self.config
        n_draft = min(cfg.n_draft, n_max)
        sources: list[str] = []
        out = cache_draft(st.tokens, n_draft, st.context, self.dynamic, self.static, cfg.ngram_min, cfg.ngram_max,
                          sources)
        st.tag = sources[0] if sources else ""
        return out

    def draft_tag(self, slot: int) -> str:
        """Which cache gave the first token of the slot's last draft (``SOURCES``), "" for none:
        this request's own n-grams and earlier requests' are right at very different rates (a
        dynamic cache filled on one workload drafts confidently wrong at the start of another),
        so the chain learns their acceptance apart."""
        st = self.slots.get(slot)
        return st.tag if st is not None else ""

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        return  # llama.cpp's ngram-cache does not adapt to acceptance

    def learned(self) -> NgramCache:
        """The dynamic cache plus what the slots have seen so far (a copy: nothing is counted twice)."""
        out = self.dynamic.copy()
        for st in self.slots.values():
            out.merge(st.context)
        return out

    def size_bytes(self) -> int:
        ctx = sum(st.context.size_bytes() + 8 * len(st.tokens) for st in self.slots.values())
        return ctx + self.dynamic.size_bytes() + self.static.size_bytes()
