"""Server configuration, built from the command line by keyword and checked once."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from slotserver.engine.engine import EngineConfig
from slotserver.limits import LimitsConfig
from slotserver.sampling.params import SamplingParams
from slotserver.speculation.config import SCOPES, SPEC_N_MAX, DraftLimits, SpecConfig

# Prometheus families /metrics can export: ours and llama-server's (api/metrics_llamacpp.py).
METRICS_SERIES = ("slotserver", "llamacpp")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    engine: EngineConfig
    spec: SpecConfig = field(default_factory=SpecConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    slot_save_path: str = ""  # --slot-save-path: directory for slot save/restore ("" = disabled)
    spec_learning: str = "shared"  # who drafters learn from: shared | per-key | per-request (learning_scopes.py)
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
