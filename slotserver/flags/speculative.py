"""llama-server's "speculative params": drafters, their settings, the draft model, and the requests' draft limits."""

from __future__ import annotations

import argparse

from ngram.cache import DYNAMIC_MAX_BYTES
from slotserver.flags.env import add_flag
from slotserver.flags.ignored import Ignored, add_ignored
from slotserver.speculation.config import SCOPES, SELECT_MODES, WHEN
from slotserver.speculation.registry import DRAFT_MODEL, SPEC_TYPES

MIB = 1024 * 1024  # --lookup-cache-dynamic-max-mb counts MiB
IGNORED = (
    Ignored(("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"),
            "the draft model runs on the CPU, as the target", env=("LLAMA_ARG_N_GPU_LAYERS_DRAFT",)),
    Ignored(("-tbd", "--threads-batch-draft", "--spec-draft-threads-batch"), "the draft model uses -td threads for all"),
    Ignored(("-devd", "--device-draft", "--spec-draft-device"), "the draft model runs on the CPU", "DEV,..."),
    Ignored(("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"), "the draft model's KV cache is f16, as the target's",
            "TYPE", env=("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", "LLAMA_ARG_CACHE_TYPE_K_DRAFT")),
    Ignored(("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"), "the draft model's KV cache is f16, as the target's",
            "TYPE", env=("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", "LLAMA_ARG_CACHE_TYPE_V_DRAFT")),
    Ignored(("-cmoed", "--cpu-moe-draft"), "the draft model runs on the CPU", None, env=("LLAMA_ARG_CPU_MOE_DRAFT",)),
    Ignored(("-ncmoed", "--n-cpu-moe-draft"), "the draft model runs on the CPU", env=("LLAMA_ARG_N_CPU_MOE_DRAFT",)),
    Ignored(("--draft-p-split", "--spec-draft-p-split"), "only llama.cpp's tree-drafting example uses it", "P",
            env=("LLAMA_ARG_SPEC_DRAFT_P_SPLIT", "LLAMA_ARG_DRAFT_P_SPLIT")),
)


def add_speculative_args(parser) -> None:
    g = parser.add_argument_group("speculative params")
    add_flag(g, "--spec-type", action="append", metavar="LIST", env="LLAMA_ARG_SPEC_TYPE",
             help=f"comma list of drafters ({', '.join(SPEC_TYPES)}), or 'none' to switch speculation off "
                  f"(default: ngram-mod; with -md: ngram-mod,{DRAFT_MODEL})")
    _draft_limits(g)
    _draft_model(g)
    g.add_argument("--spec-ngram-mod-n-match", type=int, default=24, metavar="N", help="ngram-mod: tokens hashed per lookup")
    g.add_argument("--spec-ngram-mod-n-min", type=int, default=48, metavar="N", help="ngram-mod: shortest draft")
    g.add_argument("--spec-ngram-mod-n-max", type=int, default=64, metavar="N", help="ngram-mod: longest draft")
    g.add_argument("--spec-ngram-mod-n-match-cold", type=int, default=8, metavar="N",
                   help="slotserver, ngram-mod: shortest match in the slot's own history used when the pool "
                        "has no draft (then half of it, drafting at most twice that); 0 = off")
    for kind in ("simple", "map-k", "map-k4v"):
        g.add_argument(f"--spec-ngram-{kind}-size-n", type=int, default=12, metavar="N", help=f"ngram-{kind}: n-gram (key) length")
        g.add_argument(f"--spec-ngram-{kind}-size-m", type=int, default=48, metavar="N", help=f"ngram-{kind}: longest draft")
        g.add_argument(f"--spec-ngram-{kind}-min-hits", type=int, default=1, metavar="N",
                       help=f"ngram-{kind}: key hits before drafting" + (" (used by map-k4v only)" if kind != "map-k4v" else ""))
    _suffix_args(g)
    g.add_argument("-lcs", "--lookup-cache-static", default="", metavar="FNAME",
                   help="ngram-cache: static n-gram cache file (llama.cpp or msgpack format; never written)")
    g.add_argument("-lcd", "--lookup-cache-dynamic", default="", metavar="FNAME",
                   help="ngram-cache: dynamic n-gram cache file, learned from every generation and saved")
    _own_args(g)
    add_ignored(g, IGNORED)


def _draft_limits(g) -> None:
    add_flag(g, "--spec-draft-n-max", "--draft-max", "--draft", "--draft-n", dest="draft_n_max", type=int,
             default=-1, metavar="N", env=("LLAMA_ARG_SPEC_DRAFT_N_MAX", "LLAMA_ARG_DRAFT_MAX"),
             help="default speculative.n_max of requests: longest draft verified (-1: each drafter's longest; "
                  "the draft model's is 16)")
    add_flag(g, "--spec-draft-n-min", "--draft-min", "--draft-n-min", dest="draft_n_min", type=int, default=0,
             metavar="N", env=("LLAMA_ARG_SPEC_DRAFT_N_MIN", "LLAMA_ARG_DRAFT_MIN"),
             help="default speculative.n_min of requests: shorter drafts are dropped")
    add_flag(g, "--spec-draft-p-min", "--draft-p-min", dest="draft_p_min", type=float, default=0.0, metavar="P",
             env=("LLAMA_ARG_SPEC_DRAFT_P_MIN", "LLAMA_ARG_DRAFT_P_MIN"),
             help="default speculative.p_min of requests: the draft model stops at a token it is less sure of "
                  "(a first token below it gives no draft; the n-gram drafters do not use it)")


def _draft_model(g) -> None:
    add_flag(g, "-md", "--model-draft", "--spec-draft-model", dest="model_draft", default="", metavar="FNAME",
             env=("LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_MODEL_DRAFT"),
             help=f"draft model GGUF for {DRAFT_MODEL}; any vocabulary (a different one is bridged through text)")
    add_flag(g, "-td", "--threads-draft", "--spec-draft-threads", dest="threads_draft", type=int, default=0,
             metavar="N", help="draft model's CPU threads (0: as -t)")
    add_flag(g, "-cd", "--ctx-size-draft", dest="ctx_size_draft", type=int, default=0, metavar="N",
             env="LLAMA_ARG_CTX_SIZE_DRAFT", help="draft model's context size (0: as the target's)")
    g.add_argument("--spec-draft-when", default="pays", choices=WHEN,
                   help="slotserver: draft with the draft model only where a draft token's chance of acceptance "
                        "pays for its cost as measured at start-up (pays), or always (llama-server's behaviour); "
                        "docs/drafters.md")


def _suffix_args(g) -> None:
    """slotserver's own suffix drafter (SuffixDecoding; docs/drafters.md#suffix-suffixdecoding)."""
    g.add_argument("--spec-suffix-depth", type=int, default=24, metavar="N",
                   help="suffix: longest suffix of the context matched")
    g.add_argument("--spec-suffix-min-prob", type=float, default=0.1, metavar="P",
                   help="suffix: a draft stops before a token whose estimated probability is below P")
    g.add_argument("--spec-suffix-factor", type=float, default=1.0, metavar="F",
                   help="suffix: a draft has at most match length x F tokens")
    g.add_argument("--spec-suffix-n-max", type=int, default=64, metavar="N", help="suffix: longest draft")
    g.add_argument("--spec-suffix-max-mb", type=float, default=256.0, metavar="MiB",
                   help="suffix: memory budget of the global structure; over it, the oldest requests go first")
    g.add_argument("--spec-suffix-learn-prompts", action="store_true",
                   help="suffix: the global structure learns prompts too, not only outputs")
    g.add_argument("--spec-suffix-file", default="", metavar="PATH",
                   help="suffix: load the global structure from PATH at start and save it there (atomically); "
                        "'python -m slotserver.tools.ngram_tool suffix-build' prebuilds one from text files")


def _own_args(g) -> None:
    """slotserver's own: persistence of learned state, and who drafters learn from."""
    g.add_argument("--spec-ngram-mod-file", default="", metavar="PATH",
                   help="slotserver: load the ngram-mod pool from PATH at start and save it there (atomically)")
    g.add_argument("--lookup-cache-format", default="llamacpp", choices=["llamacpp", "msgpack"],
                   help="slotserver: format the dynamic cache is saved in")
    g.add_argument("--lookup-cache-dynamic-max-mb", type=float, default=DYNAMIC_MAX_BYTES / MIB, metavar="MiB",
                   help="slotserver: memory budget of the dynamic cache; over it, the n-grams of least draft "
                        "value per byte are evicted (docs/drafters.md)")
    g.add_argument("--spec-estimates-file", default="", metavar="PATH",
                   help="slotserver: load the drafters' learned acceptance estimates from PATH at start and save "
                        "them there (atomically): after a restart drafts are as long as they had grown to")
    g.add_argument("--spec-save-interval", type=float, default=300.0, metavar="SECONDS",
                   help="slotserver: how often learned pools/caches are saved (also at shutdown)")
    g.add_argument("--spec-ignore-bad-files", action="store_true",
                   help="slotserver: start even if a pool/cache file cannot be read (it is then never overwritten)")
    g.add_argument("--spec-learning", default="shared", choices=SCOPES,
                   help="slotserver: who drafters learn from: every request (shared, saved to files), requests of "
                        "the same API key (per-key), or only the request itself (per-request); see docs/operations.md")
    _selection_args(g)


def _selection_args(g) -> None:
    """slotserver's own: what a draft is worth here (docs/drafters.md#expected-value-drafting)."""
    g.add_argument("--spec-select", default="expected", choices=SELECT_MODES,
                   help="slotserver: which drafter's draft a step verifies: the one with the most expected tokens "
                        "per second under the measured verify costs (expected, measured the faster here) or "
                        "llama-server's fixed order (precedence); either way only as many draft tokens as pay are "
                        "verified")
    g.add_argument("--spec-profile-dir", default="", metavar="DIR",
                   help="slotserver: where the measured verify-cost profile is cached, per model file, threads "
                        "and batch sizes (default: $XDG_CACHE_HOME/slotserver or ~/.cache/slotserver)")
    g.add_argument("--spec-recalibrate", action="store_true",
                   help="slotserver: measure the verify-cost profile at start-up even if one is cached "
                        "('slotserver calibrate' measures and prints it)")
    g.add_argument("--spec-oracle", action="store_true", help=argparse.SUPPRESS)  # benchmarks only: benchmarks/bench
