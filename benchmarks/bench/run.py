"""Benchmark running servers on our workloads, against a perfect drafter and other servers.

Tokens/s cold and warm, acceptance, time outside llama_decode and concurrency, for our server's
speculative types, the oracle (a perfect drafter) and compare servers (llama-server):

    python -m benchmarks.bench.run --url http://127.0.0.1:8080 [--workloads PATH] [--types none,ngram-mod]
    python -m benchmarks.bench.run --types none,ngram-mod,oracle  # our server started with --spec-oracle
    python -m benchmarks.bench.run --types none,ngram-mod --compare llama-server:ngram-mod=http://127.0.0.1:8091
    python -m benchmarks.bench.run --types none,draft-simple,ngram-mod,ngram-mod+draft-simple  # with -md
    python -m benchmarks.bench.run --url http://127.0.0.1:8080 --json-schema  # constrained output instead
    python -m benchmarks.bench.run --rounds 3 --streams 1,4 --label "Gemma 3 270M" \\
        --markdown docs/benchmarks-performance.md --append --png docs/perf-gemma.png
    python -m benchmarks.bench.run --types none,oracle --ours ngram-mod=http://127.0.0.1:8081  # cold really cold
    bash benchmarks/performance.sh  # ours (a server per type) and one llama-server per type, for each model

The workloads live beside the harness (``benchmarks/bench/workloads.json``); the test suite uses them too.

Each round runs every workload with every configuration back to back (ours and the compare servers
alike), so ratios are measured under the same machine load; round 1 is cold, later rounds warm
(``bench_report``). Then, per stream count N > 1, each configuration serves 2N mixed requests with
N in flight. What runs in which order is ``bench_plan``; the tables ``bench_report``; the chart
``bench_chart``. Time outside llama_decode is read from our server's ``/metrics`` (start it with
``--metrics``); without the step counter that column says n/a.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
from pathlib import Path

import aiohttp

from benchmarks.bench.chart import write_png
from benchmarks.bench.plan import (
    NONE,
    ORACLE,
    OURS,
    Config,
    Visit,
    parse_configs,
    request_body,
    stream_mix,
    visit_order,
)
from benchmarks.bench.report import (
    PROGRESS_HEADER,
    Run,
    StreamRun,
    chart_rows,
    command_line,
    counters,
    markdown,
    outside_decode,
    progress_line,
    same_share,
    stream_line,
)

DEFAULT_WORKLOADS = Path(__file__).resolve().with_name("workloads.json")
# One short request per server before measuring: a fresh process pays one-time costs (weights paged
# in, threads started) that would otherwise land on the first workload. Its prompt is in no
# workload, so no workload's round 1 stops being cold.
WARMUP = {"prompt": "Hello", "n_predict": 8, "temperature": 0.0, "cache_prompt": False}
HTTP_TIMEOUT_S = 3600


def load_workloads(path: str | Path = DEFAULT_WORKLOADS) -> list[dict]:
    return json.loads(Path(path).read_text(encoding="utf-8"))["workloads"]


async def post(http: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with http.post(url + "/completion", json=body) as resp:
        out = await resp.json()
        if resp.status != 200:
            raise RuntimeError(f"{url}: {out}")
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


ORACLE_SETTLE_RUNS = 4  # unmeasured oracle runs to reach an output its own run reproduces


class Bench:
    """Runs visits against the servers and keeps what they measured."""

    def __init__(self, http: aiohttp.ClientSession, workloads: list[dict], configs: list[Config]) -> None:
        self.http = http
        self.workloads = workloads
        self.by_workload = {w["name"]: w for w in workloads}
        self.by_config = {c.name: c for c in configs}
        self.oracle_tokens: dict[str, list[int]] = {}  # workload -> generated tokens of its latest none run
        self.oracle_fixed: dict[str, list[int]] = {}  # workload -> an output the oracle's run reproduces
        self.metrics = True  # until our /metrics answers anything but 200
        self.runs: list[Run] = []
        self.stream_runs: list[StreamRun] = []

    def body(self, config: Config, wl: dict) -> dict:
        """The request of ``config`` for ``wl``: the oracle drafts the output its run reproduces
        (``settle_oracle``) once one is known, concurrent batches too, else the latest none run's."""
        name = wl["name"]
        tokens = self.oracle_fixed.get(name) if config.kind == ORACLE else None
        return request_body(config, wl, tokens or self.oracle_tokens.get(name))

    async def scrape(self, config: Config) -> dict[str, float] | None:
        if not (config.is_ours and self.metrics):
            return None
        async with self.http.get(config.url + "/metrics") as resp:
            if resp.status == 200:
                return counters(await resp.text())
        self.metrics = False
        return None

    async def single(self, visit: Visit) -> Run:
        config, wl = self.by_config[visit.config], self.by_workload[visit.workload]
        if config.kind == ORACLE:
            await self.settle_oracle(config, wl)
        body = self.body(config, wl)
        before = await self.scrape(config)
        t0 = time.perf_counter()
        out = await post(self.http, config.url, body)
        wall = time.perf_counter() - t0
        after = await self.scrape(config)
        same = None
        if config.kind == OURS and config.name == NONE:
            self.oracle_tokens[wl["name"]] = out.get("tokens") or None
        else:
            same = same_share(out.get("tokens"), self.oracle_tokens.get(wl["name"]))
        outside = outside_decode(before, after) if before is not None and after is not None else None
        run = Run.from_response(visit.round, wl["name"], config.name, out, wall, outside, same)
        self.runs.append(run)
        return run

    async def settle_oracle(self, config: Config, wl: dict) -> None:
        """Find an output the oracle's own run reproduces (unmeasured runs). Verify batches round
        differently from one-token steps, so drafting the no-speculation output can flip a near-tie;
        the output then leaves the known continuation and the oracle stops drafting. Drafting the
        flipped run's output instead reproduces it up to the flip and moves the next flip further
        on; a few rounds reach an output that is drafted whole, the ceiling of the output the
        server really produces under speculation."""
        body = self.body(config, wl)
        ref = body["speculative.oracle"]
        for _ in range(ORACLE_SETTLE_RUNS):
            out = await post(self.http, config.url, {**body, "speculative.oracle": ref})
            if out.get("tokens") == ref:
                break
            ref = out.get("tokens")
        self.oracle_fixed[wl["name"]] = ref

    async def batch(self, visit: Visit) -> StreamRun:
        config = self.by_config[visit.config]
        bodies = [self.body(config, wl) for wl in stream_mix(self.workloads, visit.streams)]
        in_flight = asyncio.Semaphore(visit.streams)

        async def one(body: dict) -> dict:
            async with in_flight:
                return await post(self.http, config.url, body)

        t0 = time.perf_counter()
        outs = await asyncio.gather(*(one(b) for b in bodies))
        run = StreamRun(visit.round, visit.streams, config.name, sum(o["tokens_predicted"] for o in outs),
                        time.perf_counter() - t0)
        self.stream_runs.append(run)
        return run


async def measure(workloads: list[dict], configs: list[Config], rounds: int, streams: list[int]) -> Bench:
    order = visit_order(rounds, [w["name"] for w in workloads], [c.name for c in configs], streams)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as http:
        for url in dict.fromkeys(c.url for c in configs):
            await post(http, url, WARMUP)
        bench = Bench(http, workloads, configs)
        print(PROGRESS_HEADER, flush=True)
        for visit in order:
            line = progress_line(await bench.single(visit)) if visit.streams == 1 else \
                stream_line(await bench.batch(visit))
            print(line, flush=True)
    return bench


def write_markdown(path: str | Path, report: str, append: bool) -> None:
    """Write ``report``, or append it as a new section (one blank line after what is there)."""
    path = Path(path)
    if append and path.exists() and path.stat().st_size:
        report = "\n" + report
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        fh.write(report)


def write_reports(args, workloads: list[dict], configs: list[Config], streams: list[int], bench: Bench) -> None:
    report = markdown(args.label, command_line(sys.argv), workloads, configs, bench.runs, bench.stream_runs,
                      streams)
    print("\n" + report, flush=True)
    if args.markdown:
        write_markdown(args.markdown, report, args.append)
    if args.png:
        names = [w["name"] for w in workloads]
        phase, rows = chart_rows(bench.runs, names, configs)
        write_png(args.png, args.label or "Benchmark", names, [c.name for c in configs], rows, f"tokens/s ({phase})")


def parse_streams(text: str) -> list[int]:
    streams = [int(n) for n in text.split(",") if n]
    if any(n < 1 for n in streams):
        raise ValueError("--streams takes counts of 1 or more")
    return streams


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080", help="our server")
    p.add_argument("--workloads", default=str(DEFAULT_WORKLOADS))
    p.add_argument("--types", default="none,ngram-mod",
                   help="our configurations: speculative types per request, '+' joins types drafting together "
                        "(ngram-mod+draft-simple); 'oracle' drafts the expected output (server with --spec-oracle; "
                        "needs 'none')")
    p.add_argument("--compare", action="append", default=[], metavar="NAME=URL",
                   help="another server speaking llama-server's /completion, its speculative type fixed at its "
                        "start; NAME labels its column (llama-server:ngram-mod); repeatable")
    p.add_argument("--ours", action="append", default=[], metavar="NAME=URL",
                   help="our server of its own, its speculative types fixed at its start (NAME labels "
                        "its column): its drafters learn from its own runs only, so round 1 is cold; "
                        "repeatable")
    p.add_argument("--compare-url", metavar="URL", help="shorthand for --compare llama-server=URL")
    p.add_argument("--only", default="", help="comma list of workload names")
    p.add_argument("--rounds", type=int, default=2, help="round 1 is cold, the others warm (default: 2)")
    p.add_argument("--streams", default="1,4",
                   help="comma list of stream counts; N > 1: 2N mixed requests with N in flight (default: 1,4)")
    p.add_argument("--json-schema", action="store_true",
                   help="run repetitive JSON-schema-constrained tasks instead of the workloads")
    p.add_argument("--label", default="", help="the markdown heading and chart title (the model, say)")
    p.add_argument("--markdown", metavar="PATH", help="write the tables as markdown")
    p.add_argument("--append", action="store_true", help="append to --markdown instead of overwriting it")
    p.add_argument("--png", metavar="PATH", help="a grouped bar chart of tokens/s (needs matplotlib)")
    args = p.parse_args()
    workloads = JSON_WORKLOADS if args.json_schema else load_workloads(args.workloads)
    if args.only:
        workloads = [w for w in workloads if w["name"] in args.only.split(",")]
    compares = args.compare + ([f"llama-server={args.compare_url}"] if args.compare_url else [])
    try:
        configs = parse_configs(args.url, args.types, compares, args.ours)
        streams = parse_streams(args.streams)
    except ValueError as exc:
        p.error(str(exc))
    if not configs or not workloads or args.rounds < 1:
        p.error("nothing to measure: no configuration, no workload or no round")
    if args.png and importlib.util.find_spec("matplotlib") is None:  # say so before the hours of measuring
        p.error("--png needs matplotlib (pip install matplotlib)")
    bench = asyncio.run(measure(workloads, configs, args.rounds, streams))
    write_reports(args, workloads, configs, streams, bench)


if __name__ == "__main__":
    main()
