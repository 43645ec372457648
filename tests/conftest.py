"""Shared fixtures: the real model files and one live server per configuration, per session."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web

from benchmarks.bench.run import load_workloads
from slotserver.api.app import create_app
from slotserver.api.state import STATE
from slotserver.flags.command_line import build_parser, config_from_args
from tests.integration.ties import TIE_PROBS


class LiveServer:
    """A real slotserver on a loopback port, with an HTTP client session."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.fatal: list[str] = []  # reasons the app reported through on_fatal

    async def start(self) -> "LiveServer":
        config = config_from_args(build_parser().parse_args(self.argv + ["--port", "0"]))
        self.app = create_app(config, on_fatal=self.fatal.append)
        self.runner = web.AppRunner(self.app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        await self.state.loaded.wait()
        assert self.state.runner is not None, self.state.load_error
        return self

    @property
    def state(self):
        return self.app[STATE]

    async def stop(self) -> None:
        await self.http.close()
        await self.runner.cleanup()

    async def post(self, path: str, body) -> tuple[int, dict]:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        async with self.http.post(self.url + path, data=data) as resp:
            return resp.status, await resp.json(content_type=None)

    async def get(self, path: str) -> tuple[int, dict]:
        async with self.http.get(self.url + path) as resp:
            return resp.status, await resp.json(content_type=None)

    async def complete(self, **body) -> dict:
        status, out = await self.post("/completion", body)
        assert status == 200, out
        return out


ALL_TYPES = "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache"


@pytest.fixture(scope="session")
async def server():
    """4 slots sharing an 8k context (-kvu) with every drafter configured (requests pick with speculative.type)."""
    srv = await LiveServer(["-c", "8192", "-np", "4", "-kvu", "--spec-type", ALL_TYPES]).start()
    yield srv
    await srv.stop()


def greedy_request(wl: dict, spec: str, **extra) -> dict:
    return {"prompt": wl["prompt"], "n_predict": wl["n_predict"], "temperature": 0.0,
            "return_tokens": True, "speculative.type": spec, "cache_prompt": False, **extra}


COUNTING = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", "max_tokens": 6, "temperature": 0.0,
            "cache_prompt": False, "speculative.type": "none"}


async def n_choices(srv: LiveServer, n: int) -> tuple[str, int, dict]:
    """A single greedy /v1/completions of a counting prompt, then the same with ``n`` choices:
    (the single text, prompt tokens the server decoded for the n choices, their response). The
    first choice decodes the prompt; the others share its KV and decode only its last token."""
    single = (await srv.post("/v1/completions", COUNTING))[1]["choices"][0]["text"]
    stats = srv.state.runner.stats
    n_decoded = stats.n_prompt_tokens
    status, out = await srv.post("/v1/completions", {**COUNTING, "n": n})
    assert status == 200, out
    return single, stats.n_prompt_tokens - n_decoded, out


@pytest.fixture(scope="session")
async def baseline(server) -> dict[str, dict]:
    """Greedy outputs of every workload without speculation, with top log-probabilities per token."""
    return {wl["name"]: await server.complete(**greedy_request(wl, "none", n_probs=TIE_PROBS)) for wl in load_workloads()}
