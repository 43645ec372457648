"""Server configuration, built from the command line by keyword and checked once."""

from __future__ import annotations

from dataclasses import dataclass, field

from ngram.mod import NgramModConfig
from slotserver.engine import EngineConfig

DRAFTER_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


@dataclass(frozen=True, slots=True)
class SpecConfig:
    types: tuple[str, ...] = ("ngram-mod",)  # empty: speculation off
    ngram_mod: NgramModConfig = field(default_factory=NgramModConfig)

    def __post_init__(self) -> None:
        for t in self.types:
            if t not in DRAFTER_TYPES:
                raise ValueError(f"unknown speculative type: {t}")

    @property
    def n_max(self) -> int:
        """Longest draft any configured drafter may propose."""
        return self.ngram_mod.n_max if self.types else 0


@dataclass(frozen=True, slots=True)
class ServerConfig:
    engine: EngineConfig
    spec: SpecConfig = field(default_factory=SpecConfig)
    host: str = "127.0.0.1"
    port: int = 8080
    alias: str = ""
    n_predict: int = -1  # default n_predict of requests
    seed: int = -1  # default seed of requests (-1: random)
    cache_prompt: bool = True
    slots_endpoint: bool = True
    metrics: bool = False  # serve GET /metrics
    metrics_compat: str = ""  # "llamacpp": also export llama-server's llamacpp:* series

    def __post_init__(self) -> None:
        if self.metrics_compat not in ("", "llamacpp"):
            raise ValueError(f"unknown metrics compatibility: {self.metrics_compat}")

    @property
    def model_name(self) -> str:
        import os

        return self.alias or os.path.basename(self.engine.model_path)
