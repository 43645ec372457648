"""Request body decoding: everything json.loads lets through or crashes on is a 400 naming it (no model)."""

import json

import pytest

from slotserver.api.json_body import MAX_DEPTH, parse_json_body
from slotserver.errors import BadRequest


def nested(levels: int) -> bytes:
    """An object whose "a" holds lists nested so the whole body is ``levels`` deep."""
    return b'{"a":' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


def test_a_plain_object_and_an_empty_body():
    assert parse_json_body(b'{"prompt": "hi", "n_predict": 4}') == {"prompt": "hi", "n_predict": 4}
    assert parse_json_body(b"") == {}


def test_utf8_text_paired_surrogate_escapes_and_a_bom_pass():
    body = parse_json_body('\ufeff{"a": "é\\ud83d\\ude00", "\\u00e9": 1}'.encode())
    assert body == {"a": "é😀", "é": 1}


@pytest.mark.parametrize("raw,needle", [
    (b'{"a": 1', "invalid JSON"),
    (b"not json", "invalid JSON"),
    (b"   ", "invalid JSON"),
    (b'{"a": "\xff"}', "not valid UTF-8"),
    (b'{"a": "\xed\xa0\x80"}', "not valid UTF-8"),  # an encoded surrogate is not UTF-8 either
    (b"[1, 2]", "must be a JSON object"),
    (b'"text"', "must be a JSON object"),
    (b"null", "must be a JSON object"),
    (b'{"temperature": NaN}', "NaN is not a valid JSON number"),
    (b'{"temperature": Infinity}', "Infinity is not a valid JSON number"),
    (b'{"temperature": -Infinity}', "-Infinity is not a valid JSON number"),
    (b'{"temperature": 1e999}', "out of range"),  # json.loads makes it inf
    (b'{"temperature": -1e999}', "out of range"),
    (b'{"n": ' + b"1" * 5000 + b"}", "invalid JSON"),  # int() refuses that many digits
])
def test_malformed_bodies_are_bad_requests(raw, needle):
    with pytest.raises(BadRequest, match=needle) as err:
        parse_json_body(raw)
    assert err.value.status == 400


@pytest.mark.parametrize("raw", [
    b'{"prompt": "\\ud800"}',
    b'{"prompt": "ok \\uDFFF"}',
    b'{"\\udc00": 1}',  # in a key
    b'{"messages": [{"role": "user", "content": ["x", "\\ud83d"]}]}',  # deep in a list
    b'{"a": "\\ude00\\ud83d"}',  # a pair in the wrong order is two lone surrogates
])
def test_lone_surrogates_anywhere_are_rejected(raw):
    with pytest.raises(BadRequest, match="lone surrogate"):
        parse_json_body(raw)


def test_nesting_is_limited_explicitly():
    assert parse_json_body(nested(MAX_DEPTH))
    with pytest.raises(BadRequest, match="nested too deeply"):
        parse_json_body(nested(MAX_DEPTH + 1))


def test_nesting_past_the_recursion_limit_is_a_bad_request_not_a_500():
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
        with pytest.raises(BadRequest, match="nested too deeply"):
            parse_json_body(raw)


def test_many_brackets_inside_strings_are_only_text():
    body = {"prompt": "[" * 1000 + "{" * 1000}
    assert parse_json_body(json.dumps(body).encode()) == body
