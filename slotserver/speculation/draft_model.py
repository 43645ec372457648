"""The draft-model drafter (``-md``, ``--spec-type draft-simple``): a small model proposes, the target verifies.

A second llama context (an ``Engine`` of its own) holds one sequence per slot. ``draft`` serves every
slot that wants a draft-model draft this step together: one draft decode brings each slot's draft
sequence up to date with its target history and yields each slot's first draft token, then each
further decode adds one token per slot still drafting. Slots still decoding their prompt ask with
``n_max = 0``: their new prompt chunk is mirrored into the draft context in the same decode, so the
draft is ready when generation starts and a long prompt never stalls the others.

The draft context learns nothing by itself: before each draft it compares what it holds for the slot
with the slot's target history (``vocab_bridge`` converts when the vocabularies differ) and keeps
the common prefix. So accepted draft tokens stay cached, rejected ones are removed, and a new
prompt, a context shift or a restored slot simply re-synchronises.

A draft stops at the first token whose probability is below the request's ``p_min`` (a first token
below it gives no draft at all, not llama.cpp's one-token draft that is nearly always rejected), or,
with ``--spec-draft-when pays`` (default), at the first token whose chance of being accepted along
the draft no longer pays for its cost (``draft_costs``). Its failures never fail a request: the
runner drops this step's drafts and the draft context starts over.

State (engine thread only): the draft engine, and per slot the draft tokens whose KV it holds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Sequence

from slotserver.engine.batch import BatchEntry, BatchPlan, common_prefix
from slotserver.engine.calibrate import row_cap, time_decode
from slotserver.engine.engine import Engine
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.engine.vocab import Vocab
from slotserver.speculation.config import DraftModelConfig
from slotserver.speculation.draft_costs import PAY_MARGIN, DraftCosts, Payoff
from slotserver.speculation.vocab_bridge import SameVocab, TextBridge, incompatibility
from slotserver.stats import Histogram

log = logging.getLogger(__name__)

MAX_LAG = 16  # with when = pays, a draft sequence further behind its slot's history is not caught up
BATCH_SLOTS_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)


@dataclass(slots=True)
class DraftAsk:
    slot_id: int
    history: Sequence[int]  # the slot's target tokens: its KV cache, then its sampled token when generating
    n_max: int = 0  # longest draft in target tokens; 0: only bring the draft context up to date
    p_min: float = 0.0


@dataclass(slots=True)
class DraftModelStats:
    """The draft model's own decodes (the chain's ``draft-simple`` statistics time whole draft calls)."""

    n_decodes: int = 0
    n_tokens: int = 0  # tokens decoded: mirrored prompt chunks, catch-up and drafted tokens
    t_decode_s: float = 0.0
    n_failures: int = 0  # draft decodes that failed (no drafts that step; the draft context starts over)
    batch_slots: Histogram = field(default_factory=lambda: Histogram(BATCH_SLOTS_BUCKETS))  # slots per decode


@dataclass(slots=True)
class _Seq:
    bridge: SameVocab | TextBridge
    cache: list[int] = field(default_factory=list)  # draft tokens whose KV the draft context holds
    payoff: Payoff = field(default_factory=Payoff)


class ModelDrafter:
    def __init__(self, engine: Engine, target: Vocab, config: DraftModelConfig, costs: DraftCosts | None) -> None:
        self.engine = engine
        self.config = config
        self.costs = costs
        self.target = target
        self.mismatch = incompatibility(target, engine.vocab)  # "" when token ids mean the same
        self.stats = DraftModelStats()
        self._seqs: dict[int, _Seq] = {}

    @property
    def vocab_path(self) -> str:
        return "text-bridge" if self.mismatch else "shared"

    def info(self) -> dict:
        """For /props and the start-up log."""
        return {"path": self.config.path, "description": self.engine.description, "vocab": self.vocab_path,
                "vocab_mismatch": self.mismatch or None, "n_max": self.config.n_max, "when": self.config.when,
                "n_ctx": self.engine.n_ctx, "costs": self.costs.as_dict() if self.costs else None}

    def threshold(self, n_plain: int, n_drafting: int) -> float:
        """Acceptance probability a draft token needs this step (0 with ``when = always``)."""
        if self.config.when == "always" or self.costs is None:
            return 0.0
        return self.costs.threshold(n_plain, n_drafting) * PAY_MARGIN

    def can_pay(self, n_plain: int) -> bool:
        """Whether any draft-model token could pay with ``n_plain`` slots generating; if not, it is not run."""
        return self.threshold(n_plain, 1) < 1.0

    def wants(self, slot_id: int, history: Sequence[int]) -> bool:
        """Whether ``slot_id`` asks the draft model this step, its target tokens being ``history``.

        With ``when = pays``, not while the payoff guard holds it back, and not when its draft
        sequence lags more than ``MAX_LAG`` tokens behind (the model could not pay when the slot's
        prompt was decoded, so it was not mirrored): catching up would cost more than drafts gain.
        """
        if self.config.when == "always" or self.costs is None:
            return True
        seq = self._seq(slot_id)
        if seq.payoff.skips():
            return False
        full = seq.bridge.view(history)
        return len(full) - common_prefix(seq.cache, full) <= MAX_LAG

    def settle(self, slot_id: int, n_plain: int, n_verified: int, n_accepted: int, t_call_s: float) -> None:
        """The slot's last draft-model draft was verified; ``t_call_s`` is its share of the draft call."""
        if self.costs is None or self.config.when == "always":
            return
        c = self.costs
        gain = n_accepted * c.t_token(n_plain) - t_call_s - n_verified * c.t_row_s
        self._seq(slot_id).payoff.settle(gain)

    def _seq(self, slot_id: int) -> _Seq:
        seq = self._seqs.get(slot_id)
        if seq is None:
            seq = self._seqs[slot_id] = _Seq(self._bridge())
        return seq

    def _bridge(self) -> SameVocab | TextBridge:
        if not self.mismatch:
            return SameVocab(self.target.n_tokens)
        tgt, dft = self.target, self.engine.vocab
        return TextBridge(
            tgt_piece=lambda t: b"" if t == tgt.bos else tgt.piece(t, special=True),
            dft_tokenize=lambda text: dft.tokenize(text, add_special=False, parse_special=True),
            dft_piece=lambda t: dft.piece(t, special=False),
            tgt_tokenize=lambda text: tgt.tokenize(text, add_special=False, parse_special=False),
            dft_is_eog=dft.is_eog, dft_prefix=[dft.bos] if dft.add_bos else [])

    def draft(self, asks: list[DraftAsk], n_plain: int) -> list[list[int]]:
        """Drafts (target tokens) for ``asks``, all slots batched in each draft decode; ``n_plain``
        slots generate in this step (the cost of a token without drafting depends on it)."""
        theta = self.threshold(n_plain, sum(a.n_max > 0 for a in asks))
        entries, active = self._catch_up(asks)
        drafts: dict[int, list[int]] = {i: [] for i in active}
        cum = dict.fromkeys(active, 1.0)
        vocab = self.engine.vocab
        while active:
            rows = self._decode(entries)
            tokens, probs = self.engine.top1([r[-1] for r in rows if r])
            entries, still = [], []
            for i, token, p in zip(active, tokens, probs):
                ask, seq, d = asks[i], self._seqs[asks[i].slot_id], drafts[i]
                cum[i] *= p
                if p < ask.p_min or cum[i] < theta:
                    continue  # a first token below the cut-off leaves the draft empty
                eog = vocab.is_eog(token)
                if eog and seq.bridge.is_bridge:
                    continue  # the draft's end token has no target text
                d.append(token)
                if eog or len(d) >= ask.n_max:
                    continue
                entries.append(BatchEntry(ask.slot_id, len(seq.cache), [token], True))
                seq.cache.append(token)
                still.append(i)
            active = still
        out = []
        for i, ask in enumerate(asks):
            d = drafts.get(i)
            out.append(self._seqs[ask.slot_id].bridge.to_target(d)[: ask.n_max] if d else [])
        return out

    def _catch_up(self, asks: list[DraftAsk]) -> tuple[list[BatchEntry], list[int]]:
        """The first decode's entries: per slot, what its draft sequence lacks of its history (the
        last row an output where a draft is wanted); and the indices of the asks that draft."""
        entries, active = [], []
        room = self.engine.config.n_batch
        for i, ask in enumerate(asks):
            if room <= 0:
                break
            seq = self._seq(ask.slot_id)
            full = seq.bridge.view(ask.history)
            want = ask.n_max > 0 and 0 < len(full) and len(full) + ask.n_max < self.engine.n_ctx_slot
            keep = common_prefix(seq.cache, full)
            if want and keep == len(full):
                keep -= 1  # its logits are needed again
            if keep < len(seq.cache):
                self.engine.remove(ask.slot_id, keep)
                del seq.cache[keep:]
            todo = full[keep:]
            if not todo:
                continue
            chunk = todo[:room]
            room -= len(chunk)
            ends = want and len(chunk) == len(todo)
            entries.append(BatchEntry(ask.slot_id, keep, chunk, False, ends))
            seq.cache.extend(chunk)
            if ends:
                active.append(i)
        if not entries:
            return [], []
        if not active:  # only mirroring: decode it now, nothing is read back
            self._decode(entries)
        return entries, active

    def observe_target(self, n_tokens: int, seconds: float) -> None:
        """A target decode of one token (one slot generating, no draft): the cost of a plain step."""
        if self.costs is not None and n_tokens == 1:
            self.costs = self.costs.observed(t_target_s=seconds)

    def _decode(self, entries: list[BatchEntry]) -> list[list[int]]:
        st = self.stats
        t0 = time.perf_counter()
        rows = self.engine.decode(BatchPlan(entries))
        seconds = time.perf_counter() - t0
        st.t_decode_s += seconds
        if self.costs is not None and len(entries) == 1 and len(entries[0].tokens) == 1:
            self.costs = self.costs.observed(t_draft_s=seconds)
        st.n_decodes += 1
        st.n_tokens += sum(len(e.tokens) for e in entries)
        st.batch_slots.observe(len(entries))
        return rows

    def forget(self, slot_id: int) -> None:
        """Forget one slot's draft sequence and payoff record (its cache now serves another tenant:
        a kept prefix would make the new tenant's prompt faster where it matches the old one's)."""
        if self._seqs.pop(slot_id, None) is not None:
            self.engine.remove(slot_id, 0)

    def reset(self) -> None:
        """Forget every slot's draft sequence (after a failed draft decode its KV cannot be trusted)."""
        self.stats.n_failures += 1
        for slot_id in self._seqs:
            self.engine.remove(slot_id, 0)
        self._seqs.clear()


def calibrate(target: VerifyProfile, draft: Engine, repeats: int = 7) -> DraftCosts:
    """The target's one-row step and per-row cost from its verify-cost profile (one row and eight,
    after the profile's depth), and one draft decode of 1 row and of one row for each of up to 4
    slots after as many cached tokens (the fastest of ``repeats``; serving then corrects the one-row
    times). Takes well under a second.

    Eight rows, because a verify batch's cost is not linear in its rows (ggml picks kernels by
    batch size; fewer rows can cost more than 8): eight is a typical verified draft. A depth, because
    a small draft model's step is dominated by attention over its cache sooner than the target's
    (docs/measurements.md).

    Sized to the draft context: no more sequences than one measured decode holds (``row_cap``), and
    ``time_decode`` keeps the depth within each sequence's cells."""
    t1, t8 = target.t_out(1), target.t_out(8)
    n_seq = min(4, draft.config.n_parallel, row_cap(draft))
    d1 = time_decode(draft, 1, 1, repeats, target.depth)
    dn = time_decode(draft, 1, n_seq, repeats, target.depth) if n_seq > 1 else d1
    return DraftCosts(t_target_s=t1, t_row_s=max(t8 - t1, 0.0) / 7, t_draft_s=d1,
                      t_draft_row_s=max(dn - d1, 0.0) / max(n_seq - 1, 1))
