"""What the output rows of a verify batch cost: ``llama_decode`` of N rows, every row an output (a
verify) against only the last one (a prompt chunk), after 256 cached tokens, fastest of 7.

The difference is the output projection (vocabulary x embedding) for N-1 more rows. On this
machine's CPU backend (Gemma 3's Q8_0 output matrix, 262k rows) each extra output row costs 6-9 ms
up to 6 rows, nearly a whole pass over the matrix, and 1.4-2.9 ms from 8 rows on: a 2-row verify
costs twice a plain step, so short drafts pay less than their acceptance suggests. SmolLM2's
(49k rows) costs 1.5 ms at most; there the second row of the body is what costs. The verify-cost
profile (``calibrate.py``) measures the totals; this shows where they come from:

    python -m benchmarks.output_rows MODEL.gguf
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from slotserver.engine.batch import BatchEntry, BatchPlan
from slotserver.engine.engine import Engine, EngineConfig

DEPTH = 256
ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64)


def main() -> None:
    engine = Engine(EngineConfig(sys.argv[1], n_ctx=4096, n_parallel=1, n_threads=2))
    token = max(engine.vocab.bos, 0)
    engine.decode(BatchPlan([BatchEntry(0, 0, [token] * DEPTH, False)]))

    def ms(n: int, every_row: bool, repeats: int = 7) -> float:
        if every_row:
            entries = [BatchEntry(0, DEPTH, [token] * n, True)]
        else:  # the same rows, only the last an output
            entries = ([BatchEntry(0, DEPTH, [token] * (n - 1), False)] if n > 1 else []) + \
                      [BatchEntry(0, DEPTH + n - 1, [token], True)]
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            t0 = time.perf_counter()
            engine.decode(BatchPlan(entries))
            times.append(time.perf_counter() - t0)
            engine.remove(0, DEPTH)
        return min(times[1:]) * 1e3

    print(f"{'rows':>4} {'every row ms':>12} {'last row ms':>11} {'per extra output row ms':>23}")
    for n in ROWS:
        every, last = ms(n, True), ms(n, False)
        extra = f"{(every - last) / (n - 1):.2f}" if n > 1 else "-"
        print(f"{n:>4} {every:>12.1f} {last:>11.1f} {extra:>23}", flush=True)


if __name__ == "__main__":
    main()
