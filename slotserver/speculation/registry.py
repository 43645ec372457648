"""The drafter registry: one ordered table of every drafter type the server knows.

Everything that names drafters derives from ``DRAFTER_TYPES``: the precedence of the draft chain
(table order, llama.cpp's ``ngram-simple > ngram-map-k > ngram-map-k4v > ngram-mod > ngram-cache``),
the ``--spec-type`` choices, request validation of ``speculative.type``, the ``impl`` label of the
metrics and statistics lines, ``ngram_tool stats`` and the drafter micro-benchmark. A drafter has
exactly one name: its type name. ``suffix`` (ours, SuffixDecoding) comes after llama.cpp's types; the
draft model (``draft-simple``) follows them all in precedence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ngram.cache import NgramCacheConfig, NgramCacheDrafter
from ngram.map_k import NgramMapK, NgramMapK4v
from ngram.map_state import NgramMapConfig
from ngram.mod import NgramMod, NgramModConfig
from ngram.protocol import Drafter
from ngram.simple import NgramSimple
from ngram.suffix import SuffixConfig, SuffixDrafter


@dataclass(frozen=True, slots=True)
class DrafterType:
    name: str  # type name: CLI, requests, metric label ``impl``, statistics line
    cls: Callable[..., Drafter]  # called with the config (ngram-cache also takes ``static=``)
    config_field: str  # the SpecConfig field holding this drafter's configuration
    default_config: Callable[[], object]
    max_draft: Callable[[object], int]  # longest draft the configuration allows


# Precedence order: the first drafter with a non-empty draft wins the step.
DRAFTER_TYPES: tuple[DrafterType, ...] = (
    DrafterType("ngram-simple", NgramSimple, "ngram_simple", NgramMapConfig, lambda c: c.size_m),
    DrafterType("ngram-map-k", NgramMapK, "ngram_map_k", NgramMapConfig, lambda c: c.size_m),
    DrafterType("ngram-map-k4v", NgramMapK4v, "ngram_map_k4v", NgramMapConfig, lambda c: c.size_m),
    DrafterType("ngram-mod", NgramMod, "ngram_mod", NgramModConfig, lambda c: c.n_max),
    DrafterType("ngram-cache", NgramCacheDrafter, "ngram_cache", NgramCacheConfig, lambda c: c.n_draft),
    DrafterType("suffix", SuffixDrafter, "suffix", SuffixConfig, lambda c: c.n_max),
)
NAMES: tuple[str, ...] = tuple(t.name for t in DRAFTER_TYPES)
BY_NAME: dict[str, DrafterType] = {t.name: t for t in DRAFTER_TYPES}
# The draft-model drafter (slotserver/speculation/draft_model.py): last in precedence, as llama.cpp's draft-simple,
# so it only drafts for slots no n-gram drafter had a draft for. It needs -md and runs batched over
# slots, so it is not in the table of per-slot drafters above.
DRAFT_MODEL = "draft-simple"
SPEC_TYPES: tuple[str, ...] = (*NAMES, DRAFT_MODEL)  # every --spec-type / speculative.type name
RANK: dict[str, int] = {name: i for i, name in enumerate(SPEC_TYPES)}


def parse_types(value: str | list, *, field: str) -> tuple[str, ...]:
    """A comma list (or list) of type names, ``none`` allowed, into known names in the given order.

    Raises ValueError naming ``field`` and the unknown name.
    """
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"'{field}' must be a string or a list of strings")
    out = []
    for raw in names:
        name = raw.strip()
        if not name or name == "none":
            continue
        if name not in RANK:
            raise ValueError(f"unknown speculative type: {name} (known: none, {', '.join(SPEC_TYPES)})")
        out.append(name)
    return tuple(dict.fromkeys(out))
