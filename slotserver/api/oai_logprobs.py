"""OpenAI's ``logprobs`` request fields, checked and turned into how many top candidates to report.

Each parser returns None when logprobs were not asked for, else the top-N per token (0: only the
chosen token's log-probability). Invalid values are a 400 naming the field, as OpenAI answers.
"""

from __future__ import annotations

from slotserver.errors import BadRequest

TOP_LOGPROBS_MAX = 20  # OpenAI's bound for chat top_logprobs; also ours for the legacy logprobs (OpenAI: 5)


def _top(body: dict, key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= TOP_LOGPROBS_MAX:
        raise BadRequest(f"'{key}' must be an integer between 0 and {TOP_LOGPROBS_MAX}")
    return value


def text_logprobs(body: dict) -> int | None:
    """``/v1/completions``: ``logprobs`` is the number of top candidates per token."""
    return _top(body, "logprobs")


def chat_logprobs(body: dict) -> int | None:
    """``/v1/chat/completions``: ``logprobs: true`` asks for them, ``top_logprobs`` says how many
    candidates (0 when left out, as OpenAI; llama-server takes 20); ``top_logprobs`` alone is refused."""
    asked = body.get("logprobs")
    if asked is not None and not isinstance(asked, bool):
        raise BadRequest("'logprobs' must be a boolean")
    top = _top(body, "top_logprobs")
    if not asked:
        if top is not None:
            raise BadRequest("'top_logprobs' requires 'logprobs' to be true")
        return None
    return top or 0
