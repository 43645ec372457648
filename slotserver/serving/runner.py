"""The engine loop: admits jobs into slots and runs one step per ``llama_decode``.

Threads and what each owns:

- **Event loop** (aiohttp handlers): calls ``submit`` and ``cancel``, which only put a message into
  ``_inbox`` (a thread-safe ``queue.SimpleQueue``) and set ``_wake``. It delivers each step's
  events into the jobs' ``events`` queues and owns ``n_in_flight`` (jobs submitted whose final
  event is not delivered yet) and ``all_done``. It mutates nothing else here; metrics, ``/slots``
  and ``/props`` only read plain attributes.
- **Engine thread** (the single worker of ``_executor``, ``engine_thread()``; the server creates
  it before loading the model, so loading, calibrating and serving all run on it): owns ``waiting``, ``slots``, the draft
  chain and its drafters, the engine (llama context, batch, samplers), ``stats``, persistence, and
  every job from its submit to its final event. A step drains the inbox first, then ends jobs past their
  deadline, admits (only what the shared KV cache can hold), then plan -> draft -> decode -> apply.
  Steps run back to back in turns (``_steps``), each step's events handed to the event loop
  (``call_soon_threadsafe``) as it ends. Each step, and each ``on_engine_thread`` job, is marked
  on ``watchdog`` as it starts and ends (``slotserver/serving/watchdog.py``: a stuck step turns ``/health``
  to 503).

Failure isolation: an exception while starting, drafting or applying one slot's work ends that
request alone (``GenerationFailed``, its slot's KV dropped); a failed ``llama_decode`` is retried
without what caused it where that is known (KV cache full: idle caches, then prompt chunks and
drafts, then the newest request), else only the requests in that batch fail. An exception that
escapes a step is fatal: every job gets ``EngineStopped``, ``failure`` is set (``/health`` answers
503) and ``on_fatal`` is called so the process exits non-zero instead of serving a dead engine.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

from slotserver.engine.batch import BatchPlan
from slotserver.engine.engine import DecodeError, Engine
from slotserver.errors import DeadlineExceeded, EngineStopped, GenerationFailed, KvCacheFull, QueueFull, ServerError
from slotserver.limits import KV_RESERVE, MAX_UNREAD_EVENTS, LimitsConfig
from slotserver.serving.apply_rows import Applier
from slotserver.serving.drafting import Drafting
from slotserver.serving.job import Event, Job, Outbox
from slotserver.serving.lifecycle import SlotLifecycle
from slotserver.serving.scheduler import DecodeWork, IdleSlot, PrefillWork, pick_slot, plan_batch
from slotserver.serving.slots import Slot, SlotState
from slotserver.serving.watchdog import Watchdog
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.draft_model import ModelDrafter
from slotserver.speculation.learning_scopes import LearningScopes
from slotserver.speculation.persistence import Persistence
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)


def engine_thread() -> ThreadPoolExecutor:
    """The single worker every llama.cpp decode of a server runs on. llama.cpp's CPU backend
    (built with OpenMP here) keeps a team of worker threads per calling thread: while two threads
    that decoded are alive, every decode on either is much slower (``benchmarks/decode_threads.py``;
    figures in docs/measurements.md). The verify-cost calibration used to run in a worker of the
    default executor, which stays alive, so a server that measured its profile at start served at
    that speed until restarted (``tests/integration/test_engine_thread.py``)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")


KV_FULL = 1  # llama_decode: no KV slot for the batch (the context is unchanged)
SUBMIT, CANCEL = "submit", "cancel"
TURN_S = 0.05  # the longest the engine steps without letting other engine-thread jobs run


class Runner:
    def __init__(
        self, engine: Engine, chain: DraftChain, *, n_parallel: int, cache_prompt: bool = True,
        stats: ServerStats | None = None, persistence: Persistence | None = None,
        on_fatal: Callable[[str], None] | None = None, limits: LimitsConfig = LimitsConfig(),
        chains: LearningScopes | None = None, context_shift: bool = False, model_drafter: ModelDrafter | None = None,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        self.engine = engine
        self.model_drafter = model_drafter  # the draft model, if configured (engine thread only)
        self.drafting = Drafting(engine, chain, model_drafter)
        self.limits = limits
        self.chain = chain  # the shared chain: metrics, /props and persistence read it
        self.chains = chains or LearningScopes(chain)
        self.slots = [Slot(i) for i in range(n_parallel)]
        self.stats = stats or ServerStats()
        self.persistence = persistence
        self.on_fatal = on_fatal  # called once, on the event loop, if the engine loop dies
        self.failure = ""  # why the engine loop stopped; empty while it runs
        self.waiting: collections.deque[Job] = collections.deque()  # engine thread only
        self.lifecycle = SlotLifecycle(engine, self.chains, self.stats, cache_prompt=cache_prompt,
                                       model_drafter=model_drafter)
        if context_shift and not engine.can_shift:
            log.warning("--context-shift is off: this model's KV cache cannot be shifted")
        self.context_shift = context_shift and engine.can_shift
        self.apply = Applier(engine, self.stats, self.lifecycle, context_shift=self.context_shift)
        self._inbox: queue.SimpleQueue[tuple[str, Job]] = queue.SimpleQueue()
        # The engine thread: the one OS thread that ever calls into llama.cpp's compute (``engine_thread``).
        self._executor = executor or engine_thread()
        self._wake = asyncio.Event()
        self._step_out: Outbox = []  # the running step's events (engine thread while it runs)
        self.watchdog = Watchdog(limits.step_timeout_s)  # the engine thread marks steps; the event loop checks
        self.n_in_flight = 0  # event loop only
        self.all_done = asyncio.Event()  # set while no job is in flight (graceful shutdown waits on it)
        self.all_done.set()

    # -- called on the event loop --------------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue ``job``; 503 when the engine is down or the waiting queue is full."""
        if self.failure:
            raise EngineStopped(self.failure)
        n_waiting = self.n_in_flight - len(self.slots)
        if n_waiting >= self.limits.max_waiting:
            raise QueueFull(n_waiting, retry_after_s=max(1, n_waiting // max(len(self.slots), 1)))
        job.t_deadline = job.t_queued + self.limits.timeout_s
        self.n_in_flight += 1
        self.all_done.clear()
        self._inbox.put((SUBMIT, job))
        self._wake.set()

    def cancel(self, job: Job) -> None:
        """Ask the engine to end ``job``; a no-op if it already ended. Its final event follows."""
        self._inbox.put((CANCEL, job))
        self._wake.set()

    @property
    def n_busy(self) -> int:
        return sum(not s.is_idle for s in self.slots)

    def _has_work(self) -> bool:
        return not self._inbox.empty() or bool(self.waiting) or self.n_busy > 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        watch = asyncio.create_task(self.watchdog.watch())  # serving starts: loading never counts
        try:
            while True:
                if not self._has_work():
                    self._wake.clear()
                    await self._wake.wait()
                await loop.run_in_executor(self._executor, self._steps, loop)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._die(exc)
        finally:
            watch.cancel()

    def _deliver(self, outbox: Outbox) -> None:
        for job, event in outbox:
            job.events.put_nowait(event)
            if event.final:
                self.n_in_flight -= 1
                if self.n_in_flight == 0:
                    self.all_done.set()
            elif job.events.qsize() > MAX_UNREAD_EVENTS:  # its client stopped reading: free the slot
                self.cancel(job)

    def _die(self, exc: BaseException) -> None:
        """The engine loop cannot go on: fail every job, mark the runner failed, tell the owner."""
        self.failure = f"engine loop failed: {type(exc).__name__}"
        log.critical("%s; failing every request and stopping", self.failure, exc_info=exc)
        error = EngineStopped(self.failure)
        produced, self._step_out = self._step_out, []
        self._deliver([(job, event) for job, event in produced if event.final])  # jobs that ended before it
        jobs = [s.job for s in self.slots if s.job is not None] + list(self.waiting)
        while not self._inbox.empty():
            kind, job = self._inbox.get_nowait()
            if kind == SUBMIT:
                jobs.append(job)
        self._deliver([(job, Event(True, error=error)) for job in dict.fromkeys(jobs)])
        if self.on_fatal is not None:
            self.on_fatal(self.failure)

    async def on_engine_thread(self, fn):
        """Run ``fn`` on the engine thread (drafters and llama state belong to it), watched as a step."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._watched, fn)

    def _watched(self, fn):
        self.watchdog.step_started()
        try:
            return fn()
        finally:
            self.watchdog.step_ended()

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    # -- called on the engine thread -----------------------------------------------------------
    def _steps(self, loop: asyncio.AbstractEventLoop) -> None:
        """Steps back to back while there is work, for at most ``TURN_S`` (other engine-thread jobs,
        ``on_engine_thread``, wait meanwhile); each step's events go to the event loop as it ends.
        A round trip through the event loop between steps left the engine idle between decodes
        (docs/measurements.md), which llama-server does not pay."""
        t_end = time.perf_counter() + TURN_S
        while True:
            outbox = self._watched(self._step)
            if outbox:
                loop.call_soon_threadsafe(self._deliver, outbox)
            if not self._has_work() or time.perf_counter() >= t_end:
                return

    def _step(self) -> Outbox:
        t_step = time.perf_counter()
        out: Outbox = []
        self._step_out = out  # kept so that, if the step dies, ``_die`` still delivers what it produced
        self._drain_inbox(out)
        self._expire(out)
        self._admit(out)
        decodes, prefills = self._collect_work(out)
        if not decodes and not prefills:
            return out
        plan = plan_batch(decodes, prefills, self.engine.config.n_batch)
        t0 = time.perf_counter()
        plan, rows = self._decode(plan, out)
        self._count_decode(plan, time.perf_counter() - t0)
        for entry, entry_rows in zip(plan.entries, rows):
            slot = self.slots[entry.slot_id]
            try:
                out += self.apply.entry(slot, entry, entry_rows)
            except Exception:
                out += self._failed(slot, "applying the decoded batch")
        for slot in self.slots:
            out += Applier.partial(slot)
        self._maybe_save()
        self.stats.t_step_s += time.perf_counter() - t_step
        return out

    def _drain_inbox(self, out: Outbox) -> None:
        while True:
            try:
                kind, job = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == SUBMIT:
                self.waiting.append(job)
            else:
                out += self._cancel(job)

    def _cancel(self, job: Job) -> Outbox:
        if job in self.waiting:
            self.waiting.remove(job)
            return [(job, Event(True, is_cancelled=True))]
        for slot in self.slots:
            if slot.job is job:
                done, event = self.lifecycle.release(slot, "none")
                event.is_cancelled = True
                return [(done, event)]
        return []  # already ended: its final event was sent

    def _expire(self, out: Outbox) -> None:
        """Jobs past their deadline: a waiting one gets 503, a running one ends with what it has."""
        now = time.perf_counter()
        if any(j.t_deadline < now for j in self.waiting):
            for job in [j for j in self.waiting if j.t_deadline < now]:
                self.waiting.remove(job)
                out.append((job, Event(True, error=DeadlineExceeded(self.limits.timeout_s))))
        for slot in self.slots:
            if slot.job is not None and slot.job.t_deadline < now:
                log.warning("request on slot %d reached the server timeout; ending it", slot.id)
                out.append(self.lifecycle.release(slot, "limit"))

    def _kv_free(self) -> int:
        """KV cells not claimed by busy slots (idle slots' caches are evicted when room is needed)."""
        return self.engine.n_ctx - sum(len(s.cache) + len(s.pending) for s in self.slots if not s.is_idle)

    def _admit(self, out: Outbox) -> None:
        """Assign waiting jobs (FIFO) to idle slots while the shared KV cache has room for them.

        A job pinned to a busy slot keeps waiting. A job whose prompt plus ``KV_RESERVE`` does not
        fit the free cells waits too, and so does every job behind it (no overtaking), unless no
        slot is busy: a prompt that fits the context alone is always admitted then.
        """
        still_waiting: collections.deque[Job] = collections.deque()
        n_free = self._kv_free()
        while self.waiting:
            job = self.waiting.popleft()
            if job.parent is not None and self._prompt_pending(job.parent):
                still_waiting.append(job)  # another choice of the same request: it will share the prompt's KV
                continue
            idle = [IdleSlot(s.id, s.cache, s.t_last_used, s.kv_owner) for s in self.slots if s.is_idle]
            slot_id = pick_slot(idle, job.prompt, job.request.id_slot, len(self.slots),
                                self.chains.kv_owner(job.tenant, job.request_id))
            if slot_id is None:
                still_waiting.append(job)
                continue
            n_need = len(job.prompt) + KV_RESERVE
            if n_need > n_free and self.n_busy > 0:
                still_waiting.append(job)
                still_waiting.extend(self.waiting)
                self.waiting.clear()
                break
            n_free -= n_need
            slot = self.slots[slot_id]
            try:
                self.lifecycle.start(slot, job, share=self._parent_slot(job))
            except Exception:
                out += self._failed(slot, "starting the request")
        self.waiting = still_waiting

    def _prompt_pending(self, parent: Job) -> bool:
        """The parent choice's prompt is not in the KV cache yet (it waits, or its slot still prefills)."""
        return parent in self.waiting or any(s.job is parent and s.state is SlotState.PREFILL for s in self.slots)

    def _parent_slot(self, job: Job) -> Slot | None:
        """The slot holding the prompt of ``job``'s first choice, if it still does."""
        if job.parent is None or job.parent.id_slot < 0:
            return None
        return self.slots[job.parent.id_slot]

    def _collect_work(self, out: Outbox) -> tuple[list[DecodeWork], list[PrefillWork]]:
        """Each generating slot's sampled token and draft; each prefilling slot's pending prompt."""
        decodes, prefills, generating = [], [], []
        for slot in self.slots:
            if slot.state is SlotState.GENERATING and len(slot.cache) + 1 >= self.engine.n_ctx_slot:
                out += self._full(slot)
            if slot.state is SlotState.GENERATING:
                try:
                    draft = self.drafting.for_slot(slot)
                except Exception:
                    out += self._failed(slot, "drafting")
                    continue
                work = DecodeWork(slot.id, len(slot.cache), slot.sampled, draft)
                decodes.append(work)
                generating.append((slot, work))
        prefilling = sorted((s for s in self.slots if s.state is SlotState.PREFILL), key=lambda s: s.job.t_queued)
        prefills = [PrefillWork(s.id, len(s.cache), s.pending) for s in prefilling]
        self.drafting.with_model(generating, prefilling)
        room = self.engine.config.n_batch - len(decodes)
        self.drafting.select(generating, min(sum(len(p.pending) for p in prefills), room), room)
        return decodes, prefills

    def _full(self, slot: Slot) -> Outbox:
        """The slot's context is full (only reached with --context-shift): shift it, or end the request."""
        try:
            if self.lifecycle.shift_context(slot, self.engine.n_ctx_slot):
                return []
        except Exception:
            return self._failed(slot, "shifting the context")
        slot.job.is_truncated = True
        return [self.lifecycle.release(slot, "limit")]

    def _failed(self, slot: Slot, what: str) -> Outbox:
        """Called in an ``except``: one slot's work raised; end that request alone."""
        log.exception("%s failed on slot %d; ending that request only", what, slot.id)
        return self._fail(slot, GenerationFailed())

    def _fail(self, slot: Slot, error: ServerError) -> Outbox:
        self.lifecycle.forget(slot)
        return [self.lifecycle.release(slot, "none", error)] if slot.job is not None else []

    def _decode(self, plan: BatchPlan, out: Outbox) -> tuple[BatchPlan, list[list[int]]]:
        """Decode ``plan``; returns the plan that was decoded (maybe smaller) and its output rows.

        KV cache full: evict idle slots' cached prefixes, then hold back prompt chunks and drafts,
        then end the newest request in the batch, retrying after each. Any other failure ends the
        requests in the batch only.
        """
        while plan.entries:
            try:
                return plan, self.engine.decode(plan)
            except DecodeError as exc:
                if exc.code != KV_FULL:
                    log.error("%s; ending the %d requests in that batch", exc, len(plan.entries))
                    for e in plan.entries:
                        out += self._fail(self.slots[e.slot_id], GenerationFailed())
                    return BatchPlan(), []
            if self._evict_idle_caches():
                log.warning("KV cache full: evicted the prompt caches of idle slots")
            elif self._can_hold_back(plan):
                log.warning("KV cache full: holding back prompt chunks and drafts this step")
                plan = BatchPlan([replace(e, tokens=e.tokens[:1]) for e in plan.entries if e.is_decode])
            else:
                newest = max(plan.entries, key=lambda e: self.slots[e.slot_id].job.t_queued)
                log.warning("KV cache full: ending the newest request (slot %d)", newest.slot_id)
                out += self._fail(self.slots[newest.slot_id], KvCacheFull())
                plan = BatchPlan([e for e in plan.entries if e is not newest])
        return plan, []

    @staticmethod
    def _can_hold_back(plan: BatchPlan) -> bool:
        """Prompt chunks and drafts may wait only while some slot still makes progress without them."""
        n_decodes = sum(e.is_decode for e in plan.entries)
        return n_decodes > 0 and plan.n_tokens > n_decodes

    def _evict_idle_caches(self) -> bool:
        evicted = False
        for slot in self.slots:
            if slot.is_idle and slot.cache:
                self.lifecycle.forget(slot)
                evicted = True
        return evicted

    def _count_decode(self, plan: BatchPlan, seconds: float) -> None:
        if not plan.entries:
            return
        st = self.stats
        st.t_decode_s += seconds
        st.n_decode_calls += 1
        st.n_decode_tokens += plan.n_tokens
        st.n_decode_slots += len(plan.entries)
        st.tokens_per_decode.observe(plan.n_tokens)
        self.drafting.observe_decode(plan, seconds)

    def _maybe_save(self) -> None:
        if self.persistence is None:
            return
        try:
            self.persistence.maybe_save()
        except Exception:  # a save must never take the step down; Persistence counts OS errors itself
            log.exception("saving learned drafter state failed")
