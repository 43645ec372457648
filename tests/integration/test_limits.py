"""Load limits on the real model: KV admission, a full KV cache, the queue bound, deadlines."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from tests.conftest import LiveServer

LONG_PROMPT = "The history of the bicycle began in the early nineteenth century. " * 50  # ~600 tokens


@pytest.fixture(scope="module")
async def small():
    """Two slots over a 1024-token context: two long prompts cannot both fit."""
    srv = await LiveServer(["-c", "1024", "-np", "2", "-kvu", "--spec-type", "none", "--max-queue", "1"]).start()
    yield srv
    await srv.stop()


def greedy(prompt: str, n_predict: int, **extra) -> dict:
    return {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False, **extra}


async def test_two_prompts_that_cannot_share_the_cache_run_one_after_the_other(small, caplog):
    _, tok = await small.post("/tokenize", {"content": LONG_PROMPT})
    assert 500 < len(tok["tokens"]) < 1024 - 256  # each fits alone with room to generate; not both
    with caplog.at_level(logging.WARNING, logger="slotserver.serving.runner"):
        outs = await asyncio.gather(*(small.post("/completion", greedy(LONG_PROMPT + f" Part {i}.", 64))
                                      for i in range(2)))
    assert [s for s, _ in outs] == [200, 200]
    assert all(o["tokens_predicted"] == 64 for _, o in outs)
    assert not [r for r in caplog.records if "KV cache full" in r.getMessage()]  # admission kept it from filling


async def test_when_generation_fills_the_cache_only_the_newest_request_ends():
    """Both admitted (short prompts), both generate without end: the cache fills, the newer one gets
    a clear 503 and the older one completes, using the cells the newer one freed."""
    srv = await LiveServer(["-c", "512", "-np", "2", "-kvu", "--spec-type", "none"]).start()
    try:
        first = asyncio.create_task(srv.post("/completion", greedy("Count: 1, 2, 3,", 450, ignore_eos=True)))
        await wait_until(lambda: srv.state.runner.n_busy == 1)
        second = await srv.post("/completion", greedy("Letters: a, b, c,", 450, ignore_eos=True))
        status, out = await first
        assert second[0] == 503 and "KV cache is full" in second[1]["error"]["message"]
        assert status == 200 and out["tokens_predicted"] == 450
        assert await srv.get("/health") == (200, {"status": "ok"})
    finally:
        await srv.stop()


async def wait_until(condition, timeout: float = 60.0) -> None:
    """Poll a condition on the live server's state (each check is instant; this is not a sleep-and-hope)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_a_full_queue_answers_503_with_retry_after(small):
    runner = small.state.runner
    busy = [asyncio.create_task(small.post("/completion", greedy(f"Story {i}:", 200, ignore_eos=True)))
            for i in range(2)]
    await wait_until(lambda: runner.n_in_flight == 2)
    waiting = asyncio.create_task(small.post("/completion", greedy("Waiting:", 4)))
    await wait_until(lambda: runner.n_in_flight == 3)  # 2 slots + 1 waiting = the bound
    async with small.http.post(small.url + "/completion", json=greedy("One too many:", 4)) as resp:
        body = await resp.json()
        assert resp.status == 503 and int(resp.headers["Retry-After"]) >= 1
        assert "busy" in body["error"]["message"]
    assert [(await t)[0] for t in busy] == [200, 200] and (await waiting)[0] == 200


async def test_t_max_predict_ms_stops_after_a_new_line():
    srv = await LiveServer(["-c", "1024", "-np", "1", "--spec-type", "none"]).start()
    try:
        out = await srv.complete(**greedy("A list of fruits:\n1. Apple\n2.", 200, t_max_predict_ms=1, ignore_eos=True))
        assert out["stop_type"] == "limit" and out["tokens_predicted"] < 200 and "\n" in out["content"]
    finally:
        await srv.stop()


async def test_the_server_timeout_ends_a_running_request_with_what_it_has():
    srv = await LiveServer(["-c", "1024", "-np", "1", "--spec-type", "none", "--timeout", "2"]).start()
    try:
        status, out = await srv.post("/completion", greedy("Count: 1, 2,", 100000, ignore_eos=True))
        assert status == 200 and out["stop_type"] == "limit" and 0 < out["tokens_predicted"] < 100000
        assert (await srv.post("/completion", greedy("Next:", 4)))[0] == 200
    finally:
        await srv.stop()


async def test_a_body_larger_than_the_context_can_use_is_refused_unread(small):
    data = io.BytesIO(json.dumps({"prompt": "x" * (2 << 20)}).encode())
    async with small.http.post(small.url + "/completion", data=data) as resp:
        out = await resp.json()
    assert resp.status == 413 and out["error"]["code"] == 413
