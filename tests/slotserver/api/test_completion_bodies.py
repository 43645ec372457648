"""Completion handlers without a model: big bodies are built off the event loop, and an n > 1
stream's merged queue is bounded so a slow reader leaves its events where the engine sees them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

from slotserver.api.bodies import BIG_BODY_ITEMS, body_items, json_response_async
from slotserver.api.completion import _merged
from slotserver.serving.job import Event, Job
from slotserver.serving.request import parse_completion
from slotserver.serving.text_stream import TextStream
from slotserver.speculation.config import DraftLimits


def make_job(**fields) -> Job:
    return Job(parse_completion({"prompt": "hi", **fields}), [1, 2], DraftLimits(), TextStream([]))


async def test_a_big_body_is_built_and_serialised_in_a_worker_thread():
    threads = []

    def build() -> dict:
        threads.append(threading.current_thread())
        return {"content": "é" * 10}

    small = await json_response_async(build, BIG_BODY_ITEMS)
    big = await json_response_async(build, BIG_BODY_ITEMS + 1)
    assert threads == [threading.main_thread(), threads[1]] and threads[1] is not threading.main_thread()
    assert small.content_type == big.content_type == "application/json" and big.charset == "utf-8"
    assert json.loads(big.body) == json.loads(small.text) == {"content": "é" * 10}


def test_a_bodys_size_counts_tokens_and_their_reported_candidates():
    plain, probs = make_job(n_predict=8), make_job(n_predict=8, n_probs=10)
    plain.generated[:] = probs.generated[:] = [5] * 8
    assert body_items([plain]) == 8 and body_items([plain, probs]) == 8 + 8 * 11


async def test_the_merged_stream_of_choices_does_not_drain_a_slow_readers_events():
    """The engine cancels a job once MAX_UNREAD_EVENTS wait in its queue; the merge must leave them
    there. Up to 24272d3 it moved every event into an unbounded queue of its own."""
    jobs = [make_job(stream=True), make_job(stream=True)]
    for job in jobs:
        for _ in range(300):
            job.events.put_nowait(Event(False, "x"))
    async with contextlib.aclosing(_merged(jobs)) as events:
        first = await anext(events)  # the reader takes one event, then stops reading
        assert first[1].text == "x"
        for _ in range(20):
            await asyncio.sleep(0)  # the pumps run as far as they can
        assert sum(job.events.qsize() for job in jobs) >= 600 - 1 - len(jobs) - len(jobs)
        for job in jobs:
            job.events.put_nowait(Event(True))
        seen = 1
        finals = 0
        async for _, event in events:
            seen += 1
            finals += event.final
            if finals == len(jobs):
                break
    assert seen == 602
