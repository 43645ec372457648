"""The aiohttp application: factory, the error middleware, and the engine's lifecycle.

``create_app(config)`` builds the app; its cleanup context reads the cache files (a bad one stops
the start), loads the model off the event loop, runs the engine loop until shutdown, then saves
learned structures one last time. If loading fails or the engine loop dies, ``on_fatal`` is told
why (the CLI then exits non-zero) and ``/health`` answers 503: never a live port with a dead engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable

from aiohttp import web

from slotserver.api.bodies import error_body, json_response
from slotserver.api.metrics import setup_metrics
from slotserver.api.routes import setup_routes
from slotserver.api.state import STATE, State
from slotserver.chain import DraftChain
from slotserver.config import ServerConfig
from slotserver.engine import Engine
from slotserver.errors import ServerError
from slotserver.fingerprint import vocab_fingerprint
from slotserver.persist import Persistence
from slotserver.runner import Runner
from slotserver.service import CompletionService
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Translate errors into JSON once; the server keeps serving. Internal details are only logged."""
    try:
        return await handler(request)
    except ServerError as exc:
        return json_response(exc.to_json(), exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        return json_response(error_body(exc.status, exc.reason, kind), exc.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return json_response(error_body(500, "internal server error", "server_error"), 500)


def _engine_ctx(on_fatal: Callable[[str], None]):
    async def engine_ctx(app: web.Application):
        state = app[STATE]
        config = state.config
        loop = asyncio.get_running_loop()
        chain = DraftChain.from_spec(config.spec)
        stats = ServerStats()
        persistence = Persistence(config.spec, chain, stats, lambda: vocab_fingerprint(config.engine.model_path))
        await loop.run_in_executor(None, persistence.load)  # StartupFileError: the server does not start

        async def load_and_run() -> None:
            try:
                engine = await loop.run_in_executor(None, Engine, config.engine)
            except Exception as exc:
                state.load_error = f"could not load the model: {exc}"
                log.error(state.load_error)
                state.loaded.set()
                on_fatal(state.load_error)
                return
            runner = Runner(engine, chain, n_parallel=config.engine.n_parallel, cache_prompt=config.cache_prompt,
                            stats=stats, persistence=persistence, on_fatal=on_fatal)
            state.runner, state.service = runner, CompletionService(config, runner)
            log.info("model loaded: %s, n_ctx %d, %d slots, speculation: %s",
                     engine.description, engine.n_ctx, config.engine.n_parallel, ",".join(chain.types) or "none")
            state.loaded.set()
            await runner.run()

        task = asyncio.create_task(load_and_run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if state.runner is not None:
            await state.runner.on_engine_thread(persistence.save)
            state.runner.close()
            state.runner.engine.close()

    return engine_ctx


def _log_fatal(reason: str) -> None:
    log.critical("the engine is down: %s", reason)


def create_app(config: ServerConfig, *, on_fatal: Callable[[str], None] = _log_fatal) -> web.Application:
    """The application for ``config``. ``on_fatal(reason)`` is called if the engine cannot run."""
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    app[STATE] = State(config)
    setup_routes(app, metrics_handler=setup_metrics(app) if config.metrics else None)
    app.cleanup_ctx.append(_engine_ctx(on_fatal))
    return app
