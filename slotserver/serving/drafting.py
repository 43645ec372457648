"""Each step's drafts: the chain's drafters per slot, then the draft model for all the rest at once,
then how much of each draft the step verifies.

The drafters of a slot's chain are asked in precedence order (``DraftChain.draft``). The draft model
comes last: it drafts, in one batch per draft decode, for every generating slot still without a
draft, and mirrors the prompt chunks of prefilling slots into its own context in the same decode.
It is not run at all in a step where not one of its tokens could pay for itself (``draft_costs``).
A failure of the draft model costs that step's drafts only.

``select`` then cuts every draft to what pays under the verify-cost profile, across the slots of
the step (``selection.choose``). A request's ``speculative.oracle`` (benchmarks, ``--spec-oracle``)
drafts the known continuation instead, with certainty: the ceiling of speculation here.
Engine thread only.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from slotserver.engine.batch import BatchPlan
from slotserver.engine.engine import Engine
from slotserver.serving.job import Job
from slotserver.serving.scheduler import DecodeWork, draft_budget
from slotserver.serving.slots import Slot
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.draft_model import DraftAsk, ModelDrafter
from slotserver.speculation.registry import DRAFT_MODEL
from slotserver.speculation.selection import Offer, choose

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Asked:
    """A slot's last draft-model call, until its verification is known (the job's draft counters)."""

    job: Job
    n_draft0: int
    n_accepted0: int
    n_plain: int
    t_share_s: float


class Drafting:
    def __init__(self, engine: Engine, chain: DraftChain, model: ModelDrafter | None) -> None:
        self.engine = engine
        self.chain = chain  # the shared chain: the draft model's calls are counted in its statistics
        self.model = model
        self._asked: dict[int, _Asked] = {}  # slot id -> its last draft-model call not yet settled
        self._always = model is not None and model.config.when == "always"  # llama-server's way: no cut

    def for_slot(self, slot: Slot) -> list[int]:
        """The slot's draft from its chain's drafters (the draft model aside); may raise."""
        job = slot.job
        n_max = draft_budget(self.engine.n_ctx_slot, len(slot.cache), job.n_remaining, job.limits.n_max)
        if n_max <= 0:
            return []
        if job.limits.oracle is not None:
            return oracle_draft(job.limits.oracle, job.generated, n_max)
        if not slot.chain.drafters:
            return []
        return slot.chain.draft(slot.id, slot.cache, slot.sampled, replace(job.limits, n_max=n_max))

    def select(self, generating: list[tuple[Slot, DecodeWork]], n_input: int, room: int) -> None:
        """Cut each draft to the rows that pay in this step (all of them without a profile). Never
        raises: if choosing fails, this step verifies no drafts."""
        try:
            self._select(generating, n_input, room)
        except Exception:
            log.exception("selecting draft lengths failed; this step verifies no drafts")
            for _, work in generating:
                work.draft.clear()

    def observe_decode(self, plan: BatchPlan, seconds: float) -> None:
        """A target decode took ``seconds``: the cost models follow what serving measures."""
        if self.model is not None:
            self.model.observe_target(plan.n_tokens, seconds)
        profile = self.chain.profile
        if profile is not None and len(plan.entries) == 1 and plan.entries[0].is_decode:
            entry = plan.entries[0]
            profile.observe(len(entry.tokens), seconds, len(entry.tokens) * (entry.pos0 - profile.depth))

    def _select(self, generating: list[tuple[Slot, DecodeWork]], n_input: int, room: int) -> None:
        profile = self.chain.profile
        if profile is None or not any(work.draft for _, work in generating):
            return
        offers = []
        for slot, work in generating:
            if slot.job.limits.oracle is not None or (self._always and slot.chain.winner(slot.id) == DRAFT_MODEL):
                q = [1.0] * len(work.draft)  # the oracle, and --spec-draft-when always: verified whole
            else:
                q = slot.chain.confidence(slot.id)[: len(work.draft)] if work.draft else []
            offers.append(Offer(q, len(slot.cache)))
        counts = choose(offers, profile, n_input=n_input, room=room, streams=self.engine.config.streams)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("selection: %s", ", ".join(
                f"slot {s.id}: {n}/{len(w.draft)} of {s.chain.winner(s.id) or 'oracle'} (q_last {o.q[n - 1] if n else 0:.3f})"
                for (s, w), o, n in zip(generating, offers, counts)))
        for (slot, work), n in zip(generating, counts):
            if work.draft and slot.job.limits.oracle is None:
                slot.chain.selected(slot.id, n)
            del work.draft[n:]

    def with_model(self, generating: list[tuple[Slot, DecodeWork]], prefilling: list[Slot]) -> None:
        """Fill in the draft-model drafts of ``generating`` slots that have none; mirror ``prefilling``."""
        model = self.model
        if model is None:
            return
        self._settle(generating)
        if not model.can_pay(len(generating)):
            return
        asks: list[tuple[DraftAsk, Slot, DecodeWork | None]] = []
        for slot, work in generating:
            if work.draft:
                continue
            history = slot.cache + [slot.sampled]
            n_max = self._budget(slot) if model.wants(slot.id, history) else 0
            if n_max > 0:
                asks.append((DraftAsk(slot.id, history, n_max, slot.job.limits.p_min), slot, work))
        drafting = bool(asks)
        for slot in prefilling:
            if slot.chain.uses_model(slot.job.limits):
                asks.append((DraftAsk(slot.id, slot.cache), slot, None))
        if not asks:
            return
        t0 = time.perf_counter()
        try:
            drafts = model.draft([ask for ask, _, _ in asks], len(generating))
        except Exception:
            log.exception("the draft model failed; no draft-model drafts this step, its context starts over")
            model.reset()
            return
        if not drafting:
            return
        t_call = time.perf_counter() - t0
        self.chain.model_called(t_call)
        n_drafting = sum(ask.n_max > 0 for ask, _, _ in asks)
        for (ask, slot, work), tokens in zip(asks, drafts):
            if work is not None:
                work.draft = slot.chain.adopt(slot.id, tokens, replace(slot.job.limits, n_max=ask.n_max))
                job = slot.job
                self._asked[slot.id] = _Asked(job, job.n_draft, job.n_draft_accepted, len(generating),
                                              t_call / n_drafting)

    def _settle(self, generating: list[tuple[Slot, DecodeWork]]) -> None:
        """Tell the draft model how its last drafts for these slots fared (a finished job's are dropped)."""
        jobs = {slot.id: slot.job for slot, _ in generating}
        for slot_id, asked in list(self._asked.items()):
            del self._asked[slot_id]
            job = asked.job
            if jobs.get(slot_id) is job:
                self.model.settle(slot_id, asked.n_plain, job.n_draft - asked.n_draft0,
                                  job.n_draft_accepted - asked.n_accepted0, asked.t_share_s)

    def _budget(self, slot: Slot) -> int:
        job = slot.job
        n_max = draft_budget(self.engine.n_ctx_slot, len(slot.cache), job.n_remaining, job.limits.n_max)
        return min(n_max, self.model.config.n_max) if slot.chain.uses_model(job.limits) else 0


def oracle_draft(oracle: tuple[int, ...], generated: list[int], n_max: int) -> list[int]:
    """What follows ``generated`` in the known continuation, while the output still follows it."""
    n = len(generated)
    if tuple(generated) != oracle[:n]:
        return []
    return list(oracle[n : n + n_max])
