"""Apply one decoded batch entry to its slot: verify drafts, emit tokens, detect stops, finish jobs.

Verification is sample-and-compare with the slot's own sampler chain (llama.cpp's
``common_sampler_sample_and_accept_n``): at each draft position the target samples exactly as it
would without speculation and the draft token is kept only if it equals the sample. The sampler's
RNG advances once per emitted token, so output is the same at any temperature.

Each method returns the events it produced (``Outbox``); the runner delivers them.
"""

from __future__ import annotations

import time

from slotserver.engine import Engine
from slotserver.job import Event, Job, Outbox
from slotserver.lifecycle import SlotLifecycle
from slotserver.scheduler import BatchEntry
from slotserver.slots import Slot, SlotState
from slotserver.stats import ServerStats


class Applier:
    def __init__(self, engine: Engine, stats: ServerStats, lifecycle: SlotLifecycle, *,
                 context_shift: bool = False) -> None:
        self.engine = engine
        self.context_shift = context_shift  # a full slot is shifted by the runner instead of stopping
        self.stats = stats
        self.lifecycle = lifecycle

    def entry(self, slot: Slot, entry: BatchEntry, rows: list[int]) -> Outbox:
        if entry.is_decode:
            return self._verify(slot, entry, rows)
        return self._prefill(slot, entry, rows)

    def _prefill(self, slot: Slot, entry: BatchEntry, rows: list[int]) -> Outbox:
        job = slot.job
        slot.cache.extend(entry.tokens)
        del slot.pending[: len(entry.tokens)]
        job.n_prompt_decoded += len(entry.tokens)
        if not entry.ends_prompt and not self._past_prompt_time(job):
            return []
        job.t_prompt_end = time.perf_counter()
        self.stats.n_prompt_tokens += job.n_prompt_decoded
        self.stats.t_prompt_s += job.t_prompt_end - job.t_prompt_start
        if not entry.ends_prompt or job.request.n_predict == 0:
            return [self.lifecycle.release(slot, "limit")]
        slot.state = SlotState.GENERATING
        slot.chain.begin(slot.id, slot.cache)
        token = self.engine.sample(slot.sampler, rows[0])
        self._record_probs(job, rows[0], token)
        self.stats.ttft_s.observe(time.perf_counter() - job.t_queued)
        return self._emit(slot, [token])

    def _verify(self, slot: Slot, entry: BatchEntry, rows: list[int]) -> Outbox:
        job = slot.job
        draft = entry.tokens[1:]  # what the batch verified: the chain's draft, maybe cut to fit
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
        slot.chain.accept(slot.id, len(draft), n_accepted)
        if draft:
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
        return self._emit(slot, sampled)

    def _record_probs(self, job: Job, row: int, token: int) -> None:
        if job.request.n_probs > 0:
            job.probs.append(self.engine.top_logprobs(row, job.request.n_probs, token))

    def _emit(self, slot: Slot, tokens: list[int]) -> Outbox:
        """Hand new tokens to the job; the last one becomes the slot's pending ``sampled`` token."""
        job = slot.job
        now = time.perf_counter()
        vocab = self.engine.vocab
        n_ctx = self.engine.n_ctx_slot
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
            elif job.n_remaining == 0 or self._past_predict_time(job, now):
                stop = "limit"
            elif len(slot.cache) + 1 >= n_ctx and not self.context_shift:
                stop, job.is_truncated = "limit", True
            if stop is not None:
                return [self.lifecycle.release(slot, stop)]
        slot.sampled = tokens[-1]
        return []

    @staticmethod
    def _past_prompt_time(job: Job) -> bool:
        """``t_max_prompt_ms`` (llama.vim sends it; llama-server ignores it): a prompt that takes longer
        ends the request after the chunk in flight. What was decoded stays cached for the next request."""
        t_max_ms = job.request.t_max_prompt_ms
        return t_max_ms > 0 and (time.perf_counter() - job.t_prompt_start) * 1e3 > t_max_ms

    @staticmethod
    def _past_predict_time(job: Job, now: float) -> bool:
        """llama.cpp's ``t_max_predict_ms``: past this much generation time, stop once a new line was generated."""
        t_max_ms = job.request.t_max_predict_ms
        return t_max_ms > 0 and (now - job.t_prompt_end) * 1e3 > t_max_ms and job.text.has_new_line()

    @staticmethod
    def partial(slot: Slot) -> Outbox:
        """A streaming job's new text and tokens since its last event, if any."""
        job = slot.job
        if job is None or not job.request.stream or not job.unsent:
            return []
        event = Event(False, job.text.take(final=False), job.unsent)
        job.unsent = []
        return [(job, event)]
