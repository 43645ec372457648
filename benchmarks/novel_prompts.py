"""Speculation on text no server has seen: many new prompts, each asked once per server.

``performance.sh`` has one cold request per workload and configuration, and single requests here
vary by several percent, so a cold cell just below 1.0x no speculation says little. This asks
``--n`` essay prompts that repeat nothing of each other (a topic each) of three servers of ours,
alternating per prompt:

- ``none``: a server without speculation;
- ``TYPE, asked none``: a server started with ``--spec-type TYPE``, every request sent
  ``speculative.type: none``. Against ``none`` this isolates the server itself (its drafters'
  state, its memory, its start-up choices) from what drafting does;
- ``TYPE``: a third server of the same type, drafting. Every prompt is new to it.

It prints tokens/s and milliseconds per ``llama_decode`` (from ``/metrics``) per prompt, then the
medians and how many prompts drafting made faster or slower than ``none``:

    python -m benchmarks.novel_prompts --model PATH --type ngram-mod --n 12
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.bench.report import counters
from benchmarks.chain_replay import post
from benchmarks.cold_samples import wait_healthy

TOPICS = [
    "the history of glassblowing in Venice", "how bees communicate", "why the sky is blue", "the rules of cricket",
    "how a refrigerator works", "the life of Ada Lovelace", "the water cycle", "making sourdough bread",
    "the causes of the French Revolution", "how volcanoes form", "the migration of monarch butterflies",
    "how compilers work", "the invention of the printing press", "how tides work", "the game of Go",
    "why cats purr", "the building of the Panama Canal", "how vaccines train the immune system",
    "the origins of jazz", "how a bicycle stays upright",
]
DECODES, DECODE_S = "slotserver_decode_calls_total", "slotserver_decode_seconds_total"


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics") as r:
        return counters(r.read().decode())


def ask(url: str, prompt: str, n_predict: int, spec_type: str | None) -> tuple[float, float, int]:
    """Tokens/s, ms per llama_decode during the request, tokens drafted."""
    before = scrape(url)
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False}
    if spec_type:
        body["speculative.type"] = spec_type
    t = post(url, "/completion", body)["timings"]
    after = scrape(url)
    n = after[DECODES] - before[DECODES]
    ms = (after[DECODE_S] - before[DECODE_S]) / n * 1e3 if n else 0.0
    return t["predicted_per_second"], ms, t.get("draft_n", 0)


def start(model: str, spec_type: str, port: int) -> subprocess.Popen:
    """A server of ours with ``--metrics`` and ``--spec-type spec_type``, answering on ``port``."""
    cmd = [sys.executable, "-m", "slotserver", "-m", model, "--port", str(port), "-np", "4", "-c", "8192",
           "--metrics", "--spec-type", spec_type]
    with open(f"/tmp/novel_prompts_{port}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_healthy(f"http://127.0.0.1:{port}", proc)
    return proc


def summary(results: dict[str, list[tuple[float, float, int]]]) -> None:
    """Medians per configuration; for the others against ``none``, the spread per prompt."""
    base = [r[0] for r in results["none"]]
    print("medians:")
    for name, rs in results.items():
        tps = statistics.median(r[0] for r in rs)
        line = f"  {name:24s} {tps:7.1f} t/s ({tps / statistics.median(base):.2f}x none) " \
               f"{statistics.median(r[1] for r in rs):6.2f} ms/decode"
        if name != "none":
            ratios = [r[0] / b for r, b in zip(rs, base)]
            line += (f"; per prompt {min(ratios):.2f}-{max(ratios):.2f}x, faster on "
                     f"{sum(x > 1 for x in ratios)} of {len(ratios)}")
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--type", default="ngram-mod", help="the speculative type (comma list) under test")
    ap.add_argument("--n", type=int, default=12, help=f"prompts, at most {len(TOPICS)}")
    ap.add_argument("--n-predict", type=int, default=160)
    ap.add_argument("--port", type=int, default=8520)
    args = ap.parse_args()
    # (name, the server's --spec-type, what each request asks for)
    configs = [("none", "none", None), (f"{args.type}, asked none", args.type, "none"), (args.type, args.type, None)]
    procs: list[subprocess.Popen] = []
    try:
        for i, (_, server_type, _) in enumerate(configs):
            procs.append(start(args.model, server_type, args.port + i))
        urls = [f"http://127.0.0.1:{args.port + i}" for i in range(len(configs))]
        results: dict[str, list[tuple[float, float, int]]] = {name: [] for name, _, _ in configs}
        for k, topic in enumerate(TOPICS[: args.n]):
            prompt = f"Write a short essay about {topic}.\n\n"
            order = list(zip(configs, urls))
            if k % 2:  # alternate who goes first: the machine's drift falls on every server alike
                order.reverse()
            for (name, _, asked), url in order:
                r = ask(url, prompt, args.n_predict, asked)
                results[name].append(r)
                print(f"{k:2d} {name:24s} {r[0]:7.1f} t/s {r[1]:6.2f} ms/decode {r[2]:4d} drafted", flush=True)
        summary(results)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
