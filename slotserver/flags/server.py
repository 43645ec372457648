"""llama-server's example-specific "server params": HTTP, slots, endpoints, keys; slotserver's limits."""

from __future__ import annotations

from slotserver.api.security import API_KEY_ENV
from slotserver.config import METRICS_SERIES
from slotserver.flags.env import add_flag, add_pair
from slotserver.flags.ignored import Ignored, add_ignored

TEMPLATE = "chat requests use the GGUF's own chat template (llama.cpp's built-in renderer, no Jinja engine)"
REASONING = "reasoning output is not parsed here: the model's text is returned as it is"
IGNORED = (
    Ignored(("-cb", "--cont-batching"), "batching is always continuous here", negative=("-nocb", "--no-cont-batching"),
            env=("LLAMA_ARG_CONT_BATCHING",)),
    Ignored(("--jinja",), TEMPLATE, negative=("--no-jinja",), env=("LLAMA_ARG_JINJA",)),
    Ignored(("--chat-template",), TEMPLATE, "TEMPLATE", env=("LLAMA_ARG_CHAT_TEMPLATE",)),
    Ignored(("--chat-template-file",), TEMPLATE, "FNAME", env=("LLAMA_ARG_CHAT_TEMPLATE_FILE",)),
    Ignored(("--reasoning-format",), REASONING, "FORMAT", env=("LLAMA_ARG_THINK",)),
    Ignored(("--reasoning-budget",), REASONING, env=("LLAMA_ARG_THINK_BUDGET",)),
    Ignored(("-rea", "--reasoning"), REASONING, "on|off|auto", env=("LLAMA_ARG_REASONING",)),
    Ignored(("--webui", "--ui"), "there is no web UI", negative=("--no-webui", "--no-ui"),
            env=("LLAMA_ARG_WEBUI", "LLAMA_ARG_UI")),
    Ignored(("--props",), "POST /props (changing settings at run time) is not implemented; GET /props answers",
            None, env=("LLAMA_ARG_ENDPOINT_PROPS",)),
    Ignored(("-sps", "--slot-prompt-similarity"), "a free slot is picked by its longest cached prefix", "SIMILARITY"),
    Ignored(("-cram", "--cache-ram"), "there is no host-memory prompt cache; prompts are reused from the "
            "slots' KV cache", env=("LLAMA_ARG_CACHE_RAM",)),
    Ignored(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "the sliding-window cache is kept full size, "
            "so no checkpoints are needed", env=("LLAMA_ARG_CTX_CHECKPOINTS",)),
    Ignored(("--warmup",), "no warm-up run is made", negative=("--no-warmup",)),
    Ignored(("--threads-http",), "HTTP is served by one asyncio loop", env=("LLAMA_ARG_THREADS_HTTP",)),
)


def add_server_args(parser) -> None:
    g = parser.add_argument_group("server params")
    add_flag(g, "--host", default="127.0.0.1", env="LLAMA_ARG_HOST", help="address to listen on")
    add_flag(g, "--port", type=int, default=8080, env="LLAMA_ARG_PORT", help="port to listen on")
    add_flag(g, "-a", "--alias", default="", metavar="STRING", env="LLAMA_ARG_ALIAS",
             help="model name reported by the API")
    add_flag(g, "-np", "--parallel", type=int, default=-1, metavar="N", env="LLAMA_ARG_N_PARALLEL",
             help="number of slots (concurrent requests); -1: 4 slots sharing the whole context (-kvu)")
    add_pair(g, ["--cache-prompt"], ["--no-cache-prompt"], dest="cache_prompt", default=True,
             env="LLAMA_ARG_CACHE_PROMPT", help="reuse a slot's cached prompt prefix")
    add_flag(g, "--cache-reuse", type=int, default=0, metavar="N", env="LLAMA_ARG_CACHE_REUSE",
             help="default n_cache_reuse: reuse cached chunks of at least N tokens after the common prefix "
                  "by shifting their KV (0: off; llama.vim recommends 256)")
    g.add_argument("--spm-infill", action="store_true",
                   help="/infill prompt in suffix-prefix-middle order instead of prefix-suffix-middle")
    g.add_argument("--slot-save-path", default="", metavar="PATH",
                   help="directory where POST /slots/{id}?action=save|restore keeps slot files (default: disabled)")
    add_pair(g, ["--slots"], ["--no-slots"], dest="slots", default=True, env="LLAMA_ARG_ENDPOINT_SLOTS",
             help="serve GET /slots")
    add_flag(g, "-to", "--timeout", type=float, default=600.0, metavar="SECONDS", env="LLAMA_ARG_TIMEOUT",
             help="a request's deadline (waiting + generating) and a stream write's timeout")
    g.add_argument("--api-key", action="append", metavar="KEY",
                   help=f"API key requests must show (Authorization: Bearer KEY or X-Api-Key: KEY); repeatable, "
                        f"each a comma list; if not given, ${API_KEY_ENV}; no key at all: none needed")
    add_flag(g, "--api-key-file", action="append", metavar="FNAME", env="LLAMA_ARG_API_KEY_FILE",
             help="file of API keys, one per line (blank lines and # comments ignored); repeatable")
    add_flag(g, "--cors-origins", metavar="ORIGINS", env="LLAMA_ARG_CORS_ORIGINS",
             help="comma list of browser origins (scheme://host[:port]) allowed besides the server's own and "
                  "loopback ones; 'localhost': loopback origins (always allowed here); '*': any; adds to "
                  "--cors-origin; other origins get 403, their preflights 204 without a grant")
    _metrics_args(g)
    _own_args(g)
    add_ignored(g, IGNORED)


def _metrics_args(g) -> None:
    add_flag(g, "--metrics", action="store_true", env="LLAMA_ARG_ENDPOINT_METRICS",
             help="serve Prometheus metrics at GET /metrics")
    g.add_argument("--metrics-series", default=",".join(METRICS_SERIES), metavar="LIST",
                   help="slotserver: comma list of the metric families GET /metrics exports: slotserver (slotserver_*), "
                        "llamacpp (llama-server's llamacpp:*)")
    g.add_argument("--metrics-compat", choices=["llamacpp"], default=None,
                   help="slotserver: older spelling; adds llamacpp to --metrics-series and implies --metrics")
    g.add_argument("--metrics-no-auth", action="store_true",
                   help="slotserver: GET /metrics answers without an API key")


def _own_args(g) -> None:
    """slotserver's own: browser origins and the limits of docs/operations.md."""
    g.add_argument("--cors-origin", action="append", metavar="ORIGIN",
                   help="slotserver: browser origin (scheme://host[:port]) allowed besides the server's own and "
                        "loopback ones, or '*' for any; repeatable, each a comma list; see --cors-origins")
    g.add_argument("--allowed-host", action="append", metavar="HOST",
                   help="slotserver: Host header value accepted besides loopback names and --host (a name, or "
                        "name:port), or '*' for any; repeatable; other Hosts get 403 (DNS rebinding)")
    g.add_argument("--chat-special", action="store_true",
                   help="slotserver: parse control tokens (<|im_start|>...) in chat message content; by default "
                        "content is tokenized as plain text, so a message cannot forge a turn")
    g.add_argument("--max-queue", type=int, default=256, metavar="N",
                   help="slotserver: requests that may wait for a slot; more get 503 with Retry-After")
    g.add_argument("--max-requests", type=int, default=512, metavar="N",
                   help="slotserver: HTTP requests handled at once (connections busy with a request); more get 503")
    g.add_argument("--shutdown-timeout", type=float, default=8.0, metavar="SECONDS",
                   help="slotserver: on SIGTERM/SIGINT, time in-flight requests get to finish")
    g.add_argument("--max-body-bytes", type=int, default=0, metavar="N",
                   help="slotserver: largest request body (0: sized to the context, 64 bytes per token, at least 1 MiB)")
    g.add_argument("--body-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="slotserver: a request body must arrive within this (else 408), before it takes a place")
    g.add_argument("--max-peer-reading", type=int, default=32, metavar="N",
                   help="slotserver: requests one client address may have whose body is still arriving; more get 429")
    g.add_argument("--max-peer-requests", type=int, default=256, metavar="N",
                   help="slotserver: requests one client address may have handled at once; more get 429")
    g.add_argument("--step-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="slotserver: watchdog: an engine step running longer turns /health and new requests to 503 "
                        "until it returns")
    g.add_argument("--slot-save-max-files", type=int, default=64, metavar="N",
                   help="slotserver: slot files --slot-save-path may hold; a save beyond gets 400")
    g.add_argument("--slot-save-max-bytes", type=int, default=8 << 30, metavar="N",
                   help="slotserver: bytes the slot files in --slot-save-path may hold together; a save beyond gets 400")
