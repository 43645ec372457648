"""llama-server's FIM presets (``--fim-qwen-7b-default``, llama.vim's recommended start), taken as
hints: slotserver downloads nothing, so the preset needs ``-m`` naming the model file, and then sets
what the preset sets in llama-server (port 8012, ``-b``/``-ub`` 1024, ``-c 0``, ``--cache-reuse 256``)
wherever the command line does not. Without ``-m`` the start is refused, naming the preset's file.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

# what every FIM preset sets in llama-server (common/arg.cpp), as our dests
FIM_SETTINGS = {"port": 8012, "ubatch_size": 1024, "batch_size": 1024, "ctx_size": 0, "cache_reuse": 256}


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    model: str  # the file llama-server would download (Hugging Face repo / file)
    draft: str = ""  # the -spec presets add a draft model


PRESETS = (
    Preset("--fim-qwen-1.5b-default", "ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF qwen2.5-coder-1.5b-q8_0.gguf"),
    Preset("--fim-qwen-3b-default", "ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF qwen2.5-coder-3b-q8_0.gguf"),
    Preset("--fim-qwen-7b-default", "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF qwen2.5-coder-7b-q8_0.gguf"),
    Preset("--fim-qwen-30b-default",
           "ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF qwen3-coder-30b-a3b-instruct-q8_0.gguf"),
    Preset("--fim-qwen-7b-spec", "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF qwen2.5-coder-7b-q8_0.gguf",
           "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF qwen2.5-coder-0.5b-q8_0.gguf"),
    Preset("--fim-qwen-14b-spec", "ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF qwen2.5-coder-14b-q8_0.gguf",
           "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF qwen2.5-coder-0.5b-q8_0.gguf"),
)


def add_presets(group) -> None:
    for p in PRESETS:
        group.add_argument(p.name, dest="presets", action="append_const", const=p.name,
                           help=f"llama-server's preset as a hint: with -m FILE (the model of {p.model.split()[-1]})"
                                f"{' and -md FILE' if p.draft else ''}, port 8012, -b/-ub 1024, -c 0, --cache-reuse 256 "
                                "where not given; slotserver downloads nothing")


def apply_presets(args: argparse.Namespace, given: set[str]) -> list[str]:
    """Sets the presets' values the command line leaves unset; returns warnings. ValueError: the
    preset cannot start (no -m)."""
    lines: list[str] = []
    for name in dict.fromkeys(getattr(args, "presets", None) or []):
        preset = next(p for p in PRESETS if p.name == name)
        if not args.model:
            raise ValueError(f"{name}: slotserver downloads nothing: pass -m FILE "
                             f"(llama-server would download {preset.model})")
        for dest, value in FIM_SETTINGS.items():
            if dest not in given:
                setattr(args, dest, value)
        if preset.draft and not args.model_draft:
            lines.append(f"{name}: no draft model is loaded (llama-server would download {preset.draft}; "
                         "pass -md FILE)")
    return lines
