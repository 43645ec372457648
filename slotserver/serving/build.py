"""A config becomes a running service, and back: the assembly of everything the engine loop needs.

``Build.open(config)`` makes the draft chain, the statistics and the persistence of learned drafter
state, reads the cache files (a bad one raises ``StartupFileError``: the server does not start) and
creates the engine thread (``runner.engine_thread``). ``load`` then does, in this order, on that
thread: the KV layout (``kv_layout.resolve``), the target engine, the verify-cost profile (when
anything drafts) and the draft model (when configured); then the learning scopes, the runner and the
completion service. A failed measurement warns and serves without it (no profile: drafts are
verified whole; no draft costs: the draft model drafts every step), as llama.cpp does; a failed
load raises (the caller reports it). ``close`` undoes it: the runner, the engines, the engine thread,
then the persistence's writer thread; with ``stuck`` it leaves the engine thread and its model behind
instead (``api/shutdown.py``: a stuck C call must not hold the exit).

Owner: the HTTP layer's engine context (``api/app.py``) holds one ``Build`` per server, on the event
loop; the objects it makes belong to the engine thread once the runner runs (``runner.py``).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable

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


class Build:
    """One server's assembly; see the module docstring for the order of work and who owns what."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.chain = DraftChain.from_spec(config.spec)
        self.stats = ServerStats()
        self.persistence = Persistence(config.spec, self.chain, self.stats,
                                       lambda: vocab_info(config.engine.model_path))
        # Loading, calibrating and serving all decode on this one thread (runner.engine_thread).
        self.thread: ThreadPoolExecutor | None = None
        self.runner: Runner | None = None  # set once ``load`` succeeded
        self.service: CompletionService | None = None

    @classmethod
    async def open(cls, config: ServerConfig) -> Build:
        """The assembly up to the model: learned state read (``StartupFileError`` stops the start),
        the engine thread created."""
        build = cls(config)
        await asyncio.get_running_loop().run_in_executor(None, build.persistence.load)
        build.thread = engine_thread()
        return build

    async def load(self, on_fatal: Callable[[str], None]) -> Runner:
        """Load the model(s) on the engine thread and assemble the runner and the service; raises if
        loading fails. ``on_fatal(reason)``: called by the runner if its engine loop dies."""
        config, chain, thread = self.config, self.chain, self.thread
        loop = asyncio.get_running_loop()
        engine_config = await loop.run_in_executor(thread, partial(
            kv_layout.resolve, config.engine, bool(chain.types), profile_dir(config.spec),
            force=config.spec.recalibrate))
        engine = await loop.run_in_executor(thread, Engine, engine_config)
        if chain.types:
            chain.profile = await loop.run_in_executor(thread, load_profile, config, engine)
        model_drafter = None
        if config.spec.uses_draft_model:
            model_drafter = await loop.run_in_executor(thread, load_draft_model, config, engine, chain.profile)
        chains = LearningScopes(chain, scope=config.spec_learning, spec=config.spec)
        runner = Runner(engine, chain, n_parallel=config.engine.n_parallel, cache_prompt=config.cache_prompt,
                        stats=self.stats, persistence=self.persistence, on_fatal=on_fatal, limits=config.limits,
                        chains=chains, context_shift=config.context_shift, model_drafter=model_drafter,
                        executor=thread)
        self.runner, self.service = runner, CompletionService(config, runner)
        log.info("model loaded: %s, n_ctx %d (%d per slot, KV layout %s), %d slots, speculation: %s",
                 engine.description, engine.n_ctx, engine.n_ctx_slot,
                 engine.config.layout, config.engine.n_parallel,
                 ",".join(chain.types) or "none")
        return runner

    def close(self, stuck: str = "") -> None:
        """Close what ``load`` made and join the engine thread; with ``stuck`` (why the engine thread
        does not answer) leave that thread and its model behind instead (the CLI exits without
        waiting for it). Then stop the persistence's writer once the writes under way are done."""
        if stuck:
            log.error("leaving the engine thread and its model behind (%s)", stuck)
            self.thread.shutdown(wait=False, cancel_futures=True)  # cli.main exits without waiting for it
        else:
            runner = self.runner
            if runner is not None:
                runner.close()
                runner.engine.close()
                if runner.model_drafter is not None:
                    runner.model_drafter.engine.close()
            self.thread.shutdown(wait=True)  # the runner's close did if it ran; a failed load left it to us
        self.persistence.close()  # stops the writer thread once the writes already under way are done


def load_draft_model(config: ServerConfig, target: Engine, profile: VerifyProfile | None) -> ModelDrafter:
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


def load_profile(config: ServerConfig, engine: Engine) -> VerifyProfile | None:
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
