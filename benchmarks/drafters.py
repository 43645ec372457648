"""Micro-benchmark: cost of one ``draft()`` call per drafter on long histories (not a test).

Replays a synthetic token stream (vocab ~50k, with copied spans so n-grams repeat) as if it were
being generated: ``begin`` on a prompt of L tokens, then draft/accept steps where the "target"
accepts the drafted tokens that match the stream. Prints p50/p99 of the draft call in µs and the
memory each drafter holds (tracemalloc, after the run). Target: p50 <= 1 ms at 32k tokens.

    python -m benchmarks.drafters [--lengths 1024 8192 32768] [--steps 400]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc

from slotserver.speculation.registry import BY_NAME

VOCAB = 50_000
COPY_PROB = 0.35  # share of segments that repeat an earlier span
N_MAX = 16



def synthetic_stream(n_tokens: int, seed: int = 0) -> list[int]:
    """Zipf-ish random segments, a third of them copies of earlier spans (16..256 tokens)."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < n_tokens:
        if len(out) > 512 and rng.random() < COPY_PROB:
            size = rng.randint(16, 256)
            start = rng.randrange(0, len(out) - size)
            out.extend(out[start : start + size])
        else:
            out.extend(min(int(rng.paretovariate(0.7)), VOCAB - 1) for _ in range(rng.randint(8, 64)))
    return out[:n_tokens]


def run(name: str, stream: list[int], prompt_len: int, steps: int) -> dict:
    history = stream[:prompt_len]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    drafter = BY_NAME[name].cls(BY_NAME[name].default_config())
    t0 = time.perf_counter()
    drafter.begin(0, history)
    t_begin = time.perf_counter() - t0
    times, n_drafted, n_accepted = [], 0, 0
    pos = prompt_len
    for _ in range(steps):
        if pos + 1 >= len(stream):
            break
        last = stream[pos]
        t0 = time.perf_counter()
        draft = drafter.draft(0, history, last, N_MAX)
        times.append(time.perf_counter() - t0)
        n_acc = 0
        while n_acc < len(draft) and pos + 1 + n_acc < len(stream) and draft[n_acc] == stream[pos + 1 + n_acc]:
            n_acc += 1
        if draft:
            drafter.accept(0, n_acc, False)
        n_drafted += len(draft)
        n_accepted += n_acc
        history.extend(stream[pos : pos + 1 + n_acc])
        pos += 1 + n_acc
    mem = tracemalloc.get_traced_memory()[0] - base - 8 * (len(history) - prompt_len)
    tracemalloc.stop()
    times.sort()
    return {
        "p50_us": 1e6 * statistics.median(times),
        "p99_us": 1e6 * times[min(len(times) - 1, int(0.99 * len(times)))],
        "begin_ms": 1e3 * t_begin,
        "drafted": n_drafted,
        "accepted": n_accepted,
        "mem_mib": mem / 2**20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192, 32768])
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args()
    stream = synthetic_stream(max(args.lengths) + 4 * args.steps * N_MAX)
    print(f"{'drafter':<14} {'L':>6} {'p50 µs':>8} {'p99 µs':>8} {'begin ms':>9} {'drafted':>8} {'accepted':>8} {'mem MiB':>8}")
    for length in args.lengths:
        for name in BY_NAME:
            r = run(name, stream, length, args.steps)
            print(
                f"{name:<14} {length:>6} {r['p50_us']:>8.1f} {r['p99_us']:>8.1f} {r['begin_ms']:>9.1f} "
                f"{r['drafted']:>8} {r['accepted']:>8} {r['mem_mib']:>8.2f}"
            )


if __name__ == "__main__":
    main()
