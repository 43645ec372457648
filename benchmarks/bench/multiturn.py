"""Benchmark running servers on conversations that repeat their own earlier outputs.

Multi-turn workloads (``benchmarks/bench/workloads_multiturn.json``): successive edits of one file, an
agent loop of JSON tool calls, summarise-then-refine, document Q&A that quotes. Each turn's prompt
holds the conversation so far, the earlier outputs as this server generated them, so later turns
repeat large parts of earlier outputs: what a drafter that remembers whole requests (``suffix``)
is for.

    python -m benchmarks.bench.multiturn --ours none=http://127.0.0.1:8300 \\
        --ours ngram-mod=http://127.0.0.1:8301 --ours suffix=http://127.0.0.1:8302 \\
        [--compare llama-server:ngram-mod=http://127.0.0.1:8310] --phase cold --markdown out.md --append
    bash benchmarks/multiturn.sh  # starts the servers, runs the cold phase, restarts them, runs again

Every configuration of ours needs its own server, started with its drafters only: learned state is
shared by all requests of a server (``multiturn_plan``). ``--phase`` labels the run: ``cold`` when
the servers never saw these conversations, ``restart`` when they were restarted with the files
their drafters saved. Per round and conversation, the configurations replay it one after another
(``multiturn_plan.visit_order``); the tables are ``multiturn_report``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import aiohttp

from benchmarks.bench.multiturn_plan import (
    DEFAULT_CONVERSATIONS,
    PHASES,
    load_conversations,
    parse_servers,
    turn_body,
    visit_order,
)
from benchmarks.bench.multiturn_report import PROGRESS_HEADER, TurnRun, markdown, progress_line
from benchmarks.bench.plan import Config
from benchmarks.bench.report import command_line
from benchmarks.bench.run import HTTP_TIMEOUT_S, WARMUP, post, write_markdown


async def replay(http: aiohttp.ClientSession, phase: str, round_: int, conv: dict, config: Config) -> list[TurnRun]:
    """Every turn of ``conv`` on ``config``'s server, each prompt built on that server's outputs."""
    outputs: list[str] = []
    turns = []
    for turn in range(1, len(conv["turns"]) + 1):
        body = turn_body(config, conv, outputs)
        t0 = time.perf_counter()
        out = await post(http, config.url, body)
        wall = time.perf_counter() - t0
        outputs.append(out["content"])
        t = TurnRun.from_response(phase, round_, conv["name"], turn, config.name, out, wall)
        print(progress_line(t), flush=True)
        turns.append(t)
    return turns


async def measure(conversations: list[dict], configs: list[Config], phase: str, rounds: int) -> list[TurnRun]:
    by_conv = {c["name"]: c for c in conversations}
    by_config = {c.name: c for c in configs}
    order = visit_order(rounds, list(by_conv), list(by_config))
    turns: list[TurnRun] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as http:
        for config in configs:
            await post(http, config.url, WARMUP)
        print(PROGRESS_HEADER, flush=True)
        for visit in order:
            turns += await replay(http, phase, visit.round, by_conv[visit.conversation], by_config[visit.config])
    return turns


def select(conversations: list[dict], only: str, n_turns: int, n_predict: int) -> list[dict]:
    """``--only``, ``--turns`` (the first N of each) and ``--n-predict`` (every turn's)."""
    if only:
        conversations = [c for c in conversations if c["name"] in only.split(",")]
    out = []
    for conv in conversations:
        conv = dict(conv)
        if n_turns:
            conv["turns"] = conv["turns"][:n_turns]
        if n_predict:
            conv["n_predict"] = n_predict
        out.append(conv)
    return out


def write_report(args, conversations: list[dict], configs: list[Config], turns: list[TurnRun]) -> None:
    report = markdown(args.label, command_line(sys.argv, "benchmarks.bench.multiturn"), conversations, configs,
                      turns)
    print("\n" + report, flush=True)
    if args.markdown:
        write_markdown(args.markdown, report, args.append)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench.multiturn", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ours", action="append", default=[], metavar="NAME=URL",
                   help="one of our configurations on its own server: NAME is the speculative.type sent per "
                        "request ('+' joins types, '@expected'/'@precedence' sets speculative.select; 'none'); "
                        "the server should have been started with those drafters only; repeatable")
    p.add_argument("--compare", action="append", default=[], metavar="NAME=URL",
                   help="another server speaking llama-server's /completion, its speculative type fixed at its "
                        "start (llama-server:ngram-mod; NAME:none is its baseline); repeatable")
    p.add_argument("--conversations", default=str(DEFAULT_CONVERSATIONS))
    p.add_argument("--phase", default=PHASES[0], choices=PHASES,
                   help="what the servers know: cold (never saw these conversations) or restart (restarted "
                        "with their saved files)")
    p.add_argument("--rounds", type=int, default=1, help="replays of every conversation; round 2 on is warm")
    p.add_argument("--only", default="", help="comma list of conversation names")
    p.add_argument("--turns", type=int, default=0, help="replay only the first N turns (0: all)")
    p.add_argument("--n-predict", type=int, default=0, help="every turn's n_predict (0: the conversation's)")
    p.add_argument("--label", default="", help="the markdown heading (the model and phase, say)")
    p.add_argument("--markdown", metavar="PATH", help="write the tables as markdown")
    p.add_argument("--append", action="store_true", help="append to --markdown instead of overwriting it")
    args = p.parse_args()
    try:
        configs = parse_servers(args.ours, args.compare)
    except ValueError as exc:
        p.error(str(exc))
    conversations = select(load_conversations(args.conversations), args.only, args.turns, args.n_predict)
    if not configs or not conversations or args.rounds < 1 or args.turns < 0 or args.n_predict < 0:
        p.error("nothing to measure: no configuration, no conversation or no round")
    turns = asyncio.run(measure(conversations, configs, args.phase, args.rounds))
    write_report(args, conversations, configs, turns)


if __name__ == "__main__":
    main()
