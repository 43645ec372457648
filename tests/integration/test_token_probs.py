"""Token-level fields of /completion on the real model: post-sampling probabilities (and that they
leave the sampled tokens unchanged, with and without speculation), probabilities per stream chunk,
prompt progress and per-token timings.

The texts are this file's own: the session server's shared ngram-mod pool must not learn the
benchmark workloads (more drafts there make other lossless tests flip ties).
"""

from __future__ import annotations

import json
import math

from tests.integration.ties import TIE_PROBS, check_same_draw, check_same_or_tie

# Repetitive, so ngram-mod drafts (and verification runs on the post-sampling path).
REPEAT = {"prompt": "Write this line 8 times: Seven silver swans swim south in spring.\n", "n_predict": 96,
          "return_tokens": True, "cache_prompt": False}
NONE, MOD = {"speculative.type": "none"}, {"speculative.type": "ngram-mod"}
SEEDED = {"temperature": 0.8, "seed": 4321}


async def stream(server, body: dict) -> list[dict]:
    chunks = []
    async with server.http.post(server.url + "/completion", json={**body, "stream": True}) as resp:
        assert resp.status == 200
        async for line in resp.content:
            if line.startswith(b"data: "):
                chunks.append(json.loads(line[6:]))
    return chunks


async def test_greedy_post_sampling_gives_the_chosen_token_probability_one(server):
    out = await server.complete(**{**REPEAT, **NONE, "n_predict": 16, "temperature": 0.0, "n_probs": 3,
                                   "post_sampling_probs": True})
    probs = out["completion_probabilities"]
    assert [p["id"] for p in probs] == out["tokens"]
    assert all(p["prob"] == 1.0 and p["top_probs"] == [{k: p[k] for k in ("id", "token", "bytes", "prob")}]
               for p in probs)
    assert "logprob" not in probs[0] and "top_logprobs" not in probs[0]


async def test_post_sampling_probs_are_the_candidates_the_chain_left(server):
    """top_k=3 leaves at most three candidates, renormalised: they sum to 1, most likely first. With a
    penalty in the chain, the sampler must also accept each token as llama_sampler_sample does."""
    body = {**REPEAT, **NONE, **SEEDED, "n_predict": 24, "top_k": 3, "top_p": 1.0, "min_p": 0.0,
            "repeat_penalty": 1.3}
    out = await server.complete(**body, n_probs=5, post_sampling_probs=True)
    for p in out["completion_probabilities"]:
        top = [c["prob"] for c in p["top_probs"]]
        assert 1 <= len(top) <= 3 and top == sorted(top, reverse=True)
        assert math.isclose(sum(top), 1.0, rel_tol=1e-4)
        assert {c["id"]: c["prob"] for c in p["top_probs"]}[p["id"]] == p["prob"]
    pre = await server.complete(**body, n_probs=5)
    assert pre["tokens"] == out["tokens"]  # sampling by hand through the chain picks what llama_sampler_sample picks
    assert len(pre["completion_probabilities"][0]["top_logprobs"]) == 5  # raw logits: not cut by top_k


async def test_greedy_with_post_sampling_and_speculation_equals_no_speculation(server):
    reference = await server.complete(**REPEAT, **NONE, temperature=0.0, n_probs=TIE_PROBS)
    plain_post = await server.complete(**REPEAT, **NONE, temperature=0.0, n_probs=5, post_sampling_probs=True)
    assert plain_post["tokens"] == reference["tokens"]
    spec = await server.complete(**REPEAT, **MOD, temperature=0.0, n_probs=5, post_sampling_probs=True)
    assert spec["timings"].get("draft_n_accepted", 0) > 0  # verification really ran on this path
    check_same_or_tie(reference, spec["tokens"], "greedy post-sampling")
    assert all(p["prob"] == 1.0 for p in spec["completion_probabilities"])


async def test_seeded_sampling_with_post_sampling_and_speculation_equals_no_speculation(server):
    """The same seed draws the same numbers in both runs; a difference must be one draw that picks
    either token in its own run's distribution (``check_same_draw``, see test_lossless)."""
    reference = await server.complete(**REPEAT, **NONE, **SEEDED, n_probs=40, post_sampling_probs=True)
    spec = await server.complete(**REPEAT, **MOD, **SEEDED, n_probs=40, post_sampling_probs=True)
    assert spec["timings"].get("draft_n", 0) > 0
    check_same_draw(reference, spec, "repeat")
    for p in spec["completion_probabilities"]:
        assert 0.0 < p["prob"] <= 1.0 and p["id"] in [c["id"] for c in p["top_probs"]] + [p["id"]]


async def test_stream_chunks_carry_the_probabilities_of_their_tokens(server):
    body = {**REPEAT, **NONE, "n_predict": 24, "temperature": 0.0, "n_probs": 2}
    whole = await server.complete(**body)
    chunks = await stream(server, body)
    assert len(chunks) > 2 and chunks[-1]["stop"] is True
    for c in chunks[:-1]:
        assert [p["id"] for p in c.get("completion_probabilities", [])] == c["tokens"]
    streamed = [p for c in chunks for p in c.get("completion_probabilities", [])]
    assert [p["id"] for p in streamed] == whole["tokens"]
    assert [round(p["logprob"], 4) for p in streamed] == [round(p["logprob"], 4)
                                                           for p in whole["completion_probabilities"]]


async def test_return_progress_reports_each_prompt_chunk_before_the_first_token(server):
    n_batch = server.state.config.engine.n_batch
    prompt = "Notes on tidal pools, barnacles and the patient work of sea anemones. " * (n_batch // 12)
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0.0, "return_progress": True, **NONE}
    chunks = await stream(server, {**body, "cache_prompt": False})
    progress = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    total = chunks[-1]["tokens_evaluated"]
    assert total > n_batch and len(progress) == math.ceil(total / n_batch)
    assert [p["processed"] for p in progress] == [min(total, n_batch * (i + 1)) for i in range(len(progress))]
    assert all(p["total"] == total and p["cache"] == 0 for p in progress)
    assert [p["time_ms"] for p in progress] == sorted(p["time_ms"] for p in progress)
    is_progress = ["prompt_progress" in c for c in chunks]
    assert is_progress == sorted(is_progress, reverse=True)  # progress first, then the tokens
    await stream(server, {**body, "id_slot": 2})
    reused = await stream(server, {**body, "id_slot": 2})  # reuses the previous request's cache
    [cached] = [c["prompt_progress"] for c in reused if "prompt_progress" in c]
    assert cached == {**cached, "total": total, "cache": total - 1, "processed": total}
    quiet = await stream(server, {**body, "id_slot": 2, "return_progress": False})  # cached: only the switch differs
    assert not any("prompt_progress" in c for c in quiet)


async def test_timings_per_token_puts_timings_in_every_chunk(server):
    body = {**REPEAT, **NONE, "n_predict": 12, "temperature": 0.0, "timings_per_token": True}
    chunks = await stream(server, body)
    seen = 0
    for c in chunks[:-1]:
        seen += len(c["tokens"])
        assert c["timings"]["predicted_n"] == seen and c["timings"]["prompt_n"] == c["tokens_evaluated"]
    assert not any("timings" in c for c in (await stream(server, {**body, "timings_per_token": False}))[:-1])
