"""Build a llama.cpp sampler chain for one request, in llama.cpp's default order.

Order (``common_sampler_init`` defaults): penalties, top_k, top_p, min_p, temperature, then dist.
At temperature <= 0 the chain ends in greedy instead (argmax, same as temp-0 + dist).
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp as lc

from slotserver.sampling import SamplingParams


def make_sampler(params: SamplingParams, n_vocab: int, prompt: Sequence[int]):
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if params.logit_bias:  # first, as in llama.cpp's chain
        biases = (lc.llama_logit_bias * len(params.logit_bias))(*params.logit_bias)
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(n_vocab, len(biases), biases))
    if params.has_penalties:
        lc.llama_sampler_chain_add(
            chain,
            lc.llama_sampler_init_penalties(
                n_vocab, params.repeat_last_n, params.repeat_penalty,
                params.frequency_penalty, params.presence_penalty,
            ),
        )
    if params.is_greedy:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
    else:
        if params.top_k > 0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(params.top_k))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(params.top_p, 0))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_min_p(params.min_p, 0))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(params.temperature))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(params.seed))
    if params.has_penalties:
        # As llama-server, the prompt counts towards the penalty window.
        window = prompt if params.repeat_last_n < 0 else prompt[-params.repeat_last_n :]
        for t in window:
            lc.llama_sampler_accept(chain, t)
    return chain


def free_sampler(chain) -> None:
    lc.llama_sampler_free(chain)
