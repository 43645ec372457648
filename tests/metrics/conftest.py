"""A live server with metrics on (and llama.cpp compatibility), shared by the metrics tests.

Same pattern as the suite's ``LiveServer``: the real app and model in-process on a loopback port.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web

from slotserver.app import STATE, create_app
from slotserver.cli import build_parser, config_from_args
from tests.metrics.promtext import Samples, parse

# Greedy and repetitive, so ngram-mod drafts get accepted after the first repetition.
REPEAT_PROMPT = "Repeat this sentence 10 times: This is a test prompt.\n"
LOAD_TIMEOUT_S = 300


class MetricsServer:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv

    async def start(self) -> "MetricsServer":
        config = config_from_args(build_parser().parse_args(self.argv + ["--port", "0"]))
        self.app = create_app(config)
        self.runner = web.AppRunner(self.app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while self.state.runner is None:  # the model loads in the background; /health is 503 until then
            assert not self.state.load_error, self.state.load_error
            assert time.monotonic() < deadline, "model did not load"
            await asyncio.sleep(0.05)
        return self

    @property
    def state(self):
        return self.app[STATE]

    async def stop(self) -> None:
        await self.http.close()
        await self.runner.cleanup()

    async def get(self, path: str) -> tuple[int, dict]:
        async with self.http.get(self.url + path) as resp:
            return resp.status, await resp.json(content_type=None)

    async def complete(self, **body) -> dict:
        async with self.http.post(self.url + "/completion", data=json.dumps(body)) as resp:
            out = await resp.json(content_type=None)
            assert resp.status == 200, out
            return out

    async def repeat(self, n_predict: int = 128, **body) -> dict:
        return await self.complete(prompt=REPEAT_PROMPT, n_predict=n_predict, temperature=0, **body)

    async def scrape(self) -> Samples:
        async with self.http.get(self.url + "/metrics") as resp:
            assert resp.status == 200, await resp.text()
            return parse(await resp.text())


@pytest.fixture(scope="session")
async def metrics_server():
    """2 slots over a 4k context, ngram-mod on, ``--metrics --metrics-compat llamacpp``.

    One decode thread: on a small, shared CI machine llama.cpp's thread barrier makes ``-t 2``
    several times slower than ``-t 1`` as soon as another process competes for a core.
    """
    argv = ["-c", "4096", "-np", "2", "-t", "1", "--metrics", "--metrics-compat", "llamacpp"]
    srv = await MetricsServer(argv).start()
    yield srv
    await srv.stop()
