"""The draft chain on fake drafters: precedence, cutting, counting, and backing off failures."""

from __future__ import annotations

from slotserver.chain import BACKOFF_MIN, CAP_MIN, CAP_START, FAIL_STREAK, DraftChain, DraftLimits


class Fixed:
    """Always proposes the same tokens; records what the chain told it."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.accepted = tokens, []

    def begin(self, slot, prompt):
        pass

    def draft(self, slot, history, last_token, n_max):
        return list(self.tokens)

    def accept(self, slot, n_accepted, is_other):
        self.accepted.append((n_accepted, is_other))


def test_first_non_empty_drafter_in_precedence_order_wins_and_is_cut():
    mod, simple = Fixed([1, 2, 3]), Fixed([])
    chain = DraftChain([("ngram-mod", mod), ("ngram-simple", simple)])
    assert chain.types == ["ngram-simple", "ngram-mod"]  # sorted by llama.cpp's precedence
    assert chain.draft(0, [9], 9, DraftLimits(n_max=2)) == [1, 2]  # simple had nothing; cut to n_max
    chain.accept(0, 2, 1)
    assert mod.accepted == [(1, False)] and simple.accepted == [(1, True)]
    st = chain.stats["ngram-mod"]
    assert (st.n_gen_drafts, st.n_gen_tokens, st.n_acc_tokens, st.n_acc_per_pos) == (1, 2, 1, [1])
    assert chain.stats["ngram-simple"].n_call_draft == 1 and chain.stats["ngram-simple"].n_gen_drafts == 0


def test_n_min_and_allowed_types_are_honoured():
    chain = DraftChain([("ngram-mod", Fixed([1, 2]))])
    assert chain.draft(0, [9], 9, DraftLimits(n_max=8, n_min=3)) == []
    assert chain.draft(0, [9], 9, DraftLimits(n_max=8, types=frozenset())) == []
    chain.accept(0, 0, 0)  # no draft was handed out: nothing to count
    assert chain.stats["ngram-mod"].n_call_accept == 0


def test_a_drafter_that_keeps_failing_is_skipped_with_doubling_backoff():
    bad = Fixed([7] * 8)
    chain = DraftChain([("ngram-cache", bad)])
    chain.begin(0, [1, 2])
    limits = DraftLimits(n_max=8)
    for _ in range(FAIL_STREAK):
        assert chain.draft(0, [1], 1, limits)
        chain.accept(0, 8, 0)  # nothing accepted: a failure
    skipped = [chain.draft(0, [1], 1, limits) for _ in range(BACKOFF_MIN)]
    assert skipped == [[]] * BACKOFF_MIN and chain.stats["ngram-cache"].n_skipped == BACKOFF_MIN
    again = chain.draft(0, [1], 1, limits)  # asked again after the pause
    chain.accept(0, len(again), len(again))  # a success resets the streak and the pause length
    for _ in range(FAIL_STREAK):
        chain.draft(0, [1], 1, limits)
        chain.accept(0, 8, 0)
    assert all(chain.draft(0, [1], 1, limits) == [] for _ in range(BACKOFF_MIN))
    assert chain.draft(0, [1], 1, limits)


def test_draft_length_cap_doubles_on_full_acceptance_and_halves_on_failure():
    chain = DraftChain([("ngram-mod", Fixed(list(range(100))))])
    chain.begin(0, [1])
    limits = DraftLimits(n_max=64)
    lengths = []
    for n_acc in ("all", "all", "all", 0):
        draft = chain.draft(0, [1], 1, limits)
        lengths.append(len(draft))
        chain.accept(0, len(draft), len(draft) if n_acc == "all" else 0)
    lengths.append(len(chain.draft(0, [1], 1, limits)))
    assert lengths == [CAP_START, 2 * CAP_START, 64, 64, 64 // 2]  # the request's n_max still bounds it


def test_begin_forgets_the_backoff_of_the_previous_request():
    chain = DraftChain([("ngram-cache", Fixed([7] * 8))])
    for _ in range(FAIL_STREAK):
        chain.draft(0, [1], 1, DraftLimits(n_max=8))
        chain.accept(0, 8, 0)
    chain.begin(0, [5])
    assert chain.draft(0, [1], 1, DraftLimits(n_max=8))


def test_statistics_line_has_llama_cpp_fields():
    chain = DraftChain([("ngram-mod", Fixed([1, 2]))])
    chain.draft(0, [9], 9, DraftLimits(n_max=8))
    chain.accept(0, 2, 2)
    line = chain.stats_lines()[0]
    assert line.startswith("statistics ngram-mod: #calls(b,g,a) = 0 1 1, #gen drafts = 1, #acc drafts = 1")
    assert "#gen tokens = 2, #acc tokens = 2, #mean acc len = 3.000" in line


def test_a_draft_cut_by_the_batch_is_judged_on_its_verified_part():
    """The batch had room for 4 of 16 draft tokens and all 4 were accepted: a full acceptance.

    Judged on the proposed 16 it would be a partial one (the cap would stay 16); judged on the
    verified 4 the cap doubles from 4 to 8.
    """
    chain = DraftChain([("ngram-mod", Fixed(list(range(100))))])
    chain.begin(0, [1])
    limits = DraftLimits(n_max=64)
    assert len(chain.draft(0, [1], 1, limits)) == CAP_START
    chain.accept(0, 4, 4)  # plan_batch cut the draft to 4 tokens; all 4 accepted
    st = chain.stats["ngram-mod"]
    assert (st.n_gen_drafts, st.n_gen_tokens, st.n_acc_tokens) == (1, 4, 4)  # counters: verified tokens
    assert len(chain.draft(0, [1], 1, limits)) == 2 * 4  # cap doubled from the verified length


def test_a_cut_draft_whose_verified_part_failed_backs_off_on_that_part():
    """Cut to 2 tokens, none accepted, three times in a row: a failure streak, so the drafter pauses,
    and the cap halves from the verified length (2 -> CAP_MIN), not from the proposed 16."""
    chain = DraftChain([("ngram-mod", Fixed(list(range(100))))])
    chain.begin(0, [1])
    limits = DraftLimits(n_max=64)
    for _ in range(FAIL_STREAK):
        assert chain.draft(0, [1], 1, limits)
        chain.accept(0, 2, 0)
    assert chain.stats["ngram-mod"].n_gen_tokens == 2 * FAIL_STREAK
    assert all(chain.draft(0, [1], 1, limits) == [] for _ in range(BACKOFF_MIN))
    assert len(chain.draft(0, [1], 1, limits)) == CAP_MIN


def test_a_draft_the_batch_had_no_room_for_is_not_counted():
    chain = DraftChain([("ngram-mod", Fixed([1, 2, 3]))])
    chain.begin(0, [1])
    assert chain.draft(0, [1], 1, DraftLimits(n_max=8))
    chain.accept(0, 0, 0)  # cut to nothing: never verified
    st = chain.stats["ngram-mod"]
    assert (st.n_gen_drafts, st.n_gen_tokens, st.n_call_accept) == (0, 0, 0)
