"""The KV layout timing with the real model: both layouts are opened and every step timed, and the
verdict opens an engine (the rule itself is tests/slotserver/engine/test_kv_layout.py)."""

from __future__ import annotations

from slotserver.engine.engine import Engine, EngineConfig
from slotserver.engine.kv_layout import patterns, resolve, time_steps
from slotserver.engine.model_files import default_model_path


def test_both_layouts_time_every_step_and_the_verdict_serves(tmp_path):
    config = EngineConfig(default_model_path(), n_ctx=1024, n_parallel=2, n_batch=256, kv_streams=None)
    t_streams, t_one = time_steps(config, depth=64, repeats=1)
    steps = patterns(2, 256)
    assert len(t_streams) == len(t_one) == len(steps)
    assert all(t > 0 for t in t_streams + t_one)
    # the longest lone verify costs more than a lone plain step in either layout
    assert t_streams[-1] > t_streams[steps.index((1,))] and t_one[-1] > t_one[steps.index((1,))]
    decided = resolve(config, True, tmp_path)
    assert decided.kv_streams in (True, False) and list(tmp_path.glob("kv-layout-*.json"))
    engine = Engine(decided)
    try:
        assert engine.n_ctx_slot == 512 and engine.config.layout in ("streams", "one-cache")
    finally:
        engine.close()
