"""What one ``llama_decode`` carries (``BatchPlan`` of ``BatchEntry`` runs) and the token-prefix
arithmetic the engine and the layers above share. Pure: no llama.cpp here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(slots=True)
class BatchEntry:
    """A run of consecutive tokens of one slot in the batch."""

    slot_id: int
    pos0: int  # KV position of tokens[0]
    tokens: list[int]
    is_decode: bool  # True: [sampled] + draft, every row is an output; False: a prompt chunk
    ends_prompt: bool = False  # prompt chunk that finishes the prompt: its last row is an output


@dataclass(slots=True)
class BatchPlan:
    """Everything one ``llama_decode`` carries. Decode entries come first, then prompt chunks."""

    entries: list[BatchEntry] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable_prefix(n_keep: int, pos_min: int, n_swa: int) -> int:
    """Cached prefix still usable when the sequence's SWA cache only holds positions >= ``pos_min``.

    Tokens decoded after the prefix attend to its last ``n_swa`` positions in sliding-window layers,
    so those must all be present; otherwise nothing is reused.
    """
    if n_keep <= 0 or n_swa <= 0 or pos_min <= max(0, n_keep - n_swa - 1):
        return n_keep
    return 0
