"""Measuring the verify-cost profile (``verify_costs.py``) with the loaded target, and caching it.

At start-up, when speculation is on, the server reads the profile cached for this model file, these
threads and these batch sizes, or measures it (tens of seconds on a small CPU, progress in the log) and caches it.
``slotserver calibrate [flags]`` measures again and prints the table. The context size is not part
of the key: a decode's cost depends on the cells in use, which the depth term models, not on the
cells allocated.

What is measured is sized to what the batch and a slot hold (``sizes``): a small context or batch
measures fewer row counts, at a shallower depth, and keys its profile by that sizing (a profile cut
short never serves a larger context). A measurement that fails anyway only logs a warning at start-up
(``serving/build.py``: drafts are then verified whole, as llama.cpp does) and nothing is cached.

The cache is one JSON file per key under ``--spec-profile-dir`` (default ``$XDG_CACHE_HOME/slotserver``
or ``~/.cache/slotserver``), written atomically; a file that does not parse is measured over.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable, TypeVar

from slotserver.engine.batch import BatchEntry, BatchPlan
from slotserver.engine.cpu_kernels import use_extra_bufts
from slotserver.engine.engine import Engine, EngineConfig
from slotserver.engine.verify_costs import VerifyProfile

log = logging.getLogger(__name__)
T = TypeVar("T")

PROFILE_FORMAT = 2  # bump when what is measured changes: old cache files are then measured over
DEPTH = 256  # cached tokens before each timed decode: a typical prompt
DEEP = 1024  # a second depth, for the attention term
# Every row count up to a 64-token draft's 65 rows, not a sample of them: ggml's CPU matrix kernels
# (with weight repacking) take the rows four at a time and each row left over costs almost a
# one-row decode (figures: docs/measurements.md). A sampled table (1-6, 8, 12, 16, 24, 32, 48, 64)
# interpolated 65 rows at about the 64-row time, so a 64-token draft looked cheaper per token than a
# 63-token one and the selection verified 65 rows.
ROWS = tuple(range(1, 66))
PROGRESS_EVERY = 8  # row counts between two progress lines
N_SEQS = 4  # the per-sequence term: this many sequences of one row against one of this many rows


def repeats_for(n_rows: int) -> int:
    """More runs where a decode is short (noisier, and cheap to repeat); one for a row count the
    kernels do not take whole (not a multiple of four): other load only adds time, so a sample
    that came out high makes the selection avoid a row count it would mostly avoid anyway."""
    return 4 if n_rows <= 8 else 2 if n_rows % 4 == 0 else 1


def filler(engine: Engine) -> int:
    """The token the timed decodes repeat (BOS, or 0 without one): what it is does not change the cost."""
    return engine.vocab.bos if engine.vocab.bos >= 0 else 0


def row_cap(engine: Engine) -> int:
    """Most rows in one measured decode: the batch, and one micro-batch (one graph: what is timed)."""
    return max(1, min(engine.config.n_batch, engine.config.n_ubatch))


def sizes(cap: int, cells: int) -> tuple[tuple[int, ...], int, int]:
    """(row counts, depth, deep depth) of a measurement that fits decodes of at most ``cap`` rows
    and ``cells`` cells per sequence: the row counts of ``ROWS`` up to ``cap`` that fit the cells;
    ``DEPTH`` cached tokens before them where the longest fits after them (fewer where not), and
    ``DEEP`` for the depth term where it fits (the caller skips that term when it is not deeper)."""
    top = max(1, min(ROWS[-1], cap, cells - 2))
    rows = tuple(r for r in ROWS if r <= top)
    depth = max(0, min(DEPTH, cells - top - 2))
    n_deep = 8 if 8 in rows else rows[-1]
    deep = max(0, min(DEEP, cells - n_deep - 2))
    return rows, depth, deep


def prefill(engine: Engine, seqs: range, depth: int) -> None:
    """``depth`` filler tokens into each of ``seqs``, in decodes of at most ``row_cap`` rows."""
    token = filler(engine)
    chunk = max(1, row_cap(engine) // len(seqs))
    for p0 in range(0, depth, chunk):
        m = min(chunk, depth - p0)
        engine.decode(BatchPlan([BatchEntry(s, p0, [token] * m, False) for s in seqs]))


def time_decode(engine: Engine, n_rows: int, n_seq: int, repeats: int, depth: int, seq0: int = 0,
                warm: bool = True) -> float:
    """Seconds of one decode of ``n_rows`` output rows in each of ``n_seq`` sequences (ids from
    ``seq0``) after ``depth`` cached tokens each (fewer if the sequence has no room for them): the
    fastest of ``repeats`` runs after a warm-up (``warm``: not needed once a larger decode has run),
    since whatever else runs on the machine only ever adds time (one busy moment can make a decode
    several times slower: docs/measurements.md). Leaves the sequences empty."""
    token = filler(engine)
    seqs = range(seq0, seq0 + n_seq)
    room = min(engine.n_ctx // n_seq, engine.n_ctx_slot)  # cells per sequence (a slot's stream without -kvu)
    depth = max(0, min(depth, room - n_rows - 1))
    prefill(engine, seqs, depth)
    plan = BatchPlan([BatchEntry(s, depth, [token] * n_rows, True) for s in seqs])
    times = []
    for _ in range(repeats + warm):
        t0 = time.perf_counter()
        engine.decode(plan)
        times.append(time.perf_counter() - t0)
        for s in seqs:
            engine.remove(s, depth)
    for s in seqs:
        engine.remove(s, 0)
    return min(times[1:] if warm else times)


def warm_up(engine: Engine, n_rows: int) -> float:
    """One decode of ``n_rows`` output rows, then the sequence is emptied again: what a cached
    profile skips at start-up. The first decode with that many output rows touches the output and
    compute buffers' pages for the first time (Gemma: about 1 MiB of logits per row); without this the
    server's first long verify pays for it, inside a request. Seconds it took."""
    token = filler(engine)
    n_rows = max(1, min(n_rows, row_cap(engine), engine.n_ctx_slot - 1))
    t0 = time.perf_counter()
    engine.decode(BatchPlan([BatchEntry(0, 0, [token] * n_rows, True)]))
    engine.remove(0, 0)
    return time.perf_counter() - t0


def measure(engine: Engine, progress=log.info) -> VerifyProfile:
    """The profile of ``engine``'s model and context, sized to them (``sizes``). Needs an empty KV
    cache; leaves it empty."""
    cap = row_cap(engine)
    rows, depth, deep = sizes(cap, engine.n_ctx_slot)
    t_rows = []
    warm_up(engine, rows[-1])  # touches the output rows the row counts below will use, once
    for i, n in enumerate(rows):
        t_rows.append(time_decode(engine, n, 1, repeats_for(n), depth, warm=False))
        if n % PROGRESS_EVERY == 0 or i == len(rows) - 1:
            progress("calibrating verify costs (%d/%d): %d output rows: %.1f ms", i + 1, len(rows) + 2, n,
                     t_rows[-1] * 1e3)
    n_seqs = min(N_SEQS, engine.config.n_parallel, cap)
    t_seq = 0.0
    if n_seqs > 1:
        t_multi = time_decode(engine, 1, n_seqs, 4, 0)
        t_single = time_decode(engine, n_seqs, 1, 4, 0)
        t_seq = max(t_multi - t_single, 0.0) / (n_seqs - 1)
    progress("calibrating verify costs (%d/%d): %.2f ms per further sequence", len(rows) + 1, len(rows) + 2,
             t_seq * 1e3)
    t_input, t_depth = _depth_terms(engine, dict(zip(rows, t_rows)), depth, deep)
    progress("calibrating verify costs (%d/%d): %.3f ms per prompt row, %.2f ms per 1000 cached tokens "
             "per output row", len(rows) + 2, len(rows) + 2, t_input * 1e3, t_depth * 1e6)
    return VerifyProfile(rows, tuple(t_rows), t_seq, t_input, t_depth, depth)


def _depth_terms(engine: Engine, t_rows: dict[int, float], depth: int, deep: int) -> tuple[float, float]:
    """(seconds per prompt row, seconds per output row per cached token): a timed prompt of ``deep``
    tokens (in decodes of at most ``row_cap`` rows), then 8 output rows after it against the same
    at ``depth``. Both 0 where ``deep`` is not deeper (a context too small to tell)."""
    n_rows = 8 if 8 in t_rows else max(t_rows)
    if deep <= depth:
        return 0.0, 0.0
    t0 = time.perf_counter()
    prefill(engine, range(1), deep)
    t_input = (time.perf_counter() - t0) / deep
    engine.remove(0, 0)
    t_deep = time_decode(engine, n_rows, 1, 2, deep)
    return t_input, max(t_deep - t_rows[n_rows], 0.0) / (n_rows * (deep - depth))


def cache_key(engine: Engine) -> dict:
    """What the profile depends on: the model file, the library, the weight layout, threads and batch
    sizes, and the sizing where a small context or batch cut it short (``sizes``; absent otherwise,
    so a full-size profile keeps its key whatever the context). Not the slot count: a server of one
    slot measures no per-sequence term (0), and that term is small here."""
    key = config_key(engine.config, engine.n_threads)
    sized = sizing_key(row_cap(engine), engine.n_ctx_slot)
    return key if sized is None else {**key, "sized": sized}


def sizing_key(cap: int, cells: int) -> dict | None:
    """What ``cache_key`` adds for a measurement that ``sizes`` cut short; None for a full one."""
    rows, depth, deep = sizes(cap, cells)
    if (rows[-1], depth) == (ROWS[-1], DEPTH) and deep > depth:
        return None
    return {"rows": rows[-1], "depth": depth, "deep": deep}


def config_key(c: EngineConfig, n_threads: int) -> dict:
    """``cache_key`` of an engine of config ``c`` with ``n_threads`` threads, before one exists."""
    path = Path(c.model_path).resolve()
    st = path.stat()
    try:
        lib = version("llama_cpp_python")
    except PackageNotFoundError:
        lib = "unknown"
    return {"format": PROFILE_FORMAT, "model": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "llama_cpp_python": lib, "extra_bufts": use_extra_bufts(), "n_threads": n_threads, "n_batch": c.n_batch,
            "n_ubatch": c.n_ubatch}


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "slotserver"


def profile_dir(spec) -> Path:
    """The cache directory a ``SpecConfig`` asks for (``--spec-profile-dir``, or the user's cache)."""
    return Path(spec.profile_dir) if spec.profile_dir else default_dir()


def cache_path(directory: Path, key: dict, kind: str = "verify-profile") -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return directory / f"{kind}-{digest}.json"


def load_or_measure(engine: Engine, directory: Path | None, *, force: bool = False) -> tuple[VerifyProfile, str]:
    """The cached profile for ``engine`` (measured and cached if there is none, or ``force``), and
    where it came from ("cached PATH" or "measured")."""
    key = cache_key(engine)
    path = cache_path(directory, key) if directory is not None else None
    profile = None
    if path is not None and not force:
        profile = load_json(path, key, lambda data: VerifyProfile.from_dict(data["profile"]))
    if profile is not None:
        t = warm_up(engine, profile.rows[-1] + 1)  # the longest verify: a draft of the last row count
        return profile, f"cached {path}; warm-up decode of {profile.rows[-1] + 1} rows {t * 1e3:.0f} ms"
    log.info("measuring the verify-cost profile of this model on this machine (tens of seconds on a small CPU, cached after)")
    profile = measure(engine)
    if path is not None:
        save_json(path, {"key": key, "profile": profile.to_dict()})
    return profile, "measured"


def load_json(path: Path, key: dict, parse: Callable[[dict], T]) -> T | None:
    """``parse`` of the cache file at ``path`` if there is one written for ``key``; None if there is
    none, or another key's, or it does not parse (logged: the caller measures again)."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        return parse(data) if data.get("key") == key else None
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("the cache file %s is unreadable; measuring again", path)
        return None


def save_json(path: Path, data: dict) -> None:
    """Write a cache file atomically; a failure is only logged (the next start measures again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write the cache file %s: %s", path, exc)
