"""The engine thread's turns, without a model: steps run back to back while there is work, each
step's events reach the event loop in order, and other engine-thread jobs still get their turn."""

from __future__ import annotations

import asyncio
import threading

from slotserver.serving import runner as runner_mod
from slotserver.serving.job import Event
from slotserver.serving.runner import Runner
from slotserver.speculation.chain import DraftChain
from tests.slotserver.serving.test_runner_limits import make_job


class FakeSteps:
    """Stands in for ``Runner._step``/``_has_work``: ``n`` steps of work, one event each, the last final."""

    def __init__(self, job, n: int | None) -> None:
        self.job, self.n, self.done = job, n, 0
        self.threads: set[str] = set()
        self.stop = threading.Event()  # n=None: work until told to stop

    def step(self):
        self.threads.add(threading.current_thread().name)
        self.done += 1
        final = self.n is not None and self.done == self.n
        return [(self.job, Event(final, f"t{self.done}"))]

    def has_work(self) -> bool:
        return not self.stop.is_set() if self.n is None else self.done < self.n


def fake_runner(n: int | None):
    runner = Runner(None, DraftChain([]), n_parallel=1)
    job = make_job()
    runner.submit(job)
    runner._inbox.get_nowait()  # the fake steps stand for the engine's handling of it
    fake = FakeSteps(job, n)
    runner._step, runner._has_work = fake.step, fake.has_work
    return runner, job, fake


async def drain(job) -> list[str]:
    out = []
    while True:
        event = await job.events.get()
        out.append(event.text)
        if event.final:
            return out


async def test_one_turn_runs_every_step_while_there_is_work_and_delivers_each_in_order():
    runner, job, fake = fake_runner(n=50)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(runner._executor, runner._steps, loop)
    assert fake.done == 50  # one turn: no round trip through the event loop between steps
    assert await drain(job) == [f"t{i}" for i in range(1, 51)]
    assert runner.n_in_flight == 0 and runner.all_done.is_set()
    assert fake.threads == {await runner.on_engine_thread(lambda: threading.current_thread().name)}
    runner.close()


async def test_a_turn_ends_after_turn_s_so_other_engine_thread_jobs_run_while_work_goes_on(monkeypatch):
    monkeypatch.setattr(runner_mod, "TURN_S", 0.0)  # every turn is one step
    runner, job, fake = fake_runner(n=None)
    task = asyncio.create_task(runner.run())
    # (the timeout only turns a hang into a failure: without turns this job would wait forever)
    ran = await asyncio.wait_for(runner.on_engine_thread(lambda: (fake.done, fake.has_work())), 60)
    assert ran[1] and not task.done()  # ran on the engine thread while the requests still had work
    seen = fake.done

    async def steps_go_on() -> None:  # each job is queued behind whatever the run loop has queued,
        while await runner.on_engine_thread(lambda: fake.done) <= seen:  # so the order of the two
            pass  # wake-ups on the event loop decides whether a step sits between two given jobs

    await asyncio.wait_for(steps_go_on(), 60)  # the steps went on between engine-thread jobs
    fake.stop.set()
    runner._wake.set()
    task.cancel()
    runner.close()
