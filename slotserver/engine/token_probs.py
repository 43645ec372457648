"""A generated token's probability and its top candidates', as the engine reports them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenProbs:
    """One generated token's probability and its top candidates', as the request asked for them.

    Log-probabilities of the raw logits by default; with ``post_sampling_probs`` probabilities
    (0..1) of the candidates the sampler chain left. Which one is the request's to say.
    """

    token: int
    value: float  # the token's own (log-)probability
    top: tuple[tuple[int, float], ...]  # (id, value), most likely first, at most n_probs
