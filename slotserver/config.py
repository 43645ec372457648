"""Server configuration, built from the command line by keyword and checked once."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ngram.cache import NgramCacheConfig
from ngram.map_state import NgramMapConfig
from ngram.mod import NgramModConfig
from ngram.suffix import SuffixConfig
from slotserver.chain import SELECT_MODES, DraftLimits
from slotserver.chains import SCOPES
from slotserver.drafter_types import BY_NAME, DRAFT_MODEL, RANK
from slotserver.engine import EngineConfig
from slotserver.limits import LimitsConfig
from slotserver.model_drafter import DraftModelConfig
from slotserver.request import SPEC_N_MAX
from slotserver.sampling import SamplingParams

# Prometheus families /metrics can export: ours and llama-server's (api/metrics_llamacpp.py).
METRICS_SERIES = ("slotserver", "llamacpp")


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
        return max((self.draft.n_max if t == DRAFT_MODEL else BY_NAME[t].max_draft(BY_NAME[t].config(self))
                    for t in self.types), default=0)

    @property
    def uses_draft_model(self) -> bool:
        return DRAFT_MODEL in self.types


@dataclass(frozen=True, slots=True)
class ServerConfig:
    engine: EngineConfig
    spec: SpecConfig = field(default_factory=SpecConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    slot_save_path: str = ""  # --slot-save-path: directory for slot save/restore ("" = disabled)
    spec_learning: str = "shared"  # who drafters learn from: shared | per-key | per-request (chains.py)
    host: str = "127.0.0.1"
    port: int = 8080
    alias: str = ""
    n_predict: int = -1  # default n_predict of requests
    seed: int = -1  # default seed of requests (-1: random)
    # Defaults of requests' sampling fields (--temp, --top-k, ...; llama.cpp's when not given).
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # Defaults of requests' speculative.n_max/n_min/p_min (--spec-draft-n-max/-n-min/-p-min);
    # n_max -1: the longest draft the configured drafters make (SpecConfig.n_max).
    draft_n_max: int = -1
    draft_n_min: int = 0
    draft_p_min: float = 0.0
    cache_prompt: bool = True
    context_shift: bool = False  # --context-shift: a full slot drops old tokens instead of stopping
    n_keep: int = 0  # --keep: default n_keep of requests
    cache_reuse: int = 0  # --cache-reuse: default n_cache_reuse of requests (0: off)
    spm_infill: bool = False  # --spm-infill: /infill prompts in suffix-prefix-middle order
    slots_endpoint: bool = True
    metrics: bool = False  # serve GET /metrics
    metrics_series: tuple[str, ...] = METRICS_SERIES  # families GET /metrics exports (--metrics-series)
    # Keys a request must show (api/security.py); empty: none needed. Out of repr: a logged or
    # printed config must not leak them.
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    metrics_no_auth: bool = False  # GET /metrics answers without a key (a Prometheus without one)
    cors_origins: tuple[str, ...] = ()  # browser origins allowed besides the server's own; "*": any
    # Host header values accepted besides loopback names and --host (--allowed-host); "*": any.
    allowed_hosts: tuple[str, ...] = ()
    # --chat-special: chat message content may contain control tokens (parsed as such); off: as text
    chat_special: bool = False

    def __post_init__(self) -> None:
        if self.spec_learning not in SCOPES:
            raise ValueError(f"unknown learning scope: {self.spec_learning} (known: {', '.join(SCOPES)})")
        unknown = set(self.metrics_series) - set(METRICS_SERIES)
        if unknown:
            raise ValueError(f"unknown metrics series: {', '.join(sorted(unknown))} (known: {', '.join(METRICS_SERIES)})")
        if not -1 <= self.draft_n_max <= SPEC_N_MAX or not 0 <= self.draft_n_min <= SPEC_N_MAX:
            raise ValueError(f"--spec-draft-n-max must be in [-1, {SPEC_N_MAX}] and --spec-draft-n-min in [0, {SPEC_N_MAX}]")
        if not 0.0 <= self.draft_p_min <= 1.0:
            raise ValueError("--spec-draft-p-min must be in [0, 1]")
        if self.n_keep < -1 or self.cache_reuse < 0:
            raise ValueError("--keep must be >= -1 and --cache-reuse >= 0")
        if any(not key for key in self.api_keys):
            raise ValueError("an API key must not be empty")  # a blank key protects nothing

    @property
    def draft_limits(self) -> DraftLimits:
        """A new ``DraftLimits`` holding the server's defaults (a job's limits are its own object)."""
        n_max = self.spec.n_max if self.draft_n_max == -1 else self.draft_n_max
        return DraftLimits(n_max=n_max, n_min=self.draft_n_min, p_min=self.draft_p_min)

    @property
    def model_name(self) -> str:
        return self.alias or os.path.basename(self.engine.model_path)
