"""suffix: SuffixDecoding's drafter (Oliaro et al., arXiv 2411.04975), over suffix arrays.

Two structures answer each draft call: a **global** one over the outputs (``learn_prompts``: also
the prompts) of finished requests, shared by all slots and bounded by ``max_mb`` with FIFO eviction
of whole requests (``ngram/suffix_store.py``), and a **per-request** one over the slot's own prompt
and output (``ngram/suffix_local.py``). In each we match the longest suffix of the context, at most
``depth`` tokens, that occurred before with a token after it, then follow the most frequent
continuation while its estimated probability (occurrences of the child over occurrences of the
parent, multiplied along the path) stays at least ``min_prob``, for at most ``match length x factor``
tokens and ``n_max``; a match of the full ``depth`` is censored, so only ``n_max`` bounds its draft
(``suffix_walk.draft_limit``). The draft with more expected accepted tokens (the sum of its
cumulative probabilities) wins, the slot's own on a tie; ``draft_tag`` says which, ``draft_probs``
gives the estimates for the chain's expected-value selection.

Differences from ArcticInference's tree (same counts, same greedy path otherwise):
- the match is the longest one, as the paper describes, not the best-scoring of every length;
- only ``depth`` bounds the match: the draft goes on past it (their tree ends at ``depth`` tokens,
  so match plus draft never exceeds it);
- an occurrence at the very end of a stored request counts for nothing (theirs counts in the
  parent, lowering every estimate after it) and the live context's own suffix is no occurrence;
- ties between children go to the smallest token (theirs: hash-map order).

A request is learned when it ends (``finish(slot, history)``, called by the chain when the slot is
released), or else when the slot's next ``begin()`` arrives, from the history seen by its last
``draft()`` call and that call's ``last_token``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Sequence

from ngram.suffix_local import LocalIndex
from ngram.suffix_sort import SPAN_MAX
from ngram.suffix_store import SuffixStore
from ngram.suffix_walk import Cursor, draft_limit

MIB = 1 << 20
MAX_MB = 1 << 14  # 16 GiB: at >= 13 bytes per token, corpus positions stay within int32
# draft_tag() values: which structure drafted the slot's last draft ("" for none).
TAG_GLOBAL = "global"
TAG_LOCAL = "local"


@dataclass(slots=True)
class SuffixConfig:
    depth: int = 24  # longest suffix of the context matched
    min_prob: float = 0.1  # a draft stops before a token whose estimated probability is below this
    factor: float = 1.0  # a draft has at most match length x factor tokens
    max_mb: float = 256.0  # memory budget of the global structure (MiB)
    n_max: int = 64  # longest draft
    learn_prompts: bool = False  # the global structure learns prompts too, not just outputs

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= SPAN_MAX - 1:
            raise ValueError(f"suffix depth must be in 1..{SPAN_MAX - 1}")
        if not 1 <= self.n_max <= SPAN_MAX - self.depth:
            raise ValueError(f"suffix n_max must be in 1..{SPAN_MAX} - depth (depth + n_max <= {SPAN_MAX})")
        if not 0.0 <= self.min_prob <= 1.0:
            raise ValueError("suffix min_prob must be in 0..1")
        if not 0.0 < self.factor <= SPAN_MAX:
            raise ValueError(f"suffix factor must be in (0, {SPAN_MAX}]")
        if not 0.0 < self.max_mb <= MAX_MB:
            raise ValueError(f"suffix max_mb must be in (0, {MAX_MB}]")

    @property
    def span(self) -> int:
        """Tokens a match and its draft can reach: how far the suffix indexes order windows."""
        return self.depth + self.n_max

    @property
    def max_bytes(self) -> int:
        return max(1, int(self.max_mb * MIB))


@dataclass(slots=True)
class SlotState:
    local: LocalIndex
    out_start: int  # where the part of the context the global structure learns begins
    last: int | None = None  # last_token of the last draft() call
    n_context: int = 0  # context length at the last draft() call...
    m_local: int = 0  # ...and the match lengths found then (hints for the next search)
    m_global: int = 0
    tag: str = ""
    probs: list[float] = field(default_factory=list)


def encoded_context(tokens: list[int], last: int, depth: int) -> bytes:
    """The last ``depth`` tokens of ``tokens + [last]`` as the suffix indexes compare them."""
    tail = tokens[len(tokens) - min(depth - 1, len(tokens)) :]
    tail.append(last)
    return struct.pack(f">{len(tail)}I", *[t + 1 for t in tail])


class SuffixDrafter:
    """The drafter; ``store`` (the global structure) may be shared or loaded (``ngram/suffixfile.py``)."""

    def __init__(self, config: SuffixConfig | None = None, store: SuffixStore | None = None) -> None:
        self.config = config or SuffixConfig()
        if store is not None and store.span != self.config.span:
            raise ValueError(f"suffix store span {store.span} != depth + n_max = {self.config.span}")
        self.store = store or SuffixStore(self.config.span, self.config.max_bytes)
        self.slots: dict[int, SlotState] = {}

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        self.finish(slot)
        local = LocalIndex(self.config.span, self.config.depth)
        local.reset(prompt)
        self.slots[slot] = SlotState(local, 0 if self.config.learn_prompts else len(prompt))

    def finish(self, slot: int, history: Sequence[int] | None = None) -> None:
        """The slot's request ended: store it in the global structure now (``begin`` does it for a
        request that was not finished). ``history``: the request's whole final context (prompt,
        output and the last sampled token); without it, what the last ``draft()`` call saw."""
        st = self.slots.pop(slot, None)
        if st is None:
            return
        tokens = st.local.tokens
        n = len(tokens)
        if history is not None and len(history) >= n and (not n or (history[0] == tokens[0]
                                                                    and history[n - 1] == tokens[-1])):
            learned = [int(t) for t in history[st.out_start :]]  # the index itself is dropped: no sync
        elif st.last is not None:
            learned = tokens[st.out_start :] + [st.last]
        else:
            return
        if learned:
            self.store.add(learned)

    def draft(self, slot: int, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        st = self.slots.get(slot)
        if st is None:  # no begin(): the whole history counts as prompt
            self.begin(slot, history)
            st = self.slots[slot]
        local = st.local
        if not local.sync(history):  # rebuilt: only output from here on is learned
            st.out_start = len(local.tokens)
        st.last = last_token
        st.tag, st.probs = "", []
        cap = min(n_max, self.config.n_max)
        if cap <= 0:
            return []
        cfg = self.config
        context = encoded_context(local.tokens, last_token, cfg.depth)
        n_context = len(local.tokens) + 1
        grown = n_context - st.n_context  # a match that went on is longer by this much
        st.m_local, own, own_p = local.draft(last_token, context, cap, cfg.factor, cfg.min_prob,
                                             st.m_local + grown if st.m_local else 0)
        st.n_context = n_context
        # A global draft is worth at most its length, at most its limit for the longest possible
        # match: when the local one is worth that much already, the global one could only tie (and
        # lose the tie).
        if own and sum(own_p) >= draft_limit(min(cfg.depth, n_context), cfg.depth, cap, cfg.factor):
            st.m_global = 0
            st.tag, st.probs = TAG_LOCAL, own_p
            return own
        st.m_global, shared, shared_p = self.store.draft(context, n_context, cfg.depth, cap, cfg.factor,
                                                         cfg.min_prob, st.m_global + grown if st.m_global else 0)
        if own and sum(own_p) >= sum(shared_p):
            st.tag, st.probs = TAG_LOCAL, own_p
            return own
        if shared:
            st.tag, st.probs = TAG_GLOBAL, shared_p
        return shared

    def match(self, slot: int, n_max: int) -> tuple[list[Cursor], int]:
        """Fresh cursors over the occurrences of the match behind the slot's last draft, in the
        structure that drafted it, and the length limit of a draft from it (``draft_limit``): what a
        token tree grows from (``ngram/suffix_tree.py``). ([], 0) after no draft."""
        st = self.slots.get(slot)
        if st is None or not st.tag or st.last is None:
            return [], 0
        cfg, local = self.config, st.local
        context = encoded_context(local.tokens, st.last, cfg.depth)
        if st.tag == TAG_LOCAL:
            m, cursors = local.match(st.last, context, st.m_local)
        else:
            m, cursors = self.store.match(context, len(local.tokens) + 1, cfg.depth, st.m_global)
        return cursors, draft_limit(m, cfg.depth, min(n_max, cfg.n_max), cfg.factor)

    def draft_tag(self, slot: int) -> str:
        """Which structure drafted the slot's last draft: ``global``, ``local``, or "" for none."""
        st = self.slots.get(slot)
        return st.tag if st is not None else ""

    def draft_probs(self, slot: int) -> list[float]:
        """Cumulative probability estimates of the slot's last draft, one per token."""
        st = self.slots.get(slot)
        return list(st.probs) if st is not None else []

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        """No-op: the estimates come from the structures' counts, not from verification."""
