"""The engine watchdog: tells when the engine thread has been inside one step for too long.

Why: one C call (a sampler, a decode) can run for minutes. Meanwhile no request makes progress,
yet the process looks alive: ``/health`` said 200 throughout such a freeze, so no orchestrator
could notice it. The engine thread marks when each step (or other engine-thread job) starts and
ends: plain attribute writes, atomic under the GIL, so marking costs nothing and never waits. The
event loop compares the running step's start with the clock: a step older than ``--step-timeout``
is a stall. While stalled, ``/health`` and new requests get 503 with the reason
(``State.ready``), one ERROR line is logged per incident and ``n_stalls`` counts incidents (for the
metrics); once the step returns the server serves again and logs that it recovered.

The watch starts with serving: loading the model and calibrating also run on the engine thread,
but before the runner (which owns the watchdog) exists, so they never count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0  # the periodic check's period (shorter for a step timeout under 2 s)


class Watchdog:
    def __init__(self, step_timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if step_timeout_s <= 0:
            raise ValueError("--step-timeout must be > 0")
        self.step_timeout_s = step_timeout_s
        self._clock = clock
        # Engine thread writes, any thread reads (one reference each, atomic under the GIL):
        self._t_started: float | None = None  # when the running step started; None between steps
        self._long_step: tuple[float, float] = (0.0, 0.0)  # (start, seconds) of the last step past the timeout
        # Event loop only:
        self._incident: float | None = None  # start of the step reported stalled, until it returns
        self.n_stalls = 0  # incidents so far: steps that ran past the timeout while the loop looked

    # -- engine thread ---------------------------------------------------------------------------
    def step_started(self) -> None:
        self._t_started = self._clock()

    def step_ended(self) -> None:
        t_started, now = self._t_started, self._clock()
        self._t_started = None
        if t_started is not None and now - t_started > self.step_timeout_s:
            self._long_step = (t_started, now - t_started)

    # -- any thread ------------------------------------------------------------------------------
    def stall(self) -> str:
        """Why the engine counts as stalled now, or "" (no logging, no counting)."""
        return self._reason(self._t_started, self._clock())

    def _reason(self, t_started: float | None, now: float) -> str:
        if t_started is None or now - t_started <= self.step_timeout_s:
            return ""
        return f"the engine has been in one step for {now - t_started:.1f} s (--step-timeout {self.step_timeout_s:g})"

    # -- event loop ------------------------------------------------------------------------------
    def check(self) -> str:
        """``stall()``, and the incident's bookkeeping: an ERROR line and a count when a stall is
        first seen, an INFO line once its step returned."""
        t_started, now = self._t_started, self._clock()
        reason = self._reason(t_started, now)
        if self._incident is not None and (not reason or t_started != self._incident):
            start, seconds = self._long_step
            if start != self._incident:  # its end was not recorded yet: it ended by now at the latest
                seconds = now - self._incident
            log.warning("the engine recovered after %.1f s in one step; serving again", seconds)
            self._incident = None
        if reason and self._incident is None:
            self._incident = t_started
            self.n_stalls += 1
            log.error("%s: /health and new requests answer 503 until it returns", reason)
        return reason

    def interval(self) -> float:
        return min(CHECK_INTERVAL_S, self.step_timeout_s / 2)

    async def watch(self) -> None:
        """Check periodically, so an incident is logged and counted even when nobody asks."""
        while True:
            await asyncio.sleep(self.interval())
            self.check()
