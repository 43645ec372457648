"""llama-server's "speculative params": drafters, their settings, and the requests' draft limits.

The draft-model flags are accepted with one warning until the draft-model drafter exists.
"""

from __future__ import annotations

from ngram.cache import DYNAMIC_MAX_BYTES
from slotserver.chains import SCOPES
from slotserver.drafter_types import NAMES
from slotserver.flags.env import add_flag
from slotserver.flags.ignored import DRAFT_MODEL, Ignored, add_ignored

MIB = 1024 * 1024  # --lookup-cache-dynamic-max-mb counts MiB
DRAFT = f"{DRAFT_MODEL} (the n-gram drafters need no draft model)"
IGNORED = (
    Ignored(("-md", "--model-draft", "--spec-draft-model"), DRAFT, "FNAME",
            env=("LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_MODEL_DRAFT"), draft=True),
    Ignored(("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"), DRAFT,
            env=("LLAMA_ARG_N_GPU_LAYERS_DRAFT",), draft=True),
    Ignored(("-td", "--threads-draft", "--spec-draft-threads"), DRAFT, draft=True),
    Ignored(("-tbd", "--threads-batch-draft", "--spec-draft-threads-batch"), DRAFT, draft=True),
    Ignored(("-cd", "--ctx-size-draft"), DRAFT, env=("LLAMA_ARG_CTX_SIZE_DRAFT",), draft=True),
    Ignored(("-devd", "--device-draft", "--spec-draft-device"), DRAFT, "DEV,...", draft=True),
    Ignored(("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"), DRAFT, "TYPE",
            env=("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", "LLAMA_ARG_CACHE_TYPE_K_DRAFT"), draft=True),
    Ignored(("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"), DRAFT, "TYPE",
            env=("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", "LLAMA_ARG_CACHE_TYPE_V_DRAFT"), draft=True),
    Ignored(("--draft-p-split", "--spec-draft-p-split"), DRAFT, "P",
            env=("LLAMA_ARG_SPEC_DRAFT_P_SPLIT", "LLAMA_ARG_DRAFT_P_SPLIT"), draft=True),
)


def add_speculative_args(parser) -> None:
    g = parser.add_argument_group("speculative params")
    add_flag(g, "--spec-type", action="append", metavar="LIST", env="LLAMA_ARG_SPEC_TYPE",
             help=f"comma list of drafters ({', '.join(NAMES)}), or 'none' to switch speculation off "
                  "(default: ngram-mod)")
    _draft_limits(g)
    g.add_argument("--spec-ngram-mod-n-match", type=int, default=24, metavar="N", help="ngram-mod: tokens hashed per lookup")
    g.add_argument("--spec-ngram-mod-n-min", type=int, default=48, metavar="N", help="ngram-mod: shortest draft")
    g.add_argument("--spec-ngram-mod-n-max", type=int, default=64, metavar="N", help="ngram-mod: longest draft")
    for kind in ("simple", "map-k", "map-k4v"):
        g.add_argument(f"--spec-ngram-{kind}-size-n", type=int, default=12, metavar="N", help=f"ngram-{kind}: n-gram (key) length")
        g.add_argument(f"--spec-ngram-{kind}-size-m", type=int, default=48, metavar="N", help=f"ngram-{kind}: longest draft")
        g.add_argument(f"--spec-ngram-{kind}-min-hits", type=int, default=1, metavar="N",
                       help=f"ngram-{kind}: key hits before drafting" + (" (used by map-k4v only)" if kind != "map-k4v" else ""))
    g.add_argument("-lcs", "--lookup-cache-static", default="", metavar="FNAME",
                   help="ngram-cache: static n-gram cache file (llama.cpp or msgpack format; never written)")
    g.add_argument("-lcd", "--lookup-cache-dynamic", default="", metavar="FNAME",
                   help="ngram-cache: dynamic n-gram cache file, learned from every generation and saved")
    _own_args(g)
    add_ignored(g, IGNORED)


def _draft_limits(g) -> None:
    add_flag(g, "--spec-draft-n-max", "--draft-max", "--draft", "--draft-n", dest="draft_n_max", type=int,
             default=-1, metavar="N", env=("LLAMA_ARG_SPEC_DRAFT_N_MAX", "LLAMA_ARG_DRAFT_MAX"),
             help="default speculative.n_max of requests: longest draft verified (-1: the drafters' longest)")
    add_flag(g, "--spec-draft-n-min", "--draft-min", "--draft-n-min", dest="draft_n_min", type=int, default=0,
             metavar="N", env=("LLAMA_ARG_SPEC_DRAFT_N_MIN", "LLAMA_ARG_DRAFT_MIN"),
             help="default speculative.n_min of requests: shorter drafts are dropped")
    add_flag(g, "--spec-draft-p-min", "--draft-p-min", dest="draft_p_min", type=float, default=0.0, metavar="P",
             env=("LLAMA_ARG_SPEC_DRAFT_P_MIN", "LLAMA_ARG_DRAFT_P_MIN"),
             help="default speculative.p_min of requests (a draft model's confidence cut-off; "
                  "the n-gram drafters do not use it)")


def _own_args(g) -> None:
    """slotserver's own: persistence of learned state, and who drafters learn from."""
    g.add_argument("--spec-ngram-mod-file", default="", metavar="PATH",
                   help="slotserver: load the ngram-mod pool from PATH at start and save it there (atomically)")
    g.add_argument("--lookup-cache-format", default="llamacpp", choices=["llamacpp", "msgpack"],
                   help="slotserver: format the dynamic cache is saved in")
    g.add_argument("--lookup-cache-dynamic-max-mb", type=float, default=DYNAMIC_MAX_BYTES / MIB, metavar="MiB",
                   help="slotserver: memory budget of the dynamic cache; over it, the n-grams of least draft "
                        "value per byte are evicted (docs/drafters.md)")
    g.add_argument("--spec-save-interval", type=float, default=300.0, metavar="SECONDS",
                   help="slotserver: how often learned pools/caches are saved (also at shutdown)")
    g.add_argument("--spec-ignore-bad-files", action="store_true",
                   help="slotserver: start even if a pool/cache file cannot be read (it is then never overwritten)")
    g.add_argument("--spec-learning", default="shared", choices=SCOPES,
                   help="slotserver: who drafters learn from: every request (shared, saved to files), requests of "
                        "the same API key (per-key), or only the request itself (per-request); see docs/operations.md")
