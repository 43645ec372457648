"""Helpers to tell a numerical near-tie from a real divergence between two token streams."""

from __future__ import annotations

# A flip between two tokens whose logits are closer than this is rounding, not a bug. The core
# issue proposed 0.1; on this CPU build one batched decode moves the top-2 logit gap by up to
# ~0.37 against single-token decodes (test_numerics.py measures it), and speculation compounds
# that through every KV entry written in a batch: over 48 seeded runs one batched decode moved the
# relative log-probabilities of a position's candidates by up to 0.86 (code_edit, 2026-11-25).
# Observed greedy flips sit at gaps 0.14-0.26, and once at 0.60 (goldcoin, token 227 of 256, deep
# into the compounding; 1 run of the lossless module in 4 on 2026-11-26), so the bound is the
# measured movement, 0.9. A bug (wrong position, wrong KV removal, slots mixed up) shows as a token
# far from the top two, or outside the reference's TIE_PROBS candidates.
TIE_LOGIT_GAP = 0.9
# Candidates a reference run reports (n_probs), so that a flip is judged by its gap: a token
# outside the reported ones counts as no tie. Five were too few: after "a man named" on `free`,
# seven names sit within 0.28 logits of the top one, rounding reorders them, and a flip to one
# the reference ranked sixth failed a full-suite run.
TIE_PROBS = 20


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


def parting(ref_tokens: list[int], other_tokens: list[int], label: str) -> int | None:
    """Where two outputs first differ (None: identical); neither may be a prefix of the other."""
    k = first_difference(ref_tokens, other_tokens)
    assert k is None or (k < len(ref_tokens) and k < len(other_tokens)), \
        f"{label}: one output is a prefix of the other at {k}"
    return k


def check_same_or_tie(reference: dict, other_tokens: list[int], label: str) -> bool:
    """True if identical; False if they differ at a near-tie of the reference run; AssertionError else.

    ``reference`` is a completion response with ``tokens`` and ``completion_probabilities``.
    """
    ref_tokens = reference["tokens"]
    k = parting(ref_tokens, other_tokens, label)
    if k is None:
        return True
    # The other token must be among the reference's top candidates and within the bound of its
    # choice; several near-equal candidates can make it the third or fourth, not only the second.
    gap = logprob_gap(reference["completion_probabilities"][k], ref_tokens[k], other_tokens[k])
    assert gap < TIE_LOGIT_GAP, (
        f"{label}: outputs differ at token {k} ({ref_tokens[k]} vs {other_tokens[k]}) "
        f"with a logit gap of {gap:.4f}, which is not a tie"
    )
    return False


def draw_interval(probs_at: dict, token: int) -> tuple[float, float] | None:
    """Where in [0, 1) the sampler's uniform draw picks ``token`` at one position: the post-sampling
    probabilities (``top_probs``) laid end to end in the order the chain left them, most likely
    first, as llama.cpp's dist sampler walks them. None if ``token`` is not a candidate."""
    lo = 0.0
    for c in probs_at["top_probs"]:
        if c["id"] == token:
            return lo, lo + c["prob"]
        lo += c["prob"]
    return None


def check_same_draw(reference: dict, other: dict, label: str) -> bool:
    """Seeded sampling: True if identical; False if they differ where one draw explains both
    tokens; AssertionError else.

    Both runs draw the same number per emitted token, so up to their first difference they drew
    the same numbers. There, each run's token holds the draw in that run's own distribution;
    batched decodes round differently from single-token ones, so the two distributions differ
    slightly (boundaries move, near-equal candidates swap places). The difference is rounding
    exactly when the two tokens' intervals overlap: one draw picks either token. An RNG out of
    step, or a wrong KV cache, picks tokens whose intervals lie apart. Both responses carry
    ``post_sampling_probs`` with ``n_probs`` at least the chain's ``top_k``: every candidate.
    """
    k = parting(reference["tokens"], other["tokens"], label)
    if k is None:
        return True
    at_ref, at_other = reference["completion_probabilities"][k], other["completion_probabilities"][k]
    a, b = reference["tokens"][k], other["tokens"][k]
    ia, ib = draw_interval(at_ref, a), draw_interval(at_other, b)
    where = (f"{label}: token {k}: {a} (interval {ia}) vs {b} (interval {ib}); "
             f"reference {[(c['id'], round(c['prob'], 4)) for c in at_ref['top_probs'][:8]]}, "
             f"other {[(c['id'], round(c['prob'], 4)) for c in at_other['top_probs'][:8]]}")
    assert ia is not None and ib is not None, where
    assert max(ia[0], ib[0]) <= min(ia[1], ib[1]) + 1e-6, where
    return False
