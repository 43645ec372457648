"""Build a llama.cpp sampler chain for one request, as llama.cpp's ``common_sampler_init``.

Logit biases first, then the samplers in the request's order (llama.cpp's default order unless the
request sends ``samplers``), then the pick: ``dist`` with the request's seed. With a greedy request
(temperature <= 0 and a temperature sampler in the order) only the samplers that can change the
top candidate are kept before a ``greedy`` pick: the same token as llama.cpp's temperature-0 mask
followed by ``dist``, without the filters that could not change it.

An ``infill`` sampler (its cost grows with the square of its candidates) only ever runs behind a
bounded ``top_k``: requests are checked when parsed (``sampling.bound_infill``), and a chain that
still lacks one is refused here rather than built.
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp as lc

from slotserver.sampling.params import SamplingParams, bound_infill


def _sampler(name: str, p: SamplingParams, vocab, n_vocab: int):
    """The llama sampler for ``name`` with the request's parameters, or None when it would do nothing."""
    if name == "top_k":
        return lc.llama_sampler_init_top_k(p.top_k) if p.top_k > 0 else None
    if name == "top_p":
        return lc.llama_sampler_init_top_p(p.top_p, 1) if p.top_p < 1.0 else None
    if name == "min_p":
        return lc.llama_sampler_init_min_p(p.min_p, 1) if p.min_p > 0.0 else None
    if name == "typ_p":
        return lc.llama_sampler_init_typical(p.typical_p, 1) if p.typical_p < 1.0 else None
    if name == "top_n_sigma":
        return lc.llama_sampler_init_top_n_sigma(p.top_n_sigma) if p.top_n_sigma > 0.0 else None
    if name == "xtc":
        return lc.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, 1, p.seed) if p.xtc_probability > 0 else None
    if name == "temperature":
        return lc.llama_sampler_init_temp(p.temperature)
    if name == "infill":
        return lc.llama_sampler_init_infill(vocab)
    if name == "penalties":
        if not p.has_penalties:
            return None
        return lc.llama_sampler_init_penalties(n_vocab, p.repeat_last_n, p.repeat_penalty, p.frequency_penalty,
                                               p.presence_penalty)
    return None  # dry: accepted for compatibility; its parameters are not supported, so it is off


def make_sampler(params: SamplingParams, vocab, n_vocab: int, prompt: Sequence[int]):
    names = params.reranking_samplers() if params.is_greedy else params.order
    if bound_infill(names, params.top_k) != names:
        raise ValueError("an infill sampler without a top_k before it would compare every pair of tokens")
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if params.logit_bias:
        biases = (lc.llama_logit_bias * len(params.logit_bias))(*params.logit_bias)
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(n_vocab, len(biases), biases))
    for name in names:
        sampler = _sampler(name, params, vocab, n_vocab)
        if sampler is not None:
            lc.llama_sampler_chain_add(chain, sampler)
    if params.is_greedy:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
    else:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(params.seed))
    if params.has_penalties and "penalties" in names:
        # As llama-server, the prompt counts towards the penalty window.
        for t in prompt[-params.repeat_last_n :]:
            lc.llama_sampler_accept(chain, t)
    return chain


def free_sampler(chain) -> None:
    lc.llama_sampler_free(chain)
