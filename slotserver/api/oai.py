"""OpenAI-compatible endpoints: /v1/completions, /v1/chat/completions, /v1/responses, /v1/models.

They run the same jobs as /completion; only the request's shape and the response's differ. As in
llama-server, native fields (id_slot, cache_prompt, speculative.*, n_probs...) pass through.
"""

from __future__ import annotations

from aiohttp import web

from slotserver.api.bodies import chat_body, chat_events, json_response, text_body, text_events
from slotserver.api.completion import Formatter, serve_choices, serve_job
from slotserver.api.json_body import parse_json_body
from slotserver.api.oai_logprobs import chat_logprobs, text_logprobs
from slotserver.api.responses import chat_request, response_body, response_events
from slotserver.api.state import STATE
from slotserver.errors import BadRequest

TEXT = Formatter(text_body, text_events, done_marker=True)
CHAT = Formatter(chat_body, chat_events, done_marker=True)
RESPONSES = Formatter(response_body, response_events, done_marker=False, named_events=True)


def choices(request: web.Request, body: dict) -> int:
    """OpenAI's ``n`` (llama-server's ``n_cmpl``): 1 up to the slot count, as llama-server bounds it."""
    n = body.get("n", body.get("n_cmpl", 1))
    n_slots = len(request.app[STATE].ready().slots)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= n_slots:
        raise BadRequest(f"'n' must be an integer between 1 and {n_slots} (the server's slots)")
    return n


async def completions(request: web.Request) -> web.StreamResponse:
    body = parse_json_body(await request.read())
    return await _serve(request, body, text_logprobs(body), chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = parse_json_body(await request.read())
    return await _serve(request, body, chat_logprobs(body), chat=True)


def with_top(body: dict, top: int | None) -> dict:
    """The body with OpenAI's top-N candidates as the native ``n_probs`` they stand for (a native
    ``n_probs`` the body sends wins, as in llama-server), so that parsing bounds ``n_probs`` x
    ``n_predict`` for both (request.N_PROBS_BUDGET) before the request is queued."""
    if top and not body.get("n_probs"):
        return {**body, "n_probs": top}
    return body


async def _serve(request: web.Request, body: dict, top: int | None, *, chat: bool) -> web.StreamResponse:
    """One job, or one per choice when ``n`` > 1; text or chat shapes."""
    fmt = CHAT if chat else TEXT
    body = with_top(body, top)
    n = choices(request, body)
    if n > 1:
        return await serve_choices(request, lambda service, tenant: service.submit_choices(
            body, n, chat=chat, tenant=tenant, logprobs=top), fmt)

    async def submit(service, tenant: str):
        one = service.submit_chat if chat else service.submit
        return await one(body, tenant=tenant, logprobs=top)

    return await serve_job(request, submit, fmt)


async def responses(request: web.Request) -> web.StreamResponse:
    body = chat_request(parse_json_body(await request.read()))
    return await serve_job(request, lambda service, tenant: service.submit_chat(body, tenant=tenant), RESPONSES)


async def models(request: web.Request) -> web.Response:
    """The served model (also at /models, as llama-server), with llama-server's ``meta``."""
    state = request.app[STATE]
    model = {"id": state.config.model_name, "object": "model", "created": 0, "owned_by": "slotserver"}
    if state.runner is not None:
        engine = state.runner.engine
        model["meta"] = {"n_vocab": engine.vocab.n_tokens, "n_ctx_train": engine.n_ctx_train,
                         "n_embd": engine.n_embd, "n_params": engine.n_params, "size": engine.size}
    return json_response({"object": "list", "data": [model]})
