"""Apply one decoded batch entry to its slot: verify drafts, emit tokens, detect stops, finish jobs.

Verification is sample-and-compare with the slot's own sampler chain (llama.cpp's
``common_sampler_sample_and_accept_n``): at each draft position the target samples exactly as it
would without speculation and the draft token is kept only if it equals the sample. The sampler's
RNG advances once per emitted token, so output is the same at any temperature.
"""

from __future__ import annotations

import logging
import time

from slotserver.chain import DraftChain
from slotserver.engine import Engine
from slotserver.job import Event, Job
from slotserver.samplers import free_sampler
from slotserver.scheduler import BatchEntry
from slotserver.slots import Slot, SlotState
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)


class Applier:
    def __init__(self, engine: Engine, chain: DraftChain, stats: ServerStats) -> None:
        self.engine = engine
        self.chain = chain
        self.stats = stats
        self.outbox: list[tuple[Job, Event]] = []

    def entry(self, slot: Slot, entry: BatchEntry, rows: list[int]) -> None:
        if entry.is_decode:
            self._verify(slot, entry, rows)
        else:
            self._prefill(slot, entry, rows)

    def _prefill(self, slot: Slot, entry: BatchEntry, rows: list[int]) -> None:
        job = slot.job
        slot.cache.extend(entry.tokens)
        del slot.pending[: len(entry.tokens)]
        job.n_prompt_decoded += len(entry.tokens)
        if not entry.ends_prompt:
            return
        job.t_prompt_end = time.perf_counter()
        self.stats.n_prompt_tokens += job.n_prompt_decoded
        self.stats.t_prompt_s += job.t_prompt_end - job.t_prompt_start
        if job.request.n_predict == 0:
            self.finish(slot, "limit")
            return
        slot.state = SlotState.GENERATING
        self.chain.begin(slot.id, slot.cache)
        token = self.engine.sample(slot.sampler, rows[0])
        self._record_probs(job, rows[0], token)
        self.stats.ttft_s.observe(time.perf_counter() - job.t_queued)
        self._emit(slot, [token])

    def _verify(self, slot: Slot, entry: BatchEntry, rows: list[int]) -> None:
        job = slot.job
        draft = entry.tokens[1:]
        sampled: list[int] = []
        # Plain greedy needs no sampler state: take every row's argmax at once.
        greedy = self.engine.argmax(rows) if job.request.sampling.is_plain_greedy else None
        for i, row in enumerate(rows):
            token = greedy[i] if greedy is not None else self.engine.sample(slot.sampler, row)
            sampled.append(token)
            self._record_probs(job, row, token)
            if i >= len(draft) or token != draft[i]:
                break
        n_accepted = len(sampled) - 1
        if draft:
            self.chain.accept(slot.id, n_accepted)
            job.n_draft += len(draft)
            job.n_draft_accepted += n_accepted
            self.stats.n_draft_tokens += len(draft)
            self.stats.n_draft_accepted += n_accepted
            self.stats.n_verify_steps += 1
        # KV now holds [sampled, d1..dk]; keep sampled + the accepted prefix of the draft.
        keep = 1 + n_accepted
        if keep < len(entry.tokens):
            self.engine.remove(slot.id, entry.pos0 + keep)
        slot.cache.extend(entry.tokens[:keep])
        self._emit(slot, sampled)

    def _record_probs(self, job: Job, row: int, token: int) -> None:
        if job.request.n_probs > 0:
            job.probs.append(self.engine.top_logprobs(row, job.request.n_probs, token))

    def _emit(self, slot: Slot, tokens: list[int]) -> None:
        """Hand new tokens to the job; the last one becomes the slot's pending ``sampled`` token."""
        job = slot.job
        now = time.perf_counter()
        vocab = self.engine.vocab
        n_ctx = self.engine.n_ctx
        for token in tokens:
            if job.t_last_token and job.n_gen:
                self.stats.inter_token_s.observe(now - job.t_last_token)
            job.generated.append(token)
            job.unsent.append(token)
            job.t_last_token = now
            stop = None
            if vocab.is_eog(token) and not job.request.sampling.ignore_eos:
                stop = "eos"
            elif job.text.push(vocab.piece(token)):
                stop = "word"
            elif job.n_remaining == 0:
                stop = "limit"
            elif len(slot.cache) + 1 >= n_ctx:
                stop, job.is_truncated = "limit", True
            if stop is not None:
                self.finish(slot, stop)
                return
        slot.sampled = tokens[-1]

    def flush_partials(self, slots: list[Slot]) -> None:
        for slot in slots:
            job = slot.job
            if job is not None and job.request.stream and job.unsent:
                text = job.text.take(final=False)
                self.outbox.append((job, Event(False, text, job.unsent)))
                job.unsent = []

    def finish(self, slot: Slot, stop_type: str, error: Exception | None = None) -> None:
        job = slot.job
        job.stop_type = stop_type
        job.is_done = True
        if job.t_prompt_end == 0.0:
            job.t_prompt_end = time.perf_counter()
        self.outbox.append((job, Event(True, job.text.take(final=True), job.unsent, error)))
        job.unsent = []
        del job.probs[job.n_gen :]  # tokens sampled after the stop are not part of the output
        free_sampler(slot.sampler)
        slot.sampler = None
        slot.job = None
        slot.pending = []
        slot.state = SlotState.IDLE
        slot.t_last_used = time.perf_counter()
        self.stats.n_gen_tokens += job.n_gen
        self.stats.n_requests_finished += 1
        self.stats.n_tokens_max = max(self.stats.n_tokens_max, len(slot.cache))
        if job.n_gen:
            self.stats.t_gen_s += job.t_last_token - job.t_prompt_end
        self.stats.request_s.observe(time.perf_counter() - job.t_queued)
        if self.chain.drafters:
            for line in self.chain.stats_lines():
                log.info(line)
