"""One request's speculation is one record per slot (``slot_record.py``): a request's end leaves nothing
of it behind, and the next request on the slot starts from a fresh record; only what is drafter-wide
(the estimator's estimates, the drafters' own structures) carries over."""

from __future__ import annotations

from slotserver.speculation import selection as sel
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits
from tests.slotserver.speculation.test_chain import Fixed
from tests.slotserver.speculation.test_chain_select import Tagged
from tests.slotserver.speculation.test_selection import GEMMA

LIMITS = DraftLimits(n_max=16)


def chain_of_two(select: str = "expected") -> DraftChain:
    return DraftChain([("ngram-simple", Tagged([5, 9, 9], "cold")), ("ngram-mod", Fixed([5] * 8))],
                      select=select, profile=GEMMA)


def one_request(chain: DraftChain, slot: int) -> None:
    """A request whose drafts are verified, rejected, cut to nothing and scored as rivals: every
    field of the slot's record gets something."""
    set_kind(chain, "cold")
    chain.begin(slot, [1, 2])
    history = [1, 2]
    for i in range(12):
        draft = chain.draft(slot, history, 3, LIMITS)
        n = 0 if i % 3 == 0 else min(2, len(draft))  # every third draft is cut to nothing
        chain.selected(slot, n)
        del draft[n:]
        n_acc = min(n, 1)
        chain.accept(slot, n, n_acc)
        history = history + [3] + draft[:n_acc]
    set_kind(chain, "late")  # the request's last draft is of a kind it drafted no other time, cut to nothing
    chain.draft(slot, history, 3, DraftLimits(n_max=16, types=frozenset({"ngram-simple"})))
    chain.selected(slot, 0)
    chain.accept(slot, 0, 0)
    rec = chain.slots[slot]
    assert rec.counts and rec.probes and rec.saved and rec.credit and rec.drafted
    assert rec.probes[("ngram-simple", "late")].n_denied == 1 and ("ngram-simple", "late") not in rec.counts


def set_kind(chain: DraftChain, tag: str) -> None:
    chain.drafters[0][1].tag = tag  # ngram-simple's


def test_a_requests_end_leaves_no_state_of_its_slot():
    chain = chain_of_two()
    one_request(chain, 0)
    one_request(chain, 1)
    chain.draft(1, [1, 2], 3, LIMITS)  # slot 1's request goes on
    chain.finish(0, [1, 2, 3])
    assert 0 not in chain.slots
    assert chain.confidence(0) == [] and chain.winner(0) is None
    assert chain.slots[1].draft is not None  # another slot's request is not touched


def test_the_next_request_on_a_slot_starts_fresh_but_the_drafter_wide_estimates_stay():
    for select in ("expected", "precedence"):
        used = chain_of_two(select)
        one_request(used, 0)
        used.finish(0, [1, 2, 3])
        fresh = chain_of_two(select)  # a chain that never served the slot, with the same drafter-wide estimates
        fresh.adopt_estimates(used.snapshot_estimates())
        set_kind(fresh, "late")
        for chain in (used, fresh):
            chain.begin(0, [4])
            chain.draft(0, [4], 3, DraftLimits(n_max=16, types=frozenset({"ngram-simple"})))
            chain.selected(0, 0)  # a denial: the first of this request
        assert used.slots[0] == fresh.slots[0]
        # The kind only ever denied in the last request is denied once in this one, not twice.
        assert used.slots[0].probes == {("ngram-simple", "late"): sel.Probe(n_denied=1)}
        assert used.estimator.drafter_wide == fresh.estimator.drafter_wide != {}


def test_a_context_shift_starts_the_slots_record_over_as_a_new_request_does():
    chain = chain_of_two()
    one_request(chain, 0)  # no finish: begin() again, as after a context shift
    chain.begin(0, [7])
    assert 0 not in chain.slots
    chain.draft(0, [7], 3, LIMITS)
    rec = chain.slots[0]
    assert (rec.counts, rec.probes, rec.quiet) == ({}, {}, 0)
    assert (rec.saved, rec.credit) == (sel.RISK_SHARE * GEMMA.step(1), sel.PROBE_SHARE * GEMMA.step(1))  # one step's

