"""The cost model of draft-model speculation: when a draft token pays, and Leviathan et al.'s speedup."""

from __future__ import annotations

import pytest

from slotserver.speculation.draft_costs import OBSERVE_WEIGHT, DraftCosts, expected_speedup

# Target step 100 ms, each further target row 50 ms; draft step 20 ms, each further draft row 4 ms.
COSTS = DraftCosts(t_target_s=0.100, t_row_s=0.050, t_draft_s=0.020, t_draft_row_s=0.004)


def test_one_slot_drafting_alone_needs_the_draft_step_plus_a_row_over_a_target_step():
    assert COSTS.threshold(1, 1) == pytest.approx((0.020 + 0.050) / 0.100)  # 0.7
    assert COSTS.threshold(0, 0) == COSTS.threshold(1, 1)  # counts below one are one


def test_more_generating_slots_make_a_plain_token_cheaper_so_drafting_pays_less():
    # 4 slots: a plain token costs (100 + 3 * 50) / 4 = 62.5 ms
    assert COSTS.threshold(4, 1) == pytest.approx(0.070 / 0.0625)  # 1.12
    thresholds = [COSTS.threshold(n, 1) for n in (1, 2, 4, 8)]
    assert thresholds == sorted(thresholds) and thresholds[0] < thresholds[-1]


def test_slots_drafting_together_share_the_draft_decode():
    # 4 drafting: the draft step costs (20 + 3 * 4) / 4 = 8 ms per slot
    assert COSTS.threshold(1, 4) == pytest.approx((0.008 + 0.050) / 0.100)  # 0.58
    thresholds = [COSTS.threshold(4, n) for n in (1, 2, 4, 8)]
    assert thresholds == sorted(thresholds, reverse=True) and thresholds[0] > thresholds[-1]


def test_a_draft_as_costly_as_the_target_never_pays():
    same = DraftCosts(t_target_s=0.1, t_row_s=0.0, t_draft_s=0.1, t_draft_row_s=0.1)
    assert same.c == 1.0 and same.threshold(1, 1) == 1.0
    with_rows = DraftCosts(t_target_s=0.1, t_row_s=0.01, t_draft_s=0.1, t_draft_row_s=0.1)
    assert all(with_rows.threshold(n, m) >= 1.0 for n in (1, 2, 8) for m in (1, 2, 8))


def test_a_cheap_draft_with_free_rows_pays_at_low_acceptance():
    cheap = DraftCosts(t_target_s=0.1, t_row_s=0.0, t_draft_s=0.005, t_draft_row_s=0.0)
    assert cheap.threshold(1, 1) == pytest.approx(0.05)
    assert cheap.threshold(8, 4) == pytest.approx(0.00125 / 0.0125)  # 5 ms / 4 drafting over 100 ms / 8 slots


def test_c_and_as_dict_report_milliseconds_and_the_one_slot_threshold():
    assert COSTS.c == pytest.approx(0.2)
    assert COSTS.as_dict() == {"t_target_ms": 100.0, "t_row_ms": 50.0, "t_draft_ms": 20.0,
                               "t_draft_row_ms": 4.0, "c": 0.2, "pays_above_1_slot": 0.77}  # 0.7 x PAY_MARGIN


def test_observed_one_row_times_move_the_costs_a_little_at_a_time():
    slower = COSTS.observed(t_draft_s=0.04)  # serving measures a slower draft decode than calibration did
    assert slower.t_draft_s == pytest.approx(0.02 + OBSERVE_WEIGHT * 0.02)
    assert (slower.t_target_s, slower.t_row_s, slower.t_draft_row_s) == (0.1, 0.05, 0.004)
    for _ in range(200):
        slower = slower.observed(t_target_s=0.2, t_draft_s=0.04)
    assert slower.t_target_s == pytest.approx(0.2, rel=1e-3) and slower.t_draft_s == pytest.approx(0.04, rel=1e-3)


def test_expected_speedup_is_leviathans_formula():
    # (1 - a^(g+1)) / ((1 - a)(g c + 1)), by hand
    assert expected_speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.32768) / 0.2 / 1.4)  # 2.4011
    assert expected_speedup(0.5, 2, 0.5) == pytest.approx(1.75 / 2.0)
    assert expected_speedup(0.0, 5, 0.1) == pytest.approx(1 / 1.5)  # only the target's own token
    assert expected_speedup(0.5, 2, 0.5, r=0.25) == pytest.approx(1.75 / 2.5)  # a verified row costs r


def test_a_draft_always_accepted_yields_all_its_tokens_plus_one():
    assert expected_speedup(1.0, 3, 0.2) == pytest.approx(4 / 1.6)
    assert expected_speedup(1.0, 3, 0.2, r=0.5) == pytest.approx(4 / (0.6 + 1 + 1.5))


def test_with_this_cpus_costs_no_draft_length_pays_below_90_percent_acceptance():
    """c = 0.6 and r = 0.5: even a perfect draft gives (g+1)/(1.1 g + 1) < 1."""
    best = max(expected_speedup(a / 100, g, 0.6, r=0.5) for a in range(0, 91, 5) for g in range(1, 17))
    assert best == pytest.approx(1.9 / 2.1)  # alpha 0.9, one token
    assert best < 1.0
    assert expected_speedup(0.9, 1, 0.1) > 1.0  # a cheap draft with free rows would pay
