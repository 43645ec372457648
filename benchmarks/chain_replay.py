"""Offline replay of the draft chain on known greedy outputs: how a selection policy would fare.

A live benchmark of one cold request is one sample, and two servers doing the same thing differ by
up to 7% here (``performance.sh``'s none-2 column), so a change to the chain's estimates or
selection is hard to judge live. This replays the chain instead, deterministically: each step the
chain drafts from the real context, ``selection.choose`` cuts the draft under a verify-cost
profile, the draft is accepted as far as it matches the greedy output, and the step costs what the
profile says (a single slot, no time outside ``llama_decode``, no near-tie flips). The oracle is the
same loop with every draft right. What it cannot show is overhead and noise: judge those live.

    # 1. the greedy outputs, from a running server of ours without speculation
    python -m benchmarks.chain_replay fetch --url http://127.0.0.1:8080 --out /tmp/outputs-gemma.json
    # 2. replay them under that server's cached profile (its path is in the server's start-up log)
    python -m benchmarks.chain_replay run --outputs /tmp/outputs-gemma.json \\
        --profile ~/.cache/slotserver/verify-profile-XXXX.json [--types ...] [--select expected] [-v]

``run`` replays a fresh chain per workload (truly cold), then 4 orders of the workloads (the given
one and 3 shuffles) for 2 rounds each (cold within a server's life, then warm), and prints the
% of the oracle and x no speculation per scenario and their geometric mean over all runs.

``ceiling`` (same ``--outputs`` and ``--profile``) prints, per workload, the oracle and a *copy
oracle*: it drafts the true continuation only as far as that is a copy of the prompt and output so
far, and stops there, so no draft of it fails. Every n-gram drafter drafts copies, so on a cold
request none reaches more of the oracle than the copy oracle does, and one that cannot see where a
copy ends pays for the rows after it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import urllib.request
from pathlib import Path

from benchmarks.bench.run import load_workloads
from ngram.suffix import SuffixConfig
from slotserver.config import SpecConfig
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.serving.scheduler import common_prefix
from slotserver.speculation.chain import DraftChain, DraftLimits
from slotserver.speculation.selection import Offer, choose

ALL = "ngram-mod,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-cache,suffix"
N_MAX = 64
MIN_OUTPUT = 8  # a workload whose greedy output is shorter (SmolLM2 ends goldcoin at once) is skipped


def post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def fetch(url: str, out: str) -> None:
    outputs = {}
    for wl in load_workloads():
        r = post(url, "/completion", {"prompt": wl["prompt"], "n_predict": wl["n_predict"], "temperature": 0.0,
                                      "cache_prompt": False, "return_tokens": True})
        prompt = post(url, "/tokenize", {"content": wl["prompt"], "add_special": True})["tokens"]
        outputs[wl["name"]] = {"prompt": prompt, "out": r["tokens"]}
        print(f"{wl['name']}: prompt {len(prompt)}, output {len(r['tokens'])} tokens")
    Path(out).write_text(json.dumps(outputs))


def replay(chain: DraftChain, profile: VerifyProfile, prompt: list[int], out: list[int]) -> tuple[float, float, list]:
    """Seconds of one request's steps with the chain and with the oracle, and the chain's drafts."""
    chain.begin(0, prompt)
    history, i, t, log = list(prompt), 0, 0.0, []
    while i < len(out) - 1:
        last = out[i]
        draft = chain.draft(0, history, last, DraftLimits(n_max=min(N_MAX, len(out) - 1 - i)))
        if draft:
            n = choose([Offer(chain.confidence(0)[: len(draft)], len(history))], profile)[0]
            chain.selected(0, n)
            del draft[n:]
        truth = out[i + 1 :]
        acc = common_prefix(draft, truth)
        t += profile.step(1 + len(draft))
        if draft:
            log.append(f"{chain.winner(0)}:{acc}/{len(draft)}")
            chain.accept(0, len(draft), acc)
        history += [last] + truth[:acc]
        i += 1 + acc
    chain.finish(0, prompt + out)
    t_oracle, j = 0.0, 0
    while j < len(out) - 1:
        n = choose([Offer([1.0] * min(N_MAX, len(out) - 1 - j), len(prompt) + j)], profile)[0]
        t_oracle += profile.step(1 + n)
        j += 1 + n
    return t, t_oracle, log


def load(args: argparse.Namespace) -> tuple[dict, VerifyProfile]:
    """The greedy outputs (``--outputs``) and the verify-cost profile (``--profile``) to replay under."""
    data = json.loads(Path(args.profile).expanduser().read_text())
    return json.loads(Path(args.outputs).read_text()), VerifyProfile.from_dict(data.get("profile", data))


def copy_length(context: list[int], truth: list[int], cap: int) -> int:
    """How many tokens of ``truth`` (up to ``cap``) a drafter that only copies could draft after
    ``context``: the longest prefix of ``truth`` that is a copy of tokens starting inside
    ``context``, overlapping its own end as a repetition does (``ab`` then ``ababab``)."""
    text, best, n = context + truth[:cap], 0, min(cap, len(truth))
    for j in range(len(context)):
        k = 0
        while k < n and text[j + k] == truth[k]:
            k += 1
        if k > best:
            best = k
            if best == n:
                break
    return best


def ceiling_time(profile: VerifyProfile, prompt: list[int], out: list[int], copy: bool) -> float:
    """Seconds of the oracle's steps, or (``copy``) of a copy oracle's: it drafts the true
    continuation as far as ``copy_length`` allows (the prompt and the output so far, as a cold
    request has them), and knows where that ends, so none of its drafts fails."""
    t, j = 0.0, 0
    while j < len(out) - 1:
        k = min(N_MAX, len(out) - 1 - j)
        if copy:
            k = copy_length(prompt + out[: j + 1], out[j + 1 :], k)
        n = choose([Offer([1.0] * k, len(prompt) + j)], profile)[0] if k else 0
        t += profile.step(1 + n)
        j += 1 + n
    return t


def ceiling(args: argparse.Namespace) -> None:
    """Per workload, the oracle and the copy oracle (cold) against plain decoding: how much of the
    oracle any n-gram drafter could reach even if it never drafted a token that is not accepted."""
    outputs, profile = load(args)
    print(f"{'workload':12s} {'oracle':>7s} {'copy':>6s} {'copy/oracle':>11s}  (x no speculation)")
    for name, o in outputs.items():
        if len(o["out"]) <= MIN_OUTPUT:
            continue
        t_plain = (len(o["out"]) - 1) * profile.step(1)
        t_oracle = ceiling_time(profile, o["prompt"], o["out"], copy=False)
        t_copy = ceiling_time(profile, o["prompt"], o["out"], copy=True)
        print(f"{name:12s} {t_plain / t_oracle:7.2f} {t_plain / t_copy:6.2f} {100 * t_oracle / t_copy:10.0f}%")


def run(args: argparse.Namespace) -> None:
    outputs, profile = load(args)
    spec = SpecConfig(types=tuple(args.types.split(",")), select=args.select, suffix=SuffixConfig(factor=args.factor))
    names = [n for n, o in outputs.items() if len(o["out"]) > MIN_OUTPUT]
    t_plain = profile.step(1)
    scenarios: dict[str, list[tuple[str, float, float]]] = {}  # name -> (workload, x none, share of oracle)

    def go(chain: DraftChain, name: str) -> tuple[str, float, float]:
        o = outputs[name]
        t, t_oracle, log = replay(chain, profile, o["prompt"], o["out"])
        if args.v:
            print(f"  {name}: {' '.join(log)}")
        n = len(o["out"]) - 1
        return name, n * t_plain / t, t_oracle / t

    scenarios["fresh"] = [go(DraftChain.from_spec(spec, profile=profile), n) for n in names]
    for seed in range(4):
        order = list(names)
        if seed:
            random.Random(seed).shuffle(order)
        chain = DraftChain.from_spec(spec, profile=profile)
        for rnd, phase in enumerate(("cold", "warm")):
            scenarios[f"order{seed}.{phase}"] = [go(chain, n) for n in order]
    print(f"profile: one row {1e3 * t_plain:.1f} ms; types {args.types}; select {args.select}")
    print(f"{'scenario':14s} {'% oracle':>8s} {'min x none':>10s}  per workload (x none/% oracle)")
    for key, rows in scenarios.items():
        per = " ".join(f"{w}:{x:.2f}/{100 * r:.0f}" for w, x, r in rows)
        print(f"{key:14s} {100 * statistics.mean(r for _, _, r in rows):8.1f} {min(x for _, x, _ in rows):10.2f}  {per}")
    every = [r for rows in scenarios.values() for _, _, r in rows]
    print(f"geometric mean of % of the oracle over all runs: {100 * statistics.geometric_mean(every):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="greedy outputs of the workloads from a running server")
    f.add_argument("--url", required=True)
    f.add_argument("--out", required=True)
    r = sub.add_parser("run", help="replay the chain on them")
    r.add_argument("--outputs", required=True)
    r.add_argument("--profile", required=True, help="a cached verify-cost profile (JSON)")
    r.add_argument("--types", default=ALL)
    r.add_argument("--select", default="expected")
    r.add_argument("--factor", type=float, default=1.0, help="--spec-suffix-factor")
    r.add_argument("-v", action="store_true", help="every draft: winner:accepted/verified")
    c = sub.add_parser("ceiling", help="the oracle and the copy oracle per workload (cold)")
    c.add_argument("--outputs", required=True)
    c.add_argument("--profile", required=True, help="a cached verify-cost profile (JSON)")
    args = ap.parse_args()
    {"fetch": lambda: fetch(args.url, args.out), "run": lambda: run(args), "ceiling": lambda: ceiling(args)}[args.cmd]()


if __name__ == "__main__":
    main()
