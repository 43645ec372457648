"""The runner without a model: queue bound, in-flight count, unread-event bound, waiting deadlines.

Only what needs no llama.cpp call is exercised (submit, delivery, expiry of waiting jobs).
"""

from __future__ import annotations

import pytest

from slotserver.errors import QueueFull
from slotserver.limits import MAX_UNREAD_EVENTS, LimitsConfig
from slotserver.serving.job import Event, Job
from slotserver.serving.request import parse_completion
from slotserver.serving.runner import CANCEL, SUBMIT, Runner
from slotserver.serving.text_stream import TextStream
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits


def make_runner(n_parallel: int, max_waiting: int) -> Runner:
    return Runner(None, DraftChain([]), n_parallel=n_parallel, limits=LimitsConfig(max_waiting=max_waiting))


def make_job(stream: bool = False) -> Job:
    req = parse_completion({"prompt": "hi", "stream": stream})
    return Job(req, [1, 2], DraftLimits(), TextStream([]))


def inbox(runner: Runner) -> list[tuple[str, Job]]:
    out = []
    while not runner._inbox.empty():
        out.append(runner._inbox.get_nowait())
    return out


async def test_submit_beyond_slots_plus_queue_is_refused_with_retry_after():
    runner = make_runner(n_parallel=2, max_waiting=3)
    jobs = [make_job() for _ in range(5)]
    for job in jobs:
        runner.submit(job)
    with pytest.raises(QueueFull) as err:
        runner.submit(make_job())
    assert err.value.status == 503 and int(err.value.headers["Retry-After"]) >= 1
    assert runner.n_in_flight == 5 and not runner.all_done.is_set()
    runner._deliver([(jobs[0], Event(True))])  # one finishes: room for one more
    runner.submit(make_job())
    assert [kind for kind, _ in inbox(runner)] == [SUBMIT] * 6


async def test_all_done_is_set_when_the_last_final_event_is_delivered():
    runner = make_runner(n_parallel=1, max_waiting=4)
    a, b = make_job(), make_job()
    runner.submit(a)
    runner.submit(b)
    runner._deliver([(a, Event(False, "x")), (a, Event(True))])
    assert runner.n_in_flight == 1 and not runner.all_done.is_set()
    runner._deliver([(b, Event(True, is_cancelled=True))])
    assert runner.n_in_flight == 0 and runner.all_done.is_set()


async def test_a_stream_whose_client_stops_reading_is_cancelled_past_the_unread_bound():
    runner = make_runner(n_parallel=1, max_waiting=0)
    job = make_job(stream=True)
    runner.submit(job)
    inbox(runner)
    runner._deliver([(job, Event(False, "t"))] * MAX_UNREAD_EVENTS)
    assert inbox(runner) == []  # a full buffer, but not past the bound
    runner._deliver([(job, Event(False, "t"))])
    assert inbox(runner) == [(CANCEL, job)]


async def test_a_waiting_job_past_its_deadline_gets_503():
    runner = make_runner(n_parallel=1, max_waiting=4)
    late, fresh = make_job(), make_job()
    runner.submit(late)
    runner.submit(fresh)
    runner._drain_inbox([])
    late.t_deadline = 0.0  # long past
    out = []
    runner._expire(out)  # all slots idle: no engine call
    assert [(job, event.error.status) for job, event in out] == [(late, 503)]
    assert "timeout" in str(out[0][1].error) and list(runner.waiting) == [fresh]


def test_limits_are_checked():
    with pytest.raises(ValueError):
        LimitsConfig(max_waiting=-1)
    with pytest.raises(ValueError):
        LimitsConfig(timeout_s=0)
    assert LimitsConfig().body_bytes(8192) == 1 << 20 and LimitsConfig().body_bytes(65536) == 64 * 65536
    assert LimitsConfig(max_body_bytes=1000).body_bytes(8192) == 1000


async def test_a_dying_step_still_delivers_the_finals_it_produced_and_fails_the_rest():
    fatal = []
    runner = Runner(None, DraftChain([]), n_parallel=1, on_fatal=fatal.append)
    done, waiting, queued = make_job(), make_job(), make_job()
    for job in (done, waiting, queued):
        runner.submit(job)
    runner._drain_inbox([])
    runner.waiting.remove(done)  # as if it had run and ended in the step that then died
    runner.submit(queued2 := make_job())
    runner._step_out = [(done, Event(True, "the whole text")), (waiting, Event(False, "partial"))]
    runner._die(RuntimeError("boom"))
    assert done.events.get_nowait().text == "the whole text" and done.events.empty()
    for job in (waiting, queued, queued2):
        event = job.events.get_nowait()
        assert event.final and event.error.status == 503 and job.events.empty()
    assert runner.n_in_flight == 0 and runner.all_done.is_set() and fatal == ["engine loop failed: RuntimeError"]
