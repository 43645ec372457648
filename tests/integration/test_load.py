"""A bounded load test on loopback: 64 clients on 4 slots, streaming and not, a third of the streams
disconnecting mid-stream, some reading slowly. Afterwards every slot is idle, a near-full-context
request succeeds, and resident memory after a second identical round is within 5% of the first."""

from __future__ import annotations

import asyncio
import gc
import random

import pytest

from tests.conftest import LiveServer
from tests.integration.test_limits import wait_until

N_CLIENTS = 64
N_PREDICT = 24
N_CTX = 4096


@pytest.fixture(scope="module")
async def loaded():
    srv = await LiveServer(["-c", str(N_CTX), "-np", "4", "-kvu"]).start()
    yield srv
    await srv.stop()


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb * 1024


async def client(srv, i: int, rng: random.Random) -> str:
    body = {"prompt": f"Client {i} writes a short note about the number {i}:", "n_predict": N_PREDICT,
            "temperature": 0.7, "seed": i, "ignore_eos": True}
    if i % 4 == 0:
        status, out = await srv.post("/completion", body)
        assert status == 200 and out["tokens_predicted"] == N_PREDICT
        return "whole"
    async with srv.http.post(srv.url + "/completion", json={**body, "stream": True}) as resp:
        assert resp.status == 200
        if i % 3 == 0:  # a third of the streams: leave after a couple of chunks
            await resp.content.readline()
            await resp.content.readline()
            resp.close()
            return "left"
        n_lines = 0
        async for _ in resp.content:
            n_lines += 1
            if i % 8 == 1:
                await asyncio.sleep(rng.uniform(0.02, 0.08))  # a slow reader
        assert n_lines > 0
        return "stream"


async def one_round(srv, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    kinds = await asyncio.wait_for(asyncio.gather(*(client(srv, i, rng) for i in range(N_CLIENTS))), 300)
    runner = srv.state.runner
    await wait_until(lambda: runner.n_in_flight == 0 and runner.n_busy == 0)  # the leavers were cancelled
    return {k: kinds.count(k) for k in set(kinds)}


async def test_64_clients_on_4_slots_leave_no_trace(loaded):
    kinds = await one_round(loaded, 1)
    assert kinds["left"] > 10 and kinds["whole"] == N_CLIENTS // 4
    _, slots = await loaded.get("/slots")
    assert len(slots) == 4 and not any(s["is_processing"] for s in slots)
    gc.collect()
    rss_first = rss_bytes()

    assert await one_round(loaded, 1) == kinds
    gc.collect()
    rss_second = rss_bytes()
    print(f"RSS after round 1: {rss_first / 2**20:.1f} MiB, after round 2: {rss_second / 2**20:.1f} MiB")
    assert abs(rss_second - rss_first) <= 0.05 * rss_first

    _, tok = await loaded.post("/tokenize", {"content": "A long document. " * 2000})
    n_words = int((N_CTX - 300) / len(tok["tokens"]) * 2000)
    out = await loaded.complete(prompt="A long document. " * n_words, n_predict=16, temperature=0.0)
    assert out["tokens_evaluated"] > N_CTX - 600 and out["tokens_predicted"] == 16
