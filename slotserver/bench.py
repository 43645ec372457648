"""Benchmark a running server on our workloads: tokens/s, drafts and acceptance per workload.

    python -m slotserver.bench --url http://127.0.0.1:8080 [--workloads PATH] [--types none,ngram-mod]
    python -m slotserver.bench --types none,draft-simple,ngram-mod,ngram-mod+draft-simple  # with -md
    python -m slotserver.bench --url http://127.0.0.1:8080 --json-schema  # constrained output instead

The workloads ship with the package (``slotserver/workloads.json``); the test suite uses them too.

Every workload runs once per speculative type in the same process, side by side, so ratios are
measured under the same machine load. ``--concurrency`` then compares the aggregate throughput of
N parallel streams with one stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import aiohttp

DEFAULT_WORKLOADS = Path(__file__).resolve().with_name("workloads.json")


def load_workloads(path: str | Path = DEFAULT_WORKLOADS) -> list[dict]:
    return json.loads(Path(path).read_text(encoding="utf-8"))["workloads"]


async def complete(http: aiohttp.ClientSession, url: str, wl: dict, spec: str) -> dict:
    body = {"prompt": wl["prompt"], "n_predict": wl["n_predict"], "temperature": 0.0,
            "cache_prompt": False, "speculative.type": spec.replace("+", ",")}
    if "json_schema" in wl:
        body["json_schema"] = wl["json_schema"]
    async with http.post(url + "/completion", json=body) as resp:
        out = await resp.json()
        if resp.status != 200:
            raise RuntimeError(out)
        return out


# --json-schema: an array of eight objects with the same keys, the repetitive structured output that
# n-gram drafters should speed up under a grammar too.
CHORES_SCHEMA = {
    "type": "array", "minItems": 8, "maxItems": 8,
    "items": {"type": "object", "required": ["task", "done", "priority", "owner"], "properties": {
        "task": {"type": "string", "maxLength": 24}, "done": {"type": "boolean"},
        "priority": {"enum": ["low", "medium", "high"]}, "owner": {"type": "string", "maxLength": 12}}},
}
JSON_WORKLOADS = [
    {"name": "chores", "draftability": "high", "prompt": "Eight chores for the team, as JSON:\n", "n_predict": 400,
     "json_schema": CHORES_SCHEMA},
    {"name": "todos", "draftability": "medium", "prompt": "A todo list as JSON:\n", "n_predict": 400,
     "json_schema": CHORES_SCHEMA},
]


async def per_workload(http, url: str, workloads: list[dict], types: list[str], repeats: int) -> None:
    ratio = f" {types[-1] + '/' + types[0]:>7}" if len(types) > 1 else ""
    print(f"{'workload':<12} {'draft':<6} " + " ".join(f"{t + ' t/s':>15} {'draft_n':>7} {'acc%':>5}" for t in types)
          + ratio)
    for wl in workloads:
        cells, rates = [], []
        for spec in types:
            best = None
            for _ in range(repeats):
                out = await complete(http, url, wl, spec)
                if best is None or out["timings"]["predicted_per_second"] > best["timings"]["predicted_per_second"]:
                    best = out
            t = best["timings"]
            n, acc = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
            cells.append(f"{t['predicted_per_second']:>15.1f} {n:>7} {100 * acc / n if n else 0:>5.0f}")
            rates.append(t["predicted_per_second"])
        ratio = f" {rates[-1] / rates[0]:>6.2f}x" if len(rates) > 1 else ""
        print(f"{wl['name']:<12} {wl['draftability']:<6} " + " ".join(cells) + ratio, flush=True)


async def concurrency(http, url: str, workloads: list[dict], n: int, spec: str) -> None:
    """The same n requests one after another, then all at once: aggregate tokens/s of each."""
    chosen = [workloads[i % len(workloads)] for i in range(n)]
    t0 = time.perf_counter()
    outs = [await complete(http, url, wl, spec) for wl in chosen]
    serial = sum(o["tokens_predicted"] for o in outs) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(complete(http, url, wl, spec) for wl in chosen))
    parallel = sum(o["tokens_predicted"] for o in outs) / (time.perf_counter() - t0)
    print(f"{n} requests ({spec}): one stream {serial:.1f} t/s, {n} concurrent streams {parallel:.1f} t/s "
          f"aggregate ({parallel / serial:.2f}x)")


async def main_async(args) -> None:
    workloads = JSON_WORKLOADS if args.json_schema else load_workloads(args.workloads)
    if args.only:
        workloads = [w for w in workloads if w["name"] in args.only.split(",")]
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await complete(http, args.url, workloads[0] | {"n_predict": 8}, "none")  # warm-up
        await per_workload(http, args.url, workloads, args.types.split(","), args.repeats)
        if args.concurrency > 1:
            for spec in args.types.split(","):
                await concurrency(http, args.url, workloads, args.concurrency, spec)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m slotserver.bench", description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--workloads", default=str(DEFAULT_WORKLOADS))
    p.add_argument("--types", default="none,ngram-mod",
                   help="speculative types to compare, per request; '+' joins types drafting together "
                        "(ngram-mod+draft-simple)")
    p.add_argument("--only", default="", help="comma list of workload names")
    p.add_argument("--repeats", type=int, default=1, help="runs per cell; the fastest is reported")
    p.add_argument("--concurrency", type=int, default=4, help="parallel streams to compare with one (0: skip)")
    p.add_argument("--json-schema", action="store_true",
                   help="run repetitive JSON-schema-constrained tasks instead of the workloads")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
