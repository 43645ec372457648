"""Build the draft chain from the speculative configuration."""

from __future__ import annotations

from ngram.mod import NgramMod
from slotserver.chain import DraftChain
from slotserver.config import SpecConfig


def build_chain(spec: SpecConfig) -> DraftChain:
    drafters = []
    for kind in spec.types:
        if kind == "ngram-mod":
            drafters.append((kind, NgramMod(spec.ngram_mod)))
        else:
            raise ValueError(f"speculative type {kind} is not available yet")
    return DraftChain(drafters)
