"""Counters move exactly as the requests dictate (real model, real HTTP)."""

from __future__ import annotations

import asyncio
import time

from tests.metrics.promtext import delta, total, value

IMPL = "ngram-mod"


async def test_counters_follow_requests(metrics_server):
    srv = metrics_server
    before = await srv.scrape()
    # Both slots at once, then the same prompt again: its slot still holds it (a prompt-cache hit).
    outs = list(await asyncio.gather(srv.repeat(), srv.repeat(seed=7)))
    outs.append(await srv.repeat())
    after = await srv.scrape()

    def d(name: str, **labels: str) -> float:
        return delta(after, before, name, **labels)

    timings = [o["timings"] for o in outs]
    n_gen = sum(o["tokens_predicted"] for o in outs)
    n_draft = sum(t.get("draft_n", 0) for t in timings)
    n_accepted = sum(t.get("draft_n_accepted", 0) for t in timings)
    assert n_accepted > 0, "the repetitive prompt should get drafts accepted"
    assert sum(t["predicted_n"] for t in timings) == n_gen

    assert d("slotserver_generated_tokens_total") == n_gen
    assert d("slotserver_spec_accepted_tokens_total", impl=IMPL) == n_accepted
    assert d("slotserver_spec_draft_tokens_total", impl=IMPL) == n_draft
    assert d("slotserver_spec_accepted_tokens_per_position_total", impl=IMPL) == n_accepted
    assert d("slotserver_spec_drafts_total", impl=IMPL) == d("slotserver_spec_calls_total", impl=IMPL, call="accept")
    assert d("slotserver_spec_drafts_accepted_total", impl=IMPL) <= d("slotserver_spec_drafts_total", impl=IMPL)
    assert d("slotserver_spec_calls_total", impl=IMPL, call="begin") == len(outs)
    assert d("slotserver_spec_call_duration_seconds_count", impl=IMPL, call="draft") == \
        d("slotserver_spec_calls_total", impl=IMPL, call="draft")
    assert d("slotserver_prompt_tokens_total") == sum(t["prompt_n"] for t in timings)
    assert d("slotserver_prompt_tokens_cached_total") == sum(t["cache_n"] for t in timings)
    assert timings[2]["cache_n"] > 0 and d("slotserver_prompt_cache_hits_total") >= 1
    assert d("slotserver_requests_finished_total") == len(outs)
    for hist in ("request_duration_seconds", "time_to_first_token_seconds"):
        assert d(f"slotserver_{hist}_count") == len(outs)
        assert d(f"slotserver_{hist}_bucket", le="+Inf") == len(outs)
    assert d("slotserver_inter_token_latency_seconds_count") == n_gen - len(outs)
    assert d("slotserver_http_requests_total", endpoint="/completion", outcome="success") == len(outs)
    assert d("slotserver_decode_batch_tokens_count") == d("slotserver_decode_calls_total") > 0
    assert d("slotserver_decode_slots_total") >= d("slotserver_decode_calls_total")
    # the same stats through llama-server's names
    assert d("llamacpp:tokens_predicted_total") == n_gen
    assert d("llamacpp:spec_decode_num_accepted_tokens_total") == n_accepted
    assert d("llamacpp:spec_decode_num_draft_tokens_total") == n_draft
    assert d("llamacpp:spec_decode_num_accepted_tokens_per_pos_total") == n_accepted
    assert d("llamacpp:n_decode_total") == d("slotserver_decode_calls_total")
    assert d("llamacpp:prompt_tokens_cached_total") == sum(t["cache_n"] for t in timings)
    assert d("llamacpp:prompt_tokens_total") == sum(t["prompt_n"] for t in timings)
    assert d("llamacpp:spec_decode_num_drafts_total") == d("slotserver_spec_drafts_total", impl=IMPL)
    # gauges once idle
    assert value(after, "slotserver_requests_processing") == value(after, "llamacpp:requests_processing") == 0
    assert value(after, "slotserver_requests_waiting") == 0
    cells = sum(len(s.cache) for s in srv.state.runner.slots)
    assert value(after, "slotserver_kv_cache_used_cells") == cells > 0
    assert value(after, "slotserver_ngram_mod_pool_used_entries") > 0
    assert total(after, "slotserver_sequence_tokens_max") >= max(o["tokens_evaluated"] + o["tokens_predicted"] - 1
                                                                 for o in outs)


async def test_draft_counts_in_timings_and_slots(metrics_server):
    """``timings.draft_n*`` in the response and per-job counts in GET /slots while generating."""
    srv = metrics_server
    task = asyncio.create_task(srv.repeat(n_predict=96))
    seen = None
    deadline = time.monotonic() + 120
    while not task.done() and time.monotonic() < deadline:
        status, slots = await srv.get("/slots")
        assert status == 200
        busy = [s for s in slots if s["is_processing"] and s["timings"]["draft_n"] > 0]
        if busy:
            seen = busy[0]["timings"]
            break
        await asyncio.sleep(0.01)
    out = await task
    assert seen is not None, "no slot showed draft counts while generating"
    assert 0 <= seen["draft_n_accepted"] <= seen["draft_n"]
    final = out["timings"]
    assert final["draft_n"] >= seen["draft_n"] > 0
    assert 0 < final["draft_n_accepted"] <= final["draft_n"]
