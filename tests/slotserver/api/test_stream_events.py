"""Stream events without a model: what the engine snapshots into them (token probabilities, prompt
progress, timings) and how each API's chunks carry it."""

from __future__ import annotations

from slotserver.api.bodies import BodyInfo, chat_events, native_events, text_events
from slotserver.engine.token_probs import TokenProbs
from slotserver.serving.apply_rows import Applier
from slotserver.serving.job import Job
from slotserver.serving.request import parse_completion
from slotserver.serving.slots import Slot
from slotserver.serving.text_stream import TextStream
from slotserver.speculation.config import DraftLimits

PIECES = {1: b" one", 2: b" two", 3: b" three"}
INFO = BodyInfo("m", 64, PIECES.__getitem__)


def make_job(**fields) -> Job:
    req = parse_completion({"prompt": "hi", "stream": True, **fields})
    return Job(req, [5, 6, 7, 8], DraftLimits(), TextStream([]))


def generate(job: Job, tokens: list[int], n_extra_probs: int = 0) -> None:
    """What the engine does per token: record its probabilities, append it, push its text."""
    for t in tokens:
        if job.request.records_probs:
            job.probs.append(TokenProbs(t, -float(t), ((t, -float(t)),)))
        job.generated.append(t)
        job.unsent.append(t)
        job.text.push(PIECES[t])
    for _ in range(n_extra_probs if job.request.records_probs else 0):  # a verify step sampled past what was emitted
        job.probs.append(TokenProbs(9, -9.0, ()))


def test_take_unsent_pairs_tokens_with_their_probabilities():
    job = make_job(n_probs=1)
    generate(job, [1, 2])
    assert job.take_unsent() == ([1, 2], job.probs[:2])
    generate(job, [3], n_extra_probs=1)
    tokens, probs = job.take_unsent()
    assert tokens == [3] and [p.token for p in probs] == [3] and job.unsent == []
    assert make_job().take_unsent() == ([], [])  # nothing recorded without n_probs


def test_partial_snapshots_probs_and_timings_only_when_asked():
    slot = Slot(0, job=make_job(n_probs=1, timings_per_token=True))
    generate(slot.job, [1, 2])
    [(_, event)] = Applier.partial(slot)
    assert event.tokens == [1, 2] and [p.token for p in event.probs] == [1, 2]
    assert event.timings is not None and event.timings["predicted_n"] == 2
    plain = Slot(0, job=make_job())
    generate(plain.job, [1])
    [(_, event)] = Applier.partial(plain)
    assert event.timings is None and event.probs == []


def test_progress_only_for_streams_that_ask():
    job = make_job(return_progress=True)
    job.n_cached, job.n_prompt_decoded = 1, 2
    [(_, event)] = Applier._progress(job)
    assert not event.final and event.text == "" and event.tokens == []
    assert {k: v for k, v in event.progress.items() if k != "time_ms"} == {"total": 4, "cache": 1, "processed": 3}
    assert Applier._progress(make_job()) == []
    assert Applier._progress(make_job(return_progress=True, stream=False)) == []


def test_native_partial_chunks_carry_probs_progress_and_timings():
    job = make_job(n_probs=1, return_progress=True, timings_per_token=True)
    [(_, progress)] = Applier._progress(job)
    [chunk] = native_events(INFO, job, progress)
    assert chunk["prompt_progress"]["total"] == 4 and "completion_probabilities" not in chunk
    generate(job, [1])
    [(_, event)] = Applier.partial(Slot(0, job=job))
    [chunk] = native_events(INFO, job, event)
    assert chunk["content"] == " one" and "timings" in chunk and "prompt_progress" not in chunk
    assert [c["id"] for c in chunk["completion_probabilities"]] == [1]
    assert "logprob" in chunk["completion_probabilities"][0]
    post = make_job(n_probs=1, post_sampling_probs=True)
    generate(post, [2])
    [(_, event)] = Applier.partial(Slot(0, job=post))
    assert "top_probs" in native_events(INFO, post, event)[0]["completion_probabilities"][0]


def test_chat_progress_opens_with_the_role_and_probs_travel_with_their_chunk():
    job = make_job(return_progress=True)
    job.request.token_probs = True
    [(_, progress)] = Applier._progress(job)
    [opening] = chat_events(INFO, job, progress)
    assert opening["choices"][0]["delta"]["role"] == "assistant" and "prompt_progress" in opening
    job.n_events_sent = 1
    generate(job, [1])
    [(_, event)] = Applier.partial(Slot(0, job=job))
    event.text = ""  # text withheld (a possible stop string): the logprobs still go out
    [chunk] = chat_events(INFO, job, event)
    assert chunk["choices"][0]["delta"] == {"content": ""}
    assert [c["token"] for c in chunk["choices"][0]["logprobs"]["content"]] == [" one"]


def test_text_chunks_continue_the_offsets_and_carry_no_logprobs_without_tokens():
    job = make_job(return_progress=True)
    job.request.token_probs = True
    [(_, progress)] = Applier._progress(job)
    assert text_events(INFO, job, progress)[0]["choices"][0]["logprobs"] is None
    offsets = []
    for tokens in ([1, 2], [3]):
        generate(job, tokens)
        [(_, event)] = Applier.partial(Slot(0, job=job))
        offsets += text_events(INFO, job, event)[0]["choices"][0]["logprobs"]["text_offset"]
    assert offsets == [0, 4, 8]
