"""Every speculation setting: the server's (``SpecConfig``, ``DraftModelConfig``) and one request's
(``DraftLimits``), with the names they may take. Below the chain, the scopes and the draft model, which
all build from it; above only the drafter registry and ``ngram``."""

from __future__ import annotations

from dataclasses import dataclass, field

from ngram.cache import NgramCacheConfig
from ngram.map_state import NgramMapConfig
from ngram.mod import NgramModConfig
from ngram.protocol import Drafter
from ngram.suffix import SuffixConfig
from slotserver.speculation.registry import BY_NAME, DRAFT_MODEL, RANK

SELECT_MODES = ("precedence", "expected")  # --spec-select: which drafter's draft wins a step (chain.py)
SCOPES = ("shared", "per-key", "per-request")  # --spec-learning: who drafters learn from (learning_scopes.py)
WHEN = ("pays", "always")  # --spec-draft-when: the draft model drafts where a token pays, or always
SPEC_N_MAX = 1024  # speculative.n_max/n_min: 16x the default n_max; a draft is verified in the shared batch


@dataclass(slots=True)
class DraftLimits:
    """Per-request bounds on a draft (``speculative.*`` request fields)."""

    n_max: int = 64  # longest draft handed to verification
    n_min: int = 0  # a shorter draft is dropped
    p_min: float = 0.0  # draft-model confidence cut-off (unused by n-gram drafters)
    types: frozenset[str] | None = None  # allowed drafter types; None = all configured
    oracle: tuple[int, ...] | None = None  # benchmark only (--spec-oracle): the known greedy continuation
    select: str | None = None  # which drafter wins (SELECT_MODES); None = the server's --spec-select


@dataclass(frozen=True, slots=True)
class DraftModelConfig:
    path: str = ""  # -md; "" = no draft model
    n_ctx: int = 0  # -cd; 0: the target's context size
    n_threads: int = 0  # -td; 0: the target's
    n_max: int = 16  # longest draft-model draft (--spec-draft-n-max when given)
    when: str = "pays"  # --spec-draft-when: draft only where a token pays for itself, or always

    def __post_init__(self) -> None:
        if self.when not in WHEN:
            raise ValueError(f"--spec-draft-when must be one of {', '.join(WHEN)}")
        if self.n_max < 0 or self.n_ctx < 0:
            raise ValueError("the draft model's n_max and -cd must be >= 0")


@dataclass(frozen=True, slots=True)
class SpecConfig:
    types: tuple[str, ...] = ("ngram-mod",)  # empty: speculation off
    ngram_mod: NgramModConfig = field(default_factory=NgramModConfig)
    ngram_simple: NgramMapConfig = field(default_factory=NgramMapConfig)
    ngram_map_k: NgramMapConfig = field(default_factory=NgramMapConfig)
    ngram_map_k4v: NgramMapConfig = field(default_factory=NgramMapConfig)
    ngram_cache: NgramCacheConfig = field(default_factory=NgramCacheConfig)
    suffix: SuffixConfig = field(default_factory=SuffixConfig)
    lookup_static: str = ""  # -lcs: read-only static n-gram cache file
    lookup_dynamic: str = ""  # -lcd: dynamic n-gram cache file, loaded and saved
    lookup_format: str = "llamacpp"  # format the dynamic cache is saved in: llamacpp | msgpack
    mod_file: str = ""  # --spec-ngram-mod-file: persistent ngram-mod pool
    suffix_file: str = ""  # --spec-suffix-file: persistent global structure of the suffix drafter
    estimates_file: str = ""  # --spec-estimates-file: persistent drafter-wide acceptance estimates
    ignore_bad_files: bool = False  # start with empty structures when a file cannot be read
    save_interval_s: float = 300.0  # how often learned structures are saved (and at shutdown)
    draft: DraftModelConfig = field(default_factory=DraftModelConfig)  # the draft model (draft-simple)
    select: str = "expected"  # --spec-select: which drafter's draft wins a step (chain.py)
    profile_dir: str = ""  # --spec-profile-dir: where verify-cost profiles are cached ("" = the user's cache)
    recalibrate: bool = False  # --spec-recalibrate: measure the profile even if one is cached
    oracle: bool = False  # --spec-oracle (benchmarks only): requests may carry speculative.oracle

    def __post_init__(self) -> None:
        for t in self.types:
            if t not in RANK:
                raise ValueError(f"unknown speculative type: {t}")
        if DRAFT_MODEL in self.types and not self.draft.path:
            raise ValueError(f"--spec-type {DRAFT_MODEL} needs a draft model (-md FNAME)")
        if self.select not in SELECT_MODES:
            raise ValueError(f"unknown --spec-select mode: {self.select} (known: {', '.join(SELECT_MODES)})")
        if self.lookup_format not in ("llamacpp", "msgpack"):
            raise ValueError(f"unknown lookup cache format: {self.lookup_format}")

    @property
    def n_max(self) -> int:
        """Longest draft any configured drafter may propose."""
        return max((self.draft.n_max if t == DRAFT_MODEL else BY_NAME[t].max_draft(self.drafter_config(t))
                    for t in self.types), default=0)

    def drafter_config(self, name: str) -> object:
        """The configuration of the n-gram drafter type ``name`` (its ``config_field``)."""
        return getattr(self, BY_NAME[name].config_field)

    def make_drafter(self, name: str) -> Drafter:
        return BY_NAME[name].cls(self.drafter_config(name))

    @property
    def uses_draft_model(self) -> bool:
        return DRAFT_MODEL in self.types
