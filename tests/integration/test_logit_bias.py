"""logit_bias on the real model: a forbidden greedy token changes the output, the same way with and
without speculation (verification samples through the bias too)."""

from __future__ import annotations

from tests.integration.ties import TIE_PROBS, check_same_or_tie

# Not a benchmark workload: the session server's shared pool must not learn the lossless tests' texts
# (more drafts there mean more batched verification, each a chance for rounding to flip a tie).
REPEAT = {"prompt": "Write this line 8 times: The quick brown fox jumps over the lazy dog.\n", "n_predict": 64,
          "temperature": 0.0, "cache_prompt": False, "return_tokens": True}


async def test_forbidding_a_token_changes_output_the_same_way_with_and_without_speculation(server):
    plain = await server.complete(**REPEAT, **{"speculative.type": "none"})
    banned = plain["tokens"][3]  # a token the repetition keeps producing, so drafts propose it
    bias = {"logit_bias": [[banned, False]]}
    without = await server.complete(**REPEAT, **bias, n_probs=TIE_PROBS, **{"speculative.type": "none"})
    with_spec = await server.complete(**REPEAT, **bias, **{"speculative.type": "ngram-mod"})
    assert banned not in without["tokens"] and banned not in with_spec["tokens"]
    assert without["tokens"] != plain["tokens"]
    check_same_or_tie(without, with_spec["tokens"], "logit_bias")
    assert with_spec["timings"].get("draft_n_accepted", 0) > 0  # drafting ran, and never slipped the ban past


async def test_a_positive_bias_by_text_is_applied(server):
    out = await server.complete(prompt="My favourite word is", n_predict=4, temperature=0.0,
                                logit_bias={" banana": 100})
    assert " banana" in out["content"]
