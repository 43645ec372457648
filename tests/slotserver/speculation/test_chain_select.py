"""The chain's estimates and drafter choice (--spec-select), on fake drafters and a fixed profile."""

from __future__ import annotations

import math

import pytest

from slotserver.speculation import selection as sel
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits
from tests.slotserver.speculation.test_chain import Fixed
from tests.slotserver.speculation.test_selection import GEMMA

LIMITS = DraftLimits(n_max=16)


class Tagged(Fixed):
    """Tells the chain which kind of draft it made, as ngram-mod's pool and cold drafts."""

    def __init__(self, tokens, tag):
        super().__init__(tokens)
        self.tag = tag

    def draft_tag(self, slot):
        return self.tag


def run(chain, slot, n_accepted_of):
    """One step: draft, verify it whole, accept ``n_accepted_of(len(draft))``."""
    draft = chain.draft(slot, [1], 1, LIMITS)
    chain.accept(slot, len(draft), n_accepted_of(len(draft)))
    return draft


def test_per_request_select_overrides_the_chain():
    chain = DraftChain([("ngram-simple", Fixed([7])), ("ngram-mod", Fixed([5] * 16))], profile=GEMMA)
    assert chain.select == "precedence"
    chain.estimator.drafter_wide[("ngram-mod", "")] = sel.Counts()
    for _ in range(10):
        chain.estimator.drafter_wide[("ngram-mod", "")].update(16, 16, 1.0)  # ngram-mod's drafts are always accepted
    assert chain.draft(0, [1], 1, LIMITS) == [7]
    assert chain.draft(0, [1], 1, DraftLimits(n_max=16, select="expected")) == [5] * 16


def test_estimates_rise_with_accepted_drafts_and_fall_with_rejected_ones():
    chain = DraftChain([("ngram-mod", Fixed(list(range(16))))], profile=GEMMA)
    chain.begin(0, [1])
    chain.draft(0, [1], 1, LIMITS)
    q0 = chain.confidence(0)
    assert q0[0] == pytest.approx(sel.PRIOR_P)
    assert len(q0) == sel.risk_cap(GEMMA, 0.0, 16)  # what a request's first draft may risk
    chain.accept(0, 16, 16)
    for _ in range(5):
        run(chain, 0, lambda n: n)
    chain.draft(0, [1], 1, LIMITS)
    assert len(chain.confidence(0)) == 16
    assert chain.confidence(0)[len(q0) - 1] > 0.9 > q0[-1]
    chain.accept(0, 16, 16)
    for _ in range(5):
        run(chain, 0, lambda n: 0)
    chain.draft(0, [1], 1, LIMITS)
    assert chain.confidence(0)[0] < 0.5


def test_expected_mode_takes_the_drafter_with_the_better_record_precedence_does_not():
    good, bad = Fixed([5] * 16), Fixed([7] * 16)
    # ngram-simple comes first in precedence; here it is the one whose drafts fail.
    for select, want in (("expected", [5] * 16), ("precedence", [7] * 16)):
        chain = DraftChain([("ngram-simple", bad), ("ngram-mod", good)], select=select, profile=GEMMA)
        chain.begin(0, [1])
        for key, n_acc in ((("ngram-simple", ""), 0), (("ngram-mod", ""), 16)):
            chain.estimator.drafter_wide[key] = sel.Counts()
            for _ in range(10):
                chain.estimator.drafter_wide[key].update(16, n_acc, 1.0)
        assert chain.draft(0, [1], 1, LIMITS) == want
        chain.accept(0, 16, 16 if want == [5] * 16 else 0)
        assert bad.accepted[-1][1] is (want == [5] * 16)  # the loser hears it as another's draft


def test_without_a_profile_expected_falls_back_to_precedence():
    chain = DraftChain([("ngram-simple", Fixed([7])), ("ngram-mod", Fixed([5]))], select="expected")
    assert chain.draft(0, [1], 1, LIMITS) == [7]
    with pytest.raises(ValueError):
        DraftChain([], select="fastest")


def test_tags_keep_separate_estimates():
    d = Tagged([3] * 8, "pool")
    chain = DraftChain([("ngram-mod", d)], profile=GEMMA)
    chain.begin(0, [1])
    for _ in range(6):
        run(chain, 0, lambda n: n)
    d.tag = "cold"
    chain.draft(0, [1], 1, LIMITS)
    pool_q = chain.estimator.drafter_wide[("ngram-mod", "pool")].probs(None, sel.PRIOR_WEIGHT)[0]
    # nothing known of cold drafts yet: expected to do what the drafter's other drafts did
    assert chain.confidence(0)[0] == pytest.approx(pool_q) and pool_q > sel.PRIOR_P
    assert set(chain.estimates()) == {"ngram-mod:pool"}
    chain.accept(0, 8, 0)  # then their own record takes over
    for _ in range(5):
        run(chain, 0, lambda n: 0)
    chain.draft(0, [1], 1, LIMITS)
    assert chain.confidence(0)[0] < 0.5 < pool_q
    assert chain.estimator.drafter_wide[("ngram-mod", "pool")].probs(None, sel.PRIOR_WEIGHT)[0] == pytest.approx(pool_q, abs=0.05)


def test_a_drafter_without_other_kinds_starts_from_the_prior():
    chain = DraftChain([("ngram-mod", Tagged([3] * 8, "cold")), ("suffix", Fixed([4] * 8))], profile=GEMMA)
    chain.estimator.drafter_wide[("suffix", "")] = sel.Counts()
    chain.estimator.drafter_wide[("suffix", "")].update(8, 8, 1.0)  # another drafter's record is not this one's
    chain.begin(0, [1])
    chain.draft(0, [1], 1, DraftLimits(n_max=16, types=frozenset({"ngram-mod"})))
    assert chain.confidence(0)[0] == pytest.approx(sel.PRIOR_P)


def test_drafts_cut_to_nothing_are_skipped_then_probed_when_the_slot_can_afford_it():
    chain = DraftChain([("ngram-mod", Fixed([4] * 8))], profile=GEMMA)
    chain.begin(0, [1])
    for _ in range(4):
        run(chain, 0, lambda n: 0)  # the slot's drafts fail: its estimates fall
    # A probe costs more than a plain step on this profile; the slot earns PROBE_SHARE of one a step.
    steps_to_afford = math.ceil(sel.probe_cost(GEMMA) / (sel.PROBE_SHARE * GEMMA.step(1)))
    n_denied = 0
    while True:
        chain.draft(0, [1], 1, LIMITS)
        if chain.confidence(0)[0] == 1.0:
            break
        assert chain.confidence(0)[0] < 0.5
        chain.selected(0, 0)  # the step verified none of it
        chain.accept(0, 0, 0)
        n_denied += 1
    assert chain.stats["ngram-mod"].n_skipped == n_denied
    n_steps = 4 + n_denied + 1  # the step of the probe: PROBE_MIN denials past, and the credit earned
    assert n_steps == max(4 + sel.PROBE_MIN + 1, steps_to_afford) and steps_to_afford > 4 + sel.PROBE_MIN + 1
    n_probe = sel.probe_rows(GEMMA)
    assert chain.confidence(0)[:n_probe] == [1.0] * n_probe  # a probe is due
    chain.selected(0, n_probe)
    chain.accept(0, n_probe, 0)  # the probe failed: the next one waits twice as long
    assert chain.slots[0].probes[("ngram-mod", "")].next_at == 2 * sel.PROBE_MIN
    chain.draft(0, [1], 1, LIMITS)  # and its cost was taken from the slot's credit
    assert chain.slots[0].credit < sel.probe_cost(GEMMA)


def test_begin_forgets_the_slot_but_not_the_drafter():
    chain = DraftChain([("ngram-mod", Fixed([4] * 8))], profile=GEMMA)
    chain.begin(0, [1])
    for _ in range(4):
        run(chain, 0, lambda n: 0)
    chain.draft(0, [1], 1, LIMITS)
    slot_q = chain.confidence(0)[0]
    chain.accept(0, 0, 0)
    chain.begin(0, [2])
    chain.draft(0, [1], 1, LIMITS)
    q = chain.confidence(0)[0]
    assert slot_q < q < sel.PRIOR_P  # the drafter-wide record stays, the slot's own is gone


class Estimating(Tagged):
    """Gives its own probability per draft token, as the suffix drafter."""

    def __init__(self, tokens, tag, probs):
        super().__init__(tokens, tag)
        self.probs = probs

    def draft_probs(self, slot):
        return list(self.probs)


def test_a_drafters_estimates_are_the_prior_and_sure_drafts_learn_apart():
    sure = Estimating(list(range(16)), "global", [1.0] * 16)
    chain = DraftChain([("suffix", sure)], profile=GEMMA)
    chain.begin(0, [1])
    chain.draft(0, [1], 1, LIMITS)
    cap = sel.risk_cap(GEMMA, 0.0, 16)
    assert chain.confidence(0) == pytest.approx(sel.product([sel.HINT_MAX] * cap))  # trusted at once
    assert chain.confidence(0)[-1] > 0.8 > sel.PRIOR_P
    chain.accept(0, 16, 16)
    assert ("suffix", "global:sure") in chain.estimator.drafter_wide
    sure.probs = [0.3, 0.15]  # an unsure draft: its own class, its own estimates
    sure.tokens = [1, 2]
    chain.draft(0, [1], 1, LIMITS)
    assert chain.confidence(0) == pytest.approx([0.3, 0.15])
    chain.accept(0, 2, 0)
    assert chain.estimator.drafter_wide[("suffix", "global:unsure")].tried[0] == 1
    assert chain.estimator.drafter_wide[("suffix", "global:sure")].tried[0] == 1  # untouched by the unsure draft


def test_a_request_risks_a_few_plain_steps_until_its_drafts_pay():
    """Drafter-wide estimates say drafts are always accepted; this request's are not: its drafts
    are capped at what RISK_STEPS plain steps buy, then at a probe's length once they cost more than
    they saved, and a new request starts from the first cap again."""
    chain = DraftChain([("ngram-mod", Fixed([5] * 16))], profile=GEMMA)
    key = ("ngram-mod", "")
    chain.estimator.drafter_wide[key] = sel.Counts()
    for _ in range(20):
        chain.estimator.drafter_wide[key].update(16, 16, 1.0)
    first = sel.risk_cap(GEMMA, 0.0, 16)
    chain.begin(0, [1])
    chain.draft(0, [1], 1, LIMITS)
    assert len(chain.confidence(0)) == first
    chain.accept(0, first, 0)
    assert chain.slots[0].saved < 0
    chain.draft(0, [1], 1, LIMITS)
    second = len(chain.confidence(0))  # what the first loss left of the RISK_STEPS
    assert second == sel.risk_cap(GEMMA, sel.saved_s(GEMMA, first, 0), 16) < first
    chain.accept(0, second, 0)
    chain.draft(0, [1], 1, LIMITS)
    assert len(chain.confidence(0)) == sel.probe_rows(GEMMA) < second
    chain.accept(0, 0, 0)
    chain.begin(0, [1])
    chain.draft(0, [1], 1, LIMITS)
    assert len(chain.confidence(0)) == first


def test_a_first_draft_late_in_an_answer_with_nothing_to_draft_risks_less():
    """Steps before a slot's first draft halve its base budget every RISK_HALF of them and add no
    RISK_SHARE: a short match late in an answer that repeated nothing is a common phrase more
    often than a copy. A new request starts from the whole budget again."""
    drafter = Script([])
    chain = DraftChain([("ngram-mod", drafter)], profile=GEMMA)
    chain.begin(0, [1])
    quiet = 2 * int(sel.RISK_HALF)
    for _ in range(quiet):
        assert chain.draft(0, [1], 1, LIMITS) == []
    drafter.next = [5] * 16
    chain.draft(0, [1], 1, LIMITS)
    late = len(chain.confidence(0))
    assert late == sel.risk_cap(GEMMA, sel.RISK_SHARE * GEMMA.step(1), 16, quiet)  # the draft's own step accrues
    assert sel.probe_rows(GEMMA) <= late < sel.risk_cap(GEMMA, 0.0, 16)
    chain.accept(0, late, late)
    for _ in range(2):
        run(chain, 0, lambda n: n)
    chain.draft(0, [1], 1, LIMITS)
    assert len(chain.confidence(0)) > late  # what its drafts saved widens the cap as before
    chain.begin(0, [1])
    chain.draft(0, [1], 1, LIMITS)
    assert len(chain.confidence(0)) == sel.risk_cap(GEMMA, sel.RISK_SHARE * GEMMA.step(1), 16)


def test_a_slot_the_draft_model_drafts_for_is_not_quiet():
    """The chain's drafters have nothing, the draft model has a draft every step: those steps are
    not quiet, so the draft model's drafts keep the whole budget however long the answer."""
    chain = DraftChain([("ngram-mod", Script([]))], model=True, profile=GEMMA)
    chain.begin(0, [1])
    for _ in range(3 * int(sel.RISK_HALF)):
        assert chain.draft(0, [1], 1, LIMITS) == []
        draft = chain.adopt(0, [5] * 16, LIMITS)
        assert len(chain.confidence(0)) == sel.risk_cap(GEMMA, chain.slots[0].saved, len(draft))
        chain.accept(0, 0, 0)
    assert chain.slots[0].quiet == 0


class Script:
    """Proposes whatever the test sets in ``.next`` (the same every call until changed)."""

    def __init__(self, tokens):
        self.next = tokens

    def begin(self, slot, prompt):
        pass

    def draft(self, slot, history, last_token, n_max):
        return list(self.next)

    def accept(self, slot, n_accepted, is_other):
        pass


class Follows:
    """Drafts the next ``k`` tokens of a known output after the context (right, as far as it goes)."""

    def __init__(self, output, k):
        self.output, self.k = output, k

    def begin(self, slot, prompt):
        pass

    def draft(self, slot, history, last_token, n_max):
        n = len(history) + 1
        return list(self.output[n : n + self.k])

    def accept(self, slot, n_accepted, is_other):
        pass


def test_a_losing_drafter_learns_how_far_its_draft_would_have_been_accepted():
    # ngram-mod's record makes it win every step with 2-token drafts; ngram-simple's 8-token
    # drafts are just as right but it missed once, so it loses. The next step's context shows what
    # came after each draft, so its estimate recovers without being verified, and it wins.
    output = list(range(100, 300))
    chain = DraftChain([("ngram-simple", Follows(output, 8)), ("ngram-mod", Follows(output, 2))],
                       select="expected", profile=GEMMA)
    chain.begin(0, output[:1])
    chain.estimator.drafter_wide[("ngram-simple", "")] = sel.Counts()
    chain.estimator.drafter_wide[("ngram-simple", "")].update(8, 0, 1.0)  # one early miss
    chain.estimator.drafter_wide[("ngram-mod", "")] = sel.Counts()
    for _ in range(10):
        chain.estimator.drafter_wide[("ngram-mod", "")].update(2, 2, 1.0)
    n, winners = 1, []
    for _ in range(12):
        draft = chain.draft(0, output[:n], output[n], LIMITS)
        winners.append(chain.winner(0))
        chain.selected(0, len(draft))
        chain.accept(0, len(draft), len(draft))
        n += 1 + len(draft)
    assert winners[0] == "ngram-mod" and winners[-1] == "ngram-simple"
    assert chain.stats["ngram-simple"].n_gen_drafts == winners.count("ngram-simple")  # verified drafts only


def test_a_rivals_draft_is_scored_only_on_what_the_target_produced():
    chain = DraftChain([("ngram-simple", Script([5, 9, 9])), ("ngram-mod", Script([5]))], select="expected",
                       profile=GEMMA)
    chain.estimator.drafter_wide[("ngram-mod", "")] = sel.Counts()
    for _ in range(10):
        chain.estimator.drafter_wide[("ngram-mod", "")].update(1, 1, 1.0)
    chain.draft(0, [1, 2], 3, LIMITS)
    assert chain.winner(0) == "ngram-mod"
    chain.selected(0, 1)
    chain.accept(0, 1, 1)
    chain.draft(0, [1, 2, 3, 5], 6, LIMITS)  # the target produced 5, then 6: [5, 9, 9] right once, wrong once
    c = chain.estimator.drafter_wide[("ngram-simple", "")]
    assert (c.tried[0], c.acc[0], c.tried[1], c.acc[1], c.tried[2]) == (1.0, 1.0, 1.0, 0.0, 0.0)
    c2 = chain.slots[0].counts[("ngram-simple", "")]
    assert (c2.tried[0], c2.acc[0]) == (1.0, 1.0)


def test_nothing_is_scored_when_the_context_did_not_grow_from_the_drafted_one():
    chain = DraftChain([("ngram-simple", Script([5, 6])), ("ngram-mod", Script([5]))], select="expected",
                       profile=GEMMA)
    chain.estimator.drafter_wide[("ngram-mod", "")] = sel.Counts()
    chain.estimator.drafter_wide[("ngram-mod", "")].update(1, 1, 1.0)
    chain.estimator.drafter_wide[("ngram-mod", "")].update(1, 1, 1.0)
    chain.draft(0, [1, 2], 3, LIMITS)
    assert chain.winner(0) == "ngram-mod"
    chain.accept(0, 1, 1)
    chain.draft(0, [7, 7], 5, LIMITS)  # another context (a restart without begin): nothing known
    assert ("ngram-simple", "") not in chain.estimator.drafter_wide
    chain.begin(0, [1])
    chain.draft(0, [1, 2], 3, LIMITS)
    chain.begin(0, [1, 2, 3])  # a new request: the last drafts are forgotten, not scored
    chain.draft(0, [1, 2, 3, 5], 6, LIMITS)
    assert ("ngram-simple", "") not in chain.estimator.drafter_wide


def test_a_winner_cut_to_nothing_is_scored_like_a_rival_a_verified_one_is_not_scored_twice():
    chain = DraftChain([("ngram-mod", Script([5, 6, 7]))], select="expected", profile=GEMMA)
    chain.begin(0, [1])
    draft = chain.draft(0, [1, 2], 3, LIMITS)
    chain.selected(0, 0)  # the step did not verify it...
    draft.clear()  # ...and cuts the draft it was handed (as Drafting.select does)
    chain.draft(0, [1, 2, 3], 5, LIMITS)  # the target sampled 5: right at position 0
    c = chain.estimator.drafter_wide[("ngram-mod", "")]
    assert (c.tried[0], c.acc[0]) == (1.0, 1.0)
    chain.selected(0, 3)
    chain.accept(0, 3, 3)  # verified: accept() counts it
    chain.draft(0, [1, 2, 3, 5, 5, 6, 7], 8, LIMITS)
    assert c.tried[0] == pytest.approx(1.0 * sel.GLOBAL_DECAY + 1.0)  # once by accept, not again


def test_the_first_position_a_step_cut_off_is_scored_by_the_token_the_target_sampled():
    """A draft cut to one token, accepted: the target's next token says whether the draft's second
    token was right, so bin 1 learns even while the step keeps verifying one token."""
    chain = DraftChain([("ngram-mod", Script([5, 6, 7]))], select="expected", profile=GEMMA)
    chain.begin(0, [1])
    draft = chain.draft(0, [1, 2], 3, LIMITS)
    chain.selected(0, 1)
    del draft[1:]  # the step cuts the draft it was handed
    chain.accept(0, 1, 1)
    c = chain.estimator.drafter_wide[("ngram-mod", "")]
    assert (c.tried[1], c.acc[1]) == (0.0, 0.0)
    chain.draft(0, [1, 2, 3, 5], 6, LIMITS)  # the target accepted 5 and sampled 6: position 1 right
    assert (c.tried[0], c.acc[0], c.tried[1], c.acc[1], c.tried[2]) == (1.0, 1.0, 1.0, 1.0, 0.0)
    own = chain.slots[0].counts[("ngram-mod", "")]
    assert (own.tried[1], own.acc[1]) == (1.0, 1.0)
    # Rejected within the verified part: the cut-off tail says nothing (its position was not reached).
    draft = chain.draft(0, [1, 2, 3, 5, 6], 7, LIMITS)
    chain.selected(0, 2)
    del draft[2:]
    chain.accept(0, 2, 0)
    chain.draft(0, [1, 2, 3, 5, 6, 7], 9, LIMITS)
    assert c.tried[2] == 0.0


def test_drafters_compete_on_what_the_slot_may_risk_verifying():
    """A slot whose drafts cost more than they saved may risk only a probe's length, so a long
    draft that would be cut to that length is worth no more than a short one: the tie goes by
    precedence, not to the draft whose uncut length looked better."""
    short = Estimating([7], "", [1.0])
    long = Estimating(list(range(100, 112)), "", [1.0] * 12)
    chain = DraftChain([("suffix", long), ("ngram-simple", short)], select="expected", profile=GEMMA)
    chain.begin(0, [1])
    assert chain.draft(0, [1], 1, DraftLimits(n_max=64)) == long.tokens  # nothing lost yet: the long one
    chain.slots[0].saved = sel.saved_s(GEMMA, 18, 0)  # a first draft of 18 rejected at once
    assert sel.risk_cap(GEMMA, chain.slots[0].saved, 12) == 1
    assert chain.draft(0, [1], 1, DraftLimits(n_max=64)) == short.tokens
    assert len(chain.confidence(0)) == 1


def test_a_probe_that_verified_more_than_its_length_succeeds_on_its_length():
    chain = DraftChain([("ngram-mod", Fixed([4] * 8))], profile=GEMMA)
    chain.begin(0, [1])
    for _ in range(4):
        run(chain, 0, lambda n: 0)
    for _ in range(sel.PROBE_MIN):
        chain.draft(0, [1], 1, LIMITS)
        chain.selected(0, 0)
    chain.draft(0, [1], 1, LIMITS)
    chain.selected(0, 4)
    chain.accept(0, 4, sel.probe_rows(GEMMA))  # the probe's own rows accepted, the rest not
    assert chain.slots[0].probes[("ngram-mod", "")].next_at == sel.PROBE_MIN


def test_a_request_that_spent_its_risk_regains_it_step_by_step():
    """After its first drafts failed, a slot may verify only a probe's length; every step it takes
    widens that by RISK_SHARE of a plain step, so a later stretch of its answer can draft again."""
    chain = DraftChain([("ngram-mod", Fixed([5] * 16))], profile=GEMMA)
    chain.begin(0, [1])
    chain.draft(0, [1], 1, LIMITS)
    first = len(chain.confidence(0))
    for _ in range(3):
        chain.accept(0, first, 0)
        chain.draft(0, [1], 1, LIMITS)
    assert len(chain.confidence(0)) == sel.probe_rows(GEMMA)
    chain.accept(0, 0, 0)
    spent = -chain.slots[0].saved
    n_steps = 0
    while True:
        chain.draft(0, [1], 1, LIMITS)
        n_steps += 1
        cap = len(chain.confidence(0))
        chain.selected(0, 0)
        if cap > sel.probe_rows(GEMMA):
            break
        assert n_steps < 1000
    # it took as many steps as the spent risk beyond RISK_STEPS needed at RISK_SHARE a step
    # at least the steps the spent risk beyond RISK_STEPS needs at RISK_SHARE a step (a longer
    # draft than a probe needs a little more)
    base = (spent - sel.RISK_STEPS * GEMMA.step(1)) / (sel.RISK_SHARE * GEMMA.step(1))
    assert base <= n_steps <= 1.2 * base
