"""The aiohttp application: factory, the error middleware, and the engine's lifecycle.

``create_app(config)`` builds the app; its cleanup context reads the cache files (a bad one stops
the start), loads the model off the event loop, runs the engine loop until shutdown, then saves
learned structures one last time (unless the engine is stuck in one step: its thread is then left
behind, see ``api/shutdown.py``). If loading fails or the engine loop dies, ``on_fatal`` is told
why (the CLI then exits non-zero) and ``/health`` answers 503: never a live port with a dead engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial
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
from slotserver.engine import kv_layout
from slotserver.engine.calibrate import load_or_measure, profile_dir
from slotserver.engine.engine import Engine, EngineConfig
from slotserver.engine.fingerprint import vocab_info
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.serving.runner import Runner, engine_thread
from slotserver.serving.service import CompletionService
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.draft_costs import PAY_MARGIN
from slotserver.speculation.draft_model import ModelDrafter, calibrate
from slotserver.speculation.learning_scopes import LearningScopes
from slotserver.speculation.persistence import Persistence
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)

# Context size to size the body limit by when -c 0 asks for the model's (unknown before loading).
N_CTX_UNKNOWN = 131072


def _engine_ctx(on_fatal: Callable[[str], None]):
    async def engine_ctx(app: web.Application):
        state = app[STATE]
        config = state.config
        loop = asyncio.get_running_loop()
        chain = DraftChain.from_spec(config.spec)
        stats = ServerStats()
        persistence = Persistence(config.spec, chain, stats, lambda: vocab_info(config.engine.model_path))
        await loop.run_in_executor(None, persistence.load)  # StartupFileError: the server does not start

        # Loading, calibrating and serving all decode on this one thread (runner.engine_thread).
        thread = engine_thread()

        async def load_and_run() -> None:
            try:
                engine_config = await loop.run_in_executor(thread, partial(
                    kv_layout.resolve, config.engine, bool(chain.types), profile_dir(config.spec),
                    force=config.spec.recalibrate))
                engine = await loop.run_in_executor(thread, Engine, engine_config)
                if chain.types:
                    chain.profile = await loop.run_in_executor(thread, _load_profile, config, engine)
                model_drafter = None
                if config.spec.uses_draft_model:
                    model_drafter = await loop.run_in_executor(thread, _load_draft_model, config, engine,
                                                               chain.profile)
            except Exception as exc:
                state.load_error = f"could not load the model: {exc}"
                log.error(state.load_error)
                state.loaded.set()
                on_fatal(state.load_error)
                return
            chains = LearningScopes(chain, scope=config.spec_learning, spec=config.spec)
            runner = Runner(engine, chain, n_parallel=config.engine.n_parallel, cache_prompt=config.cache_prompt,
                            stats=stats, persistence=persistence, on_fatal=on_fatal, limits=config.limits,
                            chains=chains, context_shift=config.context_shift, model_drafter=model_drafter,
                            executor=thread)
            state.runner, state.service = runner, CompletionService(config, runner)
            log.info("model loaded: %s, n_ctx %d (%d per slot, KV layout %s), %d slots, speculation: %s",
                     engine.description, engine.n_ctx, engine.n_ctx_slot,
                     engine.config.layout, config.engine.n_parallel,
                     ",".join(chain.types) or "none")
            state.loaded.set()
            await runner.run()

        task = asyncio.create_task(load_and_run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        runner = state.runner
        # The last save waits for a write in flight, then writes; never behind a stuck step (shutdown.py).
        if runner is not None and (state.engine_stuck or not await save_learned(runner, HARD_EXIT_GRACE_S)):
            state.engine_stuck = state.engine_stuck or runner.watchdog.stall() or "the engine thread did not answer"
            log.error("leaving the engine thread and its model behind (%s)", state.engine_stuck)
            thread.shutdown(wait=False, cancel_futures=True)  # cli.main exits without waiting for it
        else:
            if runner is not None:
                runner.close()
                runner.engine.close()
                if runner.model_drafter is not None:
                    runner.model_drafter.engine.close()
            thread.shutdown(wait=True)  # the runner's close did if it ran; a failed load left it to us
        persistence.close()  # stops the writer thread once the writes already under way are done

    return engine_ctx


def _load_draft_model(config: ServerConfig, target: Engine, profile: VerifyProfile | None) -> ModelDrafter:
    """The draft model's own context (one sequence per slot, the target's batch sizes), its vocabulary
    checked against the target's, and its cost measured against the target's (docs/drafters.md).
    Without a profile, or if measuring the cost fails, it drafts without costs, as llama.cpp's draft
    model does (every step, ``--spec-draft-when always``): a warning, never a failed start."""
    dc = config.spec.draft
    t = config.engine
    engine = Engine(EngineConfig(model_path=dc.path, n_ctx=dc.n_ctx or target.n_ctx, n_parallel=t.n_parallel,
                                 n_batch=t.n_batch, n_ubatch=t.n_ubatch, n_threads=dc.n_threads or target.n_threads,
                                 kv_unified=True))
    costs = None
    try:
        if profile is None:
            log.warning("draft model costs: no verify-cost profile to measure them against; the draft model "
                        "drafts every step, as llama.cpp's does")
        else:
            try:
                costs = calibrate(profile, engine)
            except Exception as exc:  # a measurement never stops the start; nothing of it is cached
                engine.remove(-1, 0)  # whatever the failed measurement left in the draft context
                log.warning("measuring the draft model's costs failed (%s: %s); the draft model drafts every "
                            "step, as llama.cpp's does", type(exc).__name__, exc)
        drafter = ModelDrafter(engine, target.vocab, dc, costs)
    except Exception:
        engine.close()
        raise
    if drafter.mismatch:
        log.info("draft model %s: vocabulary differs from the target's (%s): drafts are bridged through text",
                 engine.description, drafter.mismatch)
    else:
        log.info("draft model %s: same vocabulary as the target: token ids are shared", engine.description)
    if costs is None:
        return drafter
    never = "" if dc.when == "always" or drafter.can_pay(1) else \
        ": never here, so the draft model is not run (--spec-draft-when always runs it)"
    log.info("draft model costs: target step %.1f ms (+%.1f ms per verified row), draft step %.1f ms: c = %.2f; "
             "a draft token pays above acceptance %.2f (1 slot, with a 10%% margin)%s", costs.t_target_s * 1e3,
             costs.t_row_s * 1e3, costs.t_draft_s * 1e3, costs.c, costs.threshold(1, 1) * PAY_MARGIN, never)
    return drafter


def _load_profile(config: ServerConfig, engine: Engine) -> VerifyProfile | None:
    """The verify-cost profile that decides how much of each draft is verified (docs/drafters.md).
    None if measuring it fails (a warning; nothing cached, the next start measures again): without a
    profile every draft is verified whole and the first drafter with a draft wins, llama.cpp's plain
    drafting (``chain.py``, ``drafting.py``), rather than a start that fails."""
    try:
        profile, source = load_or_measure(engine, profile_dir(config.spec), force=config.spec.recalibrate)
    except Exception as exc:
        engine.remove(-1, 0)  # whatever the failed measurement left in the cache: serving starts empty
        log.warning("measuring the verify-cost profile failed (%s: %s); drafts are verified whole, as llama.cpp "
                    "does", type(exc).__name__, exc)
        return None
    rows, tps = profile.ceiling()
    log.info("verify-cost profile (%s): one row %.1f ms, %d rows %.1f ms; a perfect drafter reaches %.0f tokens/s "
             "at %d rows per step", source, profile.t_rows_s[0] * 1e3, profile.rows[-1], profile.t_rows_s[-1] * 1e3,
             tps, rows)
    return profile


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
