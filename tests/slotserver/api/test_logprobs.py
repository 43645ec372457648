"""Per-token probabilities in llama.cpp's and OpenAI's shapes, and OpenAI's logprobs request fields."""

import math

import pytest

from slotserver.api import logprobs
from slotserver.api.oai_logprobs import chat_logprobs, text_logprobs
from slotserver.engine.token_probs import TokenProbs
from slotserver.errors import BadRequest

PIECES = {1: b" a", 2: b" b", 3: b"\xe2\x82", 4: b" A"}
PROBS = [TokenProbs(1, -0.5, ((1, -0.5), (2, -1.5))), TokenProbs(3, -2.0, ((2, -0.1), (4, -0.2), (3, -2.0)))]


def piece(token: int) -> bytes:
    return PIECES[token]


def test_native_keys_say_whether_values_are_logprobs_or_post_sampling_probs():
    pre = logprobs.native(PROBS, piece, post_sampling=False)
    assert pre[0] == {"id": 1, "token": " a", "bytes": [32, 97], "logprob": -0.5, "top_logprobs": [
        {"id": 1, "token": " a", "bytes": [32, 97], "logprob": -0.5},
        {"id": 2, "token": " b", "bytes": [32, 98], "logprob": -1.5}]}
    assert pre[1]["token"] == "\ufffd" and pre[1]["bytes"] == [0xE2, 0x82]  # a split UTF-8 character
    post = logprobs.native([TokenProbs(2, 0.75, ((2, 0.75), (1, 0.25)))], piece, post_sampling=True)
    assert post[0]["prob"] == 0.75 and [c["prob"] for c in post[0]["top_probs"]] == [0.75, 0.25]
    assert "logprob" not in post[0] and "top_logprobs" not in post[0]


def test_chat_content_items():
    out = logprobs.chat(PROBS, piece, post_sampling=False)
    assert out["content"][0] == {"token": " a", "logprob": -0.5, "bytes": [32, 97], "top_logprobs": [
        {"token": " a", "logprob": -0.5, "bytes": [32, 97]}, {"token": " b", "logprob": -1.5, "bytes": [32, 98]}]}
    post = logprobs.chat([TokenProbs(2, 0.5, ((2, 0.5), (1, 0.0)))], piece, post_sampling=True)["content"][0]
    assert post["logprob"] == math.log(0.5) and post["top_logprobs"][1]["logprob"] == logprobs.LOG_ZERO


def test_legacy_text_lists_and_offsets_continue_across_chunks():
    first, offset = logprobs.text(PROBS[:1], piece, post_sampling=False)
    assert first == {"tokens": [" a"], "token_logprobs": [-0.5], "top_logprobs": [{" a": -0.5, " b": -1.5}],
                     "text_offset": [0]}
    second, offset = logprobs.text(PROBS[1:] * 2, piece, post_sampling=False, offset=offset)
    assert second["text_offset"] == [2, 3] and offset == 4
    assert second["top_logprobs"][0] == {" b": -0.1, " A": -0.2, "\ufffd": -2.0}


def test_legacy_top_keeps_the_more_likely_of_two_ids_with_one_text():
    same = {5: b"x", 6: b"x"}
    out, _ = logprobs.text([TokenProbs(5, -0.1, ((5, -0.1), (6, -3.0)))], same.__getitem__, post_sampling=False)
    assert out["top_logprobs"] == [{"x": -0.1}]


@pytest.mark.parametrize("body,top", [({}, None), ({"logprobs": None}, None), ({"logprobs": 0}, 0),
                                      ({"logprobs": 20}, 20)])
def test_text_logprobs_is_the_top_count(body, top):
    assert text_logprobs(body) == top


@pytest.mark.parametrize("value", [True, -1, 21, 2.5, "3"])
def test_text_logprobs_out_of_range_is_refused(value):
    with pytest.raises(BadRequest, match="'logprobs'"):
        text_logprobs({"logprobs": value})


@pytest.mark.parametrize("body,top", [({}, None), ({"logprobs": False}, None), ({"logprobs": True}, 0),
                                      ({"logprobs": True, "top_logprobs": 5}, 5),
                                      ({"logprobs": True, "top_logprobs": None}, 0)])
def test_chat_logprobs(body, top):
    assert chat_logprobs(body) == top


@pytest.mark.parametrize("body,needle", [({"logprobs": 1}, "'logprobs' must be a boolean"),
                                         ({"top_logprobs": 3}, "requires 'logprobs'"),
                                         ({"logprobs": False, "top_logprobs": 3}, "requires 'logprobs'"),
                                         ({"logprobs": True, "top_logprobs": 21}, "'top_logprobs'"),
                                         ({"logprobs": True, "top_logprobs": -1}, "'top_logprobs'")])
def test_chat_logprobs_invalid(body, needle):
    with pytest.raises(BadRequest, match=needle):
        chat_logprobs(body)
