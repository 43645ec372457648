"""Every drafter type on the real model: lossless against no speculation, and drafts accepted."""

from __future__ import annotations

import pytest

from tests.conftest import ALL_TYPES, greedy_request, load_workloads
from tests.integration.ties import check_same_or_tie

WORKLOADS = load_workloads()


async def compare_all(server, baseline, kind: str) -> tuple[list[str], dict[str, int]]:
    """Workloads whose output differs (each checked to be a near-tie), and accepted drafts per workload."""
    differ, accepted = [], {}
    for wl in WORKLOADS:
        out = await server.complete(**greedy_request(wl, kind))
        if not check_same_or_tie(baseline[wl["name"]], out["tokens"], f"{kind} {wl['name']}"):
            differ.append(wl["name"])
        accepted[wl["name"]] = out["timings"].get("draft_n_accepted", 0)
    return differ, accepted


@pytest.mark.parametrize("kind", ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache"])
async def test_drafter_is_lossless_and_gets_drafts_accepted(server, baseline, kind):
    differ, accepted = await compare_all(server, baseline, kind)
    assert len(differ) <= 2, differ
    assert max(accepted.values()) > 0, accepted


async def test_full_chain_is_lossless(server, baseline):
    """All five drafters chained verify far more batches, so rounding has more chances to flip a
    near-tie: every difference must still be a tie (checked in compare_all), on at most 3 of 8."""
    differ, accepted = await compare_all(server, baseline, ALL_TYPES)
    assert len(differ) <= 3, differ
    assert sum(accepted.values()) > 0


async def test_per_request_limits_cut_drafts_and_show_in_slots(server):
    wl = next(w for w in WORKLOADS if w["name"] == "repeat")
    out = await server.complete(**greedy_request(wl, "ngram-simple", **{"speculative.n_max": 4}))
    t = out["timings"]
    steps = server.state.runner.stats.n_verify_steps
    assert t["draft_n"] > 0 and t["draft_n"] <= 4 * steps
    nested = await server.complete(**greedy_request(wl, "ngram-simple", speculative={"n_max": 4, "n_min": 4}))
    assert nested["tokens"] == out["tokens"]
