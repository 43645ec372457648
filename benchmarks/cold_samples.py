"""Cold requests, sampled more than once: a fresh server per sample and configuration.

``performance.sh`` measures each workload cold once per run (round 1, on servers that have not
seen it), and one request's speed varies by several percent between runs here, so a cold cell near
1.0x no speculation cannot be judged from one run. This starts a server of ours per (sample,
configuration), one at a time, sends it the ``--before`` workloads (what a server in
``performance.sh`` has served before: its drafters learn from them), then measures the ``--measure``
workloads, each new to that server; it prints tokens/s per sample and the medians against ``none``.

    python -m benchmarks.cold_samples --model PATH --types none,ngram-mod,suffix \\
        --before repeat,repeat_zh,code_edit,quote,goldcoin,chess --measure humaneval0,free --samples 3

``--old DIR`` (a checkout of another commit, say ``git worktree add /tmp/old HEAD~1``) runs every
speculative type from that checkout too, as ``TYPE@old``, alternating with this one's: an A/B of a
change on the cold cells it is meant to move.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.bench.run import load_workloads
from benchmarks.chain_replay import post


def wait_healthy(url: str, proc: subprocess.Popen) -> None:
    while True:
        try:
            with urllib.request.urlopen(url + "/health"):
                return
        except (urllib.error.URLError, ConnectionError):
            if proc.poll() is not None:
                raise SystemExit(f"the server for {url} exited (code {proc.returncode})")
            time.sleep(0.5)


def tokens_per_second(url: str, wl: dict) -> float:
    body = {"prompt": wl["prompt"], "n_predict": wl["n_predict"], "temperature": 0.0, "cache_prompt": False}
    return post(url, "/completion", body)["timings"]["predicted_per_second"]


def sample(args: argparse.Namespace, config: str, workloads: dict[str, dict]) -> dict[str, float]:
    """One fresh server of ``config`` (a speculative type, ``TYPE@old``: from ``--old``)."""
    spec_type, _, side = config.partition("@")
    tree = Path(args.old).resolve() if side else ROOT
    url = f"http://127.0.0.1:{args.port}"
    cmd = [sys.executable, "-m", "slotserver", "-m", args.model, "--port", str(args.port), "-np", "4",
           "-c", "8192", "--spec-type", spec_type]
    env = {**os.environ, "PYTHONPATH": str(tree)}  # python -m also puts the working directory first
    with open(f"/tmp/cold_samples_{args.port}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, proc)
        for name in args.before.split(","):
            if name:
                tokens_per_second(url, workloads[name])
        return {name: tokens_per_second(url, workloads[name]) for name in args.measure.split(",")}
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--types", default="none,ngram-mod,suffix", help="comma list; 'none' is the baseline")
    ap.add_argument("--before", default="repeat,repeat_zh,code_edit,quote,goldcoin,chess")
    ap.add_argument("--measure", default="humaneval0,free")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--port", type=int, default=8510)
    ap.add_argument("--old", default="", help="another checkout: its servers run every speculative type too (TYPE@old)")
    args = ap.parse_args()
    workloads = {w["name"]: w for w in load_workloads()}
    types = args.types.split(",")
    if args.old:  # each type's old server right after its new one
        types = [c for t in types for c in ([t] if t == "none" else [t, f"{t}@old"])]
    runs: dict[tuple[str, str], list[float]] = {}
    for i in range(1, args.samples + 1):
        for spec_type in types:  # alternating: every configuration sees the same drift of the machine
            tps = sample(args, spec_type, workloads)
            print(f"sample {i} {spec_type:14s} " + "  ".join(f"{n} {v:6.1f}" for n, v in tps.items()), flush=True)
            for name, v in tps.items():
                runs.setdefault((name, spec_type), []).append(v)
    print("median tokens/s (x none):")
    for name in args.measure.split(","):
        base = statistics.median(runs[(name, "none")]) if (name, "none") in runs else None
        cells = []
        for spec_type in types:
            m = statistics.median(runs[(name, spec_type)])
            cells.append(f"{spec_type} {m:6.1f}" + (f" ({m / base:.2f}x)" if base else ""))
        print(f"  {name:12s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
