"""The /infill prompt layout and its budgets, with a character-level tokenizer instead of a model."""

from __future__ import annotations

import pytest

from slotserver.engine.vocab import NO_TOKEN, FimTokens
from slotserver.errors import BadRequest
from slotserver.serving.infill import (
    CHUNK_SEPARATOR,
    InfillBudget,
    InfillInput,
    extra_tokens,
    infill_prompt,
    parse_infill,
)

PRE, SUF, MID, REP, SEP, BOS = -10, -11, -12, -13, -14, -15
FULL = FimTokens(PRE, SUF, MID, REP, SEP)
BARE = FimTokens(PRE, SUF, MID)


def tok(text: str) -> list[int]:
    return [ord(c) for c in text]


def untok(tokens: list[int]) -> str:
    names = {PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>", BOS: "<BOS>"}
    return "".join(names.get(t, chr(t) if t >= 0 else "?") for t in tokens)


BIG = InfillBudget(n_batch=2048, n_ctx=8192, n_predict=-1)


def test_prefix_suffix_middle_layout_with_the_repo_pattern():
    inp = InfillInput("def f():\n", "\nreturn x\n", (("a.py", "A = 1\n"), ("b.py", "B\n")))
    out = untok(infill_prompt(FULL, inp, tok("    x"), tok, BIG, bos=BOS))
    assert out == ("<REP>myproject\n<SEP>a.py\nA = 1\n<SEP>b.py\nB\n<SEP>filename\n"
                   "<BOS><PRE>def f():\n    x<SUF>\nreturn x\n<MID>")


def test_without_rep_and_sep_tokens_chunks_are_separated_by_text():
    inp = InfillInput("p", "s", (("a.py", "A"),))
    out = untok(infill_prompt(BARE, inp, [], tok, BIG, bos=None))
    assert out == CHUNK_SEPARATOR + "A<PRE>p<SUF>s<MID>"


def test_a_bos_the_model_does_not_have_is_left_out():
    """A vocabulary may ask for a BOS it lacks (NO_TOKEN, -1): -1 in a prompt fails the decode."""
    out = infill_prompt(BARE, InfillInput("p", "s"), [], tok, BIG, bos=NO_TOKEN)
    assert NO_TOKEN not in out and untok(out) == "<PRE>p<SUF>s<MID>"


def test_spm_puts_the_suffix_first():
    out = untok(infill_prompt(BARE, InfillInput("p", "s"), tok("m"), tok, BIG, bos=BOS, spm=True))
    assert out == "<BOS><SUF>s<PRE>pm<MID>"


def test_budgets_keep_the_prefix_tail_the_suffix_head_and_the_extra_tail():
    budget = InfillBudget(n_batch=40, n_ctx=100, n_predict=10)  # prefix 30, suffix 10-2-len(prompt), extra 40
    inp = InfillInput("P" * 50 + "abc", "xyz" + "S" * 50, (("f", "E" * 100 + "end"),))
    prompt = tok("mm")
    out = infill_prompt(FULL, inp, prompt, tok, budget, bos=None)
    text = untok(out)
    pre = text[text.index("<PRE>") + 5 : text.index("<SUF>")]
    suf = text[text.index("<SUF>") + 5 : text.index("<MID>")]
    extra = text[: text.index("<PRE>")]
    assert pre == ("P" * 50 + "abc")[-30:] + "mm"
    assert suf == ("xyz" + "S" * 50)[: 10 - (2 + len(prompt))]
    assert out[:40] == extra_tokens(FULL, inp, tok)[-40:] and extra == "E" * 27 + "end<SEP>filename\n"


def test_no_room_for_extra_context_when_the_context_is_one_batch():
    inp = InfillInput("p", "s", (("f", "E" * 10),))
    out = infill_prompt(FULL, inp, [], tok, InfillBudget(n_batch=64, n_ctx=64, n_predict=-1), bos=None)
    assert untok(out) == "e\n<PRE>p<SUF>s<MID>"  # n_ctx - n_batch - 2 * n_predict = 2 tokens of extra


@pytest.mark.parametrize("chunk", [{}, {"filename": "ok"}, {"filename": 123}, {"filename": 123, "text": "abc"},
                                   {"filename": "a", "text": 456}, "text", None])
def test_bad_extra_chunks_are_400(chunk):
    with pytest.raises(BadRequest, match="extra_context chunk"):
        parse_infill({"input_prefix": "", "input_suffix": "", "input_extra": [chunk]})


@pytest.mark.parametrize("body", [{"input_suffix": ""}, {"input_prefix": ""}, {"input_prefix": 1, "input_suffix": ""},
                                  {"input_prefix": "", "input_suffix": "", "prompt": 5},
                                  {"input_prefix": "", "input_suffix": "", "input_extra": {"text": "x"}}, [1]])
def test_bad_infill_fields_are_400(body):
    with pytest.raises(BadRequest):
        parse_infill(body)


def test_llama_vim_chunks_with_extra_keys_parse():
    inp = parse_infill({"input_prefix": "a", "input_suffix": "b", "prompt": "c",
                        "input_extra": [{"text": "t\n", "time": [1, 2], "filename": "x.c"}, {"text": "u"}]})
    assert inp.extra == (("x.c", "t\n"), ("tmp", "u"))
