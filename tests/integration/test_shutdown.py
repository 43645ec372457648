"""SIGTERM under load: in-flight requests complete, new ones get 503, learned state is saved, exit 0."""

from __future__ import annotations

import asyncio
import json
import signal

import aiohttp

from ngram.poolfile import load_pool
from slotserver.engine.fingerprint import vocab_fingerprint
from slotserver.engine.model_files import default_model_path
from tests.integration.serverproc import ServerProcess

N_PREDICT = 96


async def read_stream(resp: aiohttp.ClientResponse) -> list[dict]:
    chunks = []
    async for line in resp.content:
        if line.startswith(b"data: "):
            chunks.append(json.loads(line[6:]))
    return chunks


async def test_sigterm_lets_in_flight_requests_finish_refuses_new_ones_and_saves(tmp_path):
    pool = tmp_path / "pool.ssngmod"
    srv = ServerProcess(["-c", "2048", "-np", "2", "--spec-ngram-mod-file", str(pool), "--shutdown-timeout", "120"])
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, srv.wait_ready)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
            body = {"prompt": "Repeat this sentence 10 times: This is a test prompt.\n", "n_predict": N_PREDICT,
                    "temperature": 0.0, "ignore_eos": True, "stream": True}
            streams = [await http.post(srv.url + "/completion", json=body) for _ in range(2)]
            for resp in streams:  # both are generating
                assert (await resp.content.readline()).startswith(b"data: ")
            srv.proc.send_signal(signal.SIGTERM)
            while True:  # the drain starts at once: /health says so
                async with http.get(srv.url + "/health") as resp:
                    if resp.status == 503:
                        assert "shutting down" in (await resp.json())["error"]["message"]
                        break
            async with http.post(srv.url + "/completion", json={"prompt": "new", "n_predict": 4}) as resp:
                assert resp.status == 503 and "shutting down" in (await resp.json())["error"]["message"]
            for resp in streams:
                chunks = await read_stream(resp)
                assert chunks[-1]["stop"] is True and chunks[-1]["tokens_predicted"] == N_PREDICT
                resp.release()
        assert await loop.run_in_executor(None, srv.proc.wait, 120) == 0
        assert pool.exists()
        reloaded = load_pool(pool, vocab_fingerprint(default_model_path()))
        assert reloaded.n_used > 0  # what the two requests taught the pool
    finally:
        srv.stop()
