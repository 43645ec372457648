"""Per-token probabilities in each API's shape: llama.cpp's ``completion_probabilities`` and OpenAI's
``logprobs`` (chat and legacy completions).

Each function formats a run of ``TokenProbs``: a whole job's, or one stream event's. The values are
log-probabilities of the raw logits, or with ``post_sampling_probs`` probabilities after the sampler
chain; llama.cpp's shape says which by its keys, OpenAI's always wants log-probabilities.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from slotserver.engine.token_probs import TokenProbs

Piece = Callable[[int], bytes]  # token id -> its bytes
LOG_ZERO = -3.4028234663852886e38  # llama-server's log(0): the lowest float32, since JSON has no -inf


def _text(data: bytes) -> str:
    return data.decode(errors="replace")


def as_logprob(value: float, post_sampling: bool) -> float:
    if not post_sampling:
        return value
    return math.log(value) if value > 0.0 else LOG_ZERO


def native(probs: Sequence[TokenProbs], piece: Piece, post_sampling: bool) -> list[dict]:
    """llama.cpp's ``completion_probabilities``: id, token, bytes and ``logprob`` + ``top_logprobs``,
    or ``prob`` + ``top_probs`` after sampling, for the chosen token and its top candidates."""
    key, top_key = ("prob", "top_probs") if post_sampling else ("logprob", "top_logprobs")

    def item(token: int, value: float) -> dict:
        data = piece(token)
        return {"id": token, "token": _text(data), "bytes": list(data), key: value}

    return [{**item(p.token, p.value), top_key: [item(t, v) for t, v in p.top]} for p in probs]


def chat(probs: Sequence[TokenProbs], piece: Piece, post_sampling: bool) -> dict:
    """OpenAI chat ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs: [...]}]}``."""

    def item(token: int, value: float) -> dict:
        data = piece(token)
        return {"token": _text(data), "logprob": as_logprob(value, post_sampling), "bytes": list(data)}

    return {"content": [{**item(p.token, p.value), "top_logprobs": [item(t, v) for t, v in p.top]} for p in probs]}


def text(probs: Sequence[TokenProbs], piece: Piece, post_sampling: bool, offset: int = 0) -> tuple[dict, int]:
    """OpenAI legacy completions ``logprobs``: parallel lists ``tokens``, ``token_logprobs``,
    ``top_logprobs`` ({token text: logprob}) and ``text_offset``.

    ``text_offset`` counts characters of the token texts from ``offset`` (a stream passes what its
    earlier chunks covered); returns the logprobs and the offset after the last token.
    """
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for p in probs:
        token_text = _text(piece(p.token))
        out["tokens"].append(token_text)
        out["token_logprobs"].append(as_logprob(p.value, post_sampling))
        top: dict[str, float] = {}
        for t, v in p.top:  # two ids with one text: the more likely one stands
            top.setdefault(_text(piece(t)), as_logprob(v, post_sampling))
        out["top_logprobs"].append(top)
        out["text_offset"].append(offset)
        offset += len(token_text)
    return out, offset
