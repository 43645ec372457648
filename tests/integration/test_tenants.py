"""Tenants and the KV prompt cache (``--spec-learning per-key|per-request``) on real Gemma servers.

Under per-key, a key reuses only the prompt cache its own requests left, so ``cache_n`` /
``cached_tokens`` never tell key 2 that key 1 sent a prefix; GET /slots hides other keys' slots'
details and slot actions answer 403. Under ``shared`` (the default) every key reuses every cache,
as before. Three small servers (2 slots, 2k context, no drafters); every test uses prompts of its own.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import LiveServer

COMMON = ["--api-key", "k1,k2", "-np", "2", "-c", "2048", "--spec-type", "none"]


async def start(argv: list[str]) -> LiveServer:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LLAMA_API_KEY", raising=False)  # the environment would stand for --api-key
        return await LiveServer(COMMON + argv).start()


@pytest.fixture(scope="module")
async def per_key(tmp_path_factory):
    srv = await start(["--spec-learning", "per-key", "--slot-save-path", str(tmp_path_factory.mktemp("slots"))])
    yield srv
    await srv.stop()


@pytest.fixture(scope="module")
async def shared():
    srv = await start([])
    yield srv
    await srv.stop()


@pytest.fixture(scope="module")
async def per_request():
    srv = await start(["--spec-learning", "per-request"])
    yield srv
    await srv.stop()


def passage(opening: str = "Ticket") -> str:
    """A prompt of about 60 tokens no other test sends; prompts with different openings share only BOS."""
    return (f"{opening} {uuid.uuid4().hex}: the night train to the coast leaves at nine, stops at every "
            "village along the river, and reaches the harbour before the fishing boats come back in.")


async def call(srv: LiveServer, key: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {key}"}
    data = json.dumps(body) if body is not None else None
    async with srv.http.request(method, srv.url + path, data=data, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def cache_n(srv: LiveServer, key: str, prompt: str) -> int:
    status, out = await call(srv, key, "POST", "/completion", {"prompt": prompt, "n_predict": 2, "temperature": 0})
    assert status == 200, out
    return out["timings"]["cache_n"]


async def cached_tokens(srv: LiveServer, key: str, prompt: str) -> int:
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0}
    status, out = await call(srv, key, "POST", "/v1/completions", body)
    assert status == 200, out
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


async def test_a_key_never_reuses_another_keys_prompt_cache_but_keeps_its_own(per_key, shared):
    prompt, other = passage("Ticket"), passage("Receipt")
    assert await cache_n(per_key, "k1", prompt) == 0
    assert await cache_n(per_key, "k1", prompt) > 40  # its own cache
    assert await cache_n(per_key, "k2", prompt) == 0  # key 1's cache: as if empty (key 2's first request)
    assert await cache_n(per_key, "k1", prompt) > 40  # and key 2's request did not take it from key 1
    await cached_tokens(per_key, "k1", other)
    assert await cached_tokens(per_key, "k2", other) == 1  # OpenAI's usage: only the BOS of its own cache
    # shared (the default): one cache for everyone, as llama-server
    assert await cache_n(shared, "k1", prompt) == 0
    assert await cache_n(shared, "k2", prompt) > 40
    await cached_tokens(shared, "k1", other)
    assert await cached_tokens(shared, "k2", other) > 40


async def test_slots_show_a_key_only_its_own_caches(per_key):
    prompt = passage()
    await cache_n(per_key, "k1", prompt)
    status, mine = await call(per_key, "k1", "GET", "/slots")
    assert status == 200 and len(mine) == 2
    assert max(s.get("n_cached_tokens", 0) for s in mine) >= 40  # key 1 sees its cache
    status, theirs = await call(per_key, "k2", "GET", "/slots")
    assert status == 200 and [s["id"] for s in theirs] == [0, 1]
    k1_slot = next(s["id"] for s in mine if s.get("n_cached_tokens", 0) >= 40)
    assert set(theirs[k1_slot]) == {"id", "n_ctx", "speculative", "is_processing"}  # no count, no request


@pytest.mark.parametrize("action, body", [("save", {"filename": "k1.bin"}), ("restore", {"filename": "k1.bin"}),
                                          ("erase", None)])
async def test_slot_actions_are_refused_under_per_key(per_key, action, body):
    status, out = await call(per_key, "k1", "POST", f"/slots/0?action={action}", body)
    assert status == 403 and out["error"]["type"] == "permission_error", out
    assert "--spec-learning per-key" in out["error"]["message"]


async def test_per_request_reuses_nothing_across_requests_but_choices_share_their_prompt(per_request):
    prompt = passage()
    assert await cache_n(per_request, "k1", prompt) == 0
    assert await cache_n(per_request, "k1", prompt) == 0  # the same key, another request
    stats = per_request.state.runner.stats
    n_decoded = stats.n_prompt_tokens
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0, "n": 2}
    status, out = await call(per_request, "k1", "POST", "/v1/completions", body)
    assert status == 200 and len(out["choices"]) == 2, out
    n_prompt = out["usage"]["prompt_tokens"]
    assert stats.n_prompt_tokens - n_decoded == n_prompt + 1  # the second choice decodes only the last token
