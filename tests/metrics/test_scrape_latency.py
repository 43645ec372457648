"""A scrape never waits for the engine thread: /metrics latency measured while both slots generate.

Run with ``-s`` to see the figures (docs/metrics.md quotes them):

    python -m pytest tests/metrics/test_scrape_latency.py -q -s
"""

from __future__ import annotations

import asyncio
import statistics
import time


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def test_scrape_latency_during_generation(metrics_server):
    srv = metrics_server
    st = srv.state.runner.stats
    calls0, decode0 = st.n_decode_calls, st.t_decode_s
    generation = asyncio.gather(srv.repeat(n_predict=128, seed=11), srv.repeat(n_predict=128, seed=12))
    latencies: list[float] = []
    sizes: list[int] = []
    while not generation.done():
        t0 = time.perf_counter()
        async with srv.http.get(srv.url + "/metrics") as resp:
            sizes.append(len(await resp.read()))
        latencies.append(time.perf_counter() - t0)
        await asyncio.sleep(0.02)  # ~40 scrapes/s, far above any real scrape rate
    await generation
    n_decode = st.n_decode_calls - calls0
    mean_decode = (st.t_decode_s - decode0) / max(n_decode, 1)
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(f"\n/metrics during generation: {len(latencies)} scrapes of ~{statistics.mean(sizes) / 1024:.0f} KiB, "
          f"p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, max {max(latencies) * 1e3:.1f} ms; "
          f"meanwhile {n_decode} llama_decode calls of {mean_decode * 1e3:.0f} ms on average")
    assert len(latencies) >= 10
    assert p99 < 0.2, f"p99 scrape latency {p99 * 1e3:.0f} ms"
    # A scrape that waited for the engine would take at least a decode step at the median.
    assert p50 < max(mean_decode, 0.02)
