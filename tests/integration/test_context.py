"""llama-server's context model: -c split among the slots unless -kvu, in a KV stream per slot or in one
cache (--kv-streams), the context error, context shift."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import LiveServer, n_choices

SMALL = ["-c", "512", "-np", "2", "--spec-type", "ngram-mod"]


@pytest.fixture(scope="module", params=["on", "off"], ids=["streams", "one-cache"])
async def split(request):
    """Each slot has its share: in its own KV stream (llama-server's layout) or in one cache."""
    srv = await LiveServer(SMALL + ["--kv-streams", request.param]).start()
    yield srv
    await srv.stop()


@pytest.fixture(scope="module")
async def shifting():
    srv = await LiveServer(SMALL + ["--context-shift"]).start()
    yield srv
    await srv.stop()


async def n_tokens(srv: LiveServer, text: str) -> int:
    return len((await srv.post("/tokenize", {"content": text, "add_special": True}))[1]["tokens"])


async def test_each_slot_gets_its_share_of_the_context(split):
    props = (await split.get("/props"))[1]
    assert props["default_generation_settings"]["n_ctx"] == 256 and props["total_slots"] == 2
    layout = {True: "streams", False: "one-cache"}[split.state.runner.engine.config.streams]
    assert props["kv_layout"] == layout
    assert [s["n_ctx"] for s in (await split.get("/slots"))[1]] == [256, 256]


async def test_a_prompt_longer_than_the_slot_gets_the_context_error(split):
    prompt = "one two three four " * 75
    assert await n_tokens(split, prompt) >= 300
    status, out = await split.post("/completion", {"prompt": prompt, "n_predict": 4})
    assert status == 400 and out["error"]["type"] == "exceed_context_size_error"
    assert out["error"]["n_ctx"] == 256 and out["error"]["n_prompt_tokens"] >= 300


async def test_without_context_shift_a_full_slot_stops_truncated(split):
    out = await split.complete(prompt="Count: 1 2 3", n_predict=400, ignore_eos=True, temperature=0.0)
    assert out["truncated"] is True and out["stop_type"] == "limit"
    assert out["tokens_cached"] <= 256 and out["tokens_predicted"] < 256


async def test_every_slot_fills_its_share_at_once(split):
    """Both slots run to the end of their share together: in one cache too, the shares add up to
    the cache, so neither runs out of cells."""
    outs = await asyncio.gather(*(split.complete(prompt=f"Count from {k}: 1 2 3", n_predict=400, ignore_eos=True,
                                                 temperature=0.0) for k in range(2)))
    for out in outs:
        assert out["truncated"] is True and out["stop_type"] == "limit"
        assert 200 < out["tokens_cached"] <= 256


async def test_in_one_cache_a_request_not_to_cache_leaves_no_cells(split):
    """Idle cells cost every decode in one cache: a request with cache_prompt false drops its
    slot's cells when it ends; with streams (and for a request that caches) they stay for reuse."""
    streams = split.state.runner.engine.config.streams
    for cache_prompt in (False, True):
        out = await split.complete(prompt="The capital of France is", n_predict=4, temperature=0.0,
                                   cache_prompt=cache_prompt)
        [slot] = [s for s in (await split.get("/slots"))[1] if s["id"] == out["id_slot"]]
        kept = cache_prompt or streams
        assert (slot["n_cached_tokens"] > 0) is kept, (cache_prompt, streams, slot)


async def test_with_context_shift_generation_goes_past_the_slot(shifting):
    out = await shifting.complete(prompt="Count: 1 2 3", n_predict=400, ignore_eos=True, temperature=0.0,
                                  n_keep=-1, return_tokens=True)
    assert out["tokens_predicted"] == 400 and out["stop_type"] == "limit" and out["truncated"] is True
    assert len(out["tokens"]) == 400
    # the other slot was not disturbed: it still serves a plain request
    again = await shifting.complete(prompt="Hello", n_predict=4, temperature=0.0)
    assert again["tokens_predicted"] == 4 and again["truncated"] is False


async def test_ignore_eos_is_a_ban_on_every_end_token_shown_in_the_settings(split):
    out = await split.complete(prompt="Hi", n_predict=2, ignore_eos=True)
    vocab = split.state.runner.engine.vocab
    banned = {b["token"] for b in out["generation_settings"]["logit_bias"] if b["bias"] is None}
    assert banned == set(vocab.eog_tokens()) and vocab.eos in banned


async def test_kv_unified_lets_every_slot_use_the_whole_context():
    srv = await LiveServer(["-c", "512", "-np", "2", "-kvu", "--spec-type", "none"]).start()
    try:
        assert (await srv.get("/props"))[1]["default_generation_settings"]["n_ctx"] == 512
        prompt = "one two three four " * 75
        status, out = await srv.post("/completion", {"prompt": prompt, "n_predict": 4})
        assert status == 200 and out["tokens_evaluated"] >= 300
    finally:
        await srv.stop()


async def test_n_choices_share_the_prompt_between_slots(split):
    """Between KV streams llama.cpp copies only whole streams, so the second choice copies the
    first's and trims it to the prompt; in one cache the choices share the prompt's cells."""
    assert split.state.runner.engine.config.kv_unified is False
    single, n_decoded, out = await n_choices(split, 2)
    assert [c["text"] for c in out["choices"]] == [single, single]
    assert n_decoded == out["usage"]["prompt_tokens"] + 1
