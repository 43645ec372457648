"""Helpers to tell a numerical near-tie from a real divergence between two token streams."""

from __future__ import annotations

# A flip between two tokens whose logits are closer than this is rounding, not a bug. The core
# issue proposed 0.1; on this CPU build one batched decode moves the top-2 logit gap by up to
# ~0.37 against single-token decodes (test_numerics.py measures it), and speculation compounds
# that through every KV entry written in a batch. Observed flips sit at gaps 0.14-0.26. A bug
# (wrong position, wrong KV removal, slots mixed up) shows as a token far from the top two.
TIE_LOGIT_GAP = 0.5


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def logprob_gap(probs_at: dict, token_a: int, token_b: int) -> float:
    """Gap between two tokens' log-probabilities (= their logit gap) at one position; inf if unknown."""
    lp = {c["id"]: c["logprob"] for c in probs_at["top_logprobs"]}
    lp[probs_at["id"]] = probs_at["logprob"]
    if token_a not in lp or token_b not in lp:
        return float("inf")
    return abs(lp[token_a] - lp[token_b])


def check_same_or_tie(reference: dict, other_tokens: list[int], label: str) -> bool:
    """True if identical; False if they differ at a near-tie of the reference run; AssertionError else.

    ``reference`` is a completion response with ``tokens`` and ``completion_probabilities``.
    """
    ref_tokens = reference["tokens"]
    k = first_difference(ref_tokens, other_tokens)
    if k is None:
        return True
    assert k < len(ref_tokens) and k < len(other_tokens), f"{label}: one output is a prefix of the other at {k}"
    # The other token must be among the reference's top candidates and within the bound of its
    # choice; several near-equal candidates can make it the third or fourth, not only the second.
    gap = logprob_gap(reference["completion_probabilities"][k], ref_tokens[k], other_tokens[k])
    assert gap < TIE_LOGIT_GAP, (
        f"{label}: outputs differ at token {k} ({ref_tokens[k]} vs {other_tokens[k]}) "
        f"with a logit gap of {gap:.4f}, which is not a tie"
    )
    return False
