"""Micro-benchmark of the suffix drafter on a 1M-token global structure (not a test).

Builds the global structure from the first ``--global-tokens`` of ``synthetic_stream`` (cut into
requests of 128..1024 tokens) in one numpy sort, then measures:

- update: adding further requests one by one at that size, without eviction and with a budget
  that forces FIFO eviction (µs per added token, mean and the slowest request);
- begin: indexing a prompt (µs per token);
- draft: ``draft()`` calls replaying the rest of the stream as generation, as benchmarks/drafters.py
  does (the local index is updated inside the call), p50/p99 in µs;
- memory: the store's estimate and what tracemalloc sees, per stored token;
- save and load of the store (``ngram/suffixfile.py``): seconds and file size.

Targets (issue 13): draft p99 <= 1 ms, update <= 50 µs per token.

    python -m benchmarks.suffix [--global-tokens 1000000] [--steps 2000] [--prompt 4096]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import tracemalloc

from benchmarks.drafters import synthetic_stream
from ngram.suffix import SuffixConfig, SuffixDrafter
from ngram.suffix_store import SuffixStore
from ngram.suffixfile import load_store, save_store

REQUEST_MIN, REQUEST_MAX = 128, 1024
N_ADDS = 200  # requests added one by one at full size
N_DRAFT = 16  # tokens asked per draft call, as benchmarks/drafters.py


def cut_requests(tokens: list[int], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out, pos = [], 0
    while pos < len(tokens):
        n = rng.randint(REQUEST_MIN, REQUEST_MAX)
        out.append(tokens[pos : pos + n])
        pos += n
    return out


def time_adds(store: SuffixStore, requests: list[list[int]]) -> tuple[float, float]:
    """Mean µs per added token and the slowest request's µs per token."""
    per_token, total_s, total_n = [], 0.0, 0
    for r in requests:
        t0 = time.perf_counter()
        store.add(r)
        dt = time.perf_counter() - t0
        per_token.append(1e6 * dt / len(r))
        total_s += dt
        total_n += len(r)
    return 1e6 * total_s / total_n, max(per_token)


def replay(drafter: SuffixDrafter, stream: list[int], prompt_len: int, steps: int) -> dict:
    history = stream[:prompt_len]
    t0 = time.perf_counter()
    drafter.begin(0, history)
    begin_us = 1e6 * (time.perf_counter() - t0) / max(1, prompt_len)
    times, drafted, accepted, tags = [], 0, 0, {"global": 0, "local": 0, "": 0}
    pos = prompt_len
    for _ in range(steps):
        if pos + 1 >= len(stream):
            break
        last = stream[pos]
        t0 = time.perf_counter()
        draft = drafter.draft(0, history, last, N_DRAFT)
        times.append(time.perf_counter() - t0)
        tags[drafter.draft_tag(0)] += 1
        n_acc = 0
        while n_acc < len(draft) and pos + 1 + n_acc < len(stream) and draft[n_acc] == stream[pos + 1 + n_acc]:
            n_acc += 1
        drafter.accept(0, n_acc, False)
        drafted += len(draft)
        accepted += n_acc
        history.extend(stream[pos : pos + 1 + n_acc])
        pos += 1 + n_acc
    times.sort()
    return {
        "p50_us": 1e6 * statistics.median(times),
        "p99_us": 1e6 * times[min(len(times) - 1, int(0.99 * len(times)))],
        "max_us": 1e6 * times[-1],
        "begin_us_per_token": begin_us,
        "calls": len(times),
        "drafted": drafted,
        "accepted": accepted,
        "tags": tags,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--global-tokens", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--prompt", type=int, default=4096)
    args = ap.parse_args()
    config = SuffixConfig()
    n_extra = N_ADDS * REQUEST_MAX
    stream = synthetic_stream(args.global_tokens + 2 * n_extra + args.prompt + 8 * args.steps)
    requests = cut_requests(stream[: args.global_tokens], seed=1)
    g = args.global_tokens
    adds = cut_requests(stream[g : g + n_extra], seed=2)[:N_ADDS]
    evicting_adds = cut_requests(stream[g + n_extra : g + 2 * n_extra], seed=3)[:N_ADDS]
    gen = stream[g + 2 * n_extra :]

    tracemalloc.start()
    t0 = time.perf_counter()
    store = SuffixStore.from_requests(config.span, 1 << 40, requests)
    build_s = time.perf_counter() - t0
    traced, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    n = store.n_tokens
    print(f"global structure: {n} tokens in {len(requests)} requests, span {config.span}")
    print(f"  one-sort build: {build_s:.2f} s ({1e6 * build_s / n:.2f} µs/token), peak {peak / 2**20:.0f} MiB")
    print(f"  memory: estimate {store.memory_bytes / n:.1f} B/token, traced {traced / n:.1f} B/token "
          f"({store.memory_bytes / 2**20:.1f} MiB)")

    mean, worst = time_adds(store, adds)
    print(f"update at {n // 1000}k tokens, no eviction: {mean:.1f} µs/token mean, slowest request {worst:.1f} µs/token")
    store.max_bytes = store.memory_bytes  # full: every further add evicts
    mean, worst = time_adds(store, evicting_adds)
    print(f"update at budget, FIFO eviction ({store.n_evicted} requests evicted): {mean:.1f} µs/token mean, "
          f"slowest request {worst:.1f} µs/token")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "suffix.bin")
        t0 = time.perf_counter()
        save_store(store, path)
        t_save = time.perf_counter() - t0
        t0 = time.perf_counter()
        load_store(path, config.span, store.max_bytes)
        print(f"save {t_save:.2f} s, load {time.perf_counter() - t0:.2f} s, file {os.path.getsize(path) / store.n_tokens:.1f} B/token")

    drafter = SuffixDrafter(config, store=store)
    r = replay(drafter, gen, args.prompt, args.steps)
    print(f"begin (prompt {args.prompt}): {r['begin_us_per_token']:.2f} µs/token")
    print(f"draft: p50 {r['p50_us']:.0f} µs, p99 {r['p99_us']:.0f} µs, max {r['max_us']:.0f} µs over {r['calls']} calls; "
          f"drafted {r['drafted']}, accepted {r['accepted']}, winners {r['tags']}")


if __name__ == "__main__":
    main()
