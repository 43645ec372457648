"""A slot's lifecycle: every change of a slot's state, and the start and end of its speculation.

The one owner of ``Slot.state`` and of the slot's job, sampler, grammar and draft chain: no other
module assigns them, so the rules live in one place. The transitions, and who calls each:

- IDLE -> PREFILL, ``start``: the runner admits a waiting job (``Runner._admit``). The slot gets
  the job, a sampler chain (and a grammar sampler if the request has a grammar), its tenant's draft
  chain and the prompt tokens its cache does not hold yet (``pending``).
- PREFILL -> GENERATING, ``start_generating``: the applier decoded the prompt's last chunk and the
  request wants tokens (``Applier._prefill``). The slot's drafters begin on the prompt
  (``DraftChain.begin``).
- GENERATING -> GENERATING, ``shift_context``: the runner found the slot's context full under
  ``--context-shift`` (``Runner._full``); old tokens go and the drafters begin again on what is left.
- any -> IDLE, ``release``: the applier saw a stop (end of generation, stop word, limit, the
  grammar's end, a prompt that took too long or asked for no tokens), or the runner ended the job
  (cancel, deadline, a full context that cannot shift, a failure). A generating slot's drafters
  learn the finished request (``DraftChain.finish``); the released slot holds no job, sampler,
  grammar or chain, and keeps the tokens whose KV entries it still has (for prefix reuse by a
  later request).

The applier writes the slot's tokens (``cache``, ``pending``, ``sampled``) as it decodes, and a
slot restore (``slot_files.py``) an idle slot's ``cache``; neither changes its state. Engine thread only.

It is also the one owner of whose prompts a slot's cache holds (``Slot.kv_owner``, the tenant of
``LearningScopes.kv_owner``: "" for everyone under ``--spec-learning shared``, else an API key or one
request): a job of another tenant finds the cache empty (it is evicted before anything can reuse
it: common prefix, ``n_cache_reuse``; the draft model's context of the slot too), so ``cache_n``
and the prompt time never reveal another tenant's prompt.
"""

from __future__ import annotations

import logging
import time

from slotserver.engine.batch import common_prefix
from slotserver.engine.engine import Engine
from slotserver.errors import ServerError
from slotserver.sampling.grammar_sampler import new_grammar
from slotserver.sampling.llama_chain import free_sampler, make_sampler
from slotserver.serving.job import Event, Job
from slotserver.serving.kv_moves import plan_chunk_reuse, plan_context_shift
from slotserver.serving.slots import Slot, SlotState
from slotserver.speculation.draft_model import ModelDrafter
from slotserver.speculation.learning_scopes import LearningScopes
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)


class SlotLifecycle:
    def __init__(self, engine: Engine, chains: LearningScopes, stats: ServerStats, *, cache_prompt: bool,
                 model_drafter: ModelDrafter | None = None) -> None:
        self.engine = engine
        self.chains = chains
        self.stats = stats
        self.cache_prompt = cache_prompt
        self.model_drafter = model_drafter  # its per-slot draft context is the slot's tenant's too

    def start(self, slot: Slot, job: Job, share: Slot | None = None) -> None:
        """Give ``job`` to the idle ``slot``: reuse the longest usable cached prefix, build the sampler.

        ``share``: another slot holding this prompt (the first choice of an n > 1 request); its KV
        entries are shared instead of decoding the prompt again.
        """
        assert slot.is_idle and slot.sampler is None and slot.grammar is None
        slot.job = job  # first: if anything below raises, ``release`` can still end the job
        slot.state = SlotState.PREFILL
        owner = self.chains.kv_owner(job.tenant, job.request_id)
        if slot.kv_owner != owner:
            self.forget(slot)  # another tenant's prompt: never reused, gone before this job runs
            if self.model_drafter is not None:
                self.model_drafter.forget(slot.id)
            slot.kv_owner = owner
        use_cache = self.cache_prompt and job.request.cache_prompt
        n_keep = common_prefix(slot.cache, job.prompt) if use_cache else 0
        n_keep = min(n_keep, len(job.prompt) - 1)  # at least one token is evaluated
        n_keep = self.engine.reusable_prefix(slot.id, n_keep)
        if share is not None and share is not slot:
            n_keep = self._share(slot, share, job.prompt, n_keep)
        if use_cache and job.request.n_cache_reuse > 0 and self.engine.can_shift:
            n_keep = self._reuse_chunks(slot, job, n_keep)
        self.engine.remove(slot.id, n_keep)
        del slot.cache[n_keep:]
        slot.pending = job.prompt[n_keep:]
        sampling = job.request.sampling
        slot.sampler = make_sampler(sampling, self.engine.vocab.ptr, self.engine.vocab.n_tokens, job.prompt)
        if sampling.grammar:
            slot.grammar = new_grammar(self.engine.vocab.ptr, sampling.grammar)
        slot.chain = self.chains.for_tenant(job.tenant)
        job.id_slot = slot.id
        job.n_cached = n_keep
        job.t_prompt_start = time.perf_counter()
        self.stats.n_prompt_tokens_cached += n_keep
        self.stats.n_prompt_cache_hits += n_keep > 0

    def start_generating(self, slot: Slot) -> None:
        """PREFILL -> GENERATING: the prompt is in the KV cache and the first token is about to be
        sampled; the slot's drafters begin on the prompt."""
        assert slot.state is SlotState.PREFILL
        slot.state = SlotState.GENERATING
        slot.chain.begin(slot.id, slot.cache)

    def _share(self, slot: Slot, source: Slot, prompt: list[int], n_own: int) -> int:
        """Share ``source``'s KV entries of the prompt with ``slot`` if that covers more than the
        slot's own ``n_own`` cached tokens; returns how many prompt tokens the slot now holds."""
        n = min(common_prefix(source.cache, prompt), len(prompt) - 1)
        n = self.engine.reusable_prefix(source.id, n)
        if n <= n_own:
            return n_own
        self.engine.remove(slot.id, 0)
        self.engine.copy(source.id, slot.id, n)
        slot.cache[:] = prompt[:n]
        return n

    def _reuse_chunks(self, slot: Slot, job: Job, n_keep: int) -> int:
        """``n_cache_reuse``: move cached runs found after the common prefix to where the new prompt
        needs them (llama-server's KV shifting); returns how much of the prompt is now cached."""
        if self.engine.reusable_prefix(slot.id, len(slot.cache)) < len(slot.cache):
            return n_keep  # sliding-window cells are missing: moved runs could not be attended to correctly
        moves = plan_chunk_reuse(slot.cache, job.prompt[:-1], n_keep, job.request.n_cache_reuse)
        for m in moves:
            self.engine.remove(slot.id, m.dst, m.src)
            self.engine.shift(slot.id, m.src, m.src + m.n, m.dst - m.src)
            slot.cache[m.dst : m.dst + m.n] = job.prompt[m.dst : m.dst + m.n]
        if moves:
            n_keep = moves[-1].dst + moves[-1].n
            log.debug("slot %d: reused %d cached tokens by shifting", slot.id, sum(m.n for m in moves))
        return n_keep

    def shift_context(self, slot: Slot, n_ctx: int) -> bool:
        """``--context-shift``: the slot's cache is full; drop old tokens after n_keep and go on.
        False when nothing can be dropped (the caller then ends the request, truncated)."""
        job = slot.job
        req = job.request
        plan = plan_context_shift(len(slot.cache), len(job.prompt), req.n_keep, req.n_discard, n_ctx,
                                  self.engine.vocab.add_bos)
        if plan is None:
            return False
        end = len(slot.cache)
        self.engine.remove(slot.id, plan.keep, plan.keep + plan.discard)
        self.engine.shift(slot.id, plan.keep + plan.discard, end, -plan.discard)
        del slot.cache[plan.keep : plan.keep + plan.discard]
        job.is_truncated = True
        slot.chain.begin(slot.id, slot.cache)  # the drafters' per-slot views of the history start over
        log.debug("slot %d: context shift dropped %d tokens after the first %d", slot.id, plan.discard, plan.keep)
        return True

    def release(self, slot: Slot, stop_type: str, error: ServerError | None = None) -> tuple[Job, Event]:
        """End the slot's job with ``stop_type`` (or ``error``) and make the slot idle.

        Returns the job's final event: after it, the engine never touches the job again.
        """
        job = slot.job
        job.stop_type = stop_type
        if job.t_prompt_end == 0.0:
            job.t_prompt_end = time.perf_counter()
        del job.probs[job.n_gen :]  # tokens sampled after the stop are not part of the output
        tokens, probs = job.take_unsent()
        event = Event(True, job.text.take(final=True), tokens, error, probs=probs)
        if slot.sampler is not None:
            free_sampler(slot.sampler)
        if slot.grammar is not None:
            free_sampler(slot.grammar)
        slot.sampler = slot.grammar = None
        if slot.chain is not None and slot.state is SlotState.GENERATING:
            slot.chain.finish(slot.id, slot.cache + [slot.sampled] if slot.sampled >= 0 else list(slot.cache))
        slot.chain = None
        slot.job = None
        slot.pending = []
        slot.state = SlotState.IDLE
        slot.t_last_used = time.perf_counter()
        self._count(job, len(slot.cache))
        if not self.engine.config.streams and not (self.cache_prompt and job.request.cache_prompt):
            # In one cache every decode's attention walks every slot's cells, an idle slot's too
            # (measured: docs/measurements.md). This request's cells were not to be kept, so they
            # go now, not at the slot's reuse.
            self.forget(slot)
        return job, event

    def forget(self, slot: Slot) -> None:
        """Drop every KV entry of the slot (after a failure its cache cannot be trusted; in one cache,
        after a request whose cells were not to be kept)."""
        self.engine.remove(slot.id, 0)
        slot.cache.clear()

    def _count(self, job: Job, n_cached: int) -> None:
        st = self.stats
        st.n_gen_tokens += job.n_gen
        st.n_requests_finished += 1
        st.n_tokens_max = max(st.n_tokens_max, n_cached)
        if job.n_gen:
            st.t_gen_s += job.t_last_token - job.t_prompt_end
        st.request_s.observe(time.perf_counter() - job.t_queued)
        if self.chains.shared.drafters:
            for line in self.chains.shared.stats_lines():
                log.info(line)
