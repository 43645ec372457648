"""Graceful shutdown (SIGTERM, SIGINT): stop admitting, save learned state, let requests finish.

``drain(app)`` is the first half: from then on every new request and ``/health`` answer 503
("shutting down"); learned drafter state is saved at once (a container's stop grace may end in a
kill); in-flight requests get ``--shutdown-timeout`` seconds to finish. The CLI then lets aiohttp
close the server, and the engine context saves again on the way out. Exit status 0.

A stuck engine never holds the exit: one C call can run for minutes (``slotserver/serving/watchdog.py``),
and every save runs on the engine thread, behind it. So each save waits only while the engine is
not stalled and at most a bound (``save_learned``). If the engine is stalled when the drain ends,
``State.engine_stuck`` says why: the engine context leaves the engine thread (and the model it is
using) behind (``serving/build.py``, ``Build.close``), background writes already under way finish, and the CLI exits ``EXIT_STUCK``
without waiting for the thread (``exit_now``). Saving the drafters from another thread is not safe
(they belong to the engine thread, which may be changing them), so that state is not saved. And
whatever else may hang, the CLI's hard-exit timer (``start_exit_timer``, started with the drain)
ends the process ``--shutdown-timeout`` + ``HARD_EXIT_GRACE_S`` seconds after the signal.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from typing import NoReturn

from aiohttp import web

from slotserver.api.state import STATE
from slotserver.serving.runner import Runner

log = logging.getLogger(__name__)

EXIT_STUCK = 3  # exit status when the engine thread was left behind (a supervisor restarts the server)
HARD_EXIT_GRACE_S = 5.0  # after --shutdown-timeout: aiohttp's close (1 s), the last save, the exit
SAVE_MIN_S = 1.0  # the drain's save waits at least this long for the engine thread, even with --shutdown-timeout 0


async def drain(app: web.Application) -> None:
    state = app[STATE]
    state.shutting_down = True
    runner = state.runner
    if runner is None or runner.failure:
        return
    loop = asyncio.get_running_loop()
    timeout = state.config.limits.shutdown_timeout_s
    t_end = loop.time() + timeout
    log.info("shutting down: no new requests; saving learned state; %d requests in flight", runner.n_in_flight)
    if runner.persistence is not None:
        await save_learned(runner, max(timeout, SAVE_MIN_S))
    if not runner.all_done.is_set():
        try:
            await asyncio.wait_for(runner.all_done.wait(), max(t_end - loop.time(), 0.0))
        except asyncio.TimeoutError:
            log.warning("shutting down: %d requests still running after %.1f s are cancelled",
                        runner.n_in_flight, timeout)
    stall = runner.watchdog.stall()
    if stall:
        state.engine_stuck = stall
        log.error("shutting down: %s; the drafters' learned state cannot be saved without it; "
                  "exiting %d without waiting for it", stall, EXIT_STUCK)


async def save_learned(runner: Runner, timeout: float) -> bool:
    """Save learned drafter state on the engine thread; False, logged, when the engine is stalled
    (``runner.watchdog``) or the save did not end within ``timeout`` seconds (it is then cancelled
    if it has not started; one that started finishes on the engine thread)."""
    loop = asyncio.get_running_loop()
    t_end = loop.time() + timeout
    stall = runner.watchdog.stall()
    if not stall:
        saving = asyncio.ensure_future(runner.on_engine_thread(runner.persistence.save))
        while not saving.done():
            stall = runner.watchdog.stall()
            left = t_end - loop.time()
            if stall or left <= 0:
                saving.cancel()
                break
            await asyncio.wait({saving}, timeout=min(left, runner.watchdog.interval()))
        if saving.done() and not saving.cancelled():
            saving.result()  # Persistence.save logs and counts its own failures; anything else is a bug
            return True
    what = "learned state not saved" if runner.persistence.is_active else "the engine thread did not answer"
    log.error("%s: %s", what, stall or f"it did not take the save within {timeout:.1f} s")
    return False


def exit_now(reason: str) -> NoReturn:
    """Log, flush, and end the process with ``EXIT_STUCK`` at once: no cleanup, no thread joins
    (Python's exit would wait for the stuck engine thread forever)."""
    log.critical("exiting %d without waiting for the engine thread: %s", EXIT_STUCK, reason)
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # a broken log stream must not keep the process alive
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(EXIT_STUCK)


def start_exit_timer(seconds: float) -> threading.Timer:
    """A daemon timer that ends the process (``exit_now``) if it is still running in ``seconds``."""
    timer = threading.Timer(seconds, exit_now, args=(f"still running {seconds:g} s after the shutdown signal",))
    timer.daemon = True
    timer.start()
    return timer
