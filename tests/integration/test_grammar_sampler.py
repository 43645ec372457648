"""The grammar sampler against llama.cpp's own grammar-then-chain path, on Gemma 3's vocabulary.

Only the vocabulary is loaded (no weights): logits are random, so every branch is reached on
purpose: the chain's pick allowed, rejected and resampled, the greedy scan within and past its
windows, and a grammar that allows nothing the chain leaves.
"""

from __future__ import annotations

import llama_cpp as lc
import numpy as np
import pytest

from slotserver.engine.model_files import default_model_path
from slotserver.engine.vocab import Vocab
from slotserver.sampling.candidates import CandidateSampler
from slotserver.sampling.grammar_sampler import NO_TOKEN, SCAN_WINDOWS, GrammarSampler, new_grammar

DIGITS = 'root ::= [0-9]{3} "!"'


@pytest.fixture(scope="module")
def vocab():
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(default_model_path().encode(), params)
    yield Vocab(model)
    lc.llama_model_free(model)


@pytest.fixture(scope="module")
def sampler(vocab):
    return GrammarSampler(CandidateSampler(vocab.n_tokens))


def greedy_chain(biases=()):
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if biases:
        arr = (lc.llama_logit_bias * len(biases))(*biases)
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(0, len(arr), arr))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
    return chain


def run(sampler, vocab, logits_per_step, argmax: bool, biases=()) -> list[int]:
    """Tokens sampled step by step under DIGITS (each accepted, as the engine does)."""
    grammar, chain = new_grammar(vocab.ptr, DIGITS), greedy_chain(biases)
    try:
        return [sampler.sample(chain, grammar, logits, argmax) for logits in logits_per_step]
    finally:
        lc.llama_sampler_free(grammar)
        lc.llama_sampler_free(chain)


def test_the_greedy_scan_picks_what_grammar_then_greedy_picks(sampler, vocab):
    rng = np.random.default_rng(7)
    steps = [rng.normal(size=vocab.n_tokens).astype(np.float32) for _ in range(5)]
    digit = vocab.tokenize("7", False, False)[0]
    steps[0][digit] = 100.0  # the chain's own pick is allowed
    steps[1][:] = np.float32(1.0)  # all tied: the lowest allowed id wins
    eog = list(vocab.eog_tokens())
    steps[4][eog] = -100.0  # complete grammar: only end-of-generation tokens, far past the scan windows
    assert len(eog) < vocab.n_tokens - SCAN_WINDOWS[-1]
    scanned = run(sampler, vocab, steps, argmax=True)
    assert scanned == run(sampler, vocab, steps, argmax=False)
    text = b"".join(vocab.piece(t) for t in scanned[:4]).decode()
    assert scanned[0] == digit and text[:3].isdigit() and text.endswith("!") and vocab.is_eog(scanned[4])


def test_nothing_allowed_is_no_token_and_nothing_is_accepted(sampler, vocab):
    """Complete grammar, every end-of-generation token banned (ignore_eos): no token, and no abort."""
    rng = np.random.default_rng(1)
    steps = [rng.normal(size=vocab.n_tokens).astype(np.float32) for _ in range(6)]
    bans = [(t, float("-inf")) for t in vocab.eog_tokens()]
    out = run(sampler, vocab, steps, argmax=False, biases=bans)
    assert out[4:] == [NO_TOKEN, NO_TOKEN] and NO_TOKEN not in out[:4]
