"""Build the draft chain from the speculative configuration (one place maps type names to classes)."""

from __future__ import annotations

from ngram.cache import NgramCacheDrafter
from ngram.map_k import NgramMapK, NgramMapK4v
from ngram.mod import NgramMod
from ngram.protocol import Drafter
from ngram.simple import NgramSimple
from slotserver.chain import DraftChain
from slotserver.config import SpecConfig


def make_drafter(kind: str, spec: SpecConfig) -> Drafter:
    if kind == "ngram-mod":
        return NgramMod(spec.ngram_mod)
    if kind == "ngram-simple":
        return NgramSimple(spec.ngram_simple)
    if kind == "ngram-map-k":
        return NgramMapK(spec.ngram_map_k)
    if kind == "ngram-map-k4v":
        return NgramMapK4v(spec.ngram_map_k4v)
    if kind == "ngram-cache":
        return NgramCacheDrafter(spec.ngram_cache)
    raise ValueError(f"unknown speculative type: {kind}")


def build_chain(spec: SpecConfig) -> DraftChain:
    return DraftChain([(kind, make_drafter(kind, spec)) for kind in spec.types])
