"""Sampling parameters of one request (llama.cpp's defaults); the llama sampler chain is built in ``engine``."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: pick a random seed


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_last_n: int = 64
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = DEFAULT_SEED
    ignore_eos: bool = False
    logit_bias: tuple = ()  # (token id, bias) pairs once resolved (text entries until then); -inf: never

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def is_plain_greedy(self) -> bool:
        """Greedy with no stateful sampler in the chain: the token is simply the argmax."""
        return self.is_greedy and not self.has_penalties and not self.logit_bias

    @property
    def has_penalties(self) -> bool:
        return (
            self.repeat_last_n != 0
            and (self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0)
        )
