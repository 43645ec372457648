"""The per-slot n-gram map of ngram-map-k / ngram-map-k4v: keys, value statistics and ``key_map``.

After llama.cpp ``common_ngram_map`` and ``common_ngram_map_begin`` (``common/ngram-map.{h,cpp}``,
PR #18471). This module is the data structure; the drafting policy is in ``ngram/map_k.py``.

The key search reproduces llama.cpp's three-step lookup exactly, quirks included:

1. ``key_map`` (2^18 slots, 32-bit LCG hash, first writer wins, verified on hit);
2. a backward scan of the not-yet-hashed part of the prompt, ``(key_map_last_idx,
   size_last_begin-n-m-1]``;
3. a backward scan of the not-yet-hashed generated part, ``(max(size_last_begin,
   key_map_last_idx), L-n-m-1]``.

Positions ``(size_last_begin-n-m-1, size_last_begin]`` are never scanned nor hashed (llama.cpp
quirk), and hash collisions in ``key_map`` hide already-hashed occurrences. The scans use the
``TokenWindows`` hash mirror, so they return what llama.cpp's token-by-token loops return.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ngram.windows import TokenWindows

MAX_VALUES = 4  # COMMON_NGRAM_MAX_VALUES: value slots per key
KEY_MAP_SIZE = 262144  # COMMON_NGRAM_HASH_MAP_SIZE (2^18)
MAX_VALUE_COUNT = 16380  # COMMON_NGRAM_MAX_VALUE_COUNT: saturation cap of key/value counters
SMALL_KEY_MAP_UPDATE = 64  # below this many new positions, update key_map in plain Python
CONFIG_MAX = 1024


@dataclass(frozen=True, slots=True)
class NgramMapConfig:
    """llama.cpp ``common_params_speculative_ngram_map`` (shared by simple, map-k and map-k4v)."""

    size_n: int = 12  # key / lookup n-gram length
    size_m: int = 48  # value length = longest draft
    min_hits: int = 1  # key hits needed before drafting (ngram-map-k4v only)

    def __post_init__(self) -> None:
        if not 1 <= self.size_n <= CONFIG_MAX:
            raise ValueError(f"size_n must be in 1..{CONFIG_MAX}, got {self.size_n}")
        if not 1 <= self.size_m <= CONFIG_MAX:
            raise ValueError(f"size_m must be in 1..{CONFIG_MAX}, got {self.size_m}")
        if self.min_hits < 1:
            raise ValueError(f"min_hits must be >= 1, got {self.min_hits}")


@dataclass(slots=True)
class MapValue:
    value_idx: int = 0  # history index where this m-gram starts; 0 = unused slot
    value_num: int = 0  # occurrences counted (saturating)
    n_accepted: int = 0  # tokens accepted when last drafted; caps the next draft


@dataclass(slots=True)
class MapKey:
    key_idx: int  # history index of the occurrence that created the key
    stat_idx: int = 0  # value statistics are computed up to this index (inclusive, rescanned)
    key_num: int = 0  # hits (saturating)
    values: list[MapValue] = field(default_factory=list)


def _count_up(value: int) -> int:
    return min(value + 1, MAX_VALUE_COUNT)


class MapState:
    """One slot's ``common_ngram_map`` (llama.cpp keeps one per sequence)."""

    def __init__(self, config: NgramMapConfig, key_only: bool) -> None:
        self.n = config.size_n
        self.m = config.size_m
        self.key_only = key_only
        self.windows = TokenWindows(self.n)
        self.keys: dict[tuple[int, ...], MapKey] = {}  # llama.cpp: a linear vector
        self.key_map = np.zeros(KEY_MAP_SIZE, dtype=np.uint32)  # hash slot -> index, 0 = empty
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last_draft: tuple[MapKey, int] | None = None  # (key, value slot) of the last draft

    def new_key(self, key: tuple[int, ...], match_pos: int) -> MapKey:
        values = [MapValue(n_accepted=self.m) for _ in range(MAX_VALUES)]
        entry = self.keys[key] = MapKey(key_idx=match_pos, values=values)
        return entry

    def begin(self, prompt: Sequence[int]) -> None:
        """``common_ngram_map_begin``: forget what a shrunk history no longer contains."""
        size_begin = len(prompt)
        old_size = len(self.windows)
        lcp = self.windows.resync(prompt)
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - self.n - self.m if size_begin > self.n + self.m else 0
        shrunk = size_begin < self.idx_last_check
        if lcp < min(size_begin, old_size):
            # Not in llama.cpp (it assumes a consistent history): the prompt rewrote tokens
            # below lcp, so also drop whatever overlaps the changed part.
            shrunk = True
            cleanup = min(cleanup, max(0, lcp - self.n - self.m))
        if shrunk:
            self._cleanup(cleanup)
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin

    def _cleanup(self, boundary: int) -> None:
        self.key_map[self.key_map >= boundary] = 0
        self.key_map_last_idx = boundary - 1 if boundary > 0 else 0
        for key, entry in list(self.keys.items()):
            if entry.key_idx >= boundary:
                del self.keys[key]
                continue
            if self.key_only:
                continue
            kept = [v for v in entry.values if not (v.value_idx != 0 and v.value_idx >= boundary)]
            # Deleted values shift left; freed slots at the end are cleared (n_accepted kept,
            # but it is reset to m when the slot is reused).
            kept += [MapValue(n_accepted=self.m) for _ in range(MAX_VALUES - len(kept))]
            entry.values = kept
            if kept[0].value_idx == 0:
                del self.keys[key]
        self.last_draft = None

    def find_match(self, key: list[int], key_hash: int, size: int) -> int:
        """llama.cpp's three-step search for ``key``; returns the match position or 0."""
        n, m, win = self.n, self.m, self.windows
        limit = size - n - m - 1
        idx = int(self.key_map[key_hash % KEY_MAP_SIZE])
        if idx != 0 and idx < limit and win.matches(idx, key):
            return idx
        if self.size_last_begin > n + m + 1:
            j = win.find_last(key, key_hash, self.key_map_last_idx + 1, self.size_last_begin - n - m - 1)
            if j > 0:
                return j
        lo = max(self.size_last_begin, self.key_map_last_idx) + 1
        j = win.find_last(key, key_hash, lo, limit)
        return j if j > 0 else 0

    def update_key_map(self, size: int) -> None:
        """Hash the not-yet-hashed positions into ``key_map`` in llama.cpp's order (descending,
        prompt part first; an occupied slot keeps its first writer)."""
        n, m = self.n, self.m
        parts = []
        if self.size_last_begin > n + m + 1:
            parts.append((self.size_last_begin - n - m - 1, self.key_map_last_idx + 1))
        parts.append((size - n - m - 1, max(self.size_last_begin, self.key_map_last_idx) + 1))
        total = sum(max(0, hi - lo + 1) for hi, lo in parts)
        if total > SMALL_KEY_MAP_UPDATE:
            self._update_key_map_vectorised(parts)
        elif total > 0:
            hashes, key_map = self.windows.hashes, self.key_map
            for hi, lo in parts:
                for j in range(hi, lo - 1, -1):
                    slot = int(hashes[j]) % KEY_MAP_SIZE
                    if key_map[slot] == 0:
                        key_map[slot] = j
        self.key_map_last_idx = max(size - n - m - 1, self.key_map_last_idx)

    def _update_key_map_vectorised(self, parts: list[tuple[int, int]]) -> None:
        idxs = np.concatenate([np.arange(hi, lo - 1, -1, dtype=np.int64) for hi, lo in parts])
        slots = self.windows.hashes[idxs].astype(np.int64) % KEY_MAP_SIZE
        uniq, first = np.unique(slots, return_index=True)  # first writer in sequence order
        pos = idxs[first]
        empty = self.key_map[uniq] == 0
        self.key_map[uniq[empty]] = pos[empty]

    def count_values(self, entry: MapKey, key: list[int], key_hash: int, match_pos: int) -> None:
        """k4v statistics: classify the m-gram after every key occurrence in [stat_idx, match_pos]."""
        n, m, ids = self.n, self.m, self.windows.ids
        for i in self.windows.find_all(key, key_hash, entry.stat_idx, match_pos):
            begin = i + n
            for value in entry.values:
                if value.value_idx == 0:  # first free slot: a new m-gram
                    value.value_idx, value.value_num, value.n_accepted = begin, 0, m
                elif ids[begin : begin + m] != ids[value.value_idx : value.value_idx + m]:
                    continue
                value.value_num = _count_up(value.value_num)
                break
            # (no break: all four slots hold other m-grams, so this occurrence is ignored)
        entry.stat_idx = match_pos  # quirk: the occurrence at match_pos is counted again next time

    def size_bytes(self) -> int:
        per_key = 200 + 8 * self.n + MAX_VALUES * 72  # rough CPython object sizes
        return self.key_map.nbytes + self.windows.size_bytes + per_key * len(self.keys)
