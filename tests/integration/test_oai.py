"""OpenAI-compatible endpoints on the real model: same generation, OpenAI shapes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import COUNTING, n_choices

SAME_PATH = {"cache_prompt": False, "speculative.type": "none", "temperature": 0.0}


async def sse(server, path: str, body: dict) -> list:
    events = []
    async with server.http.post(server.url + path, json={**body, "stream": True}) as resp:
        assert resp.status == 200
        async for line in resp.content:
            if line.startswith(b"data: "):
                payload = line[6:].strip()
                events.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return events


async def test_v1_completions_matches_native_completion(server):
    body = {"prompt": "The capital of France is", "max_tokens": 12, **SAME_PATH}
    native = await server.complete(**body)
    status, oai = await server.post("/v1/completions", body)
    assert status == 200 and oai["object"] == "text_completion"
    assert oai["choices"][0]["text"] == native["content"] and oai["choices"][0]["finish_reason"] == "length"
    assert oai["usage"]["completion_tokens"] == 12 and oai["usage"]["prompt_tokens"] == native["tokens_evaluated"]
    events = await sse(server, "/v1/completions", body)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == native["content"]
    assert events[-2]["choices"][0]["finish_reason"] == "length"


async def test_chat_completions_uses_the_template_and_streams_deltas(server):
    messages = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a colour."}]
    body = {"messages": messages, "max_tokens": 10, **SAME_PATH}
    status, out = await server.post("/v1/chat/completions", body)
    assert status == 200 and out["object"] == "chat.completion"
    text = out["choices"][0]["message"]["content"]
    prompt = server.state.runner.engine.chat_prompt([(m["role"], m["content"]) for m in messages])
    assert prompt.endswith("assistant\n") and "Name a colour." in prompt
    native = await server.complete(prompt=prompt, n_predict=10, **SAME_PATH)
    assert text == native["content"]
    events = await sse(server, "/v1/chat/completions", body)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant" and events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1]) == text
    assert events[-2]["choices"][0]["finish_reason"] in ("stop", "length")


async def test_bad_messages_are_a_400_and_models_lists_the_model(server):
    status, err = await server.post("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]})
    assert status == 400 and "role" in err["error"]["message"]
    status, models = await server.get("/v1/models")
    assert status == 200 and models["data"][0]["id"] == server.state.config.model_name


async def test_v1_errors_name_the_field_as_openai_param(server):
    status, out = await server.post("/v1/completions", {"prompt": "x", "temperature": "hot"})
    assert status == 400 and out["error"]["param"] == "temperature" and out["error"]["code"] == 400
    status, out = await server.post("/v1/chat/completions", {"messages": "nope"})
    assert status == 400 and out["error"]["param"] == "messages"
    status, out = await server.post("/completion", {"prompt": "x", "temperature": "hot"})
    assert status == 400 and "param" not in out["error"]  # llama.cpp's shape on the native endpoints


LOGPROBS_TEXT = {"prompt": "A short list of fruits: apple, pear,", "max_tokens": 10, **SAME_PATH}


async def test_v1_completions_logprobs_match_native_probabilities(server):
    native = await server.complete(**LOGPROBS_TEXT, n_probs=3)
    status, oai = await server.post("/v1/completions", {**LOGPROBS_TEXT, "logprobs": 3})
    assert status == 200
    lp = oai["choices"][0]["logprobs"]
    n = oai["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert "".join(lp["tokens"]) == oai["choices"][0]["text"]
    assert lp["tokens"] == [p["token"] for p in native["completion_probabilities"]]
    assert lp["token_logprobs"] == [p["logprob"] for p in native["completion_probabilities"]]
    assert all(1 <= len(top) <= 3 and max(top.values()) >= lp for top, lp in zip(lp["top_logprobs"], lp["token_logprobs"]))
    assert lp["text_offset"] == [sum(map(len, lp["tokens"][:i])) for i in range(n)]
    events = await sse(server, "/v1/completions", {**LOGPROBS_TEXT, "logprobs": 3})
    streamed = [e["choices"][0]["logprobs"] for e in events[:-1] if e["choices"] and e["choices"][0]["logprobs"]]
    assert [t for s in streamed for t in s["tokens"]] == lp["tokens"]
    assert [o for s in streamed for o in s["text_offset"]] == lp["text_offset"]  # offsets go on across chunks
    status, plain = await server.post("/v1/completions", LOGPROBS_TEXT)
    assert plain["choices"][0]["logprobs"] is None


async def test_chat_logprobs_whole_and_streamed(server):
    body = {"messages": [{"role": "user", "content": "Say hello to the moon."}], "max_tokens": 8,
            "logprobs": True, "top_logprobs": 2, **SAME_PATH}
    status, out = await server.post("/v1/chat/completions", body)
    assert status == 200
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    assert "".join(c["token"] for c in content) == out["choices"][0]["message"]["content"]
    for c in content:
        assert set(c) == {"token", "logprob", "bytes", "top_logprobs"} and c["logprob"] <= 0
        assert len(c["top_logprobs"]) == 2 and c["top_logprobs"][0]["logprob"] >= c["logprob"]
        assert bytes(c["bytes"]).decode(errors="replace") == c["token"]
    events = await sse(server, "/v1/chat/completions", body)
    streamed = [c for e in events[:-1] if e["choices"] for c in (e["choices"][0].get("logprobs") or {}).get("content", [])]
    assert [c["token"] for c in streamed] == [c["token"] for c in content]
    status, none = await server.post("/v1/chat/completions", {**body, "logprobs": True, "top_logprobs": 0})
    assert all(c["top_logprobs"] == [] for c in none["choices"][0]["logprobs"]["content"])
    status, plain = await server.post("/v1/chat/completions", {**body, "logprobs": False, "top_logprobs": None})
    assert status == 200 and plain["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("path,body,needle", [
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, "'logprobs'"),
    ("/v1/completions", {"prompt": "x", "logprobs": True}, "'logprobs'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": 2}, "'logprobs'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "requires"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True,
                              "top_logprobs": 30}, "'top_logprobs'"),
])
async def test_invalid_logprobs_are_a_400(server, path, body, needle):
    status, err = await server.post(path, body)
    assert status == 400 and needle in err["error"]["message"]


async def test_n_choices_share_the_prompt_kv_and_stream_by_index(server):
    """A counting prompt: greedy choices agree with a single request whatever the batch composition
    (KV sharing and batching change logits by rounding only; see ties.py)."""
    single, n_decoded, out = await n_choices(server, 3)
    assert [(c["index"], c["text"]) for c in out["choices"]] == [(i, single) for i in range(3)]
    n_prompt = out["usage"]["prompt_tokens"]
    assert n_decoded == n_prompt + 2
    assert out["usage"]["completion_tokens"] == 18 and out["usage"]["total_tokens"] == n_prompt + 18
    events = await sse(server, "/v1/completions", {**COUNTING, "n": 3, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 18
    for i in range(3):
        assert "".join(c["text"] for e in events[:-2] for c in e["choices"] if c["index"] == i) == single


async def test_n_beyond_the_slots_is_a_400(server):
    status, out = await server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 5})
    assert status == 400 and out["error"]["param"] == "n"
