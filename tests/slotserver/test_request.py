"""Request validation: field types, ranges and the speculative.* forms (no model)."""

import pytest

from slotserver.errors import BadRequest
from slotserver.request import parse_completion


def test_defaults_and_aliases():
    req = parse_completion({"prompt": "hi", "max_tokens": 7})
    assert req.n_predict == 7 and req.cache_prompt and req.sampling.temperature == 0.8


@pytest.mark.parametrize("body,needle", [
    ({}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": "x", "n_predict": -2}, "n_predict"),
    ({"prompt": "x", "n_predict": "10"}, "n_predict"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "stop": [1]}, "stop"),
    ({"prompt": "x", "speculative.type": "magic"}, "magic"),
    ({"prompt": "x", "speculative": {"n_max": -1}}, "n_max"),
    ([1, 2], "object"),
])
def test_bad_fields_are_rejected_with_the_field_named(body, needle):
    with pytest.raises(BadRequest, match=needle):
        parse_completion(body)


def test_speculative_flat_and_nested_forms_agree():
    flat = parse_completion({"prompt": "x", "speculative.n_max": 16, "speculative.type": "none"})
    nested = parse_completion({"prompt": "x", "speculative": {"n_max": 16, "type": "none"}})
    assert flat.spec == nested.spec
    assert flat.spec.n_max == 16 and flat.spec.types == frozenset()


def test_token_prompt_and_mixed_prompt():
    assert parse_completion({"prompt": [1, 2, 3]}).prompt == [1, 2, 3]
    assert parse_completion({"prompt": ["a", 5]}).prompt == ["a", 5]
