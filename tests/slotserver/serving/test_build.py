"""``serving/build.py`` on the real SmolLM2: a config becomes a runner and a service on the engine
thread, and ``close`` undoes it; a load that fails raises (the HTTP layer reports it) and still closes."""

from __future__ import annotations

import threading

import pytest

from slotserver.flags.command_line import build_parser, config_from_args
from slotserver.serving.build import Build
from tests.integration.fim_model import SMOLLM2


def config(tmp_path, *flags: str):
    argv = ["-m", SMOLLM2, "-c", "256", "-np", "1", "--spec-type", "none", "--spec-profile-dir", str(tmp_path),
            *flags]
    return config_from_args(build_parser().parse_args(argv))


async def test_a_config_becomes_a_runner_on_the_engine_thread_and_close_undoes_it(tmp_path):
    build = await Build.open(config(tmp_path))
    fatal: list[str] = []
    runner = await build.load(fatal.append)
    assert build.runner is runner and build.service is not None and build.service.runner is runner
    assert runner.engine.n_ctx == 256 and len(runner.slots) == 1 and runner.chain is build.chain
    assert runner.persistence is build.persistence and runner.stats is build.stats
    assert runner._executor is build.thread  # loading and serving decode on the one engine thread
    assert await runner.on_engine_thread(lambda: threading.current_thread().name.startswith("engine"))
    build.close()
    assert build.thread._shutdown and fatal == []


async def test_a_failed_load_raises_and_close_still_joins_the_engine_thread(tmp_path):
    build = await Build.open(config(tmp_path, "-m", str(tmp_path / "missing.gguf")))
    with pytest.raises(RuntimeError, match="could not load model"):
        await build.load(lambda reason: None)
    assert build.runner is None and build.service is None
    build.close()
    assert build.thread._shutdown
