"""llama-server's "common params": model, context, threads, batches; and the hardware flags that
cannot matter on this CPU build."""

from __future__ import annotations

import importlib.metadata
import os

from slotserver import __version__
from slotserver.flags.env import add_flag, add_pair
from slotserver.flags.ignored import Ignored, add_ignored

CPU_ONLY = "GPU offload: this server runs llama.cpp on the CPU only"
EXTRA_BUFTS = "SLOTSERVER_EXTRA_BUFTS"  # slotserver/engine/cpu_kernels.py ENV (not imported: it loads llama_cpp)
ROPE = "the model's own RoPE/YaRN settings are used (context extension is not supported)"
LOG_FORMAT = "log lines have one plain format here: time, level, logger, message"
IGNORED = (
    Ignored(("-ngl", "--gpu-layers", "--n-gpu-layers"), CPU_ONLY, env=("LLAMA_ARG_N_GPU_LAYERS",)),
    Ignored(("-sm", "--split-mode"), CPU_ONLY, "MODE", env=("LLAMA_ARG_SPLIT_MODE",)),
    Ignored(("-ts", "--tensor-split"), CPU_ONLY, "N0,N1,...", env=("LLAMA_ARG_TENSOR_SPLIT",)),
    Ignored(("-mg", "--main-gpu"), CPU_ONLY, "INDEX", env=("LLAMA_ARG_MAIN_GPU",)),
    Ignored(("-dev", "--device"), CPU_ONLY, "DEV,...", env=("LLAMA_ARG_DEVICE",)),
    Ignored(("-kvo", "--kv-offload"), CPU_ONLY, negative=("-nkvo", "--no-kv-offload"), env=("LLAMA_ARG_KV_OFFLOAD",)),
    Ignored(("-ot", "--override-tensor"), CPU_ONLY, "PATTERN=TYPE,...", env=("LLAMA_ARG_OVERRIDE_TENSOR",)),
    Ignored(("-fit", "--fit"), "fitting arguments to device memory: there is no device memory to fit",
            "on|off", env=("LLAMA_ARG_FIT",), optional=True),
    Ignored(("-fa", "--flash-attn"), "flash attention is a GPU kernel choice; llama.cpp picks the CPU kernels",
            "on|off|auto", env=("LLAMA_ARG_FLASH_ATTN",), optional=True),
    Ignored(("-ctk", "--cache-type-k"), "the KV cache stays F16: KV entries are moved and restored exactly "
            "(context shift, --cache-reuse, slot files)", "TYPE", env=("LLAMA_ARG_CACHE_TYPE_K",)),
    Ignored(("-ctv", "--cache-type-v"), "the KV cache stays F16 (see -ctk)", "TYPE", env=("LLAMA_ARG_CACHE_TYPE_V",)),
    Ignored(("--swa-full",), "the sliding-window cache is always full size here", None, env=("LLAMA_ARG_SWA_FULL",)),
    Ignored(("--mlock",), "the model is memory-mapped; whether its pages stay in RAM is left to the OS", None,
            env=("LLAMA_ARG_MLOCK",)),
    Ignored(("--mmap",), "the model is always memory-mapped", negative=("--no-mmap",), env=("LLAMA_ARG_MMAP",)),
    Ignored(("--numa",), "NUMA placement is left to the OS", "TYPE", env=("LLAMA_ARG_NUMA",)),
    Ignored(("-tb", "--threads-batch"), "prompts are processed with -t threads too"),
    Ignored(("-dt", "--defrag-thold"), "deprecated in llama-server too: the KV cache needs no defragmentation",
            env=("LLAMA_ARG_DEFRAG_THOLD",)),
    Ignored(("--rope-scaling",), ROPE, "TYPE", env=("LLAMA_ARG_ROPE_SCALING_TYPE",)),
    Ignored(("--rope-scale",), ROPE, env=("LLAMA_ARG_ROPE_SCALE",)),
    Ignored(("--rope-freq-base",), ROPE, env=("LLAMA_ARG_ROPE_FREQ_BASE",)),
    Ignored(("--rope-freq-scale",), ROPE, env=("LLAMA_ARG_ROPE_FREQ_SCALE",)),
    Ignored(("--yarn-orig-ctx",), ROPE, env=("LLAMA_ARG_YARN_ORIG_CTX",)),
    Ignored(("--yarn-ext-factor",), ROPE, env=("LLAMA_ARG_YARN_EXT_FACTOR",)),
    Ignored(("--yarn-attn-factor",), ROPE, env=("LLAMA_ARG_YARN_ATTN_FACTOR",)),
    Ignored(("--yarn-beta-slow",), ROPE, env=("LLAMA_ARG_YARN_BETA_SLOW",)),
    Ignored(("--yarn-beta-fast",), ROPE, env=("LLAMA_ARG_YARN_BETA_FAST",)),
    Ignored(("-cmoe", "--cpu-moe"), CPU_ONLY + ": MoE weights are on the CPU already", None, env=("LLAMA_ARG_CPU_MOE",)),
    Ignored(("-ncmoe", "--n-cpu-moe"), CPU_ONLY + ": MoE weights are on the CPU already", env=("LLAMA_ARG_N_CPU_MOE",)),
    Ignored(("--no-host",), "there are no device buffers to bypass", None),
    Ignored(("-hft", "--hf-token"), "slotserver downloads nothing", "TOKEN"),
    Ignored(("--offline",), "slotserver downloads nothing: it is always offline", None, env=("LLAMA_OFFLINE",)),
    Ignored(("--no-mmproj",), "no multimodal projector is ever loaded here", None),
    Ignored(("--mmproj-auto",), "no multimodal projector is ever loaded here", negative=("--no-mmproj-auto",),
            env=("LLAMA_ARG_MMPROJ_AUTO",)),
    Ignored(("--mmproj-offload",), "no multimodal projector is ever loaded here", negative=("--no-mmproj-offload",),
            env=("LLAMA_ARG_MMPROJ_OFFLOAD",)),
    Ignored(("--log-disable",), "logging is set with --log-level", None),
    Ignored(("--log-colors",), LOG_FORMAT, "on|off|auto", env=("LLAMA_LOG_COLORS",), optional=True),
    Ignored(("--log-prefix",), LOG_FORMAT, None, env=("LLAMA_LOG_PREFIX",)),
    Ignored(("--log-timestamps",), LOG_FORMAT, None, env=("LLAMA_LOG_TIMESTAMPS",)),
    Ignored(("-lv", "--verbosity", "--log-verbosity"), "what is logged is set with --log-level (or -v)",
            env=("LLAMA_LOG_VERBOSITY",)),
    Ignored(("--log-file",), "logs go to stderr (redirect it, or let the service manager collect it)", "FNAME",
            env=("LLAMA_ARG_LOG_FILE", "LLAMA_LOG_FILE")),
)


def add_common_args(parser) -> None:
    g = parser.add_argument_group("common params")
    add_flag(g, "-m", "--model", default=None, metavar="FNAME", env="LLAMA_ARG_MODEL",
             help="GGUF model file (default: the embedded Gemma 3 270M)")
    add_flag(g, "-c", "--ctx-size", type=int, default=8192, metavar="N", env="LLAMA_ARG_CTX_SIZE",
             help="context size shared by all slots (0 = model's)")
    add_flag(g, "-n", "--predict", "--n-predict", dest="n_predict", type=int, default=-1, metavar="N",
             env="LLAMA_ARG_N_PREDICT", help="default tokens to predict (-1 = until stop)")
    add_flag(g, "-t", "--threads", type=int, default=0, metavar="N", env="LLAMA_ARG_THREADS",
             help="CPU threads (0 = all cores)")
    add_flag(g, "-b", "--batch-size", type=int, default=2048, metavar="N", env="LLAMA_ARG_BATCH",
             help="logical batch: tokens per decode step")
    add_flag(g, "-ub", "--ubatch-size", type=int, default=512, metavar="N", env="LLAMA_ARG_UBATCH",
             help="physical batch size")
    add_flag(g, "--keep", type=int, default=0, metavar="N",
             help="default n_keep: prompt tokens a context shift keeps (-1: the whole prompt)")
    add_pair(g, ["-kvu", "--kv-unified"], ["-no-kvu", "--no-kv-unified"], dest="kv_unified", default=None,
             env="LLAMA_ARG_KV_UNIFIED",
             help="every slot may use the whole context (default: on when -np is not given, as llama-server; "
                  "otherwise each slot gets -c / -np)")
    add_flag(g, "--kv-streams", choices=["auto", "on", "off"], default="auto",
             help="without -kvu: a KV stream per slot (on, llama-server's layout) or one KV cache holding every "
                  "slot's share (off); auto, the default: with speculation on several slots, whichever steps "
                  "measured faster at start-up (docs/operations.md), else on")
    add_pair(g, ["--context-shift"], ["--no-context-shift"], dest="context_shift", default=False,
             env="LLAMA_ARG_CONTEXT_SHIFT",
             help="when a generation fills its slot's context, drop the oldest tokens after --keep and go on "
                  "(off, the default: it stops, truncated)")
    add_flag(g, "-v", "--verbose", "--log-verbose", action="store_true",
             help="log everything (--log-level debug)")
    add_flag(g, "--log-level", default="info", choices=["debug", "info", "warning", "error"],
             help="slotserver: what to log")
    add_pair(g, ["--repack"], ["-nr", "--no-repack"], dest="repack", default=None, env="LLAMA_ARG_REPACK",
             help=f"weight repacking into llama.cpp's extra CPU buffer types (default: on, except where the AMX "
                  f"kernels crash; the same as {EXTRA_BUFTS}=1/0, which these flags override)")
    g.add_argument("--version", action="version", version=version_text(), help="print the version and exit")
    add_ignored(g, IGNORED)


def version_text() -> str:
    try:
        llama = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        llama = "unknown"
    return f"slotserver {__version__} (llama-cpp-python {llama})"


def apply_repack(args) -> None:
    """--repack/--no-repack: set before any model loads; slotserver/engine/cpu_kernels.py reads it."""
    if getattr(args, "repack", None) is not None:
        os.environ[EXTRA_BUFTS] = "1" if args.repack else "0"
