"""Start-up measurements sized to the context, the slot and the batch (issue 34): the verify-cost
profile's row counts and depths (calibrate.sizes), its cache key when cut short, and the KV layout
timing's steps and depth (kv_layout.sizes). No model is loaded; the measurements themselves run in
tests/integration/test_small_context_start.py."""

from __future__ import annotations

import pytest

from slotserver.engine import calibrate, kv_layout


@pytest.mark.parametrize("cap,cells", [(512, 2048), (2048, 8192), (32, 128), (32, 256), (512, 256), (8, 64),
                                       (512, 16), (1, 2), (4, 8)])
def test_profile_rows_and_depths_fit_the_batch_and_the_cells(cap, cells):
    rows, depth, deep = calibrate.sizes(cap, cells)
    assert rows[0] == 1 and list(rows) == sorted(set(rows)) and rows[-1] <= cap
    assert depth >= 0 and depth + rows[-1] + 1 <= cells  # the longest measured decode fits behind the depth
    assert deep + 8 + 1 <= cells or deep <= depth  # the depth term is measured only where it fits


def test_a_full_size_profile_is_measured_as_before_and_keeps_its_key():
    assert calibrate.sizes(512, 2048) == (calibrate.ROWS, calibrate.DEPTH, calibrate.DEEP)
    assert calibrate.sizing_key(512, 2048) is None and calibrate.sizing_key(2048, 131072) is None


def test_a_small_context_measures_every_row_count_at_a_shallower_depth():
    # -c 256 -np 1: 256 cells; at 24272d3 the profile measured one row count (1), so every verified
    # row looked as dear as a whole step
    rows, depth, deep = calibrate.sizes(512, 256)
    assert rows == calibrate.ROWS and 0 < depth < calibrate.DEPTH and deep > depth
    rows, depth, _ = calibrate.sizes(32, 128)  # -c 512 -np 4 -b 32 in one cache: 128 cells per slot
    assert rows == tuple(range(1, 33)) and depth == 128 - 32 - 2


def test_a_profile_cut_short_has_its_own_cache_key():
    small, other = calibrate.sizing_key(32, 128), calibrate.sizing_key(512, 256)
    assert small is not None and other is not None and small != other


@pytest.mark.parametrize("n_slots,cap", [(4, 16), (4, 8), (2, 4), (8, 8), (8, 12)])
def test_kv_layout_steps_fit_the_batch(n_slots, cap):
    steps = kv_layout.patterns(n_slots, cap)
    assert len(steps) == 7  # the cache format: one time per step
    assert all(sum(rows) <= cap for rows in steps)
    assert steps[0] == (1,) * n_slots and all(len(rows) in (1, n_slots) for rows in steps)


def test_kv_layout_steps_are_unchanged_where_they_fit():
    assert kv_layout.patterns(4, 512) == [(1, 1, 1, 1), (9, 1, 1, 1), (17, 1, 1, 1), (9, 5, 1, 1), (1,), (9,), (65,)]
    assert kv_layout.patterns(4, 16)[2] == (13, 1, 1, 1)  # a draft cut to the batch, plain rows kept


def test_kv_layout_depth_fits_the_smaller_layouts_cells():
    # -c 512 -np 4 -b 32: llama.cpp gives each stream 256 cells, one cache 128 a slot; at 24272d3 the
    # depth came from the streams' 256 and the one-cache prefill ran out of cells
    depth, steps = kv_layout.sizes(4, 32, 128)
    longest = max(max(rows) for rows in steps)
    assert longest == 32 and 0 < depth and depth + longest <= 128
    assert kv_layout.sizes(4, 512, 2048)[0] == kv_layout.DEPTH_MAX


def test_kv_layout_is_not_timed_where_nothing_fits():
    assert kv_layout.sizes(4, 2, 2048) is None  # -ub 2 at 4 slots: not even a plain step of every slot
    assert kv_layout.sizes(2, 512, 16) is None  # no room for the longest step


def test_a_failed_timing_keeps_streams_and_is_not_cached(monkeypatch, tmp_path, caplog):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    config = kv_layout.EngineConfig(str(model), n_ctx=512, n_parallel=4, n_batch=32, kv_streams=None)
    calls = []

    def fails(c, *a, **k):
        calls.append(c)
        raise RuntimeError("llama_decode failed with code 1")

    monkeypatch.setattr(kv_layout, "time_steps", fails)
    assert kv_layout.resolve(config, True, tmp_path).kv_streams is True
    assert "timing the KV layouts failed" in caplog.text and "llama_decode failed" in caplog.text
    assert not list(tmp_path.glob("kv-layout-*.json"))
    assert kv_layout.resolve(config, True, tmp_path).kv_streams is True and len(calls) == 2  # timed again
