"""The n-gram cache data structure: n-gram (4 tokens, -1 padded) -> {next token: count}.

After llama.cpp ``common_ngram_cache`` (``common/ngram-cache.{h,cpp}``, lookup decoding). Only the
data structure lives here (update, merge, lookups); the drafting policy is in ``ngram/cache.py``
and the file formats in ``ngram/cachefile.py``.
"""

from __future__ import annotations

from collections import Counter
from itertools import repeat
from typing import Iterable, Sequence

NGRAM_MIN = 1  # LLAMA_NGRAM_MIN
NGRAM_MAX = 4  # LLAMA_NGRAM_MAX: n-grams are stored as 4 tokens
NGRAM_STATIC = 2  # LLAMA_NGRAM_STATIC: the static (corpus) cache uses 2-grams
TOKEN_NULL = -1  # LLAMA_TOKEN_NULL pads n-grams shorter than NGRAM_MAX

Ngram = tuple[int, int, int, int]


def make_ngram(tokens: Sequence[int]) -> Ngram:
    """Pad 1..4 tokens with ``TOKEN_NULL`` to a 4-token n-gram, as ``common_ngram(ptr, size)``."""
    size = len(tokens)
    assert NGRAM_MIN <= size <= NGRAM_MAX
    return tuple(tokens) + (TOKEN_NULL,) * (NGRAM_MAX - size)  # type: ignore[return-value]


def ngram_size(ngram: Ngram) -> int:
    """Number of real tokens (padding is trailing)."""
    size = NGRAM_MAX
    while size > 0 and ngram[size - 1] == TOKEN_NULL:
        size -= 1
    return size


class NgramCache:
    """``parts[ngram][token] = count``: how often ``token`` followed ``ngram``."""

    def __init__(self, parts: dict[Ngram, dict[int, int]] | None = None) -> None:
        self.parts: dict[Ngram, dict[int, int]] = parts if parts is not None else {}

    def __len__(self) -> int:
        return len(self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NgramCache) and self.parts == other.parts

    @property
    def n_ngrams(self) -> int:
        return len(self.parts)

    @property
    def n_entries(self) -> int:
        return sum(len(part) for part in self.parts.values())

    def get(self, ngram: Ngram) -> dict[int, int] | None:
        return self.parts.get(ngram)

    def add_counts(self, items: Iterable[tuple[tuple[Ngram, int], int]]) -> None:
        parts = self.parts
        for (ngram, token), count in items:
            part = parts.get(ngram)
            if part is None:
                parts[ngram] = {token: count}
            else:
                part[token] = part.get(token, 0) + count

    def update(self, tokens: Sequence[int], nmin: int, nmax: int, n_new: int | None = None) -> None:
        """``common_ngram_cache_update``: count, for each size s in [nmin, nmax] and each
        ``i in [max(len - n_new, s), len)``, the n-gram ``tokens[i-s:i]`` followed by ``tokens[i]``.

        ``tokens`` is the whole (append-only) sequence, so n-grams that straddle the boundary of
        the new chunk are counted too.
        """
        tokens = list(tokens)
        size = len(tokens)
        n_new = size if n_new is None else n_new
        for s in range(nmin, nmax + 1):
            start = max(size - n_new, s)
            if start >= size:
                continue
            cols = [tokens[start - s + k : size - s + k] for k in range(s)]
            pads = [repeat(TOKEN_NULL)] * (NGRAM_MAX - s)
            self.add_counts(Counter(zip(zip(*cols, *pads), tokens[start:])).items())

    def merge(self, other: "NgramCache") -> None:
        """``common_ngram_cache_merge``: add every count of ``other`` into this cache."""
        parts = self.parts
        for ngram, part_add in other.parts.items():
            part = parts.get(ngram)
            if part is None:
                parts[ngram] = dict(part_add)
                continue
            for token, count in part_add.items():
                part[token] = part.get(token, 0) + count

    def size_bytes(self) -> int:
        """Approximate CPython memory: dict slots, 4-tuples and small dicts."""
        return self.n_ngrams * (100 + 72 + 64 + 232) + self.n_entries * 60
