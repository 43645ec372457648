"""The engine watchdog on a fake clock: when a step counts as stalled, what is logged and counted."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from slotserver.api.shutdown import save_learned
from slotserver.serving.watchdog import Watchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_no_stall_between_steps_or_within_the_timeout(clock):
    dog = Watchdog(30.0, clock)
    assert dog.check() == "" and dog.stall() == ""
    clock.now += 1000  # idle for long: not a stall
    assert dog.check() == ""
    dog.step_started()
    clock.now += 30.0  # exactly the timeout: still fine
    assert dog.check() == "" and dog.n_stalls == 0


def test_a_step_past_the_timeout_is_a_stall_named_with_its_age_and_the_flag(clock):
    dog = Watchdog(30.0, clock)
    dog.step_started()
    clock.now += 41.25
    assert dog.stall() == "the engine has been in one step for 41.2 s (--step-timeout 30)"
    assert dog.n_stalls == 0  # stall() only tells; check() counts
    assert dog.check() == dog.stall()
    assert dog.n_stalls == 1


def test_one_incident_logs_one_error_and_counts_once_then_recovers(clock, caplog):
    caplog.set_level(logging.INFO, logger="slotserver.serving.watchdog")
    dog = Watchdog(0.5, clock)
    dog.step_started()
    clock.now += 0.6
    for _ in range(5):  # the periodic check and every request see the same incident
        assert dog.check()
        clock.now += 1.0
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert dog.n_stalls == 1 and len(errors) == 1
    assert "0.6 s (--step-timeout 0.5)" in errors[0].getMessage()
    assert "503" in errors[0].getMessage()
    dog.step_ended()  # the step returned 5.6 s after it started
    dog.step_started()  # and the next one started at once
    clock.now += 0.1
    assert dog.check() == ""
    recovered = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
    assert recovered == ["the engine recovered after 5.6 s in one step; serving again"]
    assert dog.check() == "" and dog.n_stalls == 1


def test_each_incident_counts(clock):
    dog = Watchdog(1.0, clock)
    for i in range(3):
        dog.step_started()
        clock.now += 2.0
        assert dog.check()
        dog.step_ended()
        assert dog.check() == ""
    assert dog.n_stalls == 3


def test_back_to_back_long_steps_are_two_incidents(clock):
    """A check that sees a different stalled step than the one reported: the first one returned."""
    dog = Watchdog(1.0, clock)
    dog.step_started()
    clock.now += 2.0
    assert dog.check()
    dog.step_ended()
    dog.step_started()
    clock.now += 3.0
    assert dog.check() and dog.n_stalls == 2


def test_recovery_without_a_recorded_end_uses_the_time_it_was_seen(clock, caplog):
    """A long step whose end the engine did not record yet (it was seen while the next began)."""
    caplog.set_level(logging.WARNING, logger="slotserver.serving.watchdog")
    dog = Watchdog(1.0, clock)
    dog.step_started()
    clock.now += 2.0
    dog.check()
    dog._t_started = None  # the step ended without step_ended (as if a check ran between the two writes)
    clock.now += 1.0
    assert dog.check() == ""
    assert "recovered after 3.0 s" in caplog.records[-1].getMessage()


def test_the_step_timeout_must_be_positive():
    with pytest.raises(ValueError, match="--step-timeout"):
        Watchdog(0.0)


def test_the_periodic_check_runs_at_least_twice_per_timeout():
    assert Watchdog(30.0).interval() == 1.0
    assert Watchdog(0.5).interval() == 0.25


async def test_the_periodic_check_logs_an_incident_nobody_asked_about(caplog):
    caplog.set_level(logging.ERROR, logger="slotserver.serving.watchdog")
    dog = Watchdog(0.02)
    dog.step_started()
    watch = asyncio.create_task(dog.watch())
    try:
        for _ in range(500):
            if dog.n_stalls:
                break
            await asyncio.sleep(0.01)
    finally:
        watch.cancel()
    assert dog.n_stalls == 1 and "in one step" in caplog.records[0].getMessage()


class StuckRunner:
    """What ``save_learned`` uses of a Runner: a watchdog, persistence and the engine thread,
    whose current step blocks until ``release`` is set."""

    def __init__(self, step_timeout_s: float) -> None:
        self.watchdog = Watchdog(step_timeout_s)
        self.release = threading.Event()
        self.saved = 0
        self.persistence = self
        self.is_active = True

    def save(self) -> None:
        self.saved += 1

    async def on_engine_thread(self, fn):
        def stuck_then_fn():
            self.watchdog.step_started()
            self.release.wait(30)
            self.watchdog.step_ended()
            return fn()
        return await asyncio.get_running_loop().run_in_executor(None, stuck_then_fn)


async def test_the_save_gives_up_when_the_engine_stalls_behind_it():
    runner = StuckRunner(0.05)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        assert await save_learned(runner, 30.0) is False
        assert loop.time() - t0 < 5.0  # the stall ended the wait, not the 30 s bound
        assert runner.watchdog.stall()
        assert await save_learned(runner, 30.0) is False  # already stalled: it does not even queue the save
    finally:
        runner.release.set()


async def test_the_save_gives_up_at_its_bound():
    runner = StuckRunner(60.0)
    try:
        assert await save_learned(runner, 0.1) is False and runner.saved == 0
    finally:
        runner.release.set()


async def test_the_save_completes_when_the_engine_answers():
    runner = StuckRunner(60.0)
    runner.release.set()
    assert await save_learned(runner, 30.0) is True and runner.saved == 1
