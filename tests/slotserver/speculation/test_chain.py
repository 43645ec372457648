"""The draft chain on fake drafters: precedence, cutting, counting (estimates: test_chain_select.py)."""

from __future__ import annotations

from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits


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


class Cuttable(Fixed):
    """A drafter that wants to know how much of its draft the step verified (as ngram-mod does)."""

    def __init__(self, tokens: list[int]) -> None:
        super().__init__(tokens)
        self.cuts = []

    def cut(self, slot, n_verified):
        self.cuts.append(n_verified)


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


def test_statistics_line_has_llama_cpp_fields():
    chain = DraftChain([("ngram-mod", Fixed([1, 2]))])
    chain.draft(0, [9], 9, DraftLimits(n_max=8))
    chain.accept(0, 2, 2)
    line = chain.stats_lines()[0]
    assert line.startswith("statistics ngram-mod: #calls(b,g,a) = 0 1 1, #gen drafts = 1, #acc drafts = 1")
    assert "#gen tokens = 2, #acc tokens = 2, #mean acc len = 3.000" in line


def test_a_draft_cut_by_the_step_is_counted_and_learned_on_its_verified_part():
    """The step verified 4 of 16 draft tokens and all 4 were accepted: counters and estimates see 4."""
    chain = DraftChain([("ngram-mod", Fixed(list(range(100))))])
    chain.begin(0, [1])
    limits = DraftLimits(n_max=64)
    assert len(chain.draft(0, [1], 1, limits)) == 64
    chain.accept(0, 4, 4)
    st = chain.stats["ngram-mod"]
    assert (st.n_gen_drafts, st.n_gen_tokens, st.n_acc_tokens) == (1, 4, 4)
    assert chain.estimator.drafter_wide[("ngram-mod", "")].tried[:3] == [1.0, 1.0, 2.0]  # positions 0, 1, 2-3


def test_the_winner_is_told_how_much_of_its_draft_was_verified():
    mod, other = Cuttable(list(range(100))), Cuttable([])  # other: no draft
    chain = DraftChain([("ngram-mod", mod), ("ngram-simple", other)])
    chain.begin(0, [1])
    assert len(chain.draft(0, [1], 1, DraftLimits(n_max=64, select="precedence"))) == 64
    chain.accept(0, 13, 13)
    assert mod.cuts == [13] and other.cuts == []  # only the drafter whose draft it was
    assert mod.accepted == [(13, False)] and other.accepted == [(13, True)]


def test_a_draft_the_batch_had_no_room_for_is_not_counted():
    chain = DraftChain([("ngram-mod", Fixed([1, 2, 3]))])
    chain.begin(0, [1])
    assert chain.draft(0, [1], 1, DraftLimits(n_max=8))
    chain.accept(0, 0, 0)  # cut to nothing: never verified
    st = chain.stats["ngram-mod"]
    assert (st.n_gen_drafts, st.n_gen_tokens, st.n_call_accept) == (0, 0, 0)
