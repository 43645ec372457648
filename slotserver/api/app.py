"""The aiohttp application: factory, the middlewares, and the cleanup context that runs the engine.

``create_app(config)`` builds the app; its cleanup context opens the build (``serving/build.py``:
it reads the cache files, and a bad one stops the start), loads the model off the event loop, runs
the engine loop until shutdown, then saves learned structures one last time and closes the build
(unless the engine is stuck in one step: its thread is then left behind, see ``api/shutdown.py``).
If loading fails or the engine loop dies, ``on_fatal`` is told why (the CLI then exits non-zero)
and ``/health`` answers 503: never a live port with a dead engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable

from aiohttp import web

from slotserver.api.metrics import setup_metrics
from slotserver.api.middleware import error_middleware, request_limit
from slotserver.api.peers import connection_limits
from slotserver.api.routes import setup_routes
from slotserver.api.security import Policy, cors_headers, security_middleware
from slotserver.api.shutdown import HARD_EXIT_GRACE_S, save_learned
from slotserver.api.state import STATE, State
from slotserver.config import ServerConfig
from slotserver.serving.build import Build

log = logging.getLogger(__name__)

# Context size to size the body limit by when -c 0 asks for the model's (unknown before loading).
N_CTX_UNKNOWN = 131072


def _engine_ctx(on_fatal: Callable[[str], None]):
    async def engine_ctx(app: web.Application):
        state = app[STATE]
        build = await Build.open(state.config)  # StartupFileError: the server does not start

        async def load_and_run() -> None:
            try:
                runner = await build.load(on_fatal)
            except Exception as exc:
                state.load_error = f"could not load the model: {exc}"
                log.error(state.load_error)
                state.loaded.set()
                on_fatal(state.load_error)
                return
            state.runner, state.service = runner, build.service
            state.loaded.set()
            await runner.run()

        task = asyncio.create_task(load_and_run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        runner, stuck = state.runner, ""
        # The last save waits for a write in flight, then writes; never behind a stuck step (shutdown.py).
        if runner is not None and (state.engine_stuck or not await save_learned(runner, HARD_EXIT_GRACE_S)):
            stuck = state.engine_stuck or runner.watchdog.stall() or "the engine thread did not answer"
            state.engine_stuck = stuck
        build.close(stuck=stuck)

    return engine_ctx


def _log_fatal(reason: str) -> None:
    log.critical("the engine is down: %s", reason)


def create_app(config: ServerConfig, *, on_fatal: Callable[[str], None] = _log_fatal) -> web.Application:
    """The application for ``config``. ``on_fatal(reason)`` is called if the engine cannot run."""
    max_body = config.limits.body_bytes(config.engine.n_ctx or N_CTX_UNKNOWN)
    # Security right inside the error middleware: see slotserver/api/security.py for why there.
    # Then the body is read (deadline, per-peer caps) before request_limit's place: api/peers.py.
    security = Policy.from_config(config)
    app = web.Application(middlewares=[error_middleware, security_middleware(security),
                                       connection_limits(config.limits),
                                       request_limit(config.limits.max_requests)],
                          client_max_size=max_body)
    app.on_response_prepare.append(cors_headers(security))
    app[STATE] = State(config)
    setup_routes(app, metrics_handler=setup_metrics(app) if config.metrics else None)
    app.cleanup_ctx.append(_engine_ctx(on_fatal))
    return app
