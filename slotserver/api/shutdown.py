"""Graceful shutdown (SIGTERM, SIGINT): stop admitting, save learned state, let requests finish.

``drain(app)`` is the first half: from then on every new request and ``/health`` answer 503
("shutting down"); learned drafter state is saved at once (a container's stop grace may end in a
kill); in-flight requests get ``--shutdown-timeout`` seconds to finish. The CLI then lets aiohttp
close the server, and the engine context saves again on the way out. Exit status 0.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from slotserver.api.state import STATE

log = logging.getLogger(__name__)


async def drain(app: web.Application) -> None:
    state = app[STATE]
    state.shutting_down = True
    runner = state.runner
    if runner is None or runner.failure:
        return
    log.info("shutting down: no new requests; saving learned state; %d requests in flight", runner.n_in_flight)
    if runner.persistence is not None:
        await runner.on_engine_thread(runner.persistence.save)
    timeout = state.config.limits.shutdown_timeout_s
    try:
        await asyncio.wait_for(runner.all_done.wait(), timeout)
    except asyncio.TimeoutError:
        log.warning("shutting down: %d requests still running after %.1f s are cancelled",
                    runner.n_in_flight, timeout)
