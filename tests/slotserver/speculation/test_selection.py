"""Expected-value drafting, pure: the verify-cost profile, acceptance estimates, and the selection
against a brute-force search over every way to cut the step's drafts."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slotserver.engine.verify_costs import MIN_STEP_SHARE, VerifyProfile
from slotserver.speculation import selection as sel

# Shaped like Gemma 3 270M on this CPU (ms): a first row is dear, further rows cheaper, 5 > 8.
GEMMA = VerifyProfile(rows=(1, 2, 4, 5, 8, 16, 32), t_rows_s=(0.0176, 0.025, 0.0475, 0.08, 0.0746, 0.132, 0.2507),
                      t_seq_s=0.002, t_input_row_s=0.003, t_depth_row_s=1e-6, depth=256)


def test_profile_interpolates_extrapolates_and_floors():
    assert GEMMA.t_out(1) == 0.0176 and GEMMA.t_out(0) == 0.0176
    assert GEMMA.t_out(3) == pytest.approx((0.025 + 0.0475) / 2)
    assert GEMMA.t_out(64) == pytest.approx(0.2507 + (0.2507 - 0.132) * 2)  # the last slope
    assert GEMMA.step(2, 2, 10, 100) == pytest.approx(0.025 + 0.002 + 0.03 + 1e-4)
    assert GEMMA.step(1, depth_rows=-1e9) == MIN_STEP_SHARE * 0.0176
    assert GEMMA.ceiling() == (32, pytest.approx(32 / 0.2507))
    assert VerifyProfile.from_dict(GEMMA.to_dict()) == GEMMA
    with pytest.raises(ValueError):
        VerifyProfile(rows=(2, 4), t_rows_s=(1.0, 2.0), t_seq_s=0, t_input_row_s=0, t_depth_row_s=0, depth=0)
    with pytest.raises(ValueError):
        VerifyProfile(rows=(1, 2), t_rows_s=(1.0,), t_seq_s=0, t_input_row_s=0, t_depth_row_s=0, depth=0)


def test_counts_stop_at_the_first_rejection_and_decay():
    c = sel.Counts()
    c.update(8, 3, 1.0)  # positions 0,1,2 accepted, 3 rejected; 4..7 say nothing
    assert c.tried[:4] == [1.0, 1.0, 2.0, 0.0] and c.acc[:4] == [1.0, 1.0, 1.0, 0.0]
    c.update(2, 2, 0.5)
    assert c.tried[:3] == [1.5, 1.5, 1.0] and c.acc[:3] == [1.5, 1.5, 0.5]
    assert [sel.bin_of(p) for p in (0, 1, 2, 3, 4, 7, 8, 63, 64, 1000)] == [0, 1, 2, 2, 3, 3, 4, 6, 7, 7]


def test_empty_bins_borrow_the_bin_before_and_slots_lean_on_the_drafter():
    c = sel.Counts()
    assert c.probs(None, 2.0) == [sel.PRIOR_P] * sel.N_BINS
    for _ in range(20):
        c.update(4, 4, 1.0)  # positions 0..3 always accepted, never anything further
    p = c.probs(None, 2.0)
    assert p[0] > 0.95 and p[3:] == [p[2]] * (sel.N_BINS - 3)  # later positions trusted as far
    own = sel.Counts()
    own.update(1, 0, 1.0)  # this slot's one draft failed at once
    mine = own.probs(p, sel.SLOT_WEIGHT)
    assert mine[0] == pytest.approx((0 + sel.SLOT_WEIGHT * p[0]) / (1 + sel.SLOT_WEIGHT)) and mine[1] == p[1]


def test_cumulative_and_probe_certainty():
    p = [0.5] * sel.N_BINS
    assert sel.cumulative(p, 3) == [0.5, 0.25, 0.125]
    assert sel.cumulative(p, 3, n_sure=2) == [1.0, 1.0, 0.5]


def test_probe_doubles_while_failing_and_resets_on_success():
    pr = sel.Probe()
    for _ in range(sel.PROBE_MIN):
        assert not pr.due()
        pr.denied()
    assert pr.due()
    pr.probing = True
    pr.verified(sel.PROBE_ROWS, 0)
    assert (pr.n_denied, pr.next_at) == (0, 2 * sel.PROBE_MIN)
    pr.probing = True
    pr.verified(sel.PROBE_ROWS, sel.PROBE_ROWS)
    assert pr.next_at == sel.PROBE_MIN


def rate(offers, counts, profile, n_input=0):
    n = len(offers)
    tokens = n + sum(sum(o.q[:k]) for o, k in zip(offers, counts))
    depth_rows = sum(o.depth - profile.depth for o in offers) + sum(k * (o.depth - profile.depth)
                                                                      for o, k in zip(offers, counts))
    return tokens / profile.step(n + sum(counts), n, n_input, depth_rows)


def q_lists():
    """Non-increasing cumulative probabilities of a draft of up to 6 tokens."""
    return st.lists(st.floats(0.0, 1.0), max_size=6).map(
        lambda ps: [q for q in itertools.accumulate(ps, lambda a, b: a * b)])


@settings(max_examples=300, deadline=None)
@given(qs=st.lists(q_lists(), min_size=1, max_size=3), n_input=st.integers(0, 20))
def test_choose_finds_the_best_cut_of_every_draft(qs, n_input):
    """With every slot at the profile's depth the cost depends on the row count only, so the best
    cut for k rows takes the k most likely tokens: choose must reach the brute-force optimum."""
    offers = [sel.Offer(q, GEMMA.depth) for q in qs]
    counts = sel.choose(offers, GEMMA, n_input=n_input)
    best = max(rate(offers, c, GEMMA, n_input) for c in itertools.product(*(range(len(q) + 1) for q in qs)))
    assert rate(offers, counts, GEMMA, n_input) == pytest.approx(best)
    assert all(0 <= c <= len(q) for c, q in zip(counts, qs))


def test_choose_verifies_sure_drafts_to_the_best_length_and_nothing_unlikely():
    sure = max(range(65), key=lambda k: (1 + k) / GEMMA.t_out(1 + k))  # the best rows per second
    assert sel.choose([sel.Offer([1.0] * 64, 256)], GEMMA) == [sure]
    assert sel.choose([sel.Offer([1.0] * 3, 256)], GEMMA) == [3]  # 4 rows beat 1, though 5 would cost more
    assert sel.choose([sel.Offer([0.2, 0.04], 256)], GEMMA) == [0]  # a 20% token does not pay a row
    assert sel.choose([sel.Offer([1.0] * 64, 256)], GEMMA, room=8) == [8]
    assert sel.choose([], GEMMA) == []
    # Two slots: rows go to the likelier draft first.
    assert sel.choose([sel.Offer([0.99, 0.98], 256), sel.Offer([0.3], 256)], GEMMA) == [2, 0]


def test_best_rate_orders_offers_by_what_they_are_worth():
    assert sel.best_rate([], GEMMA) == pytest.approx(1 / 0.0176)
    assert sel.best_rate([1.0] * 32, GEMMA) > sel.best_rate([0.9] * 4, GEMMA) > sel.best_rate([0.1], GEMMA)


def saw_tooth(n_rows: int) -> float:
    """Gemma 3's measured shape: rows four at a time (2 ms per row), each row left over 13 ms."""
    return 0.030 + 0.002 * (n_rows // 4 * 4) + 0.013 * (n_rows % 4)


def test_a_dense_table_keeps_the_saw_tooth_and_repeats_it_beyond_its_end():
    rows = tuple(range(1, 66))
    p = VerifyProfile(rows=rows, t_rows_s=tuple(saw_tooth(r) for r in rows), t_seq_s=0, t_input_row_s=0,
                      t_depth_row_s=0, depth=256)
    assert p.t_out(17) > p.t_out(20) and p.t_out(65) > p.t_out(64)  # not smoothed away
    period = saw_tooth(65) - saw_tooth(49)
    assert p.t_out(66) == pytest.approx(saw_tooth(50) + period)  # 66 = 50 + 16: the same remainder
    assert p.t_out(96) == pytest.approx(saw_tooth(64) + 2 * period)
    assert p.t_out(97) > p.t_out(96) < p.t_out(95)
    # The oracle's choice: all 64 tokens of a sure draft would be 65 rows; 63 tokens (64 rows) yield
    # more per second, since the 65th row costs 13 ms for one token.
    assert sel.choose([sel.Offer([1.0] * 64, 256)], p) == [63]
    # Four sure drafts in one cache: the step's total rows end on a multiple of four.
    counts = sel.choose([sel.Offer([1.0] * 10, 256) for _ in range(4)], p)
    assert (4 + sum(counts)) % 4 == 0


def test_serving_refines_the_table():
    from slotserver.engine.verify_costs import OBSERVE_WEIGHT

    p = VerifyProfile(rows=(1, 2), t_rows_s=(0.02, 0.03), t_seq_s=0, t_input_row_s=0, t_depth_row_s=1e-6, depth=256)
    p.observe(1, 0.04, depth_rows=0)
    assert p.t_rows_s[0] == pytest.approx(0.02 + OBSERVE_WEIGHT * 0.02)
    p.observe(2, 0.03 + 1e-6 * 2000, depth_rows=2000)  # the depth term is taken out first
    assert p.t_rows_s[1] == pytest.approx(0.03)
    assert len(p.t_rows_s) == 2


def test_row_counts_between_or_beyond_the_measured_ones_refine_their_neighbours():
    from slotserver.engine.verify_costs import OBSERVE_WEIGHT

    p = VerifyProfile(rows=(1, 48, 64), t_rows_s=(0.02, 0.19, 0.25), t_seq_s=0, t_input_row_s=0, t_depth_row_s=0,
                      depth=256)
    p.observe(56, 1.2 * p.t_out(56))  # halfway: 20% slower moves 48 and 64 by half a step each
    assert p.t_rows_s[0] == 0.02
    assert p.t_rows_s[1] == pytest.approx(0.19 * (1 + OBSERVE_WEIGHT * 0.5 * 0.2))
    assert p.t_rows_s[2] == pytest.approx(0.25 * (1 + OBSERVE_WEIGHT * 0.5 * 0.2))
    before = p.t_rows_s
    p.observe(65, 1.3 * p.t_out(65))  # a 64-token draft: beyond the table, the last row count follows
    assert p.t_rows_s[:2] == before[:2] and p.t_rows_s[2] == pytest.approx(before[2] * (1 + OBSERVE_WEIGHT * 0.3))
    for _ in range(200):  # a machine 30% slower at 65 rows: the 64-row time gets there
        p.observe(65, 1.3 * 0.25 + 1.3 * (0.25 - 0.19) / 16)
    assert p.t_out(65) == pytest.approx(1.3 * 0.25 + 1.3 * (0.25 - 0.19) / 16, rel=0.02)


def test_a_profile_of_one_row_count_extrapolates_without_dividing_by_zero():
    """A small context leaves room to measure one row only (-c 2048 -np 2 did, and the engine died)."""
    p = VerifyProfile(rows=(1,), t_rows_s=(0.02,), t_seq_s=0, t_input_row_s=0, t_depth_row_s=0, depth=256)
    assert p.t_out(3) == pytest.approx(0.06)
    assert sel.choose([sel.Offer([1.0] * 4, 256)], p) == [0]  # no row is cheaper than a step: nothing pays


def test_a_drafters_own_estimates_are_the_prior_position_by_position():
    h = sel.hint([1.0, 1.0, 0.5, 0.25])
    assert h == [sel.HINT_MAX, sel.HINT_MAX, 0.5, 0.5]
    assert sel.hint_class([1.0, 0.5]) == "sure" and sel.hint_class([0.6]) == "likely" and sel.hint_class([0.1]) == "unsure"
    c = sel.Counts()
    assert c.position_probs(h, sel.PRIOR_WEIGHT) == pytest.approx(h)  # no data: the drafter's word
    c.update(4, 1, 1.0)  # positions 0 and 1 tried, position 0 accepted
    p = c.position_probs(h, sel.PRIOR_WEIGHT)
    assert p[0] == pytest.approx((1 + 2 * sel.HINT_MAX) / 3) and p[1] == pytest.approx(2 * sel.HINT_MAX / 3)
    assert p[2] == pytest.approx(0.5) and p[3] == pytest.approx(0.5)  # bin 2 never tried
    assert sel.product([0.5, 0.5, 0.5], n_sure=1) == [1.0, 0.5, 0.25]


def test_stream_ubatches_follow_llama_cpps_split_equal():
    assert sel.stream_ubatches([1, 1, 1, 1]) == [(4, 4)]  # every slot one row: one graph
    assert sel.stream_ubatches([41, 1, 1, 1]) == [(4, 4), (40, 1)]  # the long draft's rest alone
    assert sel.stream_ubatches([3, 5, 2]) == [(6, 3), (2, 2), (2, 1)]
    assert sel.stream_ubatches([]) == []


def test_with_kv_streams_a_long_draft_beside_single_rows_pays_for_its_own_graph():
    """Per-slot KV streams: one slot's 64 sure tokens beside three slots without drafts cost a
    graph of 4 rows plus one of the draft's rows; the selection weighs exactly that and never
    verifies more than with a unified cache (where the rows join one graph)."""
    offers = [sel.Offer([1.0] * 64, GEMMA.depth)] + [sel.Offer([], GEMMA.depth)] * 3
    unified = sel.choose(offers, GEMMA)
    streams = sel.choose(offers, GEMMA, streams=True)
    assert streams[1:] == unified[1:] == [0, 0, 0] and 0 < streams[0] <= unified[0]

    def rate(k: int) -> float:
        return (4 + k) / sel.step_cost(GEMMA, [k, 0, 0, 0], 0, 0.0, True)

    assert rate(streams[0]) == pytest.approx(max(rate(k) for k in range(65)))
    # One slot is one graph either way.
    assert sel.choose(offers[:1], GEMMA, streams=True) == sel.choose(offers[:1], GEMMA)
    # Equal rows on every slot: one graph, the unified cost.
    assert sel.step_cost(GEMMA, [3, 3], 5, 0.0, True) == pytest.approx(sel.step_cost(GEMMA, [3, 3], 5, 0.0, False))


def test_the_risk_cap_grows_with_what_drafts_saved_and_never_goes_below_a_probe():
    t1 = GEMMA.step(1)
    first = sel.risk_cap(GEMMA, 0.0, 64)
    assert GEMMA.step(1 + first) - t1 <= sel.RISK_STEPS * t1 < GEMMA.step(2 + first) - t1
    assert first < 64 and sel.risk_cap(GEMMA, 0.1, 64) > first  # 100 ms saved: more rows may be risked
    assert sel.risk_cap(GEMMA, -1.0, 64) == sel.probe_rows(GEMMA)  # drafts that cost: only probe-sized
    assert sel.risk_cap(GEMMA, 0.0, 2) == 2 and sel.risk_cap(GEMMA, 10.0, 64) == 64
    assert sel.saved_s(GEMMA, 4, 4) == pytest.approx(5 * t1 - GEMMA.step(5))
    assert sel.saved_s(GEMMA, 4, 0) < 0 < sel.saved_s(GEMMA, 4, 4)


def test_a_probe_verifies_what_costs_at_most_half_a_plain_step_more():
    """Measured on this machine: on SmolLM2 (rows 1, 2, 3, 4, 5: 16.9, 18.0, 25.9, 31.2, 39.4 ms)
    a probe of 4 tokens costs 2.3 plain steps and one token 1.07: probes verify one token; on
    Gemma 3 (22.4, 22.4, 26.7, 29.8, 44.7 ms) three."""
    def measured(t_ms):
        return VerifyProfile(rows=(1, 2, 3, 4, 5), t_rows_s=tuple(t / 1000 for t in t_ms), t_seq_s=0,
                             t_input_row_s=0, t_depth_row_s=0, depth=0)

    smollm2, gemma = measured((16.9, 18.0, 25.9, 31.2, 39.4)), measured((22.4, 22.4, 26.7, 29.8, 44.7))
    assert sel.probe_rows(smollm2) == 1 and sel.probe_rows(gemma) == 3
    for p in (smollm2, gemma, GEMMA):
        k = sel.probe_rows(p)
        assert p.step(1 + k) <= (1 + sel.PROBE_COST) * p.step(1)
        assert k == sel.PROBE_ROWS or p.step(2 + k) > (1 + sel.PROBE_COST) * p.step(1)
    flat = measured((10.0, 10.0, 10.0, 10.0, 10.0))  # rows cost nothing more: the longest probe
    assert sel.probe_rows(flat) == sel.PROBE_ROWS == sel.probe_rows(None)
    assert sel.probe_rows(measured((10.0, 100.0, 100.0, 100.0, 100.0))) == 1  # never fewer than one token
    # A second row that costs a whole plain step (Gemma 3 with weight repacking, 2026-11-26): a
    # one-token probe could never pay, even accepted, so the step would never verify it; two can.
    repacked = measured((11.0, 22.7, 29.3, 32.2, 40.3))
    assert sel.min_paying(repacked) == 2 == sel.probe_rows(repacked)
    assert (1 + 2) / repacked.step(3) > 1 / repacked.step(1) > (1 + 1) / repacked.step(2)


def test_a_probe_is_judged_by_its_own_length():
    """A probe that verified more tokens than its length (its estimates allowed more) succeeds
    once its length was accepted: on SmolLM2 a probe is one token, not PROBE_ROWS."""
    pr = sel.Probe(n_denied=sel.PROBE_MIN, probing=True)
    pr.verified(3, 1, rows=1)
    assert pr.next_at == sel.PROBE_MIN
    pr = sel.Probe(n_denied=sel.PROBE_MIN, probing=True)
    pr.verified(3, 0, rows=1)
    assert pr.next_at == 2 * sel.PROBE_MIN
