"""Command-line tool for n-gram cache files (llama.cpp's lookup tools, in one place).

    python -m slotserver.tools.ngram_tool create -m MODEL -f CORPUS -o OUT [--format llamacpp|msgpack]
    python -m slotserver.tools.ngram_tool merge IN... OUT [--format ...] [--fingerprint HEX]
    python -m slotserver.tools.ngram_tool inspect FILE [--top K]
    python -m slotserver.tools.ngram_tool stats -m MODEL -f TEXT [-lcs FILE] [--n-draft N] [-c N_CTX]
    python -m slotserver.tools.ngram_tool suffix-build -m MODEL -f TEXT [-f TEXT ...] -o OUT [--append]
                                   [--depth 24] [--n-max 64] [--max-mb 256] [--chunk N]
    python -m slotserver.tools.ngram_tool suffix-inspect FILE [--top K] [--context N] [-m MODEL]

``create`` = ``llama-lookup-create`` (static 2-gram cache of a corpus), ``merge`` =
``llama-lookup-merge``, ``stats`` = ``llama-lookup-stats`` extended to every draftless drafter.
``suffix-build`` prebuilds the suffix drafter's global structure (``--spec-suffix-file``) from text
files and ``suffix-inspect`` prints one (``slotserver/tools/ngram_tool_suffix.py``).
llama_cpp is imported only by the commands that tokenize (``create``, ``stats``, ``suffix-build``,
and ``suffix-inspect -m``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Sequence, TextIO

from ngram.cache import NgramCacheDrafter
from ngram.cache_data import NGRAM_STATIC, NgramCache, ngram_size
from ngram.cachefile import FORMAT_LLAMACPP, FORMAT_MSGPACK, FORMATS, load_cache, save_cache
from slotserver.speculation.registry import DRAFTER_TYPES
from slotserver.tools.ngram_replay import replay
from slotserver.tools.ngram_tool_suffix import add_suffix_commands
from slotserver.tools.support import ModelVocab, progress

PROGRESS_CHUNK = 1 << 20  # tokens counted between progress-bar updates
DEFAULT_N_CTX = 4096


def tokenize_file(model_path: str, text_path: str) -> list[int]:
    with open(text_path, "rb") as f:
        return ModelVocab(model_path).tokenize(f.read(), add_bos=True)


def build_static(tokens: Sequence[int], out: TextIO = sys.stderr) -> NgramCache:
    """``llama-lookup-create``: count 2-grams over all tokens, with a progress bar."""
    cache = NgramCache()
    total = len(tokens)
    for start in range(0, total, PROGRESS_CHUNK):
        end = min(total, start + PROGRESS_CHUNK)
        window = tokens[max(0, start - NGRAM_STATIC) : end]  # enough left context for 2-grams
        cache.update(window, NGRAM_STATIC, NGRAM_STATIC, end - start)
        progress(end, total, out)
    return cache


def cmd_create(args: argparse.Namespace) -> int:
    tokens = tokenize_file(args.model, args.file)
    cache = build_static(tokens)
    fingerprint = None
    if args.format == FORMAT_MSGPACK:
        from slotserver.engine.fingerprint import vocab_fingerprint

        fingerprint = vocab_fingerprint(args.model)
    save_cache(cache, args.output, args.format, fingerprint)
    print(f"{args.output}: {cache.n_ngrams} n-grams, {cache.n_entries} entries from {len(tokens)} tokens")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    merged = NgramCache()
    fingerprints = set()
    for path in args.inputs:
        loaded = load_cache(path, args.fingerprint)
        if loaded.fingerprint is not None:
            fingerprints.add(loaded.fingerprint)
        merged.merge(loaded.cache)
    if len(fingerprints) > 1:
        print(f"error: inputs come from different tokenizers: {sorted(fingerprints)}", file=sys.stderr)
        return 2
    fingerprint = args.fingerprint or next(iter(fingerprints), None)
    if args.format == FORMAT_MSGPACK and fingerprint is None:
        print("error: --format msgpack needs --fingerprint (no input carries one)", file=sys.stderr)
        return 2
    save_cache(merged, args.output, args.format, fingerprint)
    print(f"{args.output}: {merged.n_ngrams} n-grams, {merged.n_entries} entries from {len(args.inputs)} files")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    loaded = load_cache(args.file)
    cache = loaded.cache
    sizes = Counter(ngram_size(ng) for ng in cache.parts)
    totals = {ng: sum(part.values()) for ng, part in cache.parts.items()}
    print(f"file:        {args.file}")
    print(f"format:      {loaded.format}")
    print(f"fingerprint: {loaded.fingerprint or '-'}")
    print(f"n-grams:     {cache.n_ngrams}")
    print(f"entries:     {cache.n_entries}")
    print(f"total count: {sum(totals.values())}")
    print("by size:     " + ", ".join(f"n={s}: {sizes[s]}" for s in sorted(sizes)))
    print(f"top {args.top} n-grams (total count: followers):")
    for ng in sorted(totals, key=lambda g: (-totals[g], g))[: args.top]:
        part = cache.parts[ng]
        best = sorted(part.items(), key=lambda tc: (-tc[1], tc[0]))[:5]
        tokens = [t for t in ng if t >= 0]
        print(f"  {tokens} {totals[ng]}: " + ", ".join(f"{t}x{c}" for t, c in best))
    return 0


def make_drafters(static: NgramCache) -> dict[str, object]:
    """Every registered drafter with its default configuration; ngram-cache also gets ``static``."""
    out = {}
    for t in DRAFTER_TYPES:
        extra = {"static": static} if t.cls is NgramCacheDrafter else {}
        out[t.name] = t.cls(t.default_config(), **extra)
    return out


def cmd_stats(args: argparse.Namespace) -> int:
    tokens = tokenize_file(args.model, args.file)
    static = NgramCache()
    if args.lookup_cache_static:
        from slotserver.engine.fingerprint import vocab_fingerprint

        static = load_cache(args.lookup_cache_static, vocab_fingerprint(args.model)).cache
    print(f"{len(tokens)} tokens, n_ctx {args.ctx_size}, n_draft {args.n_draft}")
    print(f"{'drafter':<14} {'drafts':>7} {'drafted':>8} {'accepted':>8} {'accept %':>8} {'µs/call':>8}")
    for name, drafter in make_drafters(static).items():
        st = replay(drafter, tokens, args.ctx_size, args.n_draft)
        print(
            f"{name:<14} {st.n_drafts:>7} {st.n_drafted:>8} {st.n_accepted:>8} "
            f"{100 * st.accept_rate:>8.2f} {st.t_per_call_us:>8.1f}"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m slotserver.tools.ngram_tool", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("create", help="build a static 2-gram cache from a corpus")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-f", "--file", required=True, help="corpus text")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--format", choices=FORMATS, default=FORMAT_LLAMACPP)
    p.set_defaults(func=cmd_create)
    p = sub.add_parser("merge", help="sum several caches into one")
    p.add_argument("inputs", nargs="+")
    p.add_argument("output")
    p.add_argument("--format", choices=FORMATS, default=FORMAT_LLAMACPP)
    p.add_argument("--fingerprint", help="expected/attached tokenizer fingerprint")
    p.set_defaults(func=cmd_merge)
    p = sub.add_parser("inspect", help="print counts, sizes and top n-grams")
    p.add_argument("file")
    p.add_argument("--top", type=int, default=10)
    p.set_defaults(func=cmd_inspect)
    p = sub.add_parser("stats", help="replay a text offline and report each drafter's acceptance")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-f", "--file", required=True)
    p.add_argument("-lcs", "--lookup-cache-static", help="static cache for ngram-cache")
    p.add_argument("--n-draft", type=int, default=8)
    p.add_argument("-c", "--ctx-size", type=int, default=DEFAULT_N_CTX)
    p.set_defaults(func=cmd_stats)
    add_suffix_commands(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
