"""The engine loop: admits jobs into slots and runs one step per ``llama_decode``.

A step runs in one dedicated worker thread (the asyncio loop never waits on llama.cpp):
reap cancelled jobs, admit waiting ones, then plan -> draft -> decode -> apply. Events for the
HTTP handlers are collected during the step and delivered on the event loop when it returns.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from slotserver.apply import Applier
from slotserver.chain import DraftChain
from slotserver.engine import DecodeError, Engine
from slotserver.job import Event, Job
from slotserver.persist import Persistence
from slotserver.samplers import make_sampler
from slotserver.scheduler import DecodeWork, IdleSlot, PrefillWork, common_prefix, draft_budget, pick_slot, plan_batch
from slotserver.slots import Slot, SlotState
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)


class Runner:
    def __init__(
        self, engine: Engine, chain: DraftChain, n_parallel: int, cache_prompt: bool = True,
        stats: ServerStats | None = None, persistence: Persistence | None = None,
    ) -> None:
        self.engine = engine
        self.chain = chain
        self.slots = [Slot(i) for i in range(n_parallel)]
        self.cache_prompt = cache_prompt
        self.stats = stats or ServerStats()
        self.persistence = persistence
        self.waiting: collections.deque[Job] = collections.deque()
        self.apply = Applier(engine, chain, self.stats)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._wake = asyncio.Event()

    # -- called on the event loop --------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self.waiting.append(job)
        self._wake.set()

    def cancel(self, job: Job) -> None:
        job.is_cancelled = True
        self._wake.set()

    @property
    def n_busy(self) -> int:
        return sum(not s.is_idle for s in self.slots)

    def _has_work(self) -> bool:
        return bool(self.waiting) or self.n_busy > 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._has_work():
                self._wake.clear()
                await self._wake.wait()
            try:
                outbox = await loop.run_in_executor(self._executor, self._step)
            except Exception as exc:  # an engine failure must not kill the server
                log.exception("engine step failed")
                outbox = await loop.run_in_executor(self._executor, self._fail_all, exc)
            for job, event in outbox:
                job.events.put_nowait(event)
            await asyncio.sleep(0)  # let handlers submit and cancel between steps

    async def on_engine_thread(self, fn):
        """Run ``fn`` on the engine thread (drafters and llama state belong to it)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    # -- called on the engine thread -----------------------------------------------------------
    def _step(self) -> list[tuple[Job, Event]]:
        outbox = self.apply.outbox = []
        self._reap()
        self._admit()
        decodes, prefills = self._collect_work()
        if not decodes and not prefills:
            return outbox
        plan = plan_batch(decodes, prefills, self.engine.config.n_batch)
        t0 = time.perf_counter()
        rows = self._decode(plan)
        self.stats.t_decode_s += time.perf_counter() - t0
        self.stats.n_decode_calls += 1
        self.stats.n_decode_tokens += plan.n_tokens
        self.stats.n_decode_slots += len(plan.entries)
        self.stats.tokens_per_decode.observe(plan.n_tokens)
        for entry, entry_rows in zip(plan.entries, rows):
            self.apply.entry(self.slots[entry.slot_id], entry, entry_rows)
        self.apply.flush_partials(self.slots)
        if self.persistence is not None:
            self.persistence.maybe_save()
        return outbox

    def _reap(self) -> None:
        for slot in self.slots:
            if slot.job is not None and slot.job.is_cancelled:
                self.apply.finish(slot, "none")
        if any(j.is_cancelled for j in self.waiting):
            self.waiting = collections.deque(j for j in self.waiting if not j.is_cancelled)

    def _admit(self) -> None:
        """Assign waiting jobs (FIFO) to idle slots; a job pinned to a busy slot keeps waiting."""
        still_waiting: collections.deque[Job] = collections.deque()
        while self.waiting:
            job = self.waiting.popleft()
            idle = [IdleSlot(s.id, s.cache, s.t_last_used) for s in self.slots if s.is_idle]
            slot_id = pick_slot(idle, job.prompt, job.request.id_slot, len(self.slots))
            if slot_id is None:
                still_waiting.append(job)
                continue
            self._start(self.slots[slot_id], job)
        self.waiting = still_waiting

    def _start(self, slot: Slot, job: Job) -> None:
        use_cache = self.cache_prompt and job.request.cache_prompt
        n_keep = common_prefix(slot.cache, job.prompt) if use_cache else 0
        n_keep = min(n_keep, len(job.prompt) - 1)  # at least one token is evaluated
        n_keep = self.engine.reusable_prefix(slot.id, n_keep)
        self.engine.remove(slot.id, n_keep)
        del slot.cache[n_keep:]
        slot.pending = job.prompt[n_keep:]
        slot.state = SlotState.PREFILL
        slot.job = job
        slot.sampler = make_sampler(job.request.sampling, self.engine.vocab.n_tokens, job.prompt)
        job.id_slot = slot.id
        job.n_cached = n_keep
        job.t_prompt_start = time.perf_counter()
        self.stats.n_prompt_tokens_cached += n_keep
        self.stats.n_prompt_cache_hits += n_keep > 0

    def _collect_work(self) -> tuple[list[DecodeWork], list[PrefillWork]]:
        decodes, prefills = [], []
        for slot in self.slots:
            if slot.state is SlotState.GENERATING:
                decodes.append(DecodeWork(slot.id, len(slot.cache), slot.sampled, self._draft(slot)))
        for slot in sorted(self.slots, key=lambda s: s.job.t_queued if s.job else 0.0):
            if slot.state is SlotState.PREFILL:
                prefills.append(PrefillWork(slot.id, len(slot.cache), slot.pending))
        return decodes, prefills

    def _draft(self, slot: Slot) -> list[int]:
        job = slot.job
        n_max = draft_budget(self.engine.n_ctx, len(slot.cache), job.n_remaining, job.limits.n_max)
        if n_max <= 0 or not self.chain.drafters:
            return []
        return self.chain.draft(slot.id, slot.cache, slot.sampled, replace(job.limits, n_max=n_max))

    def _decode(self, plan) -> list[list[int]]:
        """Decode; when the KV cache is full, drop idle slots' cached prefixes once and retry."""
        try:
            return self.engine.decode(plan)
        except DecodeError as exc:
            if exc.code != 1:
                raise
        log.warning("KV cache full: evicting the prompt caches of idle slots")
        for slot in self.slots:
            if slot.is_idle and slot.cache:
                self.engine.remove(slot.id, 0)
                slot.cache.clear()
        return self.engine.decode(plan)

    def _fail_all(self, exc: Exception) -> list[tuple[Job, Event]]:
        outbox = self.apply.outbox = []
        for slot in self.slots:
            if slot.job is not None:
                self.apply.finish(slot, "none", error=exc)
            self.engine.remove(slot.id, 0)
            slot.cache.clear()
        return outbox
