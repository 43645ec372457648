"""The HTTP API on the real model: errors, streaming, endpoints, slot pinning, cancellation."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import ALL_TYPES

SMALL = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0.0}
# Two runs compared token for token must be computed the same way: no cache reuse, no drafts.
SAME_PATH = {"cache_prompt": False, "speculative.type": "none"}


@pytest.mark.parametrize("body", [
    b"{not json",
    json.dumps({"prompt": "hi", "n_predict": "ten"}),
    json.dumps({"prompt": "hi", "n_predict": -2}),
    json.dumps({"prompt": 12}),
    json.dumps({"prompt": "hi", "temperature": [1]}),
    json.dumps({"prompt": [1, 2, 10**9]}),
    json.dumps({"prompt": "hi", "speculative.type": "telepathy"}),
])
async def test_bad_requests_get_a_400_error_object_and_the_server_keeps_serving(server, body):
    status, out = await server.post("/completion", body)
    assert status == 400
    assert set(out["error"]) >= {"code", "message", "type"} and out["error"]["code"] == 400
    assert (await server.complete(**SMALL))["tokens_predicted"] == 8


async def test_prompt_longer_than_the_context_is_a_400(server):
    status, out = await server.post("/completion", {"prompt": "word " * 9000, "n_predict": 4})
    assert status == 400 and out["error"]["type"] == "exceed_context_size_error"
    assert out["error"]["n_ctx"] == 8192
    assert (await server.get("/health"))[0] == 200


async def test_response_fields_and_timings(server):
    out = await server.complete(**SMALL, return_tokens=True)
    assert out["stop_type"] == "limit" and out["tokens_predicted"] == 8 and len(out["tokens"]) == 8
    t = out["timings"]
    assert t["prompt_n"] + t["cache_n"] == out["tokens_evaluated"] and t["predicted_n"] == 8
    assert t["predicted_per_second"] > 0 and t["prompt_ms"] > 0
    picked = await server.complete(**SMALL, response_fields=["content", "timings/predicted_n", "nope/x"])
    assert set(picked) == {"content", "timings/predicted_n"} and picked["timings/predicted_n"] == 8


async def test_second_identical_prompt_reuses_the_cache(server):
    body = {**SMALL, "prompt": "A long shared prefix about the history of the bicycle. " * 4, "id_slot": 1}
    await server.complete(**body)
    out = await server.complete(**body)
    assert out["id_slot"] == 1 and out["timings"]["cache_n"] == out["tokens_evaluated"] - 1


async def test_stop_string_ends_the_text(server):
    plain = await server.complete(**{**SMALL, **SAME_PATH, "n_predict": 16})
    word = plain["content"].strip().split()[1]
    out = await server.complete(**{**SMALL, **SAME_PATH, "n_predict": 16, "stop": [word]})
    assert out["stop_type"] == "word" and out["stopping_word"] == word and word not in out["content"]


async def test_streaming_sends_partials_then_a_final_chunk_with_the_same_text(server):
    plain = await server.complete(**{**SMALL, **SAME_PATH, "n_predict": 24})
    chunks = []
    body = {**SMALL, **SAME_PATH, "n_predict": 24, "stream": True}
    async with server.http.post(server.url + "/completion", json=body) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for line in resp.content:
            if line.startswith(b"data: "):
                chunks.append(json.loads(line[6:]))
    assert chunks[-1]["stop"] is True and all(c["stop"] is False for c in chunks[:-1])
    assert len(chunks) > 2
    assert "".join(c["content"] for c in chunks) == plain["content"]


async def test_tokenize_detokenize_round_trip(server):
    _, tok = await server.post("/tokenize", {"content": "Hello world", "with_pieces": False})
    _, text = await server.post("/detokenize", {"tokens": tok["tokens"]})
    assert text["content"] == "Hello world"
    status, err = await server.post("/tokenize", {"content": 5})
    assert status == 400 and "content" in err["error"]["message"]


async def test_health_props_and_slots(server):
    assert await server.get("/health") == (200, {"status": "ok"})
    _, props = await server.get("/props")
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 8192
    assert props["speculative"]["types"] == ALL_TYPES.split(",")
    _, slots = await server.get("/slots")
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and not any(s["is_processing"] for s in slots)
    assert (await server.get("/metrics"))[0] == 501  # only with --metrics


async def test_client_disconnect_frees_the_slot(server):
    runner = server.state.runner
    done_before, gen_before = runner.stats.n_requests_finished, runner.stats.n_gen_tokens
    body = {"prompt": "Count slowly:", "n_predict": 2000, "temperature": 0.0, "ignore_eos": True, "stream": True}
    async with server.http.post(server.url + "/completion", json=body) as resp:
        await resp.content.readline()  # generation has started
    # the connection is closed: the runner must finish the job and free its slot
    deadline = asyncio.get_running_loop().time() + 30
    while runner.stats.n_requests_finished == done_before or runner.n_busy:
        assert asyncio.get_running_loop().time() < deadline, "slot was not freed after disconnect"
        await asyncio.sleep(0.05)
    assert runner.stats.n_gen_tokens - gen_before < 2000  # it did not run to completion
    assert (await server.complete(**SMALL))["tokens_predicted"] == 8


async def test_more_requests_than_slots_wait_in_fifo_order_and_all_finish(server):
    outs = await asyncio.gather(*(server.complete(**{**SMALL, "n_predict": 4 + i}) for i in range(7)))
    assert [o["tokens_predicted"] for o in outs] == [4 + i for i in range(7)]
