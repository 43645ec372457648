"""The ``samplers`` field and which requests are plain greedy (argmax without a sampler chain)."""

from __future__ import annotations

import pytest

from slotserver.errors import BadRequest
from slotserver.request import parse_completion
from slotserver.sampling import DEFAULT_SAMPLERS, SamplingParams, parse_samplers


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
