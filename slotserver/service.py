"""Turn a request body into a queued job: parse, render chat messages, tokenize, check the context.

The one call the HTTP handlers make to start generation (``submit`` / ``submit_chat``); handlers
stay HTTP only. Raises ``BadRequest`` (or ``PromptTooLong``) before anything is queued.
"""

from __future__ import annotations

from slotserver.chain import DraftLimits
from slotserver.config import ServerConfig
from slotserver.errors import BadRequest, PromptTooLong
from slotserver.job import Job
from slotserver.request import PromptPieces, RequestBounds, parse_completion
from slotserver.runner import Runner
from slotserver.sampling import DEFAULT_SEED
from slotserver.textstream import TextStream

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
        self.n_ctx = runner.engine.n_ctx
        self.seed_default = config.seed & 0xFFFFFFFF if config.seed >= 0 else DEFAULT_SEED
        self.bounds = RequestBounds(n_ctx=self.n_ctx, n_vocab=self.vocab.n_tokens)

    def submit(self, body: dict) -> Job:
        """Validate, tokenize and queue a completion request; the job's events follow."""
        req = parse_completion(body, self.config.n_predict, self.seed_default, bounds=self.bounds)
        prompt = self.tokenize_prompt(req.prompt)
        if len(prompt) >= self.n_ctx:
            raise PromptTooLong(len(prompt), self.n_ctx)
        limits = req.spec if req.spec is not None else DraftLimits(n_max=self.config.spec.n_max)
        job = Job(req, prompt, limits, TextStream(req.stop, req.n_indent))
        self.runner.submit(job)
        return job

    def submit_chat(self, body: dict) -> Job:
        """A chat request: the messages rendered with the model's template become the prompt."""
        messages = parse_messages(body.get("messages"))
        try:
            prompt = self.runner.engine.chat_prompt(messages)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        return self.submit({**body, "prompt": prompt})

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
