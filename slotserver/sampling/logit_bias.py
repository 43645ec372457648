"""``logit_bias`` as llama-server reads it: per token, a number added to its logit, or ``false`` (never).

Forms: an object ``{"15043": -2.5, "Hello": false}`` (OpenAI's, keys are token ids or text) or a list
``[[15043, 1.0], ["Hello", false]]``. Text stands for each of its tokens. Parsing is pure; text is
resolved to ids with the model's tokenizer in ``resolve``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from slotserver.errors import BadRequest

MAX_ENTRIES = 1024  # biases per request: far beyond real use, and bounded work per step
MAX_TOKENS = 4096  # token ids the entries stand for once text is tokenized (each is applied every step)
MAX_TEXT_CHARS = 256  # a text entry is a word or a phrase; longer text is tokenized for nothing
BIAS_ABS_MAX = 1e9
# A key naming a token id, as llama-server's strtol reads it: ASCII digits only (str.isdigit() also
# holds for "²", which int() refuses, and "٣", which it reads). Anything else is text.
_ID_KEY = re.compile(r"-?[0-9]+")
_ID_DIGITS_MAX = 10  # past any int32 id; int() of thousands of digits would raise

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
        if _ID_KEY.fullmatch(key):
            digits = key.lstrip("-").lstrip("0") or "0"
            if len(digits) > _ID_DIGITS_MAX:
                raise BadRequest(f"'logit_bias' token {key[:16]}... is outside the vocabulary")
            return -int(digits) if key.startswith("-") else int(digits)
        if len(key) > MAX_TEXT_CHARS:
            raise BadRequest(f"'logit_bias' text entries must be at most {MAX_TEXT_CHARS} characters long")
        return key
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
        if len(out) > MAX_TOKENS:
            raise BadRequest(f"'logit_bias' may stand for at most {MAX_TOKENS} tokens (its text entries "
                             "are tokenized)")
    return tuple(out)
