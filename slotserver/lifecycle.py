"""A slot's lifecycle: start a job on it (prefix reuse, sampler) and release it (final event, idle).

The only code that gives a slot a job or takes it away, so the rules live in one place: a started
slot holds a sampler chain and pending prompt tokens; a released slot holds neither, and keeps the
tokens whose KV entries it still has (for prefix reuse by a later request). Engine thread only.
"""

from __future__ import annotations

import logging
import time

from slotserver.chains import ChainSet
from slotserver.engine import Engine
from slotserver.errors import ServerError
from slotserver.job import Event, Job
from slotserver.sampler_chain import free_sampler, make_sampler
from slotserver.scheduler import common_prefix
from slotserver.slots import Slot, SlotState
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)


class SlotLifecycle:
    def __init__(self, engine: Engine, chains: ChainSet, stats: ServerStats, *, cache_prompt: bool) -> None:
        self.engine = engine
        self.chains = chains
        self.stats = stats
        self.cache_prompt = cache_prompt

    def start(self, slot: Slot, job: Job) -> None:
        """Give ``job`` to the idle ``slot``: reuse the longest usable cached prefix, build the sampler."""
        assert slot.is_idle and slot.sampler is None
        slot.job = job  # first: if anything below raises, ``release`` can still end the job
        slot.state = SlotState.PREFILL
        use_cache = self.cache_prompt and job.request.cache_prompt
        n_keep = common_prefix(slot.cache, job.prompt) if use_cache else 0
        n_keep = min(n_keep, len(job.prompt) - 1)  # at least one token is evaluated
        n_keep = self.engine.reusable_prefix(slot.id, n_keep)
        self.engine.remove(slot.id, n_keep)
        del slot.cache[n_keep:]
        slot.pending = job.prompt[n_keep:]
        slot.sampler = make_sampler(job.request.sampling, self.engine.vocab.n_tokens, job.prompt)
        slot.chain = self.chains.for_tenant(job.tenant)
        job.id_slot = slot.id
        job.n_cached = n_keep
        job.t_prompt_start = time.perf_counter()
        self.stats.n_prompt_tokens_cached += n_keep
        self.stats.n_prompt_cache_hits += n_keep > 0

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
        slot.sampler = None
        slot.chain = None
        slot.job = None
        slot.pending = []
        slot.state = SlotState.IDLE
        slot.t_last_used = time.perf_counter()
        self._count(job, len(slot.cache))
        return job, event

    def forget(self, slot: Slot) -> None:
        """Drop every KV entry of the slot (after a failure its cache cannot be trusted)."""
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
