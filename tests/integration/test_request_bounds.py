"""Bounded work for request fields, on one real server (Gemma 3 270M, 2 slots): no field can freeze
the engine, answer a 500, or make the server record and build an unbounded body (issue 31).

Each test failed on 24272d3's code: the infill chains froze the engine thread inside one C call
(every pair of 262,144 candidates), "²" and a 5,000-digit key answered 500, the probability budget
did not exist (100 x 1,000 was generated and recorded), and a request's n_cache_reuse overrode the
server's.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.conftest import LiveServer

REUSE = 256  # the server's --cache-reuse


@pytest.fixture(scope="module")
async def server():
    srv = await LiveServer(["-c", "4096", "-np", "2", "--spec-type", "none", "--cache-reuse", str(REUSE)]).start()
    yield srv
    await srv.stop()


OTHER = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0.0, "cache_prompt": False,
         "ignore_eos": True}


async def timed(srv: LiveServer, body: dict) -> tuple[float, int, dict]:
    t = time.perf_counter()
    status, out = await srv.post("/completion", body)
    return time.perf_counter() - t, status, out


@pytest.mark.parametrize("chain", [
    {"samplers": ["infill"]},  # the request: infill alone over the whole vocabulary
    {"samplers": ["top_k", "infill", "temperature"], "temperature": 0.0},  # greedy chains dropped the top_k
])
async def test_an_infill_chain_completes_and_another_request_keeps_its_pace(server, chain):
    infill = {"prompt": "Once upon a time", "ignore_eos": True, "n_predict": 2, "cache_prompt": False, **chain}
    await timed(server, OTHER)  # warm
    paces = []
    for _ in range(5):  # the CPU is shared: a trial whose normal time was disturbed is tried again
        normal = (await timed(server, OTHER))[0]
        # Both at once; a frozen engine fails here instead of hanging the suite.
        (t_infill, s_infill, out), (t_other, s_other, _) = await asyncio.wait_for(
            asyncio.gather(timed(server, infill), timed(server, OTHER)), timeout=normal + 60)
        assert s_infill == 200 and out["tokens_predicted"] == 2, out
        assert out["generation_settings"]["samplers"][:2] == ["top_k", "infill"]  # bounded by the top_k before it
        assert s_other == 200
        paces.append((normal, t_other, t_infill))
        if t_other < normal + 2.0 and t_infill < normal + 2.0:
            return
    pytest.fail(f"the other request was slowed by more than 2 s in every trial (normal, with infill, infill): {paces}")


async def test_infill_with_top_k_off_or_too_wide_is_a_400_naming_top_k(server):
    for top_k in (0, 100_000):
        status, out = await server.post("/completion", {"prompt": "x", "samplers": ["infill"], "top_k": top_k})
        assert status == 400 and out["error"]["message"].startswith("'top_k' must be between 1 and 256"), out


async def test_non_ascii_digits_in_request_text_are_never_a_500(server):
    # "²".isdigit() holds and int("²") raises: a logit_bias key and a schema pattern's count were 500s
    status, out = await server.post("/completion", {"prompt": "hi", "n_predict": 1, "logit_bias": {"²": -5}})
    assert status == 200, out  # text, as llama-server's strtol reads it: its tokens get the bias
    assert out["generation_settings"]["logit_bias"] and all(
        e["bias"] == -5 for e in out["generation_settings"]["logit_bias"])
    status, out = await server.post("/completion", {"prompt": "hi", "n_predict": 1, "logit_bias": {"9" * 5000: 1}})
    assert status == 400 and "'logit_bias' token" in out["error"]["message"], out
    schema = {"type": "string", "pattern": "^a{²}$"}
    status, out = await server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
        "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}})
    assert status == 400 and "'response_format'" in out["error"]["message"], out


async def test_n_probs_times_n_predict_is_bounded_before_anything_runs(server):
    short = {"stop": [" ", "\n", ".", ","]}  # what n_predict allows counts, not what a stop string would end at
    status, out = await server.post("/completion", {"prompt": "hi", "n_probs": 100, "n_predict": 3000, **short})
    assert status == 400 and out["error"]["message"].startswith("'n_probs' times 'n_predict' must be at most"), out
    # -1 counts as the slot's context (2,048 here): 100 x 2,048 fits, and n_predict becomes the context
    status, out = await server.post("/completion", {"prompt": "hi", "n_probs": 100, **short})
    assert status == 200 and out["generation_settings"]["n_predict"] == 2048, out
    status, out = await server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 20, "max_tokens": 14000,
        **short})
    assert status == 400 and "'n_probs' times 'n_predict'" in out["error"]["message"], out
    status, out = await server.post("/completion", {"prompt": "hi", "n_probs": 100, "n_predict": 4,
                                                    "ignore_eos": True})
    assert status == 200 and len(out["completion_probabilities"]) == 4
    assert len(out["completion_probabilities"][0]["top_logprobs"]) == 100


async def test_a_request_cannot_reuse_shorter_chunks_than_the_servers_cache_reuse(server):
    text = " ".join(f"Line {i}: the value of item {i} is {i * 7 % 13}." for i in range(60))
    _, tok = await server.post("/tokenize", {"content": text})
    toks = tok["tokens"]
    assert len(toks) > 400
    cached = {"n_predict": 1, "temperature": 0.0, "id_slot": 0, "cache_prompt": True}
    await server.complete(prompt=toks[:350], **cached)
    # A chunk of 20 tokens left the middle; 200 tokens after it are still cached, fewer than the server's 256.
    out = await server.complete(prompt=toks[:30] + toks[50:250], n_cache_reuse=16, **cached)
    assert out["generation_settings"]["n_cache_reuse"] == REUSE
    assert out["timings"]["cache_n"] == 30, out["timings"]  # 24272d3: the 200 were moved with the request's 16
    await server.complete(prompt=toks[:350], **cached)
    out = await server.complete(prompt=toks[:30] + toks[50:350], **cached)  # 300 after it: reused
    assert out["generation_settings"]["n_cache_reuse"] == REUSE
    assert out["timings"]["cache_n"] >= 30 + REUSE, out["timings"]
