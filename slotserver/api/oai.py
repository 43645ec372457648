"""OpenAI-compatible endpoints: /v1/completions, /v1/chat/completions, /v1/models.

They run the same jobs as /completion; only the request's shape and the response's differ. As in
llama-server, native fields (id_slot, cache_prompt, speculative.*, n_probs...) pass through.
"""

from __future__ import annotations

import time

from aiohttp import web

from slotserver.app import STATE, State, json_response
from slotserver.errors import BadRequest
from slotserver.job import Event, Job
from slotserver.routes import Formatter, read_json, run_completion

ROLES = ("system", "user", "assistant", "tool", "developer")


def finish_reason(job: Job) -> str:
    return "stop" if job.stop_type in ("eos", "word") else "length"


def usage(job: Job) -> dict:
    return {
        "prompt_tokens": len(job.prompt),
        "completion_tokens": job.n_gen,
        "total_tokens": len(job.prompt) + job.n_gen,
        "prompt_tokens_details": {"cached_tokens": job.n_cached},
    }


def envelope(state: State, job: Job, kind: str) -> dict:
    return {"id": f"cmpl-{job.id}", "object": kind, "created": int(time.time()),
            "model": state.config.model_name, "system_fingerprint": "slotserver"}


def text_body(state: State, job: Job) -> dict:
    choice = {"text": job.text.text, "index": 0, "logprobs": None, "finish_reason": finish_reason(job)}
    return {**envelope(state, job, "text_completion"), "choices": [choice], "usage": usage(job),
            "timings": job.timings()}


def text_events(state: State, job: Job, event: Event) -> list[dict]:
    choice = {"text": event.text, "index": 0, "logprobs": None,
              "finish_reason": finish_reason(job) if event.final else None}
    body = {**envelope(state, job, "text_completion"), "choices": [choice]}
    if event.final:
        body.update(usage=usage(job), timings=job.timings())
    return [body]


def chat_body(state: State, job: Job) -> dict:
    message = {"role": "assistant", "content": job.text.text}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(job)}
    return {**envelope(state, job, "chat.completion"), "choices": [choice], "usage": usage(job),
            "timings": job.timings()}


def chat_events(state: State, job: Job, event: Event) -> list[dict]:
    head = envelope(state, job, "chat.completion.chunk")
    out = []
    if job.n_events_sent == 0:  # OpenAI streams open with the role
        out.append({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                                         "finish_reason": None}]})
    if event.text:
        out.append({**head, "choices": [{"index": 0, "delta": {"content": event.text}, "finish_reason": None}]})
    if event.final:
        out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason(job)}],
                    "usage": usage(job), "timings": job.timings()})
    return out


TEXT = Formatter(text_body, text_events, done_marker=True)
CHAT = Formatter(chat_body, chat_events, done_marker=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await run_completion(request, await read_json(request), TEXT)


def parse_messages(value) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        raise BadRequest("'messages' must be a non-empty list")
    out = []
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise BadRequest("each message needs a 'role' (system, user, assistant, tool) and a string 'content'")
        out.append((m["role"], m["content"]))
    return out


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await read_json(request)
    messages = parse_messages(body.get("messages"))
    try:
        body["prompt"] = state.ready().engine.chat_prompt(messages)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return await run_completion(request, body, CHAT)


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return json_response({"object": "list", "data": [
        {"id": state.config.model_name, "object": "model", "created": 0, "owned_by": "slotserver"}]})


def setup_oai_routes(app: web.Application) -> None:
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
