"""Offline replay of a token stream through one drafter, like llama.cpp's ``llama-lookup-stats``.

The text is cut into chunks of ``n_ctx`` tokens. In each chunk the tokens are replayed as if
generated: the drafter drafts after each accepted position, and the draft is accepted as far as
it matches the real continuation. ``begin()`` starts every chunk (so ngram-cache merges the
previous chunk's context cache into its dynamic cache, as lookup-stats does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from ngram.protocol import Drafter


@dataclass(slots=True)
class ReplayStats:
    n_tokens: int = 0  # tokens replayed
    n_calls: int = 0  # draft calls
    n_drafts: int = 0  # non-empty drafts
    n_drafted: int = 0
    n_accepted: int = 0
    t_draft_s: float = 0.0

    @property
    def accept_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def t_per_call_us(self) -> float:
        return 1e6 * self.t_draft_s / self.n_calls if self.n_calls else 0.0


def _n_matching(draft: Sequence[int], truth: Sequence[int]) -> int:
    n = 0
    while n < len(draft) and n < len(truth) and draft[n] == truth[n]:
        n += 1
    return n


def replay_chunk(drafter: Drafter, chunk: Sequence[int], n_draft: int, stats: ReplayStats, slot: int = 0) -> None:
    history = list(chunk[:1])
    drafter.begin(slot, history)
    pos = 1  # chunk[pos] is the token "just sampled"
    while pos < len(chunk):
        t0 = time.perf_counter()
        draft = drafter.draft(slot, history, chunk[pos], n_draft)[:n_draft]
        stats.t_draft_s += time.perf_counter() - t0
        stats.n_calls += 1
        n_acc = _n_matching(draft, chunk[pos + 1 :])
        if draft:
            stats.n_drafts += 1
            stats.n_drafted += len(draft)
            stats.n_accepted += n_acc
            drafter.accept(slot, n_acc, False)
        history.extend(chunk[pos : pos + 1 + n_acc])
        pos += 1 + n_acc
    stats.n_tokens += len(chunk)


def replay(drafter: Drafter, tokens: Sequence[int], n_ctx: int, n_draft: int) -> ReplayStats:
    stats = ReplayStats()
    for start in range(0, len(tokens), n_ctx):
        replay_chunk(drafter, tokens[start : start + n_ctx], n_draft, stats)
    return stats
