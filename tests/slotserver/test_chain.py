"""The draft chain on fake drafters: precedence, cutting, counting, and backing off failures."""

from __future__ import annotations

from slotserver.chain import BACKOFF_MIN, CAP_START, FAIL_STREAK, DraftChain, DraftLimits


class Fixed:
    """Always proposes the same tokens; records what the chain told it."""

    def __init__(self, name: str, tokens: list[int]) -> None:
        self.name, self.tokens, self.accepted = name, tokens, []

    def begin(self, slot, prompt):
        pass

    def draft(self, slot, history, last_token, n_max):
        return list(self.tokens)

    def accept(self, slot, n_accepted, is_other):
        self.accepted.append((n_accepted, is_other))


def test_first_non_empty_drafter_in_precedence_order_wins_and_is_cut():
    mod, simple = Fixed("ngram_mod", [1, 2, 3]), Fixed("ngram_simple", [])
    chain = DraftChain([("ngram-mod", mod), ("ngram-simple", simple)])
    assert chain.types == ["ngram-simple", "ngram-mod"]  # sorted by llama.cpp's precedence
    assert chain.draft(0, [9], 9, DraftLimits(n_max=2)) == [1, 2]  # simple had nothing; cut to n_max
    chain.accept(0, 1)
    assert mod.accepted == [(1, False)] and simple.accepted == [(1, True)]
    st = chain.stats["ngram_mod"]
    assert (st.n_gen_drafts, st.n_gen_tokens, st.n_acc_tokens, st.n_acc_per_pos) == (1, 2, 1, [1])
    assert chain.stats["ngram_simple"].n_call_draft == 1 and chain.stats["ngram_simple"].n_gen_drafts == 0


def test_n_min_and_allowed_types_are_honoured():
    chain = DraftChain([("ngram-mod", Fixed("ngram_mod", [1, 2]))])
    assert chain.draft(0, [9], 9, DraftLimits(n_max=8, n_min=3)) == []
    assert chain.draft(0, [9], 9, DraftLimits(n_max=8, types=frozenset())) == []
    chain.accept(0, 0)  # no draft was handed out: nothing to count
    assert chain.stats["ngram_mod"].n_call_accept == 0


def test_a_drafter_that_keeps_failing_is_skipped_with_doubling_backoff():
    bad = Fixed("ngram_cache", [7] * 8)
    chain = DraftChain([("ngram-cache", bad)])
    chain.begin(0, [1, 2])
    limits = DraftLimits(n_max=8)
    for _ in range(FAIL_STREAK):
        assert chain.draft(0, [1], 1, limits)
        chain.accept(0, 0)  # nothing accepted: a failure
    skipped = [chain.draft(0, [1], 1, limits) for _ in range(BACKOFF_MIN)]
    assert skipped == [[]] * BACKOFF_MIN and chain.stats["ngram_cache"].n_skipped == BACKOFF_MIN
    again = chain.draft(0, [1], 1, limits)  # asked again after the pause
    chain.accept(0, len(again))  # a success resets the streak and the pause length
    for _ in range(FAIL_STREAK):
        chain.draft(0, [1], 1, limits)
        chain.accept(0, 0)
    assert all(chain.draft(0, [1], 1, limits) == [] for _ in range(BACKOFF_MIN))
    assert chain.draft(0, [1], 1, limits)


def test_draft_length_cap_doubles_on_full_acceptance_and_halves_on_failure():
    chain = DraftChain([("ngram-mod", Fixed("ngram_mod", list(range(100))))])
    chain.begin(0, [1])
    limits = DraftLimits(n_max=64)
    lengths = []
    for n_acc in ("all", "all", "all", 0):
        draft = chain.draft(0, [1], 1, limits)
        lengths.append(len(draft))
        chain.accept(0, len(draft) if n_acc == "all" else 0)
    lengths.append(len(chain.draft(0, [1], 1, limits)))
    assert lengths == [CAP_START, 2 * CAP_START, 64, 64, 64 // 2]  # the request's n_max still bounds it


def test_begin_forgets_the_backoff_of_the_previous_request():
    chain = DraftChain([("ngram-cache", Fixed("ngram_cache", [7] * 8))])
    for _ in range(FAIL_STREAK):
        chain.draft(0, [1], 1, DraftLimits(n_max=8))
        chain.accept(0, 0)
    chain.begin(0, [5])
    assert chain.draft(0, [1], 1, DraftLimits(n_max=8))


def test_statistics_line_has_llama_cpp_fields():
    chain = DraftChain([("ngram-mod", Fixed("ngram_mod", [1, 2]))])
    chain.draft(0, [9], 9, DraftLimits(n_max=8))
    chain.accept(0, 2)
    line = chain.stats_lines()[0]
    assert line.startswith("statistics ngram_mod: #calls(b,g,a) = 0 1 1, #gen drafts = 1, #acc drafts = 1")
    assert "#gen tokens = 2, #acc tokens = 2, #mean acc len = 3.000" in line
