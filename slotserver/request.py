"""Parse and validate a llama.cpp-style completion request body into typed values.

Every problem raises ``BadRequest`` with a message naming the field; nothing here touches the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slotserver.chain import DraftLimits
from slotserver.errors import BadRequest
from slotserver.sampling import DEFAULT_SEED, SamplingParams

# Prompt pieces: str is tokenized (specials parsed), int is a token id.
PromptPieces = list["str | int"]
SPEC_TYPES = ("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft")


@dataclass(slots=True)
class CompletionRequest:
    prompt: PromptPieces
    sampling: SamplingParams
    n_predict: int = -1
    stream: bool = False
    stop: list[str] = field(default_factory=list)
    cache_prompt: bool = True
    id_slot: int = -1
    response_fields: list[str] = field(default_factory=list)
    return_tokens: bool = False
    n_indent: int = 0
    t_max_predict_ms: int = -1
    n_probs: int = 0  # report the top n_probs candidates (pre-sampling log-probabilities) per token
    spec: DraftLimits | None = None  # None: the server's defaults


def _number(body: dict, key: str, default: Any, kind: type, lo: float | None = None) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"'{key}' must be a number")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise BadRequest(f"'{key}' must be an integer")
        value = int(value)
    else:
        value = float(value)
    if lo is not None and value < lo:
        raise BadRequest(f"'{key}' must be >= {lo}")
    return value


def _bool(body: dict, key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"'{key}' must be a boolean")
    return value


def parse_prompt(value: Any, key: str = "prompt") -> PromptPieces:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(
        isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in value
    ):
        if all(isinstance(v, str) for v in value) and len(value) > 1:
            raise BadRequest(f"'{key}' with several prompts is not supported; send one request per prompt")
        return list(value)
    if isinstance(value, list) and not value:
        raise BadRequest(f"'{key}' must not be empty")
    raise BadRequest(f"'{key}' must be a string or a list of token ids")


def _stop(body: dict) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise BadRequest("'stop' must be a string or a list of strings")
    return [s for s in value if s]


def _response_fields(body: dict) -> list[str]:
    value = body.get("response_fields")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise BadRequest("'response_fields' must be a list of strings")
    return value


def parse_sampling(body: dict, seed_default: int = DEFAULT_SEED) -> SamplingParams:
    seed = _number(body, "seed", -1, int, lo=-1)
    return SamplingParams(
        temperature=_number(body, "temperature", 0.8, float),
        top_k=_number(body, "top_k", 40, int),
        top_p=_number(body, "top_p", 0.95, float),
        min_p=_number(body, "min_p", 0.05, float),
        repeat_last_n=_number(body, "repeat_last_n", 64, int, lo=-1),
        repeat_penalty=_number(body, "repeat_penalty", 1.0, float),
        presence_penalty=_number(body, "presence_penalty", 0.0, float),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, float),
        seed=seed_default if seed == -1 else seed & 0xFFFFFFFF,
        ignore_eos=_bool(body, "ignore_eos", False),
    )


def parse_spec(body: dict) -> DraftLimits | None:
    """``speculative.*`` fields, flat dotted (``"speculative.n_max": 16``) or nested."""
    nested = body.get("speculative")
    if nested is not None and not isinstance(nested, dict):
        raise BadRequest("'speculative' must be an object")
    values = dict(nested or {})
    for key, value in body.items():
        if key.startswith("speculative."):
            values[key.split(".", 1)[1]] = value
    if not values:
        return None
    defaults = DraftLimits()
    limits = DraftLimits(
        n_max=_number(values, "n_max", defaults.n_max, int, lo=0),
        n_min=_number(values, "n_min", defaults.n_min, int, lo=0),
        p_min=_number(values, "p_min", defaults.p_min, float, lo=0),
    )
    kind = values.get("type", values.get("types"))
    if kind is not None:
        names = kind.split(",") if isinstance(kind, str) else kind
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("'speculative.type' must be a string or a list of strings")
        unknown = [n for n in names if n.strip() not in SPEC_TYPES]
        if unknown:
            raise BadRequest(f"unknown speculative type: {unknown[0]}")
        limits.types = frozenset(n.strip() for n in names if n.strip() != "none")
    return limits


def parse_completion(body: Any, n_predict_default: int = -1, seed_default: int = DEFAULT_SEED) -> CompletionRequest:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if "prompt" not in body:
        raise BadRequest("'prompt' is required")
    n_predict = body.get("n_predict", body.get("max_tokens", body.get("max_completion_tokens")))
    n_predict = _number({"n_predict": n_predict}, "n_predict", n_predict_default, int, lo=-1)
    return CompletionRequest(
        prompt=parse_prompt(body["prompt"]),
        sampling=parse_sampling(body, seed_default),
        n_predict=n_predict,
        stream=_bool(body, "stream", False),
        stop=_stop(body),
        cache_prompt=_bool(body, "cache_prompt", True),
        id_slot=_number(body, "id_slot", -1, int, lo=-1),
        response_fields=_response_fields(body),
        return_tokens=_bool(body, "return_tokens", False),
        n_indent=_number(body, "n_indent", 0, int, lo=0),
        t_max_predict_ms=_number(body, "t_max_predict_ms", -1, int),
        n_probs=_number(body, "n_probs", 0, int, lo=0),
        spec=parse_spec(body),
    )
