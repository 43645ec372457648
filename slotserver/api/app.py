"""The aiohttp application: factory, typed app keys, lifecycle and the error middleware."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field

from aiohttp import web

from slotserver.config import ServerConfig
from slotserver.drafters import build_chain
from slotserver.engine import Engine
from slotserver.errors import ServerError, Unavailable
from slotserver.responses import error_body
from slotserver.persist import Persistence
from slotserver.runner import Runner
from slotserver.stats import ServerStats
from slotserver.vocab import vocab_fingerprint

log = logging.getLogger(__name__)


@dataclass(slots=True)
class State:
    """What the handlers need; ``runner`` is None while the model is loading."""

    config: ServerConfig
    runner: Runner | None = None
    load_error: str = ""
    loaded: asyncio.Event = field(default_factory=asyncio.Event)  # set once loading ended, either way

    def ready(self) -> Runner:
        if self.runner is None:
            raise Unavailable(self.load_error or "Loading model")
        return self.runner


STATE = web.AppKey("state", State)


def json_response(body, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        status=status,
        content_type="application/json",
    )


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Translate errors into llama.cpp-style JSON once; the server keeps serving."""
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


async def _engine_ctx(app: web.Application):
    """Read cache files (a bad one stops the start), load the model off the event loop, then run
    the engine loop until shutdown, when learned structures are saved one last time."""
    state = app[STATE]
    config = state.config
    loop = asyncio.get_running_loop()
    chain = build_chain(config.spec)
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
            return
        state.runner = Runner(engine, chain, config.engine.n_parallel, config.cache_prompt, stats, persistence)
        log.info("model loaded: %s, n_ctx %d, %d slots, speculation: %s",
                 engine.description, engine.n_ctx, config.engine.n_parallel, ",".join(chain.types) or "none")
        state.loaded.set()
        await state.runner.run()

    task = asyncio.create_task(load_and_run())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    if state.runner is not None:
        await state.runner.on_engine_thread(persistence.save)
        state.runner.close()
        state.runner.engine.close()


def create_app(config: ServerConfig) -> web.Application:
    from slotserver.oai import setup_oai_routes
    from slotserver.routes import setup_routes

    app = web.Application(middlewares=[error_middleware], client_max_size=64 * 1024 * 1024)
    app[STATE] = State(config)
    setup_routes(app)
    setup_oai_routes(app)
    if config.metrics:
        from slotserver.metrics import setup_metrics

        setup_metrics(app)
    app.cleanup_ctx.append(_engine_ctx)
    return app
