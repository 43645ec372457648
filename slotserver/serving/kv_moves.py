"""Plans for moving a slot's KV entries: context shift and chunk reuse (llama-server's rules).

Pure functions over token lists; the lifecycle applies the plans with ``Engine.remove``/``shift``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Sequence

MIN_NEW_ROOM = 4  # a context shift always keeps this many cells free after n_keep (llama.cpp: n_ctx - 4)


@dataclass(frozen=True, slots=True)
class Shift:
    """Drop positions [keep, keep + discard) and move everything after them down by ``discard``."""

    keep: int
    discard: int


def plan_context_shift(n_tokens: int, n_prompt: int, n_keep: int, n_discard: int, n_ctx: int,
                       add_bos: bool) -> Shift | None:
    """What a full slot drops to go on generating, as llama-server's ``--context-shift``.

    ``n_keep`` < 0 keeps the whole prompt; the BOS token is kept on top of ``n_keep``. ``n_discard``
    0 drops half of what follows the kept part. None when nothing can be dropped.
    """
    keep = n_prompt if n_keep < 0 else n_keep + int(add_bos)
    keep = max(0, min(keep, n_ctx - MIN_NEW_ROOM))
    n_left = n_tokens - keep
    discard = n_discard if n_discard > 0 else n_left // 2
    discard = min(discard, n_left - 1)
    return Shift(keep, discard) if discard > 0 else None


@dataclass(frozen=True, slots=True)
class ChunkMove:
    """Cached positions [src, src + n) are reused at [dst, dst + n) of the new prompt (dst <= src)."""

    src: int
    dst: int
    n: int


def plan_chunk_reuse(cache: Sequence[int], prompt: Sequence[int], n_past: int, n_min: int) -> list[ChunkMove]:
    """llama-server's ``n_cache_reuse``: after the common prefix ``n_past``, find runs of at least
    ``n_min`` tokens of the new prompt that are still in the cache further on, in order.

    The cached tokens between two reused runs are dropped and each run is moved down to where the
    prompt needs it, so an edit in the middle of a long prompt (llama.vim's moving window) costs
    only the changed tokens. Linear time (see ``chunk_reuse_steps``).
    """
    return chunk_reuse_steps(cache, prompt, n_past, n_min)[0]


_MOD = (1 << 61) - 1  # a Mersenne prime: window hashes as polynomials modulo it


def _window_hash(seq: Sequence[int], start: int, n: int, base: int) -> int:
    h = 0
    for t in seq[start : start + n]:
        h = (h * base + t) % _MOD
    return h


def chunk_reuse_steps(cache: Sequence[int], prompt: Sequence[int], n_past: int,
                      n_min: int) -> tuple[list[ChunkMove], int]:
    """``plan_chunk_reuse``'s moves, and the tokens it read to find them (hashed, compared).

    llama-server walks the cache one position at a time and measures the match there against the
    prompt: up to ``n_min`` comparisons per position, so O(cache x n_min), and with a request's
    ``n_min`` near the context over a second of Python at 4k tokens (docs/measurements.md). The same
    moves come from asking, for the prompt's next ``n_min`` tokens, where they first occur in the
    cache from the current position on: a Rabin-Karp search (a rolling hash over the cache's windows,
    a random base per call so no input can be built to collide, every hit checked token by token).
    Each cache position is hashed once and each reused token compared a bounded number of times:
    O(cache + prompt) in all.
    """
    if n_min <= 0:
        raise ValueError("n_min must be >= 1")
    cache = cache if isinstance(cache, list) else list(cache)  # slices of both are compared with ==
    prompt = prompt if isinstance(prompt, list) else list(prompt)
    moves: list[ChunkMove] = []
    base = secrets.randbelow(_MOD - 2) + 2
    top = pow(base, n_min - 1, _MOD)  # the weight of a window's first token, removed as it rolls
    n_cache, n_prompt = len(cache), len(prompt)
    steps = 0
    head_c = head_p = n_past
    while head_c + n_min <= n_cache and head_p + n_min <= n_prompt:
        # Where do prompt[head_p : head_p + n_min] first occur in cache[head_c:]? A match there of
        # n_min tokens or more is exactly what llama-server's walk would stop at; nothing earlier is.
        want = _window_hash(prompt, head_p, n_min, base)
        c, h = head_c, _window_hash(cache, head_c, n_min, base)
        steps += 2 * n_min
        while not (h == want and cache[c : c + n_min] == prompt[head_p : head_p + n_min]):
            if c + n_min >= n_cache:
                return moves, steps  # nowhere further on: the walk would run off the cache's end
            h = ((h - cache[c] * top) * base + cache[c + n_min]) % _MOD
            c += 1
            steps += 1
        n = n_min
        while c + n < n_cache and head_p + n < n_prompt and cache[c + n] == prompt[head_p + n]:
            n += 1
        steps += n
        moves.append(ChunkMove(c, head_p, n))
        head_c, head_p = c + n, head_p + n
    return moves, steps
