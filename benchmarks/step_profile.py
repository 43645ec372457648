"""Where the engine thread's time goes between decodes: wall time per method, per step.

`/metrics` says how much of a step is spent outside ``llama_decode`` (``step_seconds`` against
``decode_seconds``), not where. This runs the server with the engine thread's main methods wrapped
in timers (the wrappers cost about a microsecond a call) and writes microseconds per step for
each, sorted, to ``--out`` whenever the process gets SIGUSR1, then starts counting afresh:

    python -m benchmarks.step_profile --out /tmp/steps.txt -- -m MODEL --port 8302 --spec-type suffix &
    ...  # requests that should not count (warm-up, other workloads)
    kill -USR1 %1   # reset
    ...  # the requests to profile
    kill -USR1 %1 && cat /tmp/steps.txt

A method's time includes the methods it calls (``DraftChain.draft`` includes the drafter's own
``draft``). CPython only: the timers see Python frames, not llama.cpp's threads.
"""

from __future__ import annotations

import argparse
import collections
import functools
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from ngram import suffix, suffix_local, suffix_store
from slotserver import cli
from slotserver.engine import engine
from slotserver.serving import apply_rows as apply
from slotserver.serving import drafting, runner
from slotserver.speculation import chain, estimator
from slotserver.speculation import selection as spec_select

METHODS = [
    (runner.Runner, ["_step", "_collect_work", "_decode", "_count_decode"]),
    (apply.Applier, ["entry", "_verify", "_emit"]),
    (drafting.Drafting, ["for_slot", "select", "observe_decode"]),
    (chain.DraftChain, ["draft", "accept", "confidence", "selected"]),
    (estimator.Estimator, ["q", "score_rivals"]),
    (engine.Engine, ["decode", "argmax"]),
    (suffix.SuffixDrafter, ["draft"]),
    (suffix_local.LocalIndex, ["sync", "draft"]),
    (suffix_store.SuffixStore, ["draft"]),
]
FUNCTIONS = ["risk_cap", "best_rate", "probe_rows", "choose"]  # spec_select's, as chain and drafting call them

seconds: dict[str, float] = collections.defaultdict(float)
calls: collections.Counter[str] = collections.Counter()


def timed(name: str, f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - t0
            calls[name] += 1
    return wrapper


def install() -> None:
    for cls, names in METHODS:
        for name in names:
            setattr(cls, name, timed(f"{cls.__name__}.{name}", getattr(cls, name)))
    for name in FUNCTIONS:
        wrapped = timed(f"spec_select.{name}", getattr(spec_select, name))
        for module in (spec_select, drafting):  # estimator.py calls them through the module
            if hasattr(module, name):
                setattr(module, name, wrapped)


def report(out: Path) -> None:
    steps = calls["Runner._step"] or 1
    lines = [f"{name:32s} {1e6 * s / steps:9.1f} us/step  {calls[name]:7d} calls"
             for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])]
    out.write_text(f"{steps} steps\n" + "\n".join(lines) + "\n")
    seconds.clear()
    calls.clear()


def serve_instrumented(doc: str, default_out: str, install, write) -> None:
    """Run the server with ``install()``'s instruments; ``write(out)`` on every SIGUSR1. Arguments:
    ``--out`` (default ``default_out``), then after ``--`` slotserver's own."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", default=default_out, help="written on SIGUSR1")
    ap.add_argument("server_args", nargs=argparse.REMAINDER, help="after --: slotserver's arguments")
    args = ap.parse_args()
    install()
    out = Path(args.out)
    signal.signal(signal.SIGUSR1, lambda *_: write(out))
    sys.argv = ["slotserver", *[a for a in args.server_args if a != "--"]]
    cli.main()


if __name__ == "__main__":
    serve_instrumented(__doc__, "/tmp/step_profile.txt", install, report)
