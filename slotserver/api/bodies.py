"""Every JSON body the API sends: llama.cpp-style and OpenAI-style completions, stream chunks, errors.

Built from a finished job (``*_body``) or one event of a running job (``*_events``). ``BodyInfo``
carries the server facts the bodies mention (model name, context size, token pieces).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

from slotserver.api import logprobs
from slotserver.engine.token_probs import TokenProbs
from slotserver.sampling.params import SamplingParams
from slotserver.serving.job import Event, Job
from slotserver.serving.request import CompletionRequest


@dataclass(frozen=True, slots=True)
class BodyInfo:
    model: str
    n_ctx: int
    piece: Callable[[int], bytes]  # token id -> its bytes


# Generated tokens plus reported candidates above which a completion body is built and serialised
# in a worker thread: a body of 65,536 candidates takes a good part of a second to build
# (docs/measurements.md; request.N_PROBS_BUDGET allows 4x), which on the event loop would stall every
# other request's stream, /health and /metrics for that long.
BIG_BODY_ITEMS = 4096


def json_response(body, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        status=status,
        content_type="application/json",
    )


def body_items(jobs: list[Job]) -> int:
    """How big the finished ``jobs``' body will be: tokens, and the candidates reported for each."""
    return sum(job.n_gen * (1 + job.request.n_probs) for job in jobs)


def _encode(build: Callable[[], Any]) -> bytes:
    return json.dumps(build(), ensure_ascii=False, separators=(",", ":")).encode()


async def json_response_async(build: Callable[[], Any], items: int, status: int = 200) -> web.Response:
    """``json_response(build())``; when ``items`` (``body_items``) says the body is big, ``build`` and
    the serialisation run in a worker thread, so the event loop goes on serving everyone else.

    ``build`` must only read what no other thread changes (a finished job is the handler's alone).
    """
    if items <= BIG_BODY_ITEMS:
        return json_response(build(), status)
    data = await asyncio.get_running_loop().run_in_executor(None, _encode, build)
    return web.Response(body=data, status=status, content_type="application/json", charset="utf-8")


def error_body(code: int, message: str, kind: str) -> dict:
    """The one error shape, llama.cpp's (the official OpenAI clients read it as well)."""
    return {"error": {"code": code, "message": message, "type": kind}}


def pick_fields(body: dict, paths: list[str]) -> dict:
    """Keep only ``paths`` (slash-separated) of ``body``, keyed by the full path string, as llama.cpp."""
    if not paths:
        return body
    out: dict[str, Any] = {}
    for path in paths:
        node: Any = body
        for part in path.split("/"):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            out[path] = node
    return out


def sampling_settings(s: SamplingParams) -> dict:
    """Sampling parameters under llama-server's names: a request's, or the server's defaults (/props)."""
    return dict(
        temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
        repeat_last_n=s.repeat_last_n, repeat_penalty=s.repeat_penalty,
        presence_penalty=s.presence_penalty, frequency_penalty=s.frequency_penalty,
        typical_p=s.typical_p, top_n_sigma=s.top_n_sigma, xtc_probability=s.xtc_probability,
        xtc_threshold=s.xtc_threshold, ignore_eos=s.ignore_eos, samplers=list(s.order),
    )


def generation_settings(info: BodyInfo, req: CompletionRequest | None = None) -> dict:
    settings = {"n_ctx": info.n_ctx, "model": info.model}
    if req is not None:
        s = req.sampling
        settings.update(
            sampling_settings(s), seed=s.seed,
            n_predict=req.n_predict, max_tokens=req.n_predict, n_keep=req.n_keep,
            n_discard=req.n_discard, n_cache_reuse=req.n_cache_reuse, stop=req.stop,
            logit_bias=[{"bias": bias if math.isfinite(bias) else None, "token": token}  # -inf: null, as llama-server
                        for token, bias in s.logit_bias],
            n_probs=req.n_probs, grammar=s.grammar,
        )
    return settings


# -- llama.cpp's /completion -------------------------------------------------------------------
def _native_final(info: BodyInfo, job: Job, content: str, tokens: list[int], probs: list[TokenProbs]) -> dict:
    req = job.request
    body = {
        "index": 0,
        "content": content,
        "tokens": tokens if req.return_tokens else [],
        "id_slot": job.id_slot,
        "stop": True,
        "model": info.model,
        "tokens_predicted": job.n_gen,
        "tokens_evaluated": len(job.prompt),
        "generation_settings": generation_settings(info, req),
        "prompt": "",
        "has_new_line": job.text.has_new_line(),
        "truncated": job.is_truncated,
        "stop_type": job.stop_type,
        "stopping_word": job.text.stopping_word,
        "tokens_cached": job.n_cached + job.n_prompt_decoded + job.n_gen,
        "timings": job.timings(),
    }
    if req.n_probs > 0:
        body["completion_probabilities"] = logprobs.native(probs, info.piece, req.post_sampling_probs)
    return pick_fields(body, req.response_fields)


def native_body(info: BodyInfo, job: Job) -> dict:
    return _native_final(info, job, job.text.text, list(job.generated), job.probs)


def _stream_extras(event: Event) -> dict:
    """What a partial chunk adds when asked: ``timings`` (timings_per_token), ``prompt_progress`` (return_progress)."""
    extras: dict[str, Any] = {}
    if event.timings is not None:
        extras["timings"] = event.timings
    if event.progress is not None:
        extras["prompt_progress"] = event.progress
    return extras


def native_events(info: BodyInfo, job: Job, event: Event) -> list[dict]:
    req = job.request
    if event.final:  # a stream's final chunk carries only the text (and tokens, probabilities) not sent yet
        return [_native_final(info, job, event.text, list(event.tokens), event.probs)]
    chunk = {
        "index": 0,
        "content": event.text,
        "tokens": list(event.tokens) if req.return_tokens else [],
        "stop": False,
        "id_slot": -1,
        "tokens_predicted": job.n_gen,
        "tokens_evaluated": len(job.prompt),
        **_stream_extras(event),
    }
    if req.n_probs > 0 and event.probs:
        chunk["completion_probabilities"] = logprobs.native(event.probs, info.piece, req.post_sampling_probs)
    return [chunk]


# -- OpenAI's /v1/completions and /v1/chat/completions -----------------------------------------
def finish_reason(job: Job) -> str:
    return "stop" if job.stop_type in ("eos", "word") else "length"


def usage(job: Job) -> dict:
    return {
        "prompt_tokens": len(job.prompt),
        "completion_tokens": job.n_gen,
        "total_tokens": len(job.prompt) + job.n_gen,
        "prompt_tokens_details": {"cached_tokens": job.n_cached},
    }


def _envelope(info: BodyInfo, job: Job, kind: str) -> dict:
    return {"id": f"cmpl-{job.id}", "object": kind, "created": int(time.time()),
            "model": info.model, "system_fingerprint": "slotserver"}


def _text_logprobs(info: BodyInfo, job: Job, probs: list[TokenProbs]) -> dict | None:
    """A text choice's ``logprobs`` (None unless asked); text offsets go on from the stream's earlier chunks."""
    req = job.request
    if not req.records_probs:
        return None
    out, job.n_logprob_chars = logprobs.text(probs, info.piece, req.post_sampling_probs, job.n_logprob_chars)
    return out


def text_body(info: BodyInfo, job: Job) -> dict:
    choice = {"text": job.text.text, "index": 0, "logprobs": _text_logprobs(info, job, job.probs),
              "finish_reason": finish_reason(job)}
    return {**_envelope(info, job, "text_completion"), "choices": [choice], "usage": usage(job),
            "timings": job.timings()}


def _usage_chunk(head: dict, job: Job) -> list[dict]:
    """OpenAI's ``stream_options.include_usage``: one last chunk with no choices and the usage."""
    return [{**head, "choices": [], "usage": usage(job)}] if job.request.include_usage else []


def text_events(info: BodyInfo, job: Job, event: Event) -> list[dict]:
    head = _envelope(info, job, "text_completion")
    probs = _text_logprobs(info, job, event.probs) if event.probs or event.final else None
    choice = {"text": event.text, "index": 0, "logprobs": probs,
              "finish_reason": finish_reason(job) if event.final else None}
    if not event.final:
        return [{**head, "choices": [choice], **_stream_extras(event)}]
    return [{**head, "choices": [choice], "timings": job.timings()}, *_usage_chunk(head, job)]


def chat_body(info: BodyInfo, job: Job) -> dict:
    req = job.request
    message = {"role": "assistant", "content": job.text.text}
    probs = logprobs.chat(job.probs, info.piece, req.post_sampling_probs) if req.records_probs else None
    choice = {"index": 0, "message": message, "logprobs": probs, "finish_reason": finish_reason(job)}
    return {**_envelope(info, job, "chat.completion"), "choices": [choice], "usage": usage(job),
            "timings": job.timings()}


def chat_events(info: BodyInfo, job: Job, event: Event) -> list[dict]:
    """Chat chunks: the role first (and with each prompt progress, as llama-server), the text with
    its tokens' logprobs, then the finish reason."""
    req = job.request
    head = _envelope(info, job, "chat.completion.chunk")
    out = []
    if job.n_events_sent == 0 or event.progress is not None:  # OpenAI streams open with the role
        out.append({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                                         "finish_reason": None}]})
    has_probs = req.records_probs and bool(event.probs)
    if event.text or has_probs:
        choice = {"index": 0, "delta": {"content": event.text}, "finish_reason": None}
        if has_probs:
            choice["logprobs"] = logprobs.chat(event.probs, info.piece, req.post_sampling_probs)
        out.append({**head, "choices": [choice]})
    if event.final:
        out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason(job)}],
                    "timings": job.timings()})
        out += _usage_chunk(head, job)
    elif out:
        out[-1].update(_stream_extras(event))
    return out
