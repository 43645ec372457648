"""Shared fixtures: the real model files and one live server per configuration, per session."""

from __future__ import annotations

import json

import aiohttp
import pytest

from benchmarks.bench.run import load_workloads
from slotserver.api.state import STATE
from slotserver.cluster.replica import LocalServer
from tests.integration.ties import TIE_PROBS


class LiveServer(LocalServer):
    """A real slotserver on a loopback port (``LocalServer``), with an HTTP client session."""

    async def start(self) -> "LiveServer":
        await super().start()
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        return self

    @property
    def state(self):
        return self.app[STATE]

    async def stop(self) -> None:
        await self.http.close()
        await super().stop()

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
