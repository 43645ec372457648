"""``logit_bias`` as llama-server reads it: per token, a number added to its logit, or ``false`` (never).

Forms: an object ``{"15043": -2.5, "Hello": false}`` (OpenAI's, keys are token ids or text) or a list
``[[15043, 1.0], ["Hello", false]]``. Text stands for each of its tokens. Parsing is pure; text is
resolved to ids with the model's tokenizer in ``resolve``.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from slotserver.errors import BadRequest

MAX_ENTRIES = 1024  # biases per request: far beyond real use, and bounded work per step
BIAS_ABS_MAX = 1e9

Entry = tuple["int | str", float]


def _bias(value: Any) -> float:
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= BIAS_ABS_MAX:
        raise BadRequest("a 'logit_bias' value must be a finite number or false")
    return float(value)


def _token(key: Any) -> int | str:
    if isinstance(key, bool):
        raise BadRequest("a 'logit_bias' token must be a token id or a string")
    if isinstance(key, int):
        return key
    if isinstance(key, str):
        return int(key) if key.lstrip("-").isdigit() else key
    raise BadRequest("a 'logit_bias' token must be a token id or a string")


def parse_logit_bias(value: Any) -> tuple[Entry, ...]:
    if value is None:
        return ()
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [(p[0], p[1]) for p in value]
    else:
        raise BadRequest("'logit_bias' must be an object or a list of [token, bias] pairs")
    if len(pairs) > MAX_ENTRIES:
        raise BadRequest(f"'logit_bias' may hold at most {MAX_ENTRIES} entries")
    return tuple((_token(k), _bias(v)) for k, v in pairs)


def resolve(entries: tuple[Entry, ...], tokenize: Callable[[str], list[int]], n_vocab: int) -> tuple[tuple[int, float], ...]:
    """Token ids for text entries; every id must be in the vocabulary."""
    out = []
    for token, bias in entries:
        ids = tokenize(token) if isinstance(token, str) else [token]
        for t in ids:
            if not 0 <= t < n_vocab:
                raise BadRequest(f"'logit_bias' token {t} is outside the vocabulary of {n_vocab}")
            out.append((t, bias))
    return tuple(out)
