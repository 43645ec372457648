"""Straight, slow ports of llama.cpp's linear-scan drafters (digest §2), used only to cross-check
the indexed implementations on random histories. Kept deliberately naive."""

from __future__ import annotations

from ngram.map_state import KEY_MAP_SIZE, MAX_VALUE_COUNT, MAX_VALUES
from ngram.windows import window_hash32


def simple_draft(history, last, n, m):
    size = len(history)
    if size <= n + m + 1:
        return []
    pattern = list(history[size - n + 1 :]) + [last]
    for j in range(size - n - 1, 0, -1):
        if list(history[j : j + n]) == pattern:
            copy = min(m, size - (j + n))
            return [] if copy < n else list(history[j + n : j + n + copy])
    return []


class RefMap:
    """common_ngram_map with linear scans and a dict-emulated key_map (no shrink handling)."""

    def __init__(self, n, m, key_only, min_hits=1):
        self.n, self.m, self.key_only, self.min_hits = n, m, key_only, min_hits
        self.keys = []  # [key_idx, stat_idx, key_num, values=[[idx, num, n_acc] * 4]]
        self.key_map = {}
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.last = None

    def begin(self, prompt):
        self.size_last_begin = len(prompt)

    def _scan(self, inp, key, hi, lo_excl):
        for j in range(hi, lo_excl, -1):
            if inp[j : j + self.n] == key:
                return j
        return 0

    def draft(self, inp, sampled):
        n, m = self.n, self.m
        self.last = None
        size = len(inp)
        if size < 2 * n + m:
            return []
        key = inp[size - n + 1 :] + [sampled]
        limit = size - n - m - 1
        match = 0
        idx = self.key_map.get(window_hash32(key) % KEY_MAP_SIZE, 0)
        if idx != 0 and idx < limit and inp[idx : idx + n] == key:
            match = idx
        slb, kml = self.size_last_begin, self.key_map_last_idx
        if match == 0 and slb > n + m + 1:
            match = self._scan(inp, key, slb - n - m - 1, kml)
        if match == 0:
            match = self._scan(inp, key, limit, max(slb, kml))
        order = []
        if slb > n + m + 1:
            order += range(slb - n - m - 1, kml, -1)
        order += range(limit, max(slb, kml), -1)
        for j in order:
            self.key_map.setdefault(window_hash32(inp, j, n) % KEY_MAP_SIZE, j)
        self.key_map_last_idx = max(limit, kml)
        if match == 0:
            return []
        entry = next((k for k in self.keys if inp[k[0] : k[0] + n] == key), None)
        if entry is None:
            entry = [match, 0, 0, [[0, 0, m] for _ in range(MAX_VALUES)]]
            self.keys.append(entry)
        entry[2] = min(entry[2] + 1, MAX_VALUE_COUNT)
        if self.key_only:
            self.last = (entry, 0)
            return inp[match + n : match + n + min(m, entry[3][0][2])]
        if entry[2] < self.min_hits:
            return []
        for i in range(entry[1], match + 1):
            if inp[i : i + n] != key:
                continue
            for v in entry[3]:
                if v[0] == 0:
                    v[0], v[1], v[2] = i + n, 0, m
                elif inp[i + n : i + n + m] != inp[v[0] : v[0] + m]:
                    continue
                v[1] = min(v[1] + 1, MAX_VALUE_COUNT)
                break
        entry[1] = match
        nums = [v[1] for v in entry[3]]
        best = max(range(MAX_VALUES), key=lambda v: (nums[v], -v))
        if nums[best] == 0:
            best = 0
        rest = sum(nums) - nums[best]
        if rest > 0 and nums[best] < 2 * rest:
            return []
        self.last = (entry, best)
        return inp[match + n : match + n + min(m, entry[3][best][2])]

    def accept(self, n_acc):
        if self.last is not None:
            self.last[0][3][self.last[1]][2] = n_acc


def short_match_draft(history, last, n, n_max):
    """The cold fallback of ngram-mod: what followed the latest earlier occurrence of the last n
    tokens of history + [last], up to n_max tokens (a backward scan). A copy that reaches the end
    of the text goes on copying what it has drafted (the text repeats at that distance)."""
    seq = list(history) + [last]
    size = len(seq)
    if n_max <= 0 or size <= n:
        return []
    suffix = seq[size - n :]
    for j in range(size - n - 1, -1, -1):
        if seq[j : j + n] == suffix:
            src = j + n
            while len(seq) < size + n_max:
                seq.append(seq[src])
                src += 1
            return seq[size:]
    return []
