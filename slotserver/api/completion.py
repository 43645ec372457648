"""Serve one generation job over HTTP: a whole JSON body, or a stream of server-sent events.

Shared by every completion endpoint; a ``Formatter`` says how one API shapes the output. The
handler cancels its job if it leaves before the final event (client gone, a write failed or took
longer than the server's ``--timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

from aiohttp import web

from slotserver.api.bodies import BodyInfo, body_items, json_response_async, usage
from slotserver.api.state import STATE, TENANT
from slotserver.serving.job import Event, Job
from slotserver.serving.service import CompletionService


@dataclass(frozen=True, slots=True)
class Formatter:
    """How one API shapes a job's output: the whole body, and the SSE events of a stream."""

    body: Callable[[BodyInfo, Job], dict]
    events: Callable[[BodyInfo, Job, Event], list[dict]]
    done_marker: bool  # OpenAI streams end with "data: [DONE]"
    named_events: bool = False  # each event also gets an "event: <its type>" line (the Responses API)


def body_info(service: CompletionService) -> BodyInfo:
    return BodyInfo(service.config.model_name, service.n_ctx, service.vocab.piece)


async def serve_job(request: web.Request, submit: Callable[[CompletionService, str], Awaitable[Job]],
                    fmt: Formatter) -> web.StreamResponse:
    """Start a job with ``submit(service, tenant)`` and answer with its output in ``fmt``'s shape."""
    state = request.app[STATE]
    service = state.ready_service()
    job = await submit(service, request.get(TENANT, ""))
    info = body_info(service)
    finished = False
    try:
        if job.request.stream:
            resp = await _stream(request, info, job, fmt, state.config.limits.timeout_s)
            finished = True
            return resp
        while not (event := await job.events.get()).final:
            pass
        finished = True
        if event.error is not None:
            raise event.error
        return await json_response_async(lambda: fmt.body(info, job), body_items([job]))
    finally:
        if not finished:
            service.runner.cancel(job)


async def _open_sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return resp


def _sse(body, named: bool = False) -> bytes:
    head = f"event: {body['type']}\n".encode() if named else b""
    return head + b"data: " + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def _stream(request: web.Request, info: BodyInfo, job: Job, fmt: Formatter,
                  write_timeout_s: float) -> web.StreamResponse:
    """Write the job's events as SSE; a write that cannot finish in ``write_timeout_s`` (the client
    stopped reading) raises TimeoutError, and the caller cancels the job."""
    resp = await _open_sse(request)

    async def write(data: bytes) -> None:
        await asyncio.wait_for(resp.write(data), write_timeout_s)

    while True:
        event = await job.events.get()
        if event.error is not None:
            await write(_sse(event.error.to_json()))
            break
        chunks = [_sse(body, fmt.named_events) for body in fmt.events(info, job, event)]
        if event.final and fmt.done_marker:
            chunks.append(b"data: [DONE]\n\n")
        await write(b"".join(chunks))
        job.n_events_sent += 1
        if event.final:
            break
    await resp.write_eof()
    return resp


async def serve_choices(request: web.Request, submit: Callable[[CompletionService, str], Awaitable[list[Job]]],
                        fmt: Formatter) -> web.StreamResponse:
    """OpenAI's ``n`` > 1: one job per choice, answered as one body (or one stream) whose choices
    carry their index. Usage counts the prompt once and every choice's tokens."""
    state = request.app[STATE]
    service = state.ready_service()
    jobs = await submit(service, request.get(TENANT, ""))
    info = body_info(service)
    finished: set[int] = set()
    try:
        if jobs[0].request.stream:
            return await _stream_choices(request, info, jobs, fmt, state.config.limits.timeout_s, finished)
        for i, job in enumerate(jobs):
            while not (event := await job.events.get()).final:
                pass
            finished.add(i)
            if event.error is not None:
                raise event.error
        return await json_response_async(lambda: combine([fmt.body(info, job) for job in jobs], jobs),
                                         body_items(jobs))
    finally:
        for i, job in enumerate(jobs):
            if i not in finished:
                service.runner.cancel(job)


def combine(bodies: list[dict], jobs: list[Job]) -> dict:
    """One OpenAI body from the bodies of single choices."""
    out = dict(bodies[0])
    out["choices"] = [{**b["choices"][0], "index": i} for i, b in enumerate(bodies)]
    if "usage" in out:
        out["usage"] = choices_usage(jobs)
    return out


def choices_usage(jobs: list[Job]) -> dict:
    """The request's usage: its prompt once (cached as the first choice found it), every choice's tokens."""
    first = usage(jobs[0])
    n_gen = sum(job.n_gen for job in jobs)
    return {**first, "completion_tokens": n_gen, "total_tokens": first["prompt_tokens"] + n_gen}


async def _merged(jobs: list[Job]) -> AsyncIterator[tuple[int, Event]]:
    """Every job's events as they come, with the job's index, until each job's final event.

    The merged queue holds one event per job at most: a reader that stops reading stops the pumps,
    so its events wait in each job's own queue, where the engine cancels the job past
    MAX_UNREAD_EVENTS (an unbounded merged queue hid them from it and grew without end).
    """
    merged: asyncio.Queue = asyncio.Queue(maxsize=len(jobs))

    async def pump(i: int, job: Job) -> None:
        while not (event := await job.events.get()).final:
            await merged.put((i, event))
        await merged.put((i, event))

    pumps = [asyncio.ensure_future(pump(i, job)) for i, job in enumerate(jobs)]
    try:
        while True:  # the consumer stops once it has every final event
            yield await merged.get()
    finally:
        for task in pumps:
            task.cancel()


async def _stream_choices(request: web.Request, info: BodyInfo, jobs: list[Job], fmt: Formatter,
                          write_timeout_s: float, finished: set[int]) -> web.StreamResponse:
    """The choices' events as they come, each chunk's choices re-indexed; per-choice usage chunks
    are held back and one usage chunk for the whole request ends the stream."""
    resp = await _open_sse(request)

    async def write(chunks: list[bytes]) -> None:
        if chunks:
            await asyncio.wait_for(resp.write(b"".join(chunks)), write_timeout_s)

    usage_chunk = None
    async with contextlib.aclosing(_merged(jobs)) as events:  # its pumps stop with the stream
        async for i, event in events:
            if event.final:
                finished.add(i)
            if event.error is not None:
                await write([_sse(event.error.to_json())])
                break
            chunks = []
            for body in fmt.events(info, jobs[i], event):
                if not body.get("choices") and "usage" in body:
                    usage_chunk = body
                    continue
                body["choices"] = [{**c, "index": i} for c in body["choices"]]
                chunks.append(_sse(body))
            jobs[i].n_events_sent += 1
            await write(chunks)
            if len(finished) == len(jobs):
                tail = [_sse({**usage_chunk, "usage": choices_usage(jobs)})] if usage_chunk is not None else []
                await write(tail + ([b"data: [DONE]\n\n"] if fmt.done_marker else []))
                break
    await resp.write_eof()
    return resp
