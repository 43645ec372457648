"""HTTP handlers (llama.cpp-compatible API). HTTP only: parsing is in ``request``, work in ``runner``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from aiohttp import web

from slotserver.app import STATE, State, json_response
from slotserver.chain import DraftLimits
from slotserver.errors import BadRequest, NotSupported, PromptTooLong, ServerError
from slotserver.job import Event, Job
from slotserver.request import CompletionRequest, parse_completion
from slotserver.responses import final_body, partial_body
from slotserver.runner import Runner
from slotserver.sampling import DEFAULT_SEED
from slotserver.textstream import TextStream


async def read_json(request: web.Request) -> dict:
    try:
        body = json.loads(await request.read() or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON in the request body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def tokenize_prompt(runner: Runner, pieces: list) -> list[int]:
    """Strings are tokenized with specials parsed; BOS (if the model wants one) leads the first string."""
    vocab = runner.engine.vocab
    tokens: list[int] = []
    for i, piece in enumerate(pieces):
        if isinstance(piece, str):
            tokens.extend(vocab.tokenize(piece, add_special=(i == 0), parse_special=True))
        elif vocab.is_valid(piece):
            tokens.append(piece)
        else:
            raise BadRequest(f"invalid token id {piece} in the prompt (vocabulary of {vocab.n_tokens})")
    if not tokens:
        raise BadRequest("the prompt is empty after tokenization")
    return tokens


def generation_settings(state: State, req: CompletionRequest | None = None) -> dict:
    runner = state.ready()
    s = req.sampling if req else None
    settings = {"n_ctx": runner.engine.n_ctx, "model": state.config.model_name}
    if s is not None:
        settings.update(
            temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, seed=s.seed,
            repeat_last_n=s.repeat_last_n, repeat_penalty=s.repeat_penalty,
            presence_penalty=s.presence_penalty, frequency_penalty=s.frequency_penalty,
            n_predict=req.n_predict, stop=req.stop, ignore_eos=s.ignore_eos,
        )
    return settings


def default_limits(state: State) -> DraftLimits:
    return DraftLimits(n_max=state.config.spec.n_max)


@dataclass(frozen=True, slots=True)
class Formatter:
    """How one API shapes a job's output: the whole body, and the SSE events of a stream."""

    body: Callable[[State, Job], dict]
    events: Callable[[State, Job, Event], list[dict]]
    done_marker: bool  # OpenAI streams end with "data: [DONE]"


def native_body(state: State, job: Job) -> dict:
    return final_body(job, state.config.model_name, generation_settings(state, job.request),
                      state.ready().engine.vocab.piece)


def native_events(state: State, job: Job, event: Event) -> list[dict]:
    if not event.final:
        return [partial_body(job, event)]
    body = native_body(state, job)
    body["content"] = event.text
    if job.request.return_tokens:
        body["tokens"] = list(event.tokens)
    return [body]


NATIVE = Formatter(native_body, native_events, done_marker=False)


def submit(state: State, body: dict) -> Job:
    """Validate, tokenize and queue a completion request."""
    runner = state.ready()
    cfg = state.config
    seed_default = cfg.seed & 0xFFFFFFFF if cfg.seed >= 0 else DEFAULT_SEED
    req = parse_completion(body, cfg.n_predict, seed_default)
    prompt = tokenize_prompt(runner, req.prompt)
    if len(prompt) >= runner.engine.n_ctx:
        raise PromptTooLong(len(prompt), runner.engine.n_ctx)
    limits = req.spec if req.spec is not None else default_limits(state)
    job = Job(req, prompt, limits, TextStream(req.stop, req.n_indent))
    runner.submit(job)
    return job


async def run_completion(request: web.Request, body: dict, fmt: Formatter) -> web.StreamResponse:
    state = request.app[STATE]
    job = submit(state, body)
    try:
        if job.request.stream:
            return await _stream(request, state, job, fmt)
        while not (event := await job.events.get()).final:
            pass
        if event.error is not None:
            raise ServerError(f"generation failed: {event.error}")
        return json_response(fmt.body(state, job))
    finally:
        if not job.is_done:
            state.ready().cancel(job)


async def completion(request: web.Request) -> web.StreamResponse:
    return await run_completion(request, await read_json(request), NATIVE)


def _sse(body) -> bytes:
    return b"data: " + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def _stream(request: web.Request, state: State, job: Job, fmt: Formatter) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    while True:
        event = await job.events.get()
        if event.error is not None:
            await resp.write(_sse(ServerError(f"generation failed: {event.error}").to_json()))
            break
        for body in fmt.events(state, job, event):
            await resp.write(_sse(body))
        job.n_events_sent += 1
        if event.final:
            if fmt.done_marker:
                await resp.write(b"data: [DONE]\n\n")
            break
    await resp.write_eof()
    return resp


async def health(request: web.Request) -> web.Response:
    request.app[STATE].ready()
    return json_response({"status": "ok"})


async def props(request: web.Request) -> web.Response:
    state = request.app[STATE]
    runner = state.ready()
    cfg = state.config
    return json_response({
        "default_generation_settings": {
            "n_ctx": runner.engine.n_ctx,
            "params": {"n_predict": cfg.n_predict, "seed": cfg.seed, "cache_prompt": cfg.cache_prompt,
                       "speculative.types": ",".join(runner.chain.types) or "none",
                       "speculative.n_max": cfg.spec.n_max},
        },
        "total_slots": len(runner.slots),
        "model_alias": cfg.model_name,
        "model_path": cfg.engine.model_path,
        "model_desc": runner.engine.description,
        "speculative": {"types": runner.chain.types, "ngram_mod": {
            "n_match": cfg.spec.ngram_mod.n_match, "n_min": cfg.spec.ngram_mod.n_min,
            "n_max": cfg.spec.ngram_mod.n_max}},
        "bos_token": runner.engine.vocab.piece(runner.engine.vocab.bos, True).decode(errors="replace"),
        "eos_token": runner.engine.vocab.piece(runner.engine.vocab.eos, True).decode(errors="replace"),
        "build_info": "slotserver",
        "endpoint_slots": cfg.slots_endpoint,
        "endpoint_props": True,
        "endpoint_metrics": cfg.metrics,
    })


async def slots(request: web.Request) -> web.Response:
    state = request.app[STATE]
    runner = state.ready()
    if not state.config.slots_endpoint:
        raise NotSupported("This server does not support slots endpoint.")
    out = []
    for slot in runner.slots:
        job = slot.job
        item = {"id": slot.id, "n_ctx": runner.engine.n_ctx, "speculative": bool(runner.chain.types),
                "is_processing": job is not None, "n_cached_tokens": len(slot.cache)}
        if job is not None:
            item.update(
                n_prompt_tokens=len(job.prompt), n_prompt_tokens_cache=job.n_cached,
                n_prompt_tokens_processed=job.n_prompt_decoded,
                params={"speculative.n_max": job.limits.n_max, "speculative.n_min": job.limits.n_min,
                        "speculative.types": sorted(job.limits.types) if job.limits.types is not None
                        else runner.chain.types},
                next_token=[{"has_next_token": True, "n_remain": job.n_remaining, "n_decoded": job.n_gen}],
                timings={"draft_n": job.n_draft, "draft_n_accepted": job.n_draft_accepted},
            )
        out.append(item)
    if request.query.get("fail_on_no_slot") and all(s["is_processing"] for s in out):
        raise ServerError("no slot available")
    return json_response(out)


async def tokenize(request: web.Request) -> web.Response:
    runner = request.app[STATE].ready()
    body = await read_json(request)
    content = body.get("content")
    if not isinstance(content, str):
        raise BadRequest("'content' must be a string")
    add_special = body.get("add_special", False)
    parse_special = body.get("parse_special", True)
    if not isinstance(add_special, bool) or not isinstance(parse_special, bool):
        raise BadRequest("'add_special' and 'parse_special' must be booleans")
    tokens = runner.engine.vocab.tokenize(content, add_special, parse_special)
    if body.get("with_pieces"):
        vocab = runner.engine.vocab
        return json_response({"tokens": [
            {"id": t, "piece": vocab.piece(t, True).decode(errors="replace")} for t in tokens]})
    return json_response({"tokens": tokens})


async def detokenize(request: web.Request) -> web.Response:
    runner = request.app[STATE].ready()
    body = await read_json(request)
    tokens = body.get("tokens", [])
    if not isinstance(tokens, list) or any(
        isinstance(t, bool) or not isinstance(t, int) or not runner.engine.vocab.is_valid(t) for t in tokens
    ):
        raise BadRequest("'tokens' must be a list of valid token ids")
    return json_response({"content": runner.engine.vocab.detokenize(tokens)})


async def metrics_disabled(request: web.Request) -> web.Response:
    raise NotSupported("This server does not support metrics endpoint. Start it with `--metrics`.")


def setup_routes(app: web.Application) -> None:
    app.router.add_post("/completion", completion)
    app.router.add_post("/completions", completion)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/health", health)
    app.router.add_get("/props", props)
    app.router.add_get("/slots", slots)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    if not app[STATE].config.metrics:  # with --metrics, metrics.setup_metrics serves it
        app.router.add_get("/metrics", metrics_disabled)
