"""logit_bias parsing and resolution (pure; the tokenizer is a stand-in function)."""

from __future__ import annotations

import math

import pytest

from slotserver.errors import BadRequest
from slotserver.sampling.logit_bias import MAX_ENTRIES, MAX_TEXT_CHARS, MAX_TOKENS, parse_logit_bias, resolve
from slotserver.serving.request import parse_completion


def test_object_and_list_forms_with_ids_text_and_false():
    assert parse_logit_bias({"15": -2.5, "Hello": False, "7": 1}) == ((15, -2.5), ("Hello", -math.inf), (7, 1.0))
    assert parse_logit_bias([[15, 3], ["Hi", False]]) == ((15, 3.0), ("Hi", -math.inf))
    assert parse_logit_bias(None) == ()


@pytest.mark.parametrize("value", [5, "x", [[1]], [[1, "a"]], {"1": None}, {"1": True}, {"1": float("nan")},
                                   {"1": 1e300}, [[True, 1]], [[1.5, 1]], {str(i): 1 for i in range(MAX_ENTRIES + 1)}])
def test_bad_forms_are_400(value):
    with pytest.raises(BadRequest):
        parse_logit_bias(value)


def test_text_stands_for_each_of_its_tokens_and_ids_must_be_in_the_vocabulary():
    tokenize = {"ab": [3, 4]}.get
    assert resolve(((1, 2.0), ("ab", -math.inf)), tokenize, 10) == ((1, 2.0), (3, -math.inf), (4, -math.inf))
    with pytest.raises(BadRequest, match="outside the vocabulary"):
        resolve(((10, 1.0),), tokenize, 10)


def test_a_bias_takes_greedy_off_the_argmax_shortcut():
    req = parse_completion({"prompt": "x", "temperature": 0, "logit_bias": {"5": False}})
    assert req.sampling.is_greedy and not req.sampling.is_plain_greedy
    assert parse_completion({"prompt": "x", "temperature": 0}).sampling.is_plain_greedy


@pytest.mark.parametrize("key", ["²", "٣", "１", "-²", "1²"])
def test_keys_of_non_ascii_digits_are_text_as_llama_servers_strtol_reads_them(key):
    # "²".isdigit() holds but int("²") raised ValueError: a 500; "٣" was read as token 3
    assert parse_logit_bias({key: 1.0}) == ((key, 1.0),)


def test_id_keys_of_any_length_are_a_400_not_a_500():
    assert parse_logit_bias({"000000000000000000042": 1}) == ((42, 1.0),)
    with pytest.raises(BadRequest, match="^'logit_bias' token .* outside the vocabulary"):
        parse_logit_bias({"9" * 5000: 1})  # int() refuses more than 4300 digits


def test_text_entries_and_what_they_stand_for_are_bounded():
    with pytest.raises(BadRequest, match=f"at most {MAX_TEXT_CHARS} characters"):
        parse_logit_bias({"a" * (MAX_TEXT_CHARS + 1): 1})
    tokenize = lambda text: list(range(len(text)))  # noqa: E731 - one token per character
    entries = parse_logit_bias({f"{i:04d}" + "b" * (MAX_TEXT_CHARS - 4): 1
                                for i in range(MAX_TOKENS // MAX_TEXT_CHARS + 1)})
    with pytest.raises(BadRequest, match=f"at most {MAX_TOKENS} tokens"):
        resolve(entries, tokenize, 1000)
