"""Sampling parameters of one request (llama.cpp's defaults); the llama sampler chain is built in
``llama_chain``. Pure: parsing the ``samplers`` field lives here too."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: pick a random seed

# llama.cpp's sampler names (common/sampling.cpp), the letters of its one-string form, and the
# alternative spellings it accepts on the command line. adaptive_p is not supported here.
SAMPLER_CHARS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
                 "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties"}
SAMPLER_NAMES = frozenset(SAMPLER_CHARS.values())
SAMPLER_ALIASES = {"top-k": "top_k", "top-p": "top_p", "top-n-sigma": "top_n_sigma", "nucleus": "top_p",
                   "typical-p": "typ_p", "typical": "typ_p", "typ-p": "typ_p", "typ": "typ_p", "min-p": "min_p",
                   "temp": "temperature"}
# llama.cpp's default order (common.h); the chain always ends by picking a token (dist, or greedy).
DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
# llama.cpp's infill sampler compares every pair of the candidates it is given (twice the piece
# lookups per pair), inside one C call on the engine thread: over Gemma 3's 262,144 tokens that is
# 7e10 pairs, a frozen server. It only runs behind a top_k of at most this many candidates: 256
# cost a fraction of a one-row decode step, 1,000 more than a step (docs/measurements.md), and
# llama.vim's own chain is top_k 40, top_p, infill.
INFILL_TOP_K_MAX = 256


def bound_infill(order: tuple[str, ...], top_k: int) -> tuple[str, ...]:
    """``order`` with a ``top_k`` before every ``infill``, so infill sees at most ``top_k`` candidates.

    Where no ``top_k`` runs before the first ``infill``, one is inserted right before it (llama.vim's
    chain has it first: ``top_k, top_p, infill``); everything else keeps the request's order. An
    infill needs a ``top_k`` in [1, INFILL_TOP_K_MAX]: ValueError otherwise (top_k <= 0 is off).
    """
    if "infill" not in order:
        return order
    if not 0 < top_k <= INFILL_TOP_K_MAX:
        raise ValueError(f"'top_k' must be between 1 and {INFILL_TOP_K_MAX} when 'samplers' has infill "
                         "(it compares every pair of the candidates top_k leaves)")
    first = order.index("infill")
    if "top_k" in order[:first]:
        return order
    return order[:first] + ("top_k",) + order[first:]


def parse_samplers(value) -> tuple[str, ...]:
    """The ``samplers`` field: a list of names or a string of letters, as llama-server. ValueError if unknown."""
    if isinstance(value, str):
        unknown = sorted(set(value) - set(SAMPLER_CHARS))
        if unknown:
            raise ValueError(f"unknown sampler letter(s) {''.join(unknown)!r} in 'samplers' "
                             f"(known: {''.join(SAMPLER_CHARS)})")
        return tuple(SAMPLER_CHARS[c] for c in value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("'samplers' must be a list of sampler names or a string of sampler letters")
    out = []
    for name in value:
        name = SAMPLER_ALIASES.get(name, name)
        if name not in SAMPLER_NAMES:
            raise ValueError(f"unknown sampler {name!r} in 'samplers' (known: {', '.join(sorted(SAMPLER_NAMES))})")
        out.append(name)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0  # 1: off
    top_n_sigma: float = -1.0  # <= 0: off
    xtc_probability: float = 0.0  # 0: off
    xtc_threshold: float = 0.1
    repeat_last_n: int = 64
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = DEFAULT_SEED
    ignore_eos: bool = False  # the server turns it into a -inf logit bias on every end-of-generation token
    logit_bias: tuple = ()  # (token id, bias) pairs once resolved (text entries until then); -inf: never
    samplers: tuple[str, ...] | None = None  # the request's sampler order; None: llama.cpp's default
    grammar: str = ""  # GBNF text every token must fit (from grammar, json_schema or response_format); "": none

    @property
    def order(self) -> tuple[str, ...]:
        return DEFAULT_SAMPLERS if self.samplers is None else self.samplers

    @property
    def is_greedy(self) -> bool:
        """Temperature <= 0 with a temperature sampler in the chain: the most likely candidate always wins."""
        return self.temperature <= 0.0 and "temperature" in self.order

    @property
    def picks_argmax(self) -> bool:
        """Greedy with nothing in the chain that changes the ranking before the pick: the chain's token
        is the argmax of the logits it is given.

        top_k/top_p/min_p/typ_p/top_n_sigma always keep the most likely token, so they do not matter;
        logit biases, penalties, infill and xtc (which drops top choices) do.
        """
        return self.is_greedy and not self.logit_bias and not self.reranking_samplers()

    @property
    def is_plain_greedy(self) -> bool:
        """The token is the raw argmax: no grammar either (its token is the best one the grammar allows,
        which only the grammar's state can say)."""
        return self.picks_argmax and not self.grammar

    def reranking_samplers(self) -> tuple[str, ...]:
        """The active samplers before ``temperature`` that can change which token ranks first, and a
        ``top_k`` that bounds an ``infill`` after it (it keeps the top token, so it changes nothing else)."""
        order = self.order[: self.order.index("temperature")] if "temperature" in self.order else self.order
        active = {"penalties": self.has_penalties, "infill": True, "xtc": self.xtc_probability > 0,
                  "top_k": "infill" in order}
        return tuple(name for name in order if active.get(name, False))

    @property
    def has_penalties(self) -> bool:
        return (
            self.repeat_last_n != 0
            and (self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0)
        )
