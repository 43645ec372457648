"""Choosing the KV layout (kv_layout.py): the rule over timed steps, when nothing is timed, and the
cached verdict. No model is loaded here; the timing itself runs in tests/integration/test_context.py
(its `shifting` server decides at start-up) and tests/integration/test_kv_layout_timing.py."""

from __future__ import annotations

import json

import pytest

from slotserver.engine import kv_layout
from slotserver.engine.calibrate import cache_path, config_key
from slotserver.engine.cpu_kernels import use_extra_bufts
from slotserver.engine.engine import EngineConfig
from slotserver.engine.kv_layout import patterns, prefer_streams, ratio, resolve

# per-pattern milliseconds measured on this machine (docs/operations.md): Gemma 3 gains on the
# drafting steps of several slots, SmolLM2 does not, and both lose a little on a slot alone
GEMMA = ([35.5, 81.6, 96.9, 113.8, 11.6, 61.3, 240.3], [35.7, 60.5, 82.4, 66.6, 11.9, 61.7, 248.9])
SMOLLM2 = ([32.6, 81.4, 117.5, 112.9, 9.7, 55.4, 277.1], [35.5, 76.8, 119.5, 95.6, 10.9, 60.2, 259.2])


def test_patterns_time_plain_drafting_and_lone_slots():
    steps = patterns(4, 2048)
    assert steps[0] == (1, 1, 1, 1) and (9, 1, 1, 1) in steps and (9, 5, 1, 1) in steps
    assert (1,) in steps and (65,) in steps
    assert patterns(2, 32)[-1] == (32,)  # the long verify fits the batch


def test_the_measured_models_get_the_layout_their_benchmarks_favoured():
    assert ratio(*GEMMA) == pytest.approx(0.88, abs=0.01) and not prefer_streams(*GEMMA)
    assert ratio(*SMOLLM2) == pytest.approx(1.00, abs=0.01) and prefer_streams(*SMOLLM2)


def test_every_kind_of_step_counts_alike_not_the_longest():
    # one cache halves the short multi-slot step but is 20% slower on the long lone verify: a sum
    # would keep streams (the 300 ms step decides), the geometric mean takes one cache
    streams, one = [20.0, 20.0, 300.0], [10.0, 10.0, 360.0]
    assert sum(one) > sum(streams) and not prefer_streams(streams, one)


def test_a_small_gain_keeps_llama_servers_layout():
    assert prefer_streams([10.0] * 7, [9.2] * 7)
    assert not prefer_streams([10.0] * 7, [8.8] * 7)


def must_not_time(*_a, **_k):
    raise AssertionError("nothing should be timed")


@pytest.mark.parametrize("config,streams", [
    (EngineConfig("m.gguf", n_parallel=4, kv_streams=False), False),  # --kv-streams off
    (EngineConfig("m.gguf", n_parallel=4, kv_streams=True), True),  # --kv-streams on
    (EngineConfig("m.gguf", n_parallel=4, kv_unified=True, kv_streams=None), True),  # -kvu: one cache anyway
    (EngineConfig("m.gguf", n_parallel=1, kv_streams=None), True),  # one slot: one graph per step
])
def test_nothing_is_timed_where_the_layout_is_given_or_cannot_matter(monkeypatch, config, streams):
    monkeypatch.setattr(kv_layout, "time_steps", must_not_time)
    out = resolve(config, True, None)
    assert out.kv_streams is streams or (config.kv_unified and not out.streams)


def test_without_speculation_the_layout_is_llama_servers(monkeypatch):
    monkeypatch.setattr(kv_layout, "time_steps", must_not_time)
    assert resolve(EngineConfig("m.gguf", n_parallel=4, kv_streams=None), False, None).kv_streams is True


def test_the_verdict_is_cached_per_model_and_settings(monkeypatch, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    config = EngineConfig(str(model), n_ctx=8192, n_parallel=4, kv_streams=None)
    calls = []

    def timed(c, *a, **k):
        calls.append(c)
        return GEMMA

    monkeypatch.setattr(kv_layout, "time_steps", timed)
    assert resolve(config, True, tmp_path).kv_streams is False and len(calls) == 1
    assert resolve(config, True, tmp_path).kv_streams is False and len(calls) == 1  # read back, not timed
    assert resolve(config, True, tmp_path, force=True).kv_streams is False and len(calls) == 2  # --spec-recalibrate
    other = EngineConfig(str(model), n_ctx=8192, n_parallel=2, kv_streams=None)
    resolve(other, True, tmp_path)
    assert len(calls) == 3  # another slot count is another verdict


def test_an_unreadable_verdict_is_timed_again(monkeypatch, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    config = EngineConfig(str(model), n_ctx=8192, n_parallel=4, kv_streams=None)
    monkeypatch.setattr(kv_layout, "time_steps", lambda *a, **k: SMOLLM2)
    resolve(config, True, tmp_path)
    [path] = tmp_path.glob("kv-layout-*.json")
    data = json.loads(path.read_text())
    assert data["t_streams_s"] == SMOLLM2[0]
    path.write_text("{not json")
    assert resolve(config, True, tmp_path).kv_streams is True
    assert json.loads(path.read_text())["t_one_s"] == SMOLLM2[1]


def test_the_key_names_the_model_file(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    key = config_key(EngineConfig(str(model)), 2)
    assert key["model"] == str(model.resolve()) and key["n_threads"] == 2
    assert cache_path(tmp_path, key, "kv-layout").name.startswith("kv-layout-")


def test_the_key_names_the_weight_layout(tmp_path, monkeypatch):
    """A profile or verdict measured with llama.cpp's weight repacking is not reused without it
    (``SLOTSERVER_EXTRA_BUFTS``): the kernels, and so the costs, differ."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    keys = {}
    for forced in ("0", "1"):
        monkeypatch.setenv("SLOTSERVER_EXTRA_BUFTS", forced)
        use_extra_bufts.cache_clear()
        keys[forced] = config_key(EngineConfig(str(model)), 2)
    use_extra_bufts.cache_clear()
    assert keys["0"]["extra_bufts"] is False and keys["1"]["extra_bufts"] is True
    assert cache_path(tmp_path, keys["0"]).name != cache_path(tmp_path, keys["1"]).name
