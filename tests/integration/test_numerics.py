"""How far batched decoding moves logits on this build: the evidence behind TIE_LOGIT_GAP.

The no-speculation run computes each generated position with a one-token decode; a prompt that
contains the same tokens is computed in one batched decode. Any difference is pure numerics.
"""

from __future__ import annotations

import pytest

from tests.conftest import LiveServer, load_workloads
from tests.integration.ties import TIE_LOGIT_GAP

POSITIONS = (8, 16, 24, 32, 40, 48, 56, 64)


@pytest.fixture(scope="module")
async def server():
    """One slot of its own: on the suite's shared 4-slot unified cache, the cells earlier tests left
    behind (placed by the timing of concurrent requests) changed the attention reductions, and with
    them the measured moves, from one suite run to the next."""
    srv = await LiveServer(["-c", "4096", "-np", "1"]).start()
    yield srv
    await srv.stop()


async def test_batched_logits_move_more_than_the_tie_bound(server):
    wl = next(w for w in load_workloads() if w["name"] == "humaneval0")
    single = await server.complete(prompt=wl["prompt"], n_predict=max(POSITIONS) + 1, temperature=0.0,
                                   n_probs=2, return_tokens=True, cache_prompt=False,
                                   **{"speculative.type": "none"})
    _, tok = await server.post("/tokenize", {"content": wl["prompt"], "add_special": True})
    moves = []
    for k in POSITIONS:
        batched = await server.complete(prompt=tok["tokens"] + single["tokens"][:k], n_predict=1,
                                        temperature=0.0, n_probs=2, cache_prompt=False,
                                        **{"speculative.type": "none"})
        a = single["completion_probabilities"][k]["top_logprobs"]
        b = {c["id"]: c["logprob"] for c in batched["completion_probabilities"][0]["top_logprobs"]}
        # the gap between the top two candidates, single-token vs batched
        gap_single = a[0]["logprob"] - a[1]["logprob"]
        if a[0]["id"] in b and a[1]["id"] in b:
            moves.append(abs(gap_single - (b[a[0]["id"]] - b[a[1]["id"]])))
    print(f"top-2 logit gap moved by batching: {[round(m, 3) for m in moves]}")
    # One batched decode alone moves the gap by more than the 0.1 the issue first proposed, and by
    # 0.2-0.37 depending on the batch and KV layout (speculation compounds it over a run): the tie
    # bound must be of that order, not smaller.
    assert moves and max(moves) > 0.1 and TIE_LOGIT_GAP < 4 * max(moves)
