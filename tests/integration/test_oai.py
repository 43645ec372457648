"""OpenAI-compatible endpoints on the real model: same generation, OpenAI shapes."""

from __future__ import annotations

import json

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
