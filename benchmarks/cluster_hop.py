"""What the cluster's extra hop costs, and what a second replica brings, measured side by side.

    python -m benchmarks.cluster_hop [--rounds 5] [--n-predict 128] [-- server flags]

Starts one single server and ``slotserver cluster`` (``--replicas 1``, then a second cluster with
``--replicas 2`` for the load phase), each on its own port, and alternates the same greedy
streaming request between the single server and the one-replica cluster (each alone on the machine
while it answers): client-side time to first token and tokens/s, medians. Then the load phase: 8
concurrent requests at once against the one-replica and the two-replica cluster, aggregate tokens/s.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    def __init__(self, argv: list[str], command: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile(mode="a+")
        self.proc = subprocess.Popen([sys.executable, "-m", "slotserver", *command, "--port", str(self.port), *argv],
                                     stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})

    def wait(self, timeout: float = 900) -> Proc:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"server exited: {self.log.read()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit("server not ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stream(url: str, n_predict: int, session: str = "") -> tuple[float, float, int]:
    """(seconds to the first token, seconds in all, tokens) of one greedy streaming request."""
    body = {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0.0, "stream": True, "cache_prompt": False,
            "ignore_eos": True}
    headers = {"Content-Type": "application/json", **({"x-session-id": session} if session else {})}
    req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(), headers=headers, method="POST")
    t0 = time.perf_counter()
    first, n = None, 0
    with urllib.request.urlopen(req, timeout=600) as resp:
        for line in resp:
            if line.startswith(b"data: ") and json.loads(line[6:]).get("content"):
                first = first if first is not None else time.perf_counter() - t0
                n += 1
    return first or 0.0, time.perf_counter() - t0, n


def engine_tps(url: str, n_predict: int) -> float:
    """The server's own decode speed (``timings.predicted_per_second``) on one non-streamed request."""
    body = {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False, "ignore_eos": True}
    req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())["timings"]["predicted_per_second"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n-predict", type=int, default=128)
    p.add_argument("--concurrent", type=int, default=8)
    p.add_argument("server_args", nargs="*", default=["-c", "4096", "-np", "4", "--spec-type", "none"])
    args = p.parse_args()
    single = Proc(args.server_args).wait()
    one = Proc(["--replicas", "1", *args.server_args], ("cluster",)).wait()
    try:
        rows = {"single": [], "cluster": []}
        for _ in range(args.rounds):
            for name, srv in (("single", single), ("cluster", one)):
                ttft, total, n = stream(srv.url, args.n_predict)
                tps = n / (total - ttft) if total > ttft else 0.0
                rows[name].append((ttft, tps, engine_tps(srv.url, args.n_predict)))
        print(f"one request at a time, {args.rounds} rounds, n_predict {args.n_predict}, {' '.join(args.server_args)}")
        print("| server | TTFT ms, streamed | tokens/s, streamed (client) | tokens/s, engine (not streamed) |")
        print("|---|---|---|---|")
        for name, vals in rows.items():
            print(f"| {name} | {statistics.median(v[0] for v in vals) * 1e3:.1f} | "
                  f"{statistics.median(v[1] for v in vals):.1f} | {statistics.median(v[2] for v in vals):.1f} |")
        ttft = statistics.median(v[0] for v in rows["cluster"]) - statistics.median(v[0] for v in rows["single"])
        tps = statistics.median(v[1] for v in rows["cluster"]) / statistics.median(v[1] for v in rows["single"])
        print(f"\nthe hop: TTFT {ttft * 1e3:+.1f} ms, tokens/s x{tps:.3f}")
    finally:
        single.stop()
    two = None
    if args.concurrent < 1:  # the hop only
        one.stop()
        return
    try:
        results = {}
        for name, make in (("1 replica", lambda: one), ("2 replicas", None)):
            if make is None:
                one.stop()
                two = Proc(["--replicas", "2", *args.server_args], ("cluster",)).wait()
                srv = two
            else:
                srv = make()
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(args.concurrent) as pool:
                done = list(pool.map(lambda i: stream(srv.url, args.n_predict, f"load-{i}"), range(args.concurrent)))
            results[name] = sum(n for _, _, n in done) / (time.perf_counter() - t0)
        ratio = results["2 replicas"] / results["1 replica"]
        print(f"\n{args.concurrent} concurrent requests: "
              + ", ".join(f"{k} {v:.1f} tokens/s" for k, v in results.items()) + f" (x{ratio:.2f})")
    finally:
        for srv in (one, two):
            if srv is not None and srv.proc.poll() is None:
                srv.stop()


if __name__ == "__main__":
    main()
