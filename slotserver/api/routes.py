"""llama.cpp-style endpoints, and ``setup_routes``: every route of the server is registered here.

Handlers are HTTP only: they read the body, call the service or read the runner, shape the answer.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from slotserver.api import oai
from slotserver.api.bodies import json_response, native_body, native_events, sampling_settings
from slotserver.api.completion import Formatter, serve_job
from slotserver.api.json_body import parse_json_body
from slotserver.api.state import STATE, TENANT
from slotserver.errors import BadRequest, Forbidden, NotSupported, Unavailable
from slotserver.serving.slot_files import ACTIONS, SlotFiles, check_filename

NATIVE = Formatter(native_body, native_events, done_marker=False)


async def read_json(request: web.Request) -> dict:
    return parse_json_body(await request.read())


async def completion(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    return await serve_job(request, lambda service, tenant: service.submit(body, tenant=tenant), NATIVE)


async def infill(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    return await serve_job(request, lambda service, tenant: service.submit_infill(body, tenant=tenant), NATIVE)


async def apply_template(request: web.Request) -> web.Response:
    """llama-server's /apply-template: the prompt a chat request would generate from, not generated."""
    service = request.app[STATE].ready_service()
    body = await read_json(request)
    prompt = await asyncio.get_running_loop().run_in_executor(None, service.render_chat, body)
    return json_response({"prompt": prompt})


async def health(request: web.Request) -> web.Response:
    request.app[STATE].ready()
    return json_response({"status": "ok"})


def suffix_props(chain) -> dict | None:
    """The suffix drafter's settings and its global structure's size (None without the drafter)."""
    drafter = next((d for name, d in chain.drafters if name == "suffix"), None)
    if drafter is None:
        return None
    cfg, store = drafter.config, drafter.store
    return {"depth": cfg.depth, "min_prob": cfg.min_prob, "factor": cfg.factor, "n_max": cfg.n_max,
            "max_mb": cfg.max_mb, "learn_prompts": cfg.learn_prompts,
            "store": {"requests": len(store.lengths), "tokens": store.n_tokens, "bytes": store.memory_bytes}}


async def props(request: web.Request) -> web.Response:
    state = request.app[STATE]
    runner = state.ready()
    cfg = state.config
    vocab = runner.engine.vocab
    return json_response({
        "default_generation_settings": {
            "n_ctx": runner.engine.n_ctx_slot,
            "params": {"n_predict": cfg.n_predict, "seed": cfg.seed, "cache_prompt": cfg.cache_prompt,
                       **sampling_settings(cfg.sampling),
                       "speculative.types": ",".join(runner.chain.types) or "none",
                       "speculative.n_max": cfg.draft_limits.n_max, "speculative.n_min": cfg.draft_n_min,
                       "speculative.p_min": cfg.draft_p_min},
        },
        "total_slots": len(runner.slots),
        "kv_layout": runner.engine.config.layout,
        "model_alias": cfg.model_name,
        "model_path": cfg.engine.model_path,
        "model_desc": runner.engine.description,
        "speculative": {"types": runner.chain.types, "ngram_mod": {
            "n_match": cfg.spec.ngram_mod.n_match, "n_min": cfg.spec.ngram_mod.n_min,
            "n_max": cfg.spec.ngram_mod.n_max, "n_match_cold": cfg.spec.ngram_mod.n_match_cold},
            "suffix": suffix_props(runner.chain),
            "draft_model": runner.model_drafter.info() if runner.model_drafter is not None else None,
            "select": cfg.spec.select,
            "verify_profile": runner.chain.profile.as_props() if runner.chain.profile is not None else None,
            "acceptance": runner.chain.estimates()},
        "bos_token": vocab.token_text(vocab.bos),  # "" when the model has none (glm4, RWKV, T5 vocabularies)
        "eos_token": vocab.token_text(vocab.eos),
        "build_info": "slotserver",
        "endpoint_slots": cfg.slots_endpoint,
        "endpoint_props": True,
        "endpoint_metrics": cfg.metrics,
    })


async def slots(request: web.Request) -> web.Response:
    """GET /slots. Under ``--spec-learning per-key|per-request`` a slot whose cache another tenant
    left (``Slot.kv_owner``) shows only its id, context and whether it is busy: its cached token
    count and its request would tell what another tenant sent."""
    state = request.app[STATE]
    runner = state.ready()
    if not state.config.slots_endpoint:
        raise NotSupported("This server does not support slots endpoint.")
    mine = runner.chains.kv_owner(request.get(TENANT, ""), "")
    out = []
    for slot in runner.slots:
        job = slot.job
        item = {"id": slot.id, "n_ctx": runner.engine.n_ctx_slot, "speculative": bool(runner.chain.types),
                "is_processing": job is not None}
        if slot.kv_owner != mine:
            out.append(item)
            continue
        item["n_cached_tokens"] = len(slot.cache)
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
        raise Unavailable("no slot available")
    return json_response(out)


async def slot_action(request: web.Request) -> web.Response:
    """POST /slots/{id}?action=save|restore|erase, as llama-server (needs --slot-save-path).

    Refused (403) under ``--spec-learning per-key|per-request``: a slot file holds one tenant's
    prompts, a restored cache would serve whichever tenant the slot gets next, and no key is an
    administrator's."""
    state = request.app[STATE]
    runner = state.ready()
    if runner.chains.scope != "shared":
        raise Forbidden(f"slot save, restore and erase are off under --spec-learning {runner.chains.scope}: "
                        "a slot's cache belongs to one tenant")
    if not state.config.slot_save_path:
        raise NotSupported("This server does not support slot save/restore. Start it with --slot-save-path.")
    action = request.query.get("action", "")
    if action not in ACTIONS:
        raise BadRequest("Invalid action")
    try:
        id_slot = int(request.match_info["id_slot"])
    except ValueError:
        raise BadRequest("Invalid slot ID") from None
    filename = None if action == "erase" else check_filename((await read_json(request)).get("filename"))
    files = SlotFiles.from_config(runner, state.config)
    return json_response(await runner.on_engine_thread(lambda: files.run(id_slot, action, filename)))


async def tokenize(request: web.Request) -> web.Response:
    vocab = request.app[STATE].ready().engine.vocab
    body = await read_json(request)
    content = body.get("content")
    if not isinstance(content, str):
        raise BadRequest("'content' must be a string")
    add_special = body.get("add_special", False)
    parse_special = body.get("parse_special", True)
    if not isinstance(add_special, bool) or not isinstance(parse_special, bool):
        raise BadRequest("'add_special' and 'parse_special' must be booleans")
    with_pieces = body.get("with_pieces", False)
    if not isinstance(with_pieces, bool):
        raise BadRequest("'with_pieces' must be a boolean")

    def run() -> dict:  # in a worker thread: a long text takes a while to tokenize
        tokens = vocab.tokenize(content, add_special, parse_special)
        if with_pieces:
            return {"tokens": [{"id": t, "piece": vocab.piece(t, True).decode(errors="replace")} for t in tokens]}
        return {"tokens": tokens}

    return json_response(await asyncio.get_running_loop().run_in_executor(None, run))


async def detokenize(request: web.Request) -> web.Response:
    vocab = request.app[STATE].ready().engine.vocab
    body = await read_json(request)
    tokens = body.get("tokens", [])
    if not isinstance(tokens, list) or any(
        isinstance(t, bool) or not isinstance(t, int) or not vocab.is_valid(t) for t in tokens
    ):
        raise BadRequest("'tokens' must be a list of valid token ids")
    text = await asyncio.get_running_loop().run_in_executor(None, vocab.detokenize, tokens)
    return json_response({"content": text})


async def metrics_disabled(request: web.Request) -> web.Response:
    raise NotSupported("This server does not support metrics endpoint. Start it with `--metrics`.")


def setup_routes(app: web.Application, *, metrics_handler=None) -> None:
    """Every route, in one place. ``metrics_handler`` serves GET /metrics when metrics are on."""
    add_post, add_get = app.router.add_post, app.router.add_get
    add_post("/completion", completion)
    add_post("/completions", completion)
    add_post("/infill", infill)
    add_post("/v1/completions", oai.completions)
    add_post("/v1/chat/completions", oai.chat_completions)
    add_post("/chat/completions", oai.chat_completions)
    add_post("/v1/responses", oai.responses)
    add_post("/apply-template", apply_template)
    add_get("/v1/models", oai.models)
    add_get("/models", oai.models)
    add_get("/health", health)
    add_get("/v1/health", health)
    add_get("/props", props)
    add_get("/slots", slots)
    add_post("/slots/{id_slot}", slot_action)
    add_post("/tokenize", tokenize)
    add_post("/detokenize", detokenize)
    add_get("/metrics", metrics_handler or metrics_disabled)
