"""One accepted completion request while it lives in the server: its tokens, text, timings and events.

Ownership: from ``Runner.submit`` until its final event the engine thread owns every field but
three: ``events`` (the engine only puts into it, through the event loop), ``n_events_sent`` and
``n_logprob_chars`` (the HTTP handler's own counters). After the final event the engine never touches the job again
and the handler reads it freely.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

from slotserver.engine.token_probs import TokenProbs
from slotserver.errors import ServerError
from slotserver.serving.request import CompletionRequest
from slotserver.serving.text_stream import TextStream
from slotserver.speculation.config import DraftLimits


@dataclass(slots=True)
class Event:
    """What the handler receives: a partial result (``final`` False) or the end of the job.

    Everything in it is a snapshot taken on the engine thread, so the handler can format it while
    the engine goes on changing the job.
    """

    final: bool
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    error: ServerError | None = None  # the job failed; its message is safe to show to the client
    is_cancelled: bool = False  # final event of a job cancelled by its handler
    probs: list[TokenProbs] = field(default_factory=list)  # of ``tokens``, when the request records them
    progress: dict | None = None  # return_progress: prompt processing so far (no text, no tokens)
    timings: dict | None = None  # timings_per_token: the job's timings when the event was made


@dataclass(slots=True, eq=False)
class Job:
    request: CompletionRequest
    prompt: list[int]
    limits: DraftLimits  # draft bounds for this request (server defaults or speculative.*)
    text: TextStream
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    id_slot: int = -1
    n_events_sent: int = 0  # events a streaming handler has written so far (handler-owned)
    n_logprob_chars: int = 0  # characters of token text in OpenAI logprobs sent so far (handler-owned)
    generated: list[int] = field(default_factory=list)
    unsent: list[int] = field(default_factory=list)  # tokens not yet reported in a partial event
    probs: list[TokenProbs] = field(default_factory=list)  # per sampled token, when the request records them
    stop_type: str = "none"  # none | eos | word | limit
    is_truncated: bool = False
    n_cached: int = 0  # prompt tokens reused from the KV cache
    n_prompt_decoded: int = 0
    n_draft: int = 0  # draft tokens verified for this job
    n_draft_accepted: int = 0
    t_queued: float = field(default_factory=time.perf_counter)
    t_created: float = field(default_factory=time.time)  # wall clock, for the APIs' "created" fields
    parent: "Job | None" = None  # first choice of an n > 1 request: this job waits for its prompt, then shares its KV
    tenant: str = ""  # whose learned drafter state and KV prompt cache the job may use (an API key's id; learning_scopes.py)
    t_deadline: float = float("inf")  # perf_counter time after which the engine ends the job (server --timeout)
    t_prompt_start: float = 0.0
    t_prompt_end: float = 0.0
    t_last_token: float = 0.0

    @property
    def request_id(self) -> str:
        """The id every choice of one request shares (the first choice's): a per-request cache tenant."""
        return self.parent.id if self.parent is not None else self.id

    @property
    def n_gen(self) -> int:
        return len(self.generated)

    @property
    def n_remaining(self) -> int:
        """Tokens still wanted, or -1 without an n_predict limit."""
        n_predict = self.request.n_predict
        return -1 if n_predict < 0 else max(n_predict - self.n_gen, 0)

    def take_unsent(self) -> tuple[list[int], list[TokenProbs]]:
        """Tokens not reported in an event yet, with their probabilities if recorded; clears them.

        ``probs`` may run past ``generated`` (a verify step samples before the stop is seen), so the
        probabilities are taken by the tokens' positions in ``generated``.
        """
        tokens, self.unsent = self.unsent, []
        end = len(self.generated)
        return tokens, self.probs[end - len(tokens) : end] if self.probs else []

    def prompt_progress(self) -> dict:
        """llama-server's ``prompt_progress``: prompt tokens in all, reused from the cache, in the KV so far."""
        return {
            "total": len(self.prompt),
            "cache": self.n_cached,
            "processed": self.n_cached + self.n_prompt_decoded,
            "time_ms": int((time.perf_counter() - self.t_prompt_start) * 1e3),
        }

    def timings(self) -> dict:
        prompt_ms = (self.t_prompt_end - self.t_prompt_start) * 1e3
        predicted_ms = max((self.t_last_token - self.t_prompt_end) * 1e3, 1e-3) if self.n_gen else 0.0
        steps = self.n_gen - 1  # the first token comes with the prompt
        out = {
            "cache_n": self.n_cached,
            "prompt_n": self.n_prompt_decoded,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / self.n_prompt_decoded if self.n_prompt_decoded else 0.0,
            "prompt_per_second": 1e3 * self.n_prompt_decoded / prompt_ms if prompt_ms > 0 else 0.0,
            "predicted_n": self.n_gen,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / steps if steps > 0 else 0.0,
            "predicted_per_second": 1e3 * steps / predicted_ms if steps > 0 else 0.0,
        }
        if self.n_draft > 0:
            out["draft_n"] = self.n_draft
            out["draft_n_accepted"] = self.n_draft_accepted
        return out


# Events a step produced, in order, each for its job; delivered on the event loop after the step.
Outbox = list[tuple[Job, Event]]
