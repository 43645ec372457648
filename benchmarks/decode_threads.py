"""Why every decode of a server runs on one thread: one-row decode times before and after
decodes from a second thread (llama.cpp's CPU backend keeps worker threads per calling thread).

    python -m benchmarks.decode_threads [--model PATH]

Prints the median of 40 one-row decodes (after a 16-token prompt) on the main thread, on a second
thread, on the main thread while the second thread is alive, and after it is gone. Measured
2026-11-26 on the 2-core machine, Gemma 3 270M: 21.0, 21.0, 33.4, 33.9 and 21.5 ms: as long as two
threads that decoded are alive, every decode on either costs 60% more.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from slotserver.engine.batch import BatchEntry, BatchPlan
from slotserver.engine.engine import Engine, EngineConfig
from slotserver.engine.model_files import default_model_path


def one_row_ms(engine: Engine, n: int = 40) -> float:
    engine.decode(BatchPlan([BatchEntry(0, 0, [2] * 16, True)]))
    times = []
    for pos in range(16, 16 + n):
        t0 = time.perf_counter()
        engine.decode(BatchPlan([BatchEntry(0, pos, [3], True)]))
        times.append(time.perf_counter() - t0)
    engine.remove(0, 0)
    return 1e3 * sorted(times)[n // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    engine = Engine(EngineConfig(model_path=args.model or default_model_path(), n_ctx=8192, n_parallel=4))
    try:
        print(f"main thread:            {one_row_ms(engine):.1f} ms")
        print(f"main thread again:      {one_row_ms(engine):.1f} ms")
        with ThreadPoolExecutor(1) as other:
            print(f"a second thread:        {other.submit(one_row_ms, engine).result():.1f} ms")
            print(f"main thread, the second still alive: {one_row_ms(engine):.1f} ms")
        print(f"main thread, the second gone:        {one_row_ms(engine):.1f} ms")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
