"""Plans for moving a slot's KV entries: context shift and chunk reuse (llama-server's rules).

Pure functions over token lists; the lifecycle applies the plans with ``Engine.remove``/``shift``.
"""

from __future__ import annotations

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
    only the changed tokens.
    """
    moves: list[ChunkMove] = []
    head_c = head_p = n_past
    while head_c < len(cache) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cache) and head_p + n < len(prompt) and cache[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= n_min:
            moves.append(ChunkMove(head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return moves
