"""Which KV layout serves several slots faster here: a KV stream per slot, or one cache for all.

Without ``-kvu`` each slot may hold ``n_ctx / np`` tokens either way (the runner holds it to its
share); the layouts differ in cost only, and which is cheaper depends on the model:

- **A stream per slot** (llama-server's layout): a slot's attention spans only its own cells, but
  llama.cpp decodes a batch in one graph only where the slots bring the same number of rows. A step
  that verifies one slot's draft beside the others' single rows runs as two graphs or more, each
  reading all the weights again (``selection.stream_ubatches``).
- **One cache**: every step is one graph, but every row's attention walks every slot's cells
  (masked), those of idle slots that keep a cached prompt too.

Measured side by side, a model whose steps are mostly weight reads and the output projection
(Gemma 3 270M) served 4 streams faster in one cache, and one whose attention is a larger share
(SmolLM2-135M) faster with streams (figures: docs/measurements.md). So with
``--kv-streams auto`` (the default) a server that speculates on several slots times both layouts at
start-up, on the steps speculation makes (``patterns``), and keeps streams unless one cache is at
least ``MARGIN`` faster (``ratio``). The answer is cached beside the verify-cost profile. The timed
steps are sized to what the batch and the slot's cells hold (``sizes``); a timing that cannot fit
or fails anyway only logs a warning and keeps streams, uncached (a start never fails for it). Without
speculation every slot brings one row per step, one graph either way: streams, as llama-server.

Engine thread only (it decodes).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from slotserver.engine.batch import BatchEntry, BatchPlan
from slotserver.engine.calibrate import cache_path, config_key, filler, load_json, save_json
from slotserver.engine.engine import Engine, EngineConfig

log = logging.getLogger(__name__)

LAYOUT_FORMAT = 1  # bump when what is measured changes
DEPTH_SHARE = 0.75  # every slot holds this share of its cells before the timed steps (idle slots
DEPTH_MAX = 1536  # keep their prompts cached, and one cache's rows walk all of those cells)
LONG = 65  # rows of the longest verify timed: a 64-token draft
REPEATS = 4  # timed runs per step and layout after a warm-up; the fastest counts
MARGIN = 0.10  # one cache must be this much faster (``ratio``) to be chosen over llama-server's layout


def patterns(n_slots: int, n_batch: int) -> list[tuple[int, ...]]:
    """Rows per slot of the steps timed: every slot plain, one slot verifying a draft of 8 or 16
    beside plain rows, two drafts of different lengths, and one slot alone (the others idle, their
    cells cached) plain, with a short draft and with the longest. One cache makes the last three
    slower and the first four faster, by how much depends on the model (docs/measurements.md);
    ``prefer_streams`` weighs them.

    ``n_batch`` is the most rows one timed decode may hold (``row_cap``): a draft is cut so that
    its step fits (``-b 16`` at 4 slots verifies at most 13 rows beside three plain ones), the
    way the runner cuts drafts to the batch."""
    rest = (1,) * (n_slots - 1)
    two = (9, 5) + (1,) * (n_slots - 2)
    steps = [(1,) * n_slots, (9,) + rest, (17,) + rest, two, (1,), (9,), (LONG,)]
    return [fit(rows, n_batch) for rows in steps]


def fit(rows: tuple[int, ...], cap: int) -> tuple[int, ...]:
    """``rows`` with the drafts (rows above one) cut, first slot first, until they sum to at most
    ``cap``; plain rows are never cut (``sizes`` times nothing where they do not fit)."""
    out = list(rows)
    for i, r in enumerate(out):
        over = sum(out) - cap
        if over <= 0:
            break
        out[i] = max(1, r - over)
    return tuple(out)


def row_cap(config: EngineConfig) -> int:
    """Most rows in one timed decode: the batch, and one micro-batch (one graph: what is timed)."""
    return min(config.n_batch, config.n_ubatch)


def sizes(n_slots: int, cap: int, slot_cells: int) -> tuple[int, list[tuple[int, ...]]] | None:
    """(cached tokens per slot, the ``patterns``) of a timing that fits: every step at most ``cap``
    rows, and every slot's cached tokens plus its rows within ``slot_cells`` (the fewer of the two
    layouts': llama.cpp gives a stream at least 256 cells, one cache ``n_ctx / np``). None where
    no timing fits (a plain step of every slot is more than ``cap`` rows, or a slot has no room
    for the longest step): the caller then keeps llama-server's layout."""
    steps = patterns(n_slots, cap)
    longest = max(max(rows) for rows in steps)
    if n_slots > cap or slot_cells < longest + 1:
        return None
    depth = min(DEPTH_MAX, int(DEPTH_SHARE * slot_cells), slot_cells - longest - 1)
    return max(0, depth), steps


def time_steps(config: EngineConfig, depth: int | None = None, repeats: int = REPEATS) -> tuple[list[float], list[float]]:
    """Seconds of each of the ``patterns`` steps with a KV stream per slot and in one cache, the
    fastest of ``repeats`` runs, every slot holding ``depth`` cached tokens (default: ``DEPTH_SHARE``
    of its cells, at most ``DEPTH_MAX``; either way no more than ``sizes`` allows). Both engines
    stay loaded and take turns run by run, so a change in the machine's speed meets both alike
    (timed one after the other, a model's verdict flipped between two measurements). Raises
    ``ValueError`` where no timing fits (``sizes``)."""
    engines = []
    try:
        for streams in (True, False):
            engines.append(Engine(replace(config, kv_streams=streams)))
        n = config.n_parallel
        cap = row_cap(config)
        sized = sizes(n, cap, min(engine.n_ctx_slot for engine in engines))
        if sized is None:
            raise ValueError(f"no timed step fits {n} slots of {min(e.n_ctx_slot for e in engines)} cells "
                             f"in batches of {cap} rows")
        fitting, steps = sized
        depth = fitting if depth is None else max(0, min(depth, fitting))
        token = filler(engines[0])
        chunk = max(1, cap // n)
        for engine in engines:
            for p0 in range(0, depth, chunk):
                m = min(chunk, depth - p0)
                engine.decode(BatchPlan([BatchEntry(s, p0, [token] * m, False) for s in range(n)]))
        out: tuple[list[float], list[float]] = ([], [])
        for rows in steps:
            plan = BatchPlan([BatchEntry(s, depth, [token] * r, True) for s, r in enumerate(rows)])
            times: tuple[list[float], list[float]] = ([], [])
            for _ in range(repeats + 1):
                for engine, t in zip(engines, times):
                    t0 = time.perf_counter()
                    engine.decode(plan)
                    t.append(time.perf_counter() - t0)
                    for s in range(len(rows)):
                        engine.remove(s, depth)
            for o, t in zip(out, times):
                o.append(min(t[1:]))
        return out
    finally:
        for engine in engines:
            engine.close()


def ratio(t_streams: Sequence[float], t_one: Sequence[float]) -> float:
    """Geometric mean over the timed steps of one cache's time over the streams' time: every kind of
    step counts alike, however long it is (a sum would let the 65-row verify decide alone)."""
    return math.exp(sum(math.log(o / s) for s, o in zip(t_streams, t_one)) / len(t_streams))


def prefer_streams(t_streams: Sequence[float], t_one: Sequence[float]) -> bool:
    """Streams unless one cache makes the timed steps at least ``MARGIN`` faster (``ratio``)."""
    return ratio(t_streams, t_one) > 1.0 - MARGIN


def resolve(config: EngineConfig, speculative: bool, directory: Path | None, *, force: bool = False) -> EngineConfig:
    """``config`` with its layout decided (``kv_streams`` not None), measured and cached if need be."""
    if config.kv_streams is not None:
        return config
    if config.kv_unified or config.n_parallel == 1 or not speculative:
        return replace(config, kv_streams=True)  # one graph per step either way (or -kvu: one cache)
    key = {**config_key(config, config.threads), "layout_format": LAYOUT_FORMAT, "n_parallel": config.n_parallel,
           "n_ctx": config.n_ctx}
    path = cache_path(directory, key, "kv-layout") if directory is not None else None
    cached = None
    if path is not None and not force:
        cached = load_json(path, key, lambda data: (describe(config, data["t_streams_s"], data["t_one_s"]),
                                                    prefer_streams(data["t_streams_s"], data["t_one_s"])))
    if cached is not None:
        log.info("KV layout (cached %s): %s", path, cached[0])
        return replace(config, kv_streams=cached[1])
    log.info("timing %d-slot steps with a KV stream per slot and in one cache (tens of seconds on a small CPU, cached after)",
             config.n_parallel)
    try:
        t_streams, t_one = time_steps(config)
    except Exception as exc:  # a measurement never stops the start; nothing is cached, the next start times again
        log.warning("timing the KV layouts failed (%s: %s); keeping a KV stream per slot, llama-server's layout",
                    type(exc).__name__, exc)
        return replace(config, kv_streams=True)
    log.info("KV layout (measured): %s", describe(config, t_streams, t_one))
    if path is not None:
        save_json(path, {"key": key, "t_streams_s": t_streams, "t_one_s": t_one})
    return replace(config, kv_streams=prefer_streams(t_streams, t_one))


def describe(config: EngineConfig, t_streams: Sequence[float], t_one: Sequence[float]) -> str:
    chosen = "a KV stream per slot" if prefer_streams(t_streams, t_one) else "one KV cache"
    steps = ", ".join(f"{'+'.join(map(str, rows))} {s * 1e3:.1f}/{o * 1e3:.1f}"
                      for rows, s, o in zip(patterns(config.n_parallel, row_cap(config)), t_streams, t_one))
    return (f"{chosen}: one cache takes {ratio(t_streams, t_one):.2f}x the time of streams "
            f"(rows per slot: ms with streams/in one cache: {steps})")
