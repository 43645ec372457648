"""The draft chain's draft-model entry (draft-simple): precedence, adoption, counting."""

from __future__ import annotations

from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits
from slotserver.stats import DrafterStats
from tests.slotserver.speculation.test_chain import Fixed

DS = "draft-simple"


def test_the_draft_model_comes_last_in_types_and_statistics():
    chain = DraftChain([("ngram-mod", Fixed([1])), ("ngram-simple", Fixed([]))], model=True)
    assert chain.types == ["ngram-simple", "ngram-mod", DS]
    assert list(chain.stats) == ["ngram-simple", "ngram-mod", DS]
    assert chain.stats_lines()[-1].startswith("statistics draft-simple: #calls(b,g,a) = 0 0 0,")
    assert DS not in DraftChain([("ngram-mod", Fixed([1]))]).types


def test_uses_model_follows_the_allowed_types_and_n_max():
    chain = DraftChain([], model=True)
    assert chain.uses_model(DraftLimits()) is True
    assert chain.uses_model(DraftLimits(types=frozenset({DS}))) is True
    assert chain.uses_model(DraftLimits(types=frozenset({"ngram-mod"}))) is False
    assert chain.uses_model(DraftLimits(types=frozenset())) is False
    assert chain.uses_model(DraftLimits(n_max=0)) is False
    assert DraftChain([]).uses_model(DraftLimits()) is False


def test_adopt_drops_drafts_shorter_than_n_min_and_cuts_to_n_max():
    chain = DraftChain([], model=True)
    assert chain.adopt(0, [1, 2], DraftLimits(n_min=3)) == []
    assert chain.adopt(0, [], DraftLimits()) == []
    chain.accept(0, 0, 0)  # nothing adopted: nothing to count
    assert chain.stats[DS].n_call_accept == 0
    assert chain.adopt(0, list(range(10)), DraftLimits(n_max=4)) == [0, 1, 2, 3]


def test_an_adopted_draft_is_counted_for_the_draft_model():
    mod = Fixed([])
    chain = DraftChain([("ngram-mod", mod)], model=True)
    chain.begin(0, [1])
    limits = DraftLimits(n_max=8)
    assert chain.draft(0, [1], 1, limits) == []  # no n-gram draft: the draft model may ask
    assert chain.adopt(0, [5, 6, 7, 8, 9], limits) == [5, 6, 7, 8, 9]
    chain.accept(0, 4, 3)  # the batch took 4 of its 5 tokens, 3 accepted
    st = chain.stats[DS]
    assert (st.n_gen_drafts, st.n_gen_tokens, st.n_acc_tokens, st.n_acc_drafts, st.n_call_accept) == (1, 4, 3, 1, 1)
    assert st.n_acc_per_pos == [1, 1, 1]
    assert mod.accepted == [(3, True)]  # the n-gram drafter hears the accepted tokens as another's
    assert chain.stats["ngram-mod"].n_gen_drafts == 0


def test_an_n_gram_draft_winning_leaves_the_draft_model_statistics_untouched():
    chain = DraftChain([("ngram-mod", Fixed([1, 2]))], model=True)
    assert chain.draft(0, [9], 9, DraftLimits(n_max=8)) == [1, 2]
    chain.accept(0, 2, 2)
    assert chain.stats["ngram-mod"].n_acc_tokens == 2
    assert chain.stats[DS] == DrafterStats()


def test_model_called_counts_one_draft_call_for_all_slots_and_its_duration():
    chain = DraftChain([], model=True)
    chain.model_called(0.002)
    chain.model_called(0.3)
    st = chain.stats[DS]
    assert (st.n_call_draft, st.t_draft_s.n) == (2, 2)
    assert abs(st.t_draft_s.total - 0.302) < 1e-12


def test_begin_counts_a_begin_call_for_the_draft_model():
    chain = DraftChain([("ngram-mod", Fixed([1]))], model=True)
    chain.begin(0, [1, 2])
    chain.begin(1, [3])
    assert chain.stats[DS].n_call_begin == 2 and chain.stats["ngram-mod"].n_call_begin == 2
