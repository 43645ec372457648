"""Parse and validate a llama.cpp-style completion request body into typed values.

Every problem raises ``BadRequest`` with a message naming the field; nothing here touches the model.
Every number is bounded (finite, in range) here, so no request can overflow a C type, size a huge
allocation or make the shared engine step raise later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slotserver.errors import BadRequest
from slotserver.sampling.constraint import Constraint, parse_constraint
from slotserver.sampling.logit_bias import parse_logit_bias
from slotserver.sampling.params import DEFAULT_SEED, SamplingParams, bound_infill, parse_samplers
from slotserver.speculation.config import SELECT_MODES, SPEC_N_MAX, DraftLimits
from slotserver.speculation.registry import parse_types

# Prompt pieces: str is tokenized (specials parsed), int is a token id.
PromptPieces = list["str | int"]


# Bounds on numeric fields. Each value ends up in a C int/float via ctypes or in an allocation
# sized by it, so anything outside is rejected here with the field named, not overflowed later.
INT_MAX = 2**31 - 1  # llama.cpp's C ``int32_t``: the widest integer any of these fields is passed as
SEED_MAX = 2**64 - 1  # OpenAI clients send 64-bit seeds; only the low 32 bits reach llama.cpp (uint32)
FLOAT_ABS_MAX = 1e9  # far beyond any meaningful temperature/penalty, and times n_ctx still finite in float32
N_PROBS_MAX = 100  # n_probs above this (or >= n_vocab) is clamped silently, as llama.cpp caps it; a
# larger top-n per token is a client bug, and the top-n is computed inside the shared engine step
# Candidates a request may have reported in all: n_probs (or OpenAI's top_logprobs) times the tokens
# it may generate (n_predict, or the context when unbounded). Each costs ~100 bytes while generating
# and ~600 while its body is built; at this budget a body is ~28 MB of JSON, built in a worker thread
# in under a second on a small CPU (docs/measurements.md). 100 candidates x 2,621 tokens, 20 x 13,107
# (an OpenAI client's top_logprobs 20 with no max_tokens on an 8k slot passes), 5 x 52,428; above it: 400.
N_PROBS_BUDGET = 1 << 18
ORACLE_MAX = 1 << 20  # speculative.oracle (benchmarks): the known continuation, at most this many tokens
# Stop strings: llama.cpp has no limit, OpenAI allows 4. 16 covers every chat template's end markers
# with room to spare; 256 characters covers multi-line markers, and bounds both the automaton built
# per request (<= 4096 nodes) and the text a stream withholds as a possible partial stop (< 256).
MAX_STOP_STRINGS = 16
MAX_STOP_LEN = 256
_INF = float("inf")


@dataclass(frozen=True, slots=True)
class RequestBounds:
    """The loaded model's limits some fields are checked against (defaults for callers without a model)."""

    n_ctx: int = 8192  # repeat_last_n is in [-1, n_ctx], -1 meaning n_ctx; default: --ctx-size's
    n_vocab: int = 262144  # n_probs stays below it; default: the bundled Gemma 3's vocabulary


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
    t_max_prompt_ms: int = -1  # prompt processing past this ends the request at the next chunk (its KV stays cached)
    n_probs: int = 0  # report the top n_probs candidates per token
    post_sampling_probs: bool = False  # probabilities after the sampler chain instead of raw log-probabilities
    token_probs: bool = False  # record each token's probability even with n_probs 0 (OpenAI logprobs)
    return_progress: bool = False  # stream prompt_progress chunks while the prompt is processed
    timings_per_token: bool = False  # every stream chunk carries timings
    spec: DraftLimits | None = None  # None: the server's defaults
    include_usage: bool = False  # OpenAI stream_options.include_usage: a last chunk with the usage
    n_keep: int = 0  # context shift keeps this many prompt tokens (-1: the whole prompt)
    n_discard: int = 0  # tokens a context shift drops (0: half of those after n_keep)
    n_cache_reuse: int = 0  # reuse cached chunks of at least this many tokens by shifting their KV (0: off)
    constraint: Constraint | None = None  # grammar / json_schema / response_format, as sent (compiled in prepare)

    @property
    def records_probs(self) -> bool:
        """Whether the engine records each generated token's probabilities."""
        return self.n_probs > 0 or self.token_probs


def _show(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _number(
    body: dict, key: str, default: Any, kind: type, lo: float | None = None, hi: float | None = None,
    *, note: str = "",
) -> Any:
    """``body[key]`` as ``kind`` within [lo, hi] (default: a C int32, or +-FLOAT_ABS_MAX); NaN/inf rejected."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"'{key}' must be a number")
    if isinstance(value, float) and (value != value or abs(value) == _INF):  # NaN is unequal to itself
        raise BadRequest(f"'{key}' must be a finite number")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise BadRequest(f"'{key}' must be an integer")
        lo = -INT_MAX - 1 if lo is None else lo
        hi = INT_MAX if hi is None else hi
    else:
        lo = -FLOAT_ABS_MAX if lo is None else lo
        hi = FLOAT_ABS_MAX if hi is None else hi
    # Compared before converting: float() of a huge int raises OverflowError.
    if not lo <= value <= hi:
        raise BadRequest(f"'{key}' must be between {_show(lo)} and {_show(hi)}{note}")
    return int(value) if kind is int else float(value)


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
    if len(value) > MAX_STOP_STRINGS:
        raise BadRequest(f"'stop' must hold at most {MAX_STOP_STRINGS} strings (got {len(value)})")
    if any(len(s) > MAX_STOP_LEN for s in value):
        raise BadRequest(f"'stop' strings must be at most {MAX_STOP_LEN} characters long")
    return [s for s in value if s]


def _include_usage(body: dict) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object")
    return _bool(options, "include_usage", False)


def _response_fields(body: dict) -> list[str]:
    value = body.get("response_fields")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise BadRequest("'response_fields' must be a list of strings")
    return value


def _samplers(body: dict, default: tuple[str, ...] | None) -> tuple[str, ...] | None:
    value = body.get("samplers")
    if value is None:
        return default
    try:
        return parse_samplers(value)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def parse_sampling(
    body: dict, seed_default: int = DEFAULT_SEED, *, bounds: RequestBounds = RequestBounds(),
    defaults: SamplingParams = SamplingParams(),
) -> SamplingParams:
    """The sampling fields; a field the body leaves out takes its value from ``defaults``.

    ``defaults`` are llama.cpp's own unless the server was started with sampling flags (``--temp``,
    ``--top-k``, ...), as llama-server's command line sets the defaults of its requests. Their
    ``seed`` is not used: ``seed_default`` stands for a request's -1.
    """
    seed = _number(body, "seed", -1, int, lo=-1, hi=SEED_MAX)
    repeat_penalty = _number(body, "repeat_penalty", defaults.repeat_penalty, float)
    if repeat_penalty <= 0:  # llama.cpp divides positive logits by it: 0 gives inf logits, then NaN probabilities
        raise BadRequest("'repeat_penalty' must be > 0")
    repeat_last_n = _number(body, "repeat_last_n", defaults.repeat_last_n, int, lo=-1, hi=bounds.n_ctx,
                            note=" (the context size)")
    d = defaults
    top_k = _number(body, "top_k", d.top_k, int, lo=-1)  # <= 0: off (llama.cpp; vLLM-style clients send -1)
    samplers = _samplers(body, d.samplers)
    if samplers is not None:
        try:
            samplers = bound_infill(samplers, top_k)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
    return SamplingParams(
        temperature=_number(body, "temperature", d.temperature, float),
        top_k=top_k,
        top_p=_number(body, "top_p", d.top_p, float, lo=0.0, hi=1.0),
        min_p=_number(body, "min_p", d.min_p, float, lo=0.0, hi=1.0),
        typical_p=_number(body, "typical_p", d.typical_p, float, lo=0.0, hi=1.0),
        top_n_sigma=_number(body, "top_n_sigma", d.top_n_sigma, float),
        xtc_probability=_number(body, "xtc_probability", d.xtc_probability, float, lo=0.0, hi=1.0),
        xtc_threshold=_number(body, "xtc_threshold", d.xtc_threshold, float, lo=0.0, hi=1.0),
        # -1 means the whole context, as llama.cpp; resolved here so the sampler gets a concrete window
        # (passed as -1, llama.cpp's penalties sampler clamps it to 0 and silently drops the penalties).
        # A server default wider than this context is narrowed to it.
        repeat_last_n=bounds.n_ctx if repeat_last_n == -1 else min(repeat_last_n, bounds.n_ctx),
        repeat_penalty=repeat_penalty,
        presence_penalty=_number(body, "presence_penalty", d.presence_penalty, float),
        frequency_penalty=_number(body, "frequency_penalty", d.frequency_penalty, float),
        seed=seed_default if seed == -1 else seed & 0xFFFFFFFF,
        ignore_eos=_bool(body, "ignore_eos", d.ignore_eos),
        logit_bias=parse_logit_bias(body.get("logit_bias")),
        samplers=samplers,
    )


def parse_spec(body: dict, defaults: DraftLimits | None = None) -> DraftLimits | None:
    """``speculative.*`` fields, flat dotted (``"speculative.n_max": 16``) or nested; None if there are none.

    Fields left out take ``defaults`` (the server's ``--spec-draft-n-max``/``-n-min``/``-p-min``;
    ``DraftLimits()`` when not given).
    """
    nested = body.get("speculative")
    if nested is not None and not isinstance(nested, dict):
        raise BadRequest("'speculative' must be an object")
    values = dict(nested or {})
    for key, value in body.items():
        if key.startswith("speculative."):
            values[key.split(".", 1)[1]] = value
    if not values:
        return None
    defaults = defaults or DraftLimits()
    limits = DraftLimits(
        n_max=_number(values, "n_max", defaults.n_max, int, lo=0, hi=SPEC_N_MAX),
        n_min=_number(values, "n_min", defaults.n_min, int, lo=0, hi=SPEC_N_MAX),
        p_min=_number(values, "p_min", defaults.p_min, float, lo=0.0, hi=1.0),
    )
    select = values.get("select")
    if select is not None:
        if select not in SELECT_MODES:
            raise BadRequest(f"'speculative.select' must be one of: {', '.join(SELECT_MODES)}")
        limits.select = select
    oracle = values.get("oracle")
    if oracle is not None:
        if not isinstance(oracle, list) or len(oracle) > ORACLE_MAX or not all(
                type(t) is int and 0 <= t <= INT_MAX for t in oracle):
            raise BadRequest(f"'speculative.oracle' must be a list of at most {ORACLE_MAX} token ids")
        limits.oracle = tuple(oracle)
    kind = values.get("type", values.get("types"))
    if kind is not None:
        try:
            limits.types = frozenset(parse_types(kind, field="speculative.type"))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
    return limits


def check_probs_budget(req: CompletionRequest, n_ctx: int) -> None:
    """Refuse a request whose reported candidates (``n_probs`` per token times the tokens it may
    generate) exceed N_PROBS_BUDGET: they are held per token while it runs and its whole body is
    built from them. An unbounded ``n_predict`` counts as the context ``n_ctx``, and becomes it (with
    --context-shift generation could otherwise go on past the context, recording more)."""
    if req.n_probs <= 0:
        return
    n_tokens = req.n_predict if req.n_predict >= 0 else n_ctx
    if req.n_probs * n_tokens > N_PROBS_BUDGET:
        tokens = f"{n_tokens}" if req.n_predict >= 0 else f"{n_tokens} (the context: no 'n_predict' was given)"
        raise BadRequest(f"'n_probs' times 'n_predict' must be at most {N_PROBS_BUDGET} (got {req.n_probs} "
                         f"probabilities x {tokens} tokens); ask for fewer tokens (n_predict, max_tokens) "
                         "or fewer probabilities (n_probs, logprobs, top_logprobs)")
    if req.n_predict < 0:
        req.n_predict = n_ctx


def _cache_reuse(body: dict, server: int) -> int:
    """``n_cache_reuse``: the server's ``--cache-reuse`` is the operator's opt-in and floor.

    llama-server lets a request choose any value, even with --cache-reuse 0. Each reused chunk costs
    two KV operations over every cell on the engine thread, and a smaller value finds more chunks
    (up to prompt / value), so a request may ask for longer chunks than the server's (or 0: none),
    never shorter ones, and cannot turn chunk reuse on when the server has it off.
    """
    value = _number(body, "n_cache_reuse", server, int, lo=0)
    return 0 if value == 0 or server == 0 else max(value, server)


def parse_completion(
    body: Any,
    n_predict_default: int = -1,
    seed_default: int = DEFAULT_SEED,
    *,
    bounds: RequestBounds = RequestBounds(),
    n_keep_default: int = 0,
    n_cache_reuse_default: int = 0,
    sampling_defaults: SamplingParams = SamplingParams(),
    spec_defaults: DraftLimits | None = None,
) -> CompletionRequest:
    """A completion body as typed values; fields it leaves out take the server's defaults (the
    ``*_default(s)`` arguments, set from the command line), else llama.cpp's."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if "prompt" not in body:
        raise BadRequest("'prompt' is required")
    n_predict = body.get("n_predict", body.get("max_tokens", body.get("max_completion_tokens")))
    n_predict = _number({"n_predict": n_predict}, "n_predict", n_predict_default, int, lo=-1)
    n_probs = _number(body, "n_probs", 0, int, lo=0)
    req = CompletionRequest(
        prompt=parse_prompt(body["prompt"]),
        sampling=parse_sampling(body, seed_default, bounds=bounds, defaults=sampling_defaults),
        n_predict=n_predict,
        stream=_bool(body, "stream", False),
        stop=_stop(body),
        cache_prompt=_bool(body, "cache_prompt", True),
        id_slot=_number(body, "id_slot", -1, int, lo=-1),
        response_fields=_response_fields(body),
        return_tokens=_bool(body, "return_tokens", False),
        include_usage=_include_usage(body),
        n_indent=_number(body, "n_indent", 0, int, lo=0),
        t_max_predict_ms=_number(body, "t_max_predict_ms", -1, int, lo=-1),
        t_max_prompt_ms=_number(body, "t_max_prompt_ms", -1, int, lo=-1),
        # Clamped, not rejected (see N_PROBS_MAX); below n_vocab since the top-n partitions the logits.
        n_probs=min(n_probs, N_PROBS_MAX, max(bounds.n_vocab - 1, 0)),
        post_sampling_probs=_bool(body, "post_sampling_probs", False),
        return_progress=_bool(body, "return_progress", False),
        timings_per_token=_bool(body, "timings_per_token", False),
        spec=parse_spec(body, spec_defaults),
        n_keep=_number(body, "n_keep", n_keep_default, int, lo=-1),
        n_discard=_number(body, "n_discard", 0, int, lo=0),
        n_cache_reuse=_cache_reuse(body, n_cache_reuse_default),
        constraint=parse_constraint(body),
    )
    check_probs_budget(req, bounds.n_ctx)
    return req
