"""The command line, parsed: llama-server's flags and LLAMA_ARG_* variables (the sections are in this
package) turned into a checked ``ServerConfig``. ``cli.main`` runs the server from it; ``cluster`` runs
replicas from the same flags."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from typing import Mapping

from ngram.cache import NgramCacheConfig
from ngram.map_state import NgramMapConfig
from ngram.mod import NgramModConfig
from ngram.suffix import SuffixConfig
from slotserver.api.hosts import parse_allowed_hosts
from slotserver.api.security import load_api_keys, parse_cors_origins
from slotserver.config import ServerConfig
from slotserver.engine.engine import EngineConfig
from slotserver.engine.model_files import default_model_path
from slotserver.flags.common import IGNORED as COMMON_IGNORED
from slotserver.flags.common import add_common_args
from slotserver.flags.env import env_defaults, given, misspelled_short_flag, normalize_argv
from slotserver.flags.help import HelpFormatter
from slotserver.flags.ignored import ignored_warnings
from slotserver.flags.presets import add_presets, apply_presets
from slotserver.flags.refused import add_refused, refused_env
from slotserver.flags.sampling import add_sampling_args, sampling_defaults
from slotserver.flags.server import IGNORED as SERVER_IGNORED
from slotserver.flags.server import add_server_args
from slotserver.flags.speculative import IGNORED as SPEC_IGNORED
from slotserver.flags.speculative import MIB, add_speculative_args
from slotserver.limits import LimitsConfig
from slotserver.serving.slot_files import check_save_dir, own_files
from slotserver.speculation.config import DraftModelConfig, SpecConfig
from slotserver.speculation.registry import DRAFT_MODEL, parse_types


def parse_spec_types(values: list[str] | None, draft_model: str = "") -> tuple[str, ...]:
    """--spec-type; unnamed: ngram-mod, and draft-simple after it when a draft model is given."""
    if not values:
        return ("ngram-mod", DRAFT_MODEL) if draft_model else ("ngram-mod",)
    try:
        return parse_types(",".join(values), field="--spec-type")
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    """llama-server's flags in its four help sections. Exact spellings only (no abbreviations), as
    llama.cpp: an unknown llama-server flag must fail, not match one of ours by its prefix."""
    p = argparse.ArgumentParser(
        prog="slotserver", usage="%(prog)s [options]", allow_abbrev=False, formatter_class=HelpFormatter,
        description="Multi-slot LLM server over llama.cpp with draftless speculative decoding. llama-server's "
                    "flags and LLAMA_ARG_* variables work here; flags marked 'slotserver:' are ours.",
    )
    for add_section in (add_common_args, add_sampling_args, add_speculative_args, add_server_args):
        add_section(p)
    add_presets(p.add_argument_group("presets"))
    add_refused(p.add_argument_group("refused", "llama-server flags slotserver cannot honour; each stops the start "
                                                "saying why"))
    return p


def parse_args(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> argparse.Namespace:
    """The command line, with llama-server's LLAMA_ARG_* variables standing for absent flags.

    ``args.env_notes`` lists variables the command line overrode (logged at start-up).
    """
    parser = build_parser()
    argv = normalize_argv(sys.argv[1:] if argv is None else list(argv))
    wrong = misspelled_short_flag(parser, argv)
    if wrong is not None:
        parser.error(f"unrecognized argument: {wrong} (llama-server's flags are matched whole; see --help)")
    try:
        defaults, notes = env_defaults(parser, argv, environ)
    except ValueError as exc:
        parser.error(str(exc))
    parser.set_defaults(**defaults)
    args = parser.parse_args(argv)
    refused = refused_env(environ)
    if refused is not None:
        parser.error(refused)
    try:
        notes = apply_presets(args, given(parser, argv) | set(defaults)) + notes
    except ValueError as exc:
        parser.error(str(exc))
    args.env_notes = notes
    return args


def startup_warnings(args: argparse.Namespace) -> list[str]:
    """Lines to log once the server starts: ignored flags, and overridden variables."""
    specs = COMMON_IGNORED + SPEC_IGNORED + SERVER_IGNORED
    lines = ignored_warnings(args, specs)
    types = parse_spec_types(args.spec_type, args.model_draft)
    if args.model_draft and DRAFT_MODEL not in types:
        lines.append(f"-md {args.model_draft} is not loaded: --spec-type does not name {DRAFT_MODEL}")
    if args.spec_suffix_file and "suffix" not in types:
        lines.append(f"--spec-suffix-file {args.spec_suffix_file} is neither loaded nor saved: "
                     "--spec-type does not name suffix")
    return lines + list(getattr(args, "env_notes", []))


def metrics_series(args: argparse.Namespace) -> tuple[str, ...]:
    """--metrics-series, plus llamacpp when the older --metrics-compat llamacpp is given."""
    series = [name.strip() for name in args.metrics_series.split(",") if name.strip()]
    if args.metrics_compat:
        series.append(args.metrics_compat)
    return tuple(dict.fromkeys(series))


def _existing_dir(path: str, engine: EngineConfig, spec: SpecConfig) -> str:
    """--slot-save-path: an existing directory that holds none of the server's own files."""
    if path and not os.path.isdir(path):
        raise ValueError(f"--slot-save-path {path} is not an existing directory")
    if path:
        check_save_dir(path, *own_files(engine, spec))
    return path


def listen_hosts(host: str) -> list[str]:
    """--host: one address, or a comma list of them (each is listened on)."""
    hosts = [h.strip() for h in host.split(",")]
    if not all(hosts):
        raise ValueError(f"--host {host!r}: an empty address in the list")
    return hosts


def host_names(hosts: list[str]) -> list[str]:
    """With several --host addresses, the names among them (not IP literals) are the server's own
    names, allowed as Host headers (a single --host name is allowed by the Host check itself)."""
    if len(hosts) < 2:
        return []
    return [h for h in hosts if not _is_ip(h)]


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    unified = args.parallel == -1 if args.kv_unified is None else args.kv_unified
    engine = EngineConfig(
        model_path=args.model or default_model_path(),
        n_ctx=args.ctx_size, n_parallel=4 if args.parallel == -1 else args.parallel, n_batch=args.batch_size,
        n_ubatch=args.ubatch_size, n_threads=args.threads, kv_unified=unified,
        kv_streams={"on": True, "off": False}.get(args.kv_streams),
    )
    limits = LimitsConfig(
        max_waiting=args.max_queue, max_requests=args.max_requests, timeout_s=args.timeout,
        shutdown_timeout_s=args.shutdown_timeout, max_body_bytes=args.max_body_bytes,
        step_timeout_s=args.step_timeout, body_timeout_s=args.body_timeout,
        max_peer_reading=args.max_peer_reading, max_peer_requests=args.max_peer_requests,
        slot_save_max_files=args.slot_save_max_files, slot_save_max_bytes=args.slot_save_max_bytes,
    )
    spec = spec_config(args)
    return ServerConfig(
        engine=engine, spec=spec, limits=limits, spec_learning=args.spec_learning,
        slot_save_path=_existing_dir(args.slot_save_path, engine, spec), host=args.host, port=args.port,
        alias=args.alias,
        n_predict=args.n_predict, seed=args.seed, sampling=sampling_defaults(args),
        draft_n_max=args.draft_n_max, draft_n_min=args.draft_n_min, draft_p_min=args.draft_p_min,
        cache_prompt=args.cache_prompt, slots_endpoint=args.slots, context_shift=args.context_shift,
        n_keep=args.keep, cache_reuse=args.cache_reuse, spm_infill=args.spm_infill,
        metrics=args.metrics or bool(args.metrics_compat), metrics_series=metrics_series(args),
        api_keys=load_api_keys(flags=args.api_key, files=args.api_key_file), metrics_no_auth=args.metrics_no_auth,
        cors_origins=parse_cors_origins(args.cors_origin, args.cors_origins),
        allowed_hosts=parse_allowed_hosts((args.allowed_host or []) + host_names(listen_hosts(args.host))),
        chat_special=args.chat_special,
    )


def spec_config(args: argparse.Namespace) -> SpecConfig:
    def map_config(kind: str) -> NgramMapConfig:
        get = lambda name: getattr(args, f"spec_ngram_{kind}_{name}")  # noqa: E731
        return NgramMapConfig(get("size_n"), get("size_m"), get("min_hits"))

    types = parse_spec_types(args.spec_type, args.model_draft)
    draft = DraftModelConfig(
        path=args.model_draft if DRAFT_MODEL in types else "", n_ctx=args.ctx_size_draft,
        n_threads=args.threads_draft, n_max=16 if args.draft_n_max == -1 else args.draft_n_max,
        when=args.spec_draft_when)
    return SpecConfig(
        types=types, draft=draft,
        ngram_mod=NgramModConfig(args.spec_ngram_mod_n_match, args.spec_ngram_mod_n_min, args.spec_ngram_mod_n_max,
                                 args.spec_ngram_mod_n_match_cold),
        ngram_simple=map_config("simple"),
        ngram_map_k=map_config("map_k"),
        ngram_map_k4v=map_config("map_k4v"),
        ngram_cache=NgramCacheConfig(dynamic_max_bytes=int(args.lookup_cache_dynamic_max_mb * MIB)),
        lookup_static=args.lookup_cache_static,
        lookup_dynamic=args.lookup_cache_dynamic,
        lookup_format=args.lookup_cache_format,
        suffix=SuffixConfig(depth=args.spec_suffix_depth, min_prob=args.spec_suffix_min_prob,
                            factor=args.spec_suffix_factor, max_mb=args.spec_suffix_max_mb,
                            n_max=args.spec_suffix_n_max, learn_prompts=args.spec_suffix_learn_prompts),
        suffix_file=args.spec_suffix_file,
        estimates_file=args.spec_estimates_file,
        mod_file=args.spec_ngram_mod_file,
        ignore_bad_files=args.spec_ignore_bad_files,
        save_interval_s=args.spec_save_interval,
        select=args.spec_select,
        profile_dir=args.spec_profile_dir,
        recalibrate=args.spec_recalibrate,
        oracle=args.spec_oracle,
    )
