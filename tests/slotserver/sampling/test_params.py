"""The ``samplers`` field and which requests are plain greedy (argmax without a sampler chain)."""

from __future__ import annotations

import pytest

from slotserver.errors import BadRequest
from slotserver.sampling.params import DEFAULT_SAMPLERS, INFILL_TOP_K_MAX, SamplingParams, bound_infill, parse_samplers
from slotserver.serving.request import parse_completion


def test_names_aliases_and_letters_as_llama_server():
    assert parse_samplers(["top_k", "top-p", "infill"]) == ("top_k", "top_p", "infill")
    assert parse_samplers("kpit") == ("top_k", "top_p", "infill", "temperature")
    assert parse_samplers([]) == ()


@pytest.mark.parametrize("value", [["top_k", "beam"], "kq", 3, [1], ["adaptive_p"]])
def test_unknown_samplers_are_a_400(value):
    with pytest.raises(BadRequest, match="sampler"):
        parse_completion({"prompt": "x", "samplers": value})


def test_plain_greedy_only_when_nothing_can_change_the_top_token():
    assert SamplingParams(temperature=0).is_plain_greedy
    assert SamplingParams(temperature=0, samplers=("top_k", "temperature")).is_plain_greedy
    assert not SamplingParams(temperature=0, samplers=("top_k", "top_p", "infill")).is_greedy  # no temperature: T=1
    assert not SamplingParams(temperature=0, samplers=("infill", "temperature")).is_plain_greedy
    assert SamplingParams(temperature=0, samplers=("temperature", "infill")).is_plain_greedy  # after the pick: moot
    assert not SamplingParams(temperature=0, repeat_penalty=1.1).is_plain_greedy
    assert SamplingParams(temperature=0, repeat_penalty=1.1, samplers=("top_k", "temperature")).is_plain_greedy
    assert not SamplingParams(temperature=0, xtc_probability=0.5).is_plain_greedy
    assert not SamplingParams(temperature=0, logit_bias=((1, 2.0),)).is_plain_greedy
    assert SamplingParams().order == DEFAULT_SAMPLERS


def test_sampler_fields_are_bounded():
    req = parse_completion({"prompt": "x", "typical_p": 0.5, "top_n_sigma": 2, "xtc_probability": 0.1})
    assert (req.sampling.typical_p, req.sampling.top_n_sigma, req.sampling.xtc_probability) == (0.5, 2.0, 0.1)
    with pytest.raises(BadRequest, match="typical_p"):
        parse_completion({"prompt": "x", "typical_p": 2})


# --- infill compares every pair of its candidates: it only runs behind a bounded top_k -------------


def test_a_top_k_is_inserted_right_before_an_unbounded_infill():
    assert bound_infill(("infill",), 40) == ("top_k", "infill")
    assert bound_infill(("top_p", "infill", "temperature"), 40) == ("top_p", "top_k", "infill", "temperature")
    assert bound_infill(("top_k", "top_p", "infill"), 40) == ("top_k", "top_p", "infill")  # llama.vim's chain
    assert bound_infill(("infill", "top_k", "infill"), 8) == ("top_k", "infill", "top_k", "infill")
    assert bound_infill(DEFAULT_SAMPLERS, 0) == DEFAULT_SAMPLERS  # no infill: nothing to bound


def test_the_request_gets_the_bounded_order():
    req = parse_completion({"prompt": "x", "samplers": ["infill"], "ignore_eos": True, "n_predict": 2})
    assert req.sampling.order == ("top_k", "infill") and req.sampling.top_k == 40
    assert parse_completion({"prompt": "x", "samplers": "i", "top_k": INFILL_TOP_K_MAX}).sampling.order == (
        "top_k", "infill")


@pytest.mark.parametrize("top_k", [0, -1, INFILL_TOP_K_MAX + 1, 262144])
def test_infill_without_a_bounded_top_k_is_a_400_naming_top_k(top_k):
    with pytest.raises(BadRequest, match=rf"^'top_k' must be between 1 and {INFILL_TOP_K_MAX} when 'samplers'"):
        parse_completion({"prompt": "x", "samplers": ["top_k", "infill"], "top_k": top_k})


def test_a_server_default_order_with_infill_is_bounded_too():
    defaults = SamplingParams(samplers=("infill", "temperature"))
    req = parse_completion({"prompt": "x"}, sampling_defaults=defaults)
    assert req.sampling.order == ("top_k", "infill", "temperature")


def test_a_greedy_chain_keeps_the_top_k_that_bounds_infill():
    """Greedy chains keep only what can change the top token, which dropped top_k and ran infill on
    the whole vocabulary; top_k keeps the top token, so keeping it changes nothing else."""
    p = SamplingParams(temperature=0, samplers=("top_k", "top_p", "infill", "temperature"))
    assert p.reranking_samplers() == ("top_k", "infill")
    assert SamplingParams(temperature=0, samplers=("top_k", "temperature")).reranking_samplers() == ()
