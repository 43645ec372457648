"""Command line: llama-server's flag names for what slotserver supports."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from aiohttp import web
from aiohttp.web_runner import GracefulExit

from ngram.cache import DYNAMIC_MAX_BYTES, NgramCacheConfig
from ngram.map_state import NgramMapConfig
from ngram.mod import NgramModConfig
from slotserver.api.app import create_app
from slotserver.api.security import API_KEY_ENV, load_api_keys, parse_cors_origins
from slotserver.api.shutdown import drain
from slotserver.chains import SCOPES
from slotserver.config import ServerConfig, SpecConfig
from slotserver.drafter_types import NAMES, parse_types
from slotserver.engine import EngineConfig
from slotserver.limits import LimitsConfig
from slotserver.models import default_model_path
from slotserver.persist import StartupFileError


MIB = 1024 * 1024  # --lookup-cache-dynamic-max-mb counts MiB


def parse_spec_types(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return ("ngram-mod",)
    try:
        return parse_types(",".join(values), field="--spec-type")
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slotserver",
        description="Multi-slot LLM server over llama.cpp with draftless speculative decoding.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for add_group in (_model_args, _request_args, _spec_args, _limit_args, _server_args):
        add_group(p)
    return p


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and context")
    g.add_argument("-m", "--model", default=None, help="GGUF model file (default: the embedded Gemma 3 270M)")
    g.add_argument("-c", "--ctx-size", type=int, default=8192, help="context size shared by all slots (0 = model's)")
    g.add_argument("-np", "--parallel", type=int, default=-1,
                   help="number of slots (concurrent requests); -1: 4 slots sharing the whole context (-kvu)")
    g.add_argument("-kvu", "--kv-unified", action="store_true",
                   help="every slot may use the whole context (default: each gets -c / -np, as llama-server)")
    g.add_argument("--context-shift", action=argparse.BooleanOptionalAction, default=False,
                   help="when a generation fills its slot's context, drop the oldest tokens after --keep and go on "
                        "(off: it stops, truncated)")
    g.add_argument("--keep", type=int, default=0, metavar="N",
                   help="default n_keep: prompt tokens a context shift keeps (-1: the whole prompt)")
    g.add_argument("--cache-reuse", type=int, default=0, metavar="N",
                   help="default n_cache_reuse: reuse cached chunks of at least N tokens after the common prefix "
                        "by shifting their KV (0: off; llama.vim recommends 256)")
    g.add_argument("--spm-infill", action="store_true",
                   help="/infill prompt in suffix-prefix-middle order instead of prefix-suffix-middle")
    g.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    g.add_argument("-b", "--batch-size", type=int, default=2048, help="logical batch: tokens per decode step")
    g.add_argument("-ub", "--ubatch-size", type=int, default=512, help="physical batch size")


def _request_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("requests")
    g.add_argument("-n", "--n-predict", type=int, default=-1, help="default tokens to predict (-1 = until stop)")
    g.add_argument("--seed", type=int, default=-1, help="default sampling seed (-1 = random)")
    g.add_argument("--no-cache-prompt", action="store_true", help="never reuse a slot's cached prompt prefix")
    g.add_argument("--no-slots", action="store_true", help="disable GET /slots")


def _spec_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speculative decoding")
    g.add_argument("--spec-type", action="append", metavar="LIST",
                   help=f"comma list of drafters ({', '.join(NAMES)}), or 'none' to switch speculation off "
                        "(default: ngram-mod)")
    g.add_argument("--spec-ngram-mod-n-match", type=int, default=24, help="ngram-mod: tokens hashed per lookup")
    g.add_argument("--spec-ngram-mod-n-min", type=int, default=48, help="ngram-mod: shortest draft")
    g.add_argument("--spec-ngram-mod-n-max", type=int, default=64, help="ngram-mod: longest draft")
    g.add_argument("--spec-ngram-mod-file", default="", metavar="PATH",
                   help="ngram-mod: load the shared pool from PATH at start and save it there (atomically)")
    for kind in ("simple", "map-k", "map-k4v"):
        g.add_argument(f"--spec-ngram-{kind}-size-n", type=int, default=12, help=f"ngram-{kind}: n-gram (key) length")
        g.add_argument(f"--spec-ngram-{kind}-size-m", type=int, default=48, help=f"ngram-{kind}: longest draft")
        g.add_argument(f"--spec-ngram-{kind}-min-hits", type=int, default=1,
                       help=f"ngram-{kind}: key hits before drafting" + (" (used by map-k4v only)" if kind != "map-k4v" else ""))
    g.add_argument("-lcs", "--lookup-cache-static", default="", metavar="FNAME",
                   help="ngram-cache: static n-gram cache file (llama.cpp or msgpack format; never written)")
    g.add_argument("-lcd", "--lookup-cache-dynamic", default="", metavar="FNAME",
                   help="ngram-cache: dynamic n-gram cache file, learned from every generation and saved")
    g.add_argument("--lookup-cache-format", default="llamacpp", choices=["llamacpp", "msgpack"],
                   help="format the dynamic cache is saved in")
    g.add_argument("--lookup-cache-dynamic-max-mb", type=float, default=DYNAMIC_MAX_BYTES / MIB, metavar="MiB",
                   help="ngram-cache: memory budget of the dynamic cache; over it, the n-grams of least draft "
                        "value per byte are evicted (docs/drafters.md)")
    g.add_argument("--spec-save-interval", type=float, default=300.0, metavar="SECONDS",
                   help="how often learned pools/caches are saved (also at shutdown)")
    g.add_argument("--spec-ignore-bad-files", action="store_true",
                   help="start even if a pool/cache file cannot be read (it is then never overwritten)")
    g.add_argument("--spec-learning", default="shared", choices=SCOPES,
                   help="who drafters learn from: every request (shared, saved to files), requests of the same "
                        "API key (per-key), or only the request itself (per-request); see docs/operations.md")


def _limit_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("limits")
    g.add_argument("--max-queue", type=int, default=256, metavar="N",
                   help="requests that may wait for a slot; more get 503 with Retry-After")
    g.add_argument("--max-requests", type=int, default=512, metavar="N",
                   help="HTTP requests handled at once (connections busy with a request); more get 503")
    g.add_argument("-to", "--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="a request's deadline (waiting + generating) and a stream write's timeout")
    g.add_argument("--shutdown-timeout", type=float, default=8.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT: time in-flight requests get to finish (learned state is saved before and after)")
    g.add_argument("--max-body-bytes", type=int, default=0, metavar="N",
                   help="largest request body (0: sized to the context, 64 bytes per token, at least 1 MiB)")


def _server_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on")
    g.add_argument("--port", type=int, default=8080, help="port to listen on")
    g.add_argument("--alias", default="", help="model name reported by the API")
    g.add_argument("--metrics", action="store_true", help="serve Prometheus metrics at GET /metrics")
    g.add_argument("--metrics-compat", choices=["llamacpp"], default=None,
                   help="also export llama-server's llamacpp:* series (implies --metrics)")
    g.add_argument("--api-key", action="append", metavar="KEY",
                   help=f"API key requests must show (Authorization: Bearer KEY or X-Api-Key: KEY); repeatable, "
                        f"each a comma list; if not given, ${API_KEY_ENV}; no key at all: none needed")
    g.add_argument("--api-key-file", action="append", metavar="FNAME",
                   help="file of API keys, one per line (blank lines and # comments ignored); repeatable")
    g.add_argument("--slot-save-path", default="", metavar="PATH",
                   help="directory where POST /slots/{id}?action=save|restore keeps slot files (default: disabled)")
    g.add_argument("--metrics-no-auth", action="store_true", help="GET /metrics answers without an API key")
    g.add_argument("--cors-origin", action="append", metavar="ORIGIN",
                   help="browser origin (scheme://host[:port]) allowed besides the server's own, or '*' for any; "
                        "repeatable; other origins get 403")
    g.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

def _existing_dir(path: str) -> str:
    if path and not os.path.isdir(path):
        raise ValueError(f"--slot-save-path {path} is not an existing directory")
    return path


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    engine = EngineConfig(
        model_path=args.model or default_model_path(),
        n_ctx=args.ctx_size, n_parallel=4 if args.parallel == -1 else args.parallel, n_batch=args.batch_size,
        n_ubatch=args.ubatch_size, n_threads=args.threads, kv_unified=args.kv_unified or args.parallel == -1,
    )
    def map_config(kind: str) -> NgramMapConfig:
        get = lambda name: getattr(args, f"spec_ngram_{kind}_{name}")  # noqa: E731
        return NgramMapConfig(get("size_n"), get("size_m"), get("min_hits"))

    spec = SpecConfig(
        types=parse_spec_types(args.spec_type),
        ngram_mod=NgramModConfig(args.spec_ngram_mod_n_match, args.spec_ngram_mod_n_min, args.spec_ngram_mod_n_max),
        ngram_simple=map_config("simple"),
        ngram_map_k=map_config("map_k"),
        ngram_map_k4v=map_config("map_k4v"),
        ngram_cache=NgramCacheConfig(dynamic_max_bytes=int(args.lookup_cache_dynamic_max_mb * MIB)),
        lookup_static=args.lookup_cache_static,
        lookup_dynamic=args.lookup_cache_dynamic,
        lookup_format=args.lookup_cache_format,
        mod_file=args.spec_ngram_mod_file,
        ignore_bad_files=args.spec_ignore_bad_files,
        save_interval_s=args.spec_save_interval,
    )
    limits = LimitsConfig(
        max_waiting=args.max_queue, max_requests=args.max_requests, timeout_s=args.timeout,
        shutdown_timeout_s=args.shutdown_timeout, max_body_bytes=args.max_body_bytes,
    )
    return ServerConfig(
        engine=engine, spec=spec, limits=limits, spec_learning=args.spec_learning,
        slot_save_path=_existing_dir(args.slot_save_path), host=args.host, port=args.port, alias=args.alias,
        n_predict=args.n_predict, seed=args.seed, cache_prompt=not args.no_cache_prompt,
        slots_endpoint=not args.no_slots, context_shift=args.context_shift, n_keep=args.keep,
        cache_reuse=args.cache_reuse, spm_infill=args.spm_infill,
        metrics=args.metrics or bool(args.metrics_compat), metrics_compat=args.metrics_compat or "",
        api_keys=load_api_keys(flags=args.api_key, files=args.api_key_file), metrics_no_auth=args.metrics_no_auth,
        cors_origins=parse_cors_origins(args.cors_origin),
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    failures: list[str] = []

    def on_fatal(reason: str) -> None:
        """The engine cannot run: close the server at once, then exit 1."""
        failures.append(reason)
        asyncio.get_running_loop().call_soon(_exit_run_app)

    app = create_app(config, on_fatal=on_fatal)
    app.on_startup.append(_handle_signals)
    try:
        # Our signal handlers drain first (shutdown.drain); aiohttp then needs only a short grace.
        web.run_app(app, host=config.host, port=config.port, handler_cancellation=True, handle_signals=False,
                    shutdown_timeout=1.0, print=lambda msg: logging.getLogger("slotserver").info(msg))
    except StartupFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    if failures:
        raise SystemExit(f"error: {failures[0]}")


def _exit_run_app() -> None:
    """Raised from a loop callback, GracefulExit ends ``run_app``'s loop and runs its cleanup."""
    raise GracefulExit()


async def _handle_signals(app: web.Application) -> None:
    """SIGTERM/SIGINT: drain (503 for new requests, save, let in-flight ones finish), then exit 0.
    A second signal during the drain exits at once."""
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task] = []

    def on_signal() -> None:
        if draining:
            _exit_run_app()
        task = asyncio.ensure_future(drain(app))
        task.add_done_callback(lambda _: loop.call_soon(_exit_run_app))
        draining.append(task)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
