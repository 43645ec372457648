"""Learning scopes: who shares learned drafter state (``--spec-learning``), on real drafters."""

from __future__ import annotations

import pytest

from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits, SpecConfig
from slotserver.speculation.learning_scopes import LearningScopes

SPEC = SpecConfig(types=("ngram-mod",))
TEXT = list(range(100, 140)) * 3  # a 40-token passage, three times


def learn(chain: DraftChain, slot: int = 0) -> None:
    """One request that generated ``TEXT``: the shared ngram-mod pool learns its n-grams."""
    chain.begin(slot, TEXT)


def drafts_passage(chain: DraftChain, slot: int = 1) -> bool:
    chain.begin(slot, TEXT[:30])
    return bool(chain.draft(slot, TEXT[:30], TEXT[30], DraftLimits(n_max=16)))


def make(scope: str) -> LearningScopes:
    return LearningScopes(DraftChain.from_spec(SPEC), scope=scope, spec=SPEC)


def test_shared_scope_lets_one_client_draft_from_anothers_text():
    chains = make("shared")
    learn(chains.for_tenant("alice"))
    assert drafts_passage(chains.for_tenant("bob"))


def test_per_key_scope_keeps_learned_state_per_key():
    chains = make("per-key")
    learn(chains.for_tenant("alice"))
    assert not drafts_passage(chains.for_tenant("bob"))  # bob cannot probe alice's passage
    assert drafts_passage(chains.for_tenant("alice"))
    assert chains.for_tenant("alice") is chains.for_tenant("alice") and chains.n_chains == 2


def test_per_request_scope_learns_nothing_across_requests():
    chains = make("per-request")
    learn(chains.for_tenant("alice"))
    assert not drafts_passage(chains.for_tenant("alice"))


def test_every_chain_counts_into_the_shared_stats():
    chains = make("per-key")
    a, b = chains.for_tenant("a"), chains.for_tenant("b")
    a.begin(0, [1, 2])
    b.begin(1, [3, 4])
    assert chains.shared.stats["ngram-mod"].n_call_begin == 2 and a.stats is b.stats is chains.shared.stats


def test_unknown_scope_is_refused():
    with pytest.raises(ValueError):
        make("per-moon")


def test_the_kv_prompt_cache_has_the_same_tenants_as_learning():
    """Whose KV prompt cache a request may reuse (``Slot.kv_owner``): everyone's when shared, its key's
    under per-key, only its own request's (all its choices) under per-request."""
    shared, per_key, per_request = make("shared"), make("per-key"), make("per-request")
    assert shared.kv_owner("key-1", "r1") == shared.kv_owner("key-2", "r2") == ""
    assert per_key.kv_owner("key-1", "r1") == per_key.kv_owner("key-1", "r2") != per_key.kv_owner("key-2", "r1")
    assert per_request.kv_owner("key-1", "r1") != per_request.kv_owner("key-1", "r2")
    assert per_request.kv_owner("key-1", "") not in (per_request.kv_owner("key-1", "r1"), "")  # GET /slots owns nothing
