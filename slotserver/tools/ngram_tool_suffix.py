"""The suffix drafter's global structure from the command line: build one from text, inspect one.

    python -m slotserver.tools.ngram_tool suffix-build -m MODEL -f FILE [-f FILE ...] -o OUT [--append]
                                   [--depth 24] [--n-max 64] [--max-mb 256] [--chunk N]
    python -m slotserver.tools.ngram_tool suffix-inspect FILE [--top K] [--context N] [-m MODEL]

``suffix-build`` prebuilds the file the server loads with ``--spec-suffix-file``: what the server
would have saved had it generated these texts. Each text file is one finished request (with
``--chunk N``, one per N tokens, so that a corpus over the budget loses its oldest pieces rather
than whole files), added in order with ``SuffixStore.add``: the server's FIFO eviction, with the
span and budget ``SuffixConfig`` gives the server for the same flags. Texts are tokenized without
BOS, since the server learns outputs, which have none. ``--append`` loads OUT first, with the
checks the server makes (the same vocabulary), and adds after its requests.

``suffix-inspect`` needs no model: the header, the counts, the memory the store takes (so the
``--spec-suffix-max-mb`` that holds all of it) and the most frequent contexts of a few tokens with
their most frequent continuations, the counts the drafter's estimates come from. Each context's
occurrences are one run of the sorted suffixes (``ngram/suffix_index.py``), so one pass over the LCP
array counts them all.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from typing import Protocol, Sequence, TextIO

import numpy as np

from ngram.fileio import CacheFileError
from ngram.suffix import MIB, SuffixConfig
from ngram.suffix_index import SuffixIndex
from ngram.suffix_sort import SEP
from ngram.suffix_store import SuffixStore
from ngram.suffix_walk import IndexCursor
from ngram.suffixfile import SUFFIX_MAGIC, load_store, read_store_header, save_store
from slotserver.engine.fingerprint import VocabInfo
from slotserver.tools.support import ModelVocab, progress

PROGRESS_EVERY = 1 << 16  # tokens added between progress-bar updates (at most; and at least 1% of all)
N_FOLLOWERS = 5  # continuations shown per context
NO_BUDGET = 1 << 62  # inspect loads every request, whatever budget the file was built for
DEFAULTS = SuffixConfig()


class Vocab(Protocol):
    """What the commands need of a model (``ModelVocab``; tests give a fake)."""

    def tokenize(self, text: bytes, add_bos: bool) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...
    def info(self) -> VocabInfo: ...


def open_vocab(model_path: str) -> Vocab:
    return ModelVocab(model_path)


@dataclass(slots=True)
class BuildStats:
    n_added: int = 0  # requests stored (some may have been evicted by later ones)
    n_too_large: int = 0  # requests over the whole budget: not stored (``SuffixStore.add``)
    n_tokens: int = 0  # tokens offered


def tokenize_texts(paths: Sequence[str], vocab: Vocab) -> list[np.ndarray]:
    """Each file's tokens, as int32 (4 bytes a token while they wait to be added, not a Python int's 28)."""
    texts = []
    for path in paths:
        with open(path, "rb") as f:
            texts.append(np.asarray(vocab.tokenize(f.read(), add_bos=False), dtype=np.int32))
    return texts


def split_requests(tokens: np.ndarray, chunk: int) -> list[np.ndarray]:
    """One request of all ``tokens``, or one per ``chunk`` tokens (``chunk`` > 0); none if empty."""
    step = chunk if chunk > 0 else max(len(tokens), 1)
    return [tokens[i : i + step] for i in range(0, len(tokens), step)]


def add_texts(store: SuffixStore, texts: Sequence[np.ndarray], chunk: int, out: TextIO) -> BuildStats:
    """Add every text's requests to ``store`` in order, with a progress bar on ``out``."""
    requests = [r for tokens in texts for r in split_requests(tokens, chunk)]
    total = sum(len(r) for r in requests)
    stats = BuildStats()
    shown, step = 0, max(1, min(PROGRESS_EVERY, total // 100))
    for request in requests:
        if store.add(request):
            stats.n_added += 1
        else:
            stats.n_too_large += 1
        stats.n_tokens += len(request)
        if stats.n_tokens - shown >= step or stats.n_tokens == total:
            progress(stats.n_tokens, total, out)
            shown = stats.n_tokens
    return stats


def start_store(path: str | None, config: SuffixConfig, info: VocabInfo) -> tuple[SuffixStore, int]:
    """An empty store, or (``--append``, if ``path`` exists) the one saved there and how many of its
    requests the budget left out (the newest that fit are loaded)."""
    if path is None or not os.path.exists(path):
        return SuffixStore(config.span, config.max_bytes), 0
    n_saved = read_store_header(path)["n_requests"]
    store = load_store(path, config.span, config.max_bytes, info.fingerprint, n_vocab=info.n_vocab)
    return store, n_saved - len(store.lengths)


def cmd_suffix_build(args: argparse.Namespace) -> int:
    try:
        config = SuffixConfig(depth=args.depth, n_max=args.n_max, max_mb=args.max_mb)
    except ValueError as exc:
        return fail(str(exc))
    if args.chunk < 0:
        return fail("--chunk must be 0 (one request per file) or more")
    vocab = open_vocab(args.model)
    info = vocab.info()
    try:
        store, n_left_out = start_store(args.output if args.append else None, config, info)
        stats = add_texts(store, tokenize_texts(args.files, vocab), args.chunk, sys.stderr)
        save_store(store, args.output, info.fingerprint)
        n_bytes = os.path.getsize(args.output)
    except (CacheFileError, OSError) as exc:
        return fail(str(exc))
    n = max(store.n_tokens, 1)
    print(f"{args.output}: {len(store.lengths)} requests, {store.n_tokens} tokens ({stats.n_added} requests "
          f"added, {n_left_out + store.n_evicted} evicted, {stats.n_too_large} over the budget); "
          f"file {n_bytes} bytes ({n_bytes / n:.1f} per token), memory {store.memory_bytes} bytes "
          f"({store.memory_bytes / n:.1f} per token) of the {config.max_mb:g} MiB budget")
    return 0


def top_contexts(index: SuffixIndex, n: int, top: int) -> list[tuple[list[int], int, list[tuple[int, int]]]]:
    """The ``top`` most frequent ``n``-token contexts (on a tie, the smallest tokens first), each with
    its occurrences and its ``N_FOLLOWERS`` most frequent next tokens with their counts.

    A context's occurrences are the rows from one whose LCP with the row before is below ``n`` up to
    the next such row; a run whose first window meets a separator within ``n`` tokens is shorter
    than ``n`` (a request's end) and is no context.
    """
    assert 1 <= n <= index.span
    sa, lcp, vals = index.sa, index.lcp, index.vals
    firsts = np.flatnonzero(lcp < n)
    sizes = np.diff(np.append(firsts, len(sa)))
    heads = sa[firsts].astype(np.int64)
    whole = np.ones(len(firsts), dtype=bool)
    for j in range(n):
        whole &= vals[heads + j] != SEP
    candidates = np.flatnonzero(whole)
    out = []
    for i in candidates[np.argsort(-sizes[candidates], kind="stable")][:top]:
        lo, hi = int(firsts[i]), int(firsts[i] + sizes[i])
        context = (vals[heads[i] : heads[i] + n].astype(np.int64) - 1).tolist()
        tokens, counts = IndexCursor(index, lo, hi, n).children()
        followers = sorted(zip(map(int, tokens), map(int, counts)), key=lambda tc: (-tc[1], tc[0]))
        out.append((context, hi - lo, followers[:N_FOLLOWERS]))
    return out


def cmd_suffix_inspect(args: argparse.Namespace) -> int:
    try:
        header = read_store_header(args.file)
        store = load_store(args.file, header["span"], NO_BUDGET)
        n_bytes = os.path.getsize(args.file)
    except (CacheFileError, OSError) as exc:
        return fail(str(exc))
    if not 1 <= args.context <= store.span:
        return fail(f"--context must be in 1..{store.span} (the file's span)")
    vocab = open_vocab(args.model) if args.model else None
    fingerprint = header["fingerprint"] or "-"
    if vocab is not None:
        fingerprint += " (the model's)" if vocab.info().fingerprint == header["fingerprint"] else " (NOT the model's)"
    n, lengths = max(store.n_tokens, 1), sorted(store.lengths) or [0]
    memory = store.memory_bytes
    print(f"file:        {args.file}")
    print(f"format:      {SUFFIX_MAGIC.decode()} version {header['version']}")
    print(f"fingerprint: {fingerprint}")
    print(f"span:        {store.span} (depth + n_max it was built for; the server sorts it again for another)")
    print(f"requests:    {len(store.lengths)} (tokens each: min {lengths[0]}, median "
          f"{lengths[len(lengths) // 2]}, max {lengths[-1]})")
    print(f"tokens:      {store.n_tokens}")
    print(f"file size:   {n_bytes} bytes ({n_bytes / n:.1f} per token)")
    print(f"memory:      {memory} bytes ({memory / n:.1f} per token): loads whole with "
          f"--spec-suffix-max-mb >= {math.ceil(100 * memory / MIB) / 100:.2f}")
    print(f"top {args.top} contexts of {args.context} tokens (occurrences: continuations x count):")
    for context, count, followers in top_contexts(store.index, args.context, args.top):
        shown = ", ".join(f"{t}{show_text([t], vocab)} x{c}" for t, c in followers)
        print(f"  {context}{show_text(context, vocab)} {count}: {shown}")
    return 0


def show_text(tokens: list[int], vocab: Vocab | None) -> str:
    """`` 'text'`` of ``tokens`` with a model, else nothing."""
    return f" {vocab.detokenize(tokens)!r}" if vocab is not None else ""


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def add_suffix_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``suffix-build`` and ``suffix-inspect`` on ``ngram_tool``'s subcommands."""
    p = sub.add_parser("suffix-build", help="build the suffix drafter's global structure (--spec-suffix-file) "
                                            "from text files")
    p.add_argument("-m", "--model", required=True, help="the server's model (its tokenizer and fingerprint)")
    p.add_argument("-f", "--file", dest="files", action="append", required=True, metavar="FILE",
                   help="a text file, stored as one finished request; repeat for more (oldest first)")
    p.add_argument("-o", "--output", required=True, help="the file the server loads with --spec-suffix-file")
    p.add_argument("--append", action="store_true",
                   help="if OUTPUT exists, load it (built for the same model) and add after its requests")
    p.add_argument("--depth", type=int, default=DEFAULTS.depth,
                   help="must match the server's --spec-suffix-depth (default %(default)s): with another "
                        "depth + n-max the server sorts the whole file again at start")
    p.add_argument("--n-max", type=int, default=DEFAULTS.n_max,
                   help="must match the server's --spec-suffix-n-max (default %(default)s), as --depth")
    p.add_argument("--max-mb", type=float, default=DEFAULTS.max_mb,
                   help="memory budget in MiB, as the server's --spec-suffix-max-mb (default %(default)s): over "
                        "it the oldest requests are evicted; a server with a smaller one loads the newest that fit")
    p.add_argument("--chunk", type=int, default=0, metavar="N",
                   help="store each file as requests of N tokens (default 0: one request per file), so that "
                        "eviction drops the oldest pieces of a corpus rather than whole files")
    p.set_defaults(func=cmd_suffix_build)
    p = sub.add_parser("suffix-inspect", help="print a suffix structure's counts and most frequent contexts")
    p.add_argument("file")
    p.add_argument("--top", type=int, default=10, help="contexts shown (default %(default)s)")
    p.add_argument("--context", type=int, default=2, metavar="N", help="their length in tokens (default %(default)s)")
    p.add_argument("-m", "--model", help="show the tokens as text with this model's vocabulary")
    p.set_defaults(func=cmd_suffix_inspect)
