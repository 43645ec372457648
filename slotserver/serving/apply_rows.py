"""Apply one decoded batch entry to its slot: verify drafts, emit tokens, detect stops, finish jobs.

Verification is sample-and-compare with the slot's own sampler chain (llama.cpp's
``common_sampler_sample_and_accept_n``): at each draft position the target samples exactly as it
would without speculation and the draft token is kept only if it equals the sample. The sampler's
RNG advances once per emitted token (twice where a grammar rejected the first pick, in both cases),
so output is the same at any temperature. A grammar advances only by sampled tokens, so a rejected
draft token never reaches it (``grammar_sampler``).

The applier writes a slot's tokens (``cache``, ``pending``, ``sampled``); its state changes only
through the lifecycle (``SlotLifecycle.start_generating`` once the prompt is in, ``release`` at a
stop). Each method returns the events it produced (``Outbox``); the runner delivers them.
"""

from __future__ import annotations

import time

from slotserver.engine.batch import BatchEntry
from slotserver.engine.engine import Engine
from slotserver.sampling.grammar_sampler import NO_TOKEN
from slotserver.serving.job import Event, Job, Outbox
from slotserver.serving.lifecycle import SlotLifecycle
from slotserver.serving.slots import Slot
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
        out = self._progress(job)
        if not entry.ends_prompt and not self._past_prompt_time(job):
            return out
        job.t_prompt_end = time.perf_counter()
        self.stats.n_prompt_tokens += job.n_prompt_decoded
        self.stats.t_prompt_s += job.t_prompt_end - job.t_prompt_start
        if not entry.ends_prompt or job.request.n_predict == 0:
            return out + [self.lifecycle.release(slot, "limit")]
        self.lifecycle.start_generating(slot)
        token = self._sample(slot, rows[0])
        self.stats.ttft_s.observe(time.perf_counter() - job.t_queued)
        return out + self._emit(slot, [token])

    @staticmethod
    def _progress(job: Job) -> Outbox:
        """llama-server's ``return_progress``: after each prompt chunk, how far the prompt got (streams only)."""
        if not (job.request.stream and job.request.return_progress):
            return []
        return [(job, Event(False, progress=job.prompt_progress()))]

    def _verify(self, slot: Slot, entry: BatchEntry, rows: list[int]) -> Outbox:
        job = slot.job
        draft = entry.tokens[1:]  # what the batch verified: the chain's draft, maybe cut to fit
        sampled: list[int] = []
        # Plain greedy needs no sampler state: take every row's argmax at once (post-sampling
        # probabilities come out of the sampler chain, so those requests sample row by row).
        req = job.request
        greedy = self.engine.argmax(rows) if req.sampling.is_plain_greedy and not req.post_sampling_probs else None
        for i, row in enumerate(rows):
            token = self._sample(slot, row, greedy[i] if greedy is not None else None)
            sampled.append(token)
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

    def _sample(self, slot: Slot, row: int, argmax: int | None = None) -> int:
        """The token at ``row`` (``argmax`` if the caller already has it), its probabilities recorded if asked.

        Post-sampling probabilities need the candidates the sampler chain leaves, so that path
        samples through the chain by hand (``Engine.sample_post``); it picks the very same token.
        NO_TOKEN when the slot's grammar allows nothing the chain leaves (nothing recorded then).
        """
        req = slot.job.request
        if req.records_probs and req.post_sampling_probs:
            probs = self.engine.sample_post(slot.sampler, row, req.n_probs, req.sampling.is_greedy, slot.grammar,
                                            req.sampling.picks_argmax)
            if probs is None:
                return NO_TOKEN
            slot.job.probs.append(probs)
            return probs.token
        token = argmax if argmax is not None else self.engine.sample(slot.sampler, row, slot.grammar,
                                                                     req.sampling.picks_argmax)
        if req.records_probs and token != NO_TOKEN:
            slot.job.probs.append(self.engine.top_logprobs(row, req.n_probs, token))
        return token

    def _emit(self, slot: Slot, tokens: list[int]) -> Outbox:
        """Hand new tokens to the job; the last one becomes the slot's pending ``sampled`` token."""
        job = slot.job
        now = time.perf_counter()
        vocab = self.engine.vocab
        n_ctx = self.engine.n_ctx_slot
        for token in tokens:
            if token == NO_TOKEN:  # the grammar cannot go on (complete, its end tokens banned): it ends here
                return [self.lifecycle.release(slot, "eos")]
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
        """A streaming job's new text and tokens since its last event (their probabilities, and the
        timings with ``timings_per_token``), if any."""
        job = slot.job
        if job is None or not job.request.stream or not job.unsent:
            return []
        tokens, probs = job.take_unsent()
        timings = job.timings() if job.request.timings_per_token else None
        return [(job, Event(False, job.text.take(final=False), tokens, probs=probs, timings=timings))]
