"""Turn a request body into a queued job: parse, render chat messages, tokenize, check the context.

Chat message content is tokenized as plain text, the template's control tokens as such
(``chat_tokens``; ``--chat-special`` parses the whole render), so a message cannot forge a turn.
Raw prompts (``/completion``, ``/v1/completions``) parse control tokens, as llama-server does.

The one call the HTTP handlers make to start generation (``submit`` / ``submit_chat``); handlers
stay HTTP only. The work runs in a worker thread, never on the event loop (tokenizing a long
prompt takes a while), then the job is queued on the loop. Raises ``BadRequest`` (or
``PromptTooLong``) before anything is queued, ``Unavailable`` when the queue is full.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from typing import Callable

from slotserver.config import ServerConfig
from slotserver.errors import BadRequest, NotSupported, PromptTooLong
from slotserver.limits import MAX_PROMPT_CHARS_PER_TOKEN
from slotserver.sampling.grammar_compile import check_gbnf, to_gbnf
from slotserver.sampling.logit_bias import resolve
from slotserver.sampling.params import DEFAULT_SEED
from slotserver.serving.chat_tokens import (
    ControlTokens,
    TemplateMismatch,
    content_spans,
    split_specials,
    tokenize_pieces,
)
from slotserver.serving.infill import InfillBudget, infill_prompt, parse_infill
from slotserver.serving.job import Job
from slotserver.serving.request import PromptPieces, RequestBounds, parse_completion
from slotserver.serving.runner import Runner
from slotserver.serving.text_stream import TextStream

ROLES = ("system", "user", "assistant", "tool", "developer")


def parse_messages(value) -> list[tuple[str, str]]:
    """OpenAI chat ``messages`` as (role, content) pairs."""
    if not isinstance(value, list) or not value:
        raise BadRequest("'messages' must be a non-empty list")
    out = []
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise BadRequest(f"each message needs a 'role' ({', '.join(ROLES)}) and a string 'content'")
        out.append((m["role"], m["content"]))
    return out


class CompletionService:
    def __init__(self, config: ServerConfig, runner: Runner) -> None:
        self.config = config
        self.runner = runner
        self.vocab = runner.engine.vocab
        self.n_ctx = runner.engine.n_ctx_slot  # what one request may use (llama-server's n_ctx_slot)
        self.seed_default = config.seed & 0xFFFFFFFF if config.seed >= 0 else DEFAULT_SEED
        self.bounds = RequestBounds(n_ctx=self.n_ctx, n_vocab=self.vocab.n_tokens)
        self._control_tokens: ControlTokens | None = None

    async def submit(self, body: dict, *, tenant: str = "", logprobs: int | None = None) -> Job:
        """Validate, tokenize and queue a completion request; the job's events follow.

        ``tenant`` (an API key's id) selects whose learned drafter state the job uses (learning_scopes.py).
        ``logprobs``: an OpenAI endpoint's parsed logprobs request (see ``prepare``).
        """
        job = await asyncio.get_running_loop().run_in_executor(None, partial(self.prepare, body, logprobs))
        return self._queue(job, tenant)

    async def submit_chat(self, body: dict, *, tenant: str = "", logprobs: int | None = None) -> Job:
        """A chat request: the messages rendered with the model's template become the prompt."""
        job = await asyncio.get_running_loop().run_in_executor(None, partial(self.prepare_chat, body, logprobs))
        return self._queue(job, tenant)

    async def submit_infill(self, body: dict, *, tenant: str = "") -> Job:
        """A fill-in-the-middle request (llama.vim): the FIM prompt is laid out from its fields."""
        job = await asyncio.get_running_loop().run_in_executor(None, self.prepare_infill, body)
        return self._queue(job, tenant)

    async def submit_choices(self, body: dict, n: int, *, chat: bool, tenant: str = "",
                             logprobs: int | None = None) -> list[Job]:
        """OpenAI's ``n``: one job per choice, all from one tokenized prompt. Choice i samples with
        seed + i (as llama-server); the others wait for the first's prompt and share its KV cache."""
        prepare = self.prepare_chat if chat else self.prepare
        first = await asyncio.get_running_loop().run_in_executor(None, partial(prepare, body, logprobs))
        jobs = [first] + [self._choice(first, i) for i in range(1, n)]
        queued: list[Job] = []
        try:
            for job in jobs:
                queued.append(self._queue(job, tenant))
        except BaseException:
            for job in queued:  # all or nothing: a full queue refuses the whole request
                self.runner.cancel(job)
            raise
        return jobs

    @staticmethod
    def _choice(first: Job, i: int) -> Job:
        req = first.request
        seed = req.sampling.seed if req.sampling.seed == DEFAULT_SEED else (req.sampling.seed + i) & 0xFFFFFFFF
        req = replace(req, sampling=replace(req.sampling, seed=seed))
        return Job(req, first.prompt, first.limits, TextStream(req.stop, req.n_indent), parent=first)

    def _queue(self, job: Job, tenant: str) -> Job:
        job.tenant = tenant
        self.runner.submit(job)
        return job

    def prepare(self, body: dict, logprobs: int | None = None, *,
                tokenize: Callable[[PromptPieces], list[int]] | None = None) -> Job:
        """Parse, tokenize and check a completion request (any thread); nothing is queued.

        ``logprobs`` (OpenAI's, None if not asked): record every token's probability, with that many
        top candidates unless the native ``n_probs`` says how many (it wins, as in llama-server).
        ``tokenize``: how the prompt becomes tokens, when not as a raw prompt (``tokenize_prompt``).
        """
        cfg = self.config
        req = parse_completion(body, cfg.n_predict, self.seed_default, bounds=self.bounds,
                               n_keep_default=cfg.n_keep, n_cache_reuse_default=cfg.cache_reuse,
                               sampling_defaults=cfg.sampling, spec_defaults=cfg.draft_limits)
        if logprobs is not None:
            req.token_probs = True
            req.n_probs = req.n_probs or logprobs
        n_chars = sum(len(p) for p in req.prompt if isinstance(p, str))
        if n_chars > MAX_PROMPT_CHARS_PER_TOKEN * self.n_ctx:
            raise BadRequest(f"the prompt has {n_chars} characters, more than a context of {self.n_ctx} "
                             "tokens can hold; it was not tokenized")
        prompt = (tokenize or self.tokenize_prompt)(req.prompt)
        if req.sampling.logit_bias:
            biases = resolve(req.sampling.logit_bias, lambda text: self.vocab.tokenize(text, False, False),
                             self.vocab.n_tokens)
            req.sampling = replace(req.sampling, logit_bias=biases)
        if req.sampling.ignore_eos:  # as llama-server: every end-of-generation token becomes impossible
            bans = tuple((t, float("-inf")) for t in self.vocab.eog_tokens())
            req.sampling = replace(req.sampling, logit_bias=tuple(req.sampling.logit_bias) + bans)
        if len(prompt) >= self.n_ctx:
            raise PromptTooLong(len(prompt), self.n_ctx)
        if req.constraint is not None:  # a bad grammar is a 400 here, never an error in the engine step
            grammar = to_gbnf(req.constraint)
            check_gbnf(self.vocab.ptr, grammar, req.constraint.field)
            req.sampling = replace(req.sampling, grammar=grammar)
        limits = req.spec if req.spec is not None else cfg.draft_limits
        if limits.oracle is not None:
            self._check_oracle(limits.oracle)
        return Job(req, prompt, limits, TextStream(req.stop, req.n_indent))

    def _check_oracle(self, oracle: tuple[int, ...]) -> None:
        """``speculative.oracle`` is for benchmarks (the ceiling of speculation): only with --spec-oracle,
        and only ids of this vocabulary, since they are decoded as drafts."""
        if not self.config.spec.oracle:
            raise BadRequest("'speculative.oracle' needs a server started with --spec-oracle (benchmarks only)")
        if not all(self.vocab.is_valid(t) for t in oracle):
            raise BadRequest(f"'speculative.oracle' has a token id outside the vocabulary of {self.vocab.n_tokens}")

    def prepare_chat(self, body: dict, logprobs: int | None = None) -> Job:
        """A chat request's job. Message content is tokenized as text, the template's control tokens
        as such (``chat_tokens``), unless ``--chat-special``: then the whole render parses them."""
        if self.config.chat_special:
            return self.prepare({**body, "prompt": self.render_chat(body)}, logprobs)
        messages = parse_messages(body.get("messages"))
        try:
            text, spans = content_spans(self._render, messages)
        except TemplateMismatch as exc:
            raise NotSupported(f"{exc}, so message content cannot be told from the template's own text; "
                               "start the server with --chat-special to tokenize the prompt as rendered") from None

        def tokenize(_: PromptPieces) -> list[int]:
            vocab = self.vocab
            return tokenize_pieces(split_specials(text, spans, self.control_tokens),
                                   lambda piece: vocab.tokenize(piece, add_special=False, parse_special=False),
                                   bos=vocab.bos if vocab.add_bos else None, eos=vocab.eos if vocab.add_eos else None)

        return self.prepare({**body, "prompt": text}, logprobs, tokenize=tokenize)

    @property
    def control_tokens(self) -> ControlTokens:
        """The vocabulary's control tokens by text (read once; any thread: a race only reads twice)."""
        if self._control_tokens is None:
            self._control_tokens = ControlTokens.from_vocab(self.vocab)
        return self._control_tokens

    def render_chat(self, body: dict) -> str:
        """The prompt of a chat request's ``messages`` (any thread: a pure function of the template)."""
        return self._render(parse_messages(body.get("messages")))

    def _render(self, messages: list[tuple[str, str]]) -> str:
        try:
            return self.runner.engine.chat_prompt(messages)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def prepare_infill(self, body: dict) -> Job:
        fim = self.vocab.fim
        if not fim.can_infill:
            raise NotSupported("Infill is not supported by this model: its vocabulary has no FIM prefix, suffix "
                               "and middle tokens")
        inp = parse_infill(body)
        n_chars = len(inp.prefix) + len(inp.suffix) + sum(len(f) + len(t) for f, t in inp.extra)
        if n_chars > MAX_PROMPT_CHARS_PER_TOKEN * self.n_ctx:
            raise BadRequest(f"the infill input has {n_chars} characters, more than a context of {self.n_ctx} "
                             "tokens can hold; it was not tokenized")
        middle = self.vocab.tokenize(body.get("prompt", ""), add_special=False, parse_special=True)
        budget = InfillBudget(self.config.engine.n_batch, self.n_ctx, self.config.n_predict)
        tokens = infill_prompt(fim, inp, middle, lambda text: self.vocab.tokenize(text, False, False), budget,
                               bos=self.vocab.bos if self.vocab.add_bos else None, spm=self.config.spm_infill)
        return self.prepare({**body, "prompt": tokens})

    def tokenize_prompt(self, pieces: PromptPieces) -> list[int]:
        """Strings are tokenized with specials parsed; BOS (if the model wants one) leads the first string."""
        tokens: list[int] = []
        for i, piece in enumerate(pieces):
            if isinstance(piece, str):
                tokens.extend(self.vocab.tokenize(piece, add_special=(i == 0), parse_special=True))
            elif self.vocab.is_valid(piece):
                tokens.append(piece)
            else:
                raise BadRequest(f"invalid token id {piece} in the prompt (vocabulary of {self.vocab.n_tokens})")
        if not tokens:
            raise BadRequest("the prompt is empty after tokenization")
        return tokens
