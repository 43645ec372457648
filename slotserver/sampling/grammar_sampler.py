"""Sample one token under a grammar, as llama.cpp's ``common_sampler_sample``: chain first, grammar after.

Applying llama.cpp's grammar sampler to every candidate of a large vocabulary (Gemma 3: 262k) costs
several whole decode steps per token (more inside a string, where many tokens fit), while checking
one token costs microseconds (``benchmarks/grammar_cost.py``; figures: docs/measurements.md). So, as
llama.cpp does: sample
with the request's chain, check the chosen token alone against the grammar (a one-candidate array
through it), and only if the grammar rejects it load the logits again, apply the grammar to every
candidate, then the chain. A chain that picks the argmax needs no second pass: the best tokens are
checked one by one, best first, which gives the same token.

Speculation stays lossless because this is a function of (logits, chain state, grammar state) only,
and both states advance only here, by the token returned, in the order tokens are emitted:
verification samples row after row and stops at the first row that differs from the draft, so a
draft token that was not sampled never reaches ``llama_sampler_accept``. A rejected first pick
draws the chain's RNG once more (as in llama.cpp), identically with or without a draft.

The engine thread owns the one-candidate array, like the ``CandidateSampler`` it works with.
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp as lc
import numpy as np

from slotserver.sampling.candidates import CandidateSampler
from slotserver.sampling.grammar_compile import ROOT

# Returned when the grammar allows none of the tokens the chain leaves (a complete grammar whose
# end-of-generation tokens ``ignore_eos`` or a logit bias banned, say). Nothing is accepted then:
# llama.cpp aborts the process when a grammar accepts a token it does not allow.
NO_TOKEN = -1
# Greedy requests: the best tokens are checked one by one, the first 64, then up to 1024 (1024 checks
# cost less than one pass of the grammar over the vocabulary, which they add to when all fail).
SCAN_WINDOWS = (64, 1024)


def new_grammar(vocab, text: str):
    """A grammar sampler for a starting request; its text was checked when the request was prepared."""
    sampler = lc.llama_sampler_init_grammar(vocab, text.encode(), ROOT)
    if not sampler:
        raise RuntimeError("llama.cpp could not parse a grammar it parsed when the request was prepared")
    return sampler


class GrammarSampler:
    def __init__(self, candidates: CandidateSampler) -> None:
        self.candidates = candidates
        self._one = lc.llama_token_data(0, 0.0, 0.0)
        self._one_array = lc.llama_token_data_array(data=ctypes.pointer(self._one), size=1, selected=-1,
                                                    sorted=False)

    def allows(self, grammar, token: int) -> bool:
        """Whether the grammar, in its current state, accepts ``token`` next (it masks with -inf)."""
        self._one.id, self._one.logit, self._one.p = token, 1.0, 0.0
        self._one_array.size, self._one_array.selected, self._one_array.sorted = 1, -1, False
        lc.llama_sampler_apply(grammar, ctypes.byref(self._one_array))
        return self._one.logit != -math.inf

    def sample(self, chain, grammar, logits: np.ndarray, argmax: bool = False) -> int:
        """Sample a token the grammar allows and accept it into both; NO_TOKEN if there is none.

        ``argmax``: the chain picks the argmax (``SamplingParams.picks_argmax``), so the answer is the
        best token the grammar allows, found by checking tokens best first (``_best_allowed``).
        Otherwise the candidates stay loaded with the distribution the token was drawn from
        (post-sampling probabilities).
        """
        if argmax:
            token = self._best_allowed(chain, grammar, logits)
        else:
            token = self._chain_then_grammar(chain, grammar, logits)
        if token == NO_TOKEN:
            return NO_TOKEN
        lc.llama_sampler_accept(grammar, token)
        lc.llama_sampler_accept(chain, token)
        return token

    def _chain_then_grammar(self, chain, grammar, logits: np.ndarray) -> int:
        """llama.cpp's order: the chain's pick if the grammar allows it, else grammar on all, then the chain."""
        cands = self.candidates
        cands.load(logits)
        cands.apply(chain)
        token = cands.selected()
        if self.allows(grammar, token):
            return token
        return self._grammar_then_chain(chain, grammar, logits)

    def _grammar_then_chain(self, chain, grammar, logits: np.ndarray) -> int:
        """The grammar applied to every candidate, then the chain (the slow path: tens of ms)."""
        cands = self.candidates
        cands.load(logits)
        cands.apply(grammar)
        cands.apply(chain)
        token = cands.selected()
        return token if self.allows(grammar, token) else NO_TOKEN

    def _best_allowed(self, chain, grammar, logits: np.ndarray) -> int:
        """The token llama.cpp's greedy pick after the grammar gives (the highest logit the grammar
        allows, the lowest id among equal ones), checking one token at a time, best first.

        The grammar mostly allows one of the first few: the best ``SCAN_WINDOWS`` tokens (with
        everything tied with the last) are checked in order; past them the whole vocabulary goes
        through the grammar, which costs less than checking a quarter million tokens one by one.
        """
        n_checked = 0
        for k in SCAN_WINDOWS:
            kth = logits[np.argpartition(-logits, k - 1)[k - 1]]
            top = np.flatnonzero(logits >= kth)  # all tied with the k-th too, so the lowest id comes first
            ordered = top[np.lexsort((top, -logits[top]))]  # logit descending, then id ascending
            for token in ordered[n_checked:k].tolist():  # at most k checks, however many are tied
                if self.allows(grammar, token):
                    return token
            n_checked = k
        return self._grammar_then_chain(chain, grammar, logits)
