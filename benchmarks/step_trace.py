"""Every step of the engine thread, one line each: when, how long ``llama_decode`` took, its rows.

`step_profile.py` sums where the time goes; this keeps each step, so a single request can be read
step by step: which draft was verified for how many rows, how many were accepted, what the step
cost. It runs the server with ``Engine.decode`` and ``DraftChain.accept`` wrapped and, on SIGUSR1,
writes what happened since the last signal to ``--out`` as JSON lines, then starts afresh:

    python -m benchmarks.step_trace --out /tmp/trace.jsonl -- -m MODEL --port 8302 --spec-type ngram-mod &
    kill -USR1 %1   # forget what came before
    ...             # the request to read
    kill -USR1 %1 && cat /tmp/trace.jsonl

Lines: ``{"decode": [[slot, rows, is_decode], ...], "t": s, "ms": ms}`` per ``llama_decode`` (a
prompt chunk has ``is_decode`` false) and ``{"accept": slot, "kind": "drafter:tag", "verified": n,
"accepted": m, "t": s}`` per verified draft (kind null: none or the oracle's).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.step_profile import serve_instrumented
from slotserver.engine import engine
from slotserver.speculation import chain

events: list[dict] = []


def install() -> None:
    decode, accept = engine.Engine.decode, chain.DraftChain.accept

    def traced_decode(self, plan):
        t0 = time.perf_counter()
        try:
            return decode(self, plan)
        finally:
            events.append({"decode": [[e.slot_id, len(e.tokens), e.is_decode] for e in plan.entries],
                           "t": round(t0, 6), "ms": round(1e3 * (time.perf_counter() - t0), 3)})

    def traced_accept(self, slot, n_verified, n_accepted):
        kind = self.winner_kind(slot)
        events.append({"accept": slot, "kind": ":".join(kind) if kind else None, "verified": n_verified,
                       "accepted": n_accepted, "t": round(time.perf_counter(), 6)})
        return accept(self, slot, n_verified, n_accepted)

    engine.Engine.decode = traced_decode
    chain.DraftChain.accept = traced_accept


def dump(out: Path) -> None:
    out.write_text("".join(json.dumps(e) + "\n" for e in events))
    events.clear()


if __name__ == "__main__":
    serve_instrumented(__doc__, "/tmp/step_trace.jsonl", install, dump)
