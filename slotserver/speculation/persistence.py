"""Learned drafter structures that outlive the process: the ngram-mod pool, the n-gram caches, the
suffix drafter's global structure and the chain's acceptance estimates.

Loaded once at start, before the engine runs: temporary files an interrupted save left behind
are removed; a file that cannot be read, or holds a token id outside the model's vocabulary
(``n_vocab`` from ``slotserver.engine.fingerprint.vocab_info``), stops the start unless the user asked
to ignore bad files (an ignored file is then never overwritten). A dynamic cache larger than its
memory budget is trimmed by the cache's eviction rule.

Saved atomically (temp file, fsync, rename) every ``save_interval_s`` and at shutdown:

* ``maybe_save()`` runs on the engine thread at the end of each step. When a save is due it only
  takes a snapshot (a copy of the pool array; a copy of the learned cache) and hands encoding,
  writing and fsync to one background writer thread: no step waits for the disk. At most one
  write per file is in flight; if the previous one still runs, that file skips this interval.
  An exception in the writer is logged and counted (``FileStats.n_save_errors``), never raised.
* ``save()`` (shutdown, on the engine thread) waits for the writes in flight, then writes
  synchronously, so the last save is complete when it returns.
* ``close()`` stops the writer thread; call it after the last ``save()``.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

from ngram.cache import NgramCacheDrafter
from ngram.cachefile import load_cache, save_cache
from ngram.fileio import CacheFileError, remove_stale_temps
from ngram.mod import NgramMod
from ngram.poolfile import load_pool, save_pool, snapshot_pool
from ngram.suffix import SuffixDrafter
from ngram.suffixfile import load_store, read_store_header, save_store, snapshot_store
from slotserver.engine.fingerprint import VocabInfo
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import SpecConfig
from slotserver.speculation.estimates_file import load_estimates, save_estimates
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)

KIND_POOL = "ngram_mod_pool"  # ServerStats.file() kinds, the metric label ``kind``
KIND_DYNAMIC = "ngram_cache_dynamic"
KIND_SUFFIX = "suffix_store"
KIND_ESTIMATES = "acceptance_estimates"
WRITER_THREAD_NAME = "slotserver-save"

Write = Callable[[str], None]  # writes a snapshot to the given path


class StartupFileError(RuntimeError):
    """A configured cache file cannot be used; the message names the file and the byte offset."""


def _find(chain: DraftChain, kind: type):
    return next((d for _, d in chain.drafters if isinstance(d, kind)), None)


class Persistence:
    """``vocab()`` gives the model's ``VocabInfo``: the fingerprint files must carry and the
    vocabulary size their token ids must stay below."""

    def __init__(self, spec: SpecConfig, chain: DraftChain, stats: ServerStats, vocab: Callable[[], VocabInfo]):
        self.spec = spec
        self.stats = stats
        self.mod: NgramMod | None = _find(chain, NgramMod)
        self.cache: NgramCacheDrafter | None = _find(chain, NgramCacheDrafter)
        self.suffix: SuffixDrafter | None = _find(chain, SuffixDrafter)
        self.chain = chain if chain.drafters or chain.model else None  # no drafter: nothing to estimate
        self._vocab_fn = vocab
        self._fingerprint: str | None = None
        self._n_vocab: int | None = None
        self._no_write: set[str] = set()  # files we failed to read: never overwrite them
        self._writer: ThreadPoolExecutor | None = None  # started by the first background save
        self._in_flight: dict[str, Future] = {}  # path -> its latest background write
        self._closed = False
        self.t_last_save = time.monotonic()

    def _resolve_vocab(self) -> None:
        if self._fingerprint is not None:
            return
        info = self._vocab_fn()
        self._fingerprint, self._n_vocab = info.fingerprint, info.n_vocab

    @property
    def fingerprint(self) -> str:
        self._resolve_vocab()
        return self._fingerprint

    @property
    def n_vocab(self) -> int | None:
        self._resolve_vocab()
        return self._n_vocab

    @property
    def is_active(self) -> bool:
        return bool(self._written_paths())

    def _written_paths(self) -> list[str]:
        spec = self.spec
        return [p for p in (spec.mod_file if self.mod else "", spec.lookup_dynamic if self.cache else "",
                            spec.suffix_file if self.suffix else "", spec.estimates_file if self.chain else "")
                if p]

    def load(self) -> None:
        """Read the configured files (before the engine runs; loads the vocabulary once)."""
        spec = self.spec
        if self._written_paths() or (self.cache is not None and spec.lookup_static):
            self._resolve_vocab()  # here, not in the first save on the engine thread
        for path in self._written_paths():
            try:
                for tmp in remove_stale_temps(path):
                    log.warning("removed %s, left behind by an interrupted save", tmp)
            except OSError as exc:
                log.warning("could not look for temporary files next to %s: %s", path, exc)
        if self.mod is not None and spec.mod_file and os.path.exists(spec.mod_file):
            pool = self._read(spec.mod_file, lambda p: load_pool(p, self.fingerprint, n_vocab=self.n_vocab))
            if pool is not None:
                if pool.n != self.mod.pool.n:
                    self._bad(spec.mod_file, f"{spec.mod_file}: pool hashes {pool.n}-grams, "
                                             f"the server is configured for {self.mod.pool.n}")
                else:
                    self.mod.pool = pool
                    log.info("loaded the ngram-mod pool from %s (%d entries used)", spec.mod_file, pool.n_used)
        if self.suffix is not None and spec.suffix_file and os.path.exists(spec.suffix_file):
            self._load_suffix(spec.suffix_file)
        if self.chain is not None and spec.estimates_file and os.path.exists(spec.estimates_file):
            estimates = self._read(spec.estimates_file, lambda p: load_estimates(p, self.fingerprint))
            if estimates is not None:
                self.chain.adopt_estimates(estimates)
                log.info("loaded acceptance estimates of %d drafter kinds from %s", len(estimates), spec.estimates_file)
        if self.cache is not None and spec.lookup_static:
            loaded = self._read(spec.lookup_static, lambda p: load_cache(p, self.fingerprint, n_vocab=self.n_vocab))
            if loaded is not None:
                self.cache.static = loaded.cache
        if self.cache is not None and spec.lookup_dynamic and os.path.exists(spec.lookup_dynamic):
            loaded = self._read(spec.lookup_dynamic,
                                lambda p: load_cache(p, self.fingerprint, n_vocab=self.n_vocab))
            if loaded is not None:
                n_evicted = self.cache.adopt_dynamic(loaded.cache)
                if n_evicted:
                    log.warning("%s is larger than the dynamic cache's memory budget (%d bytes): "
                                "%d n-grams evicted (least draft value per byte first)", spec.lookup_dynamic,
                                self.cache.dynamic.max_bytes, n_evicted)

    def _load_suffix(self, path: str) -> None:
        """Load the global structure; warn where the file was built for other flags (a prebuilt
        ``ngram_tool suffix-build`` file): it still loads, but not as it was saved."""
        cfg = self.suffix.config
        loaded = self._read(path, lambda p: (read_store_header(p), load_store(p, cfg.span, cfg.max_bytes,
                                                                             self.fingerprint, n_vocab=self.n_vocab)))
        if loaded is None:
            return
        header, store = loaded
        self.suffix.store = store
        log.info("loaded the suffix drafter's global structure from %s (%d requests, %d tokens)",
                 path, len(store.lengths), store.n_tokens)
        if header["span"] != cfg.span:
            log.warning("%s was built for --spec-suffix-depth + --spec-suffix-n-max = %d, the server has %d: "
                        "its index was sorted again (slower start; saves keep the server's)",
                        path, header["span"], cfg.span)
        n_left_out = header["n_requests"] - len(store.lengths)
        if n_left_out:
            log.warning("%s holds more than --spec-suffix-max-mb %g: its %d oldest requests were left out "
                        "(and are gone from the next save)", path, cfg.max_mb, n_left_out)

    def _read(self, path: str, reader):
        try:
            return reader(path)
        except (CacheFileError, OSError) as exc:
            self._bad(path, str(exc))
            return None

    def _bad(self, path: str, message: str) -> None:
        if not self.spec.ignore_bad_files:
            raise StartupFileError(f"{message} (start with --spec-ignore-bad-files to run without it)")
        log.warning("ignoring %s; it will not be overwritten", message)
        self._no_write.add(path)

    def maybe_save(self) -> None:
        """Engine thread, end of each step: when a save is due, snapshot and queue the writes.
        Never waits for I/O."""
        if self._closed or not self.is_active or time.monotonic() - self.t_last_save < self.spec.save_interval_s:
            return
        self.t_last_save = time.monotonic()
        for kind, path, take_snapshot in self._jobs():
            running = self._in_flight.get(path)
            if running is not None and not running.done():
                log.warning("the previous save of %s is still running; skipping this interval", path)
                continue
            write = self._snapshot(kind, path, take_snapshot)
            if write is not None:
                self._in_flight[path] = self._writer_pool().submit(self._write, kind, path, write)

    def save(self) -> None:
        """Shutdown (engine thread): wait for the writes in flight, then write every file now."""
        self.t_last_save = time.monotonic()
        self.wait_for_writes()
        for kind, path, take_snapshot in self._jobs():
            write = self._snapshot(kind, path, take_snapshot)
            if write is not None:
                self._write(kind, path, write)

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        """Wait until no background write is in flight; False if ``timeout`` ran out first."""
        _, pending = wait(list(self._in_flight.values()), timeout)
        return not pending

    def close(self) -> None:
        """Stop the writer thread once its writes are done; later ``maybe_save`` calls do nothing.
        ``save()`` still works (synchronously). Idempotent."""
        self._closed = True
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def _writer_pool(self) -> ThreadPoolExecutor:
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=WRITER_THREAD_NAME)
        return self._writer

    def _jobs(self) -> list[tuple[str, str, Callable[[], Write]]]:
        """(kind, path, take_snapshot) per file to save. ``take_snapshot()`` copies the live
        structure (engine thread) and returns what writes that copy (any thread)."""
        spec = self.spec
        jobs = []
        if self.mod is not None and spec.mod_file:
            jobs.append((KIND_POOL, spec.mod_file, self._snapshot_pool))
        if self.cache is not None and spec.lookup_dynamic:
            jobs.append((KIND_DYNAMIC, spec.lookup_dynamic, self._snapshot_dynamic))
        if self.suffix is not None and spec.suffix_file:
            jobs.append((KIND_SUFFIX, spec.suffix_file, self._snapshot_suffix))
        if self.chain is not None and spec.estimates_file:
            jobs.append((KIND_ESTIMATES, spec.estimates_file, self._snapshot_estimates))
        return [job for job in jobs if job[1] not in self._no_write]

    def _snapshot_pool(self) -> Write:
        pool, fingerprint = snapshot_pool(self.mod.pool), self.fingerprint
        return lambda path: save_pool(pool, path, fingerprint)

    def _snapshot_dynamic(self) -> Write:
        learned, fmt, fingerprint = self.cache.learned(), self.spec.lookup_format, self.fingerprint
        return lambda path: save_cache(learned, path, fmt, fingerprint)

    def _snapshot_suffix(self) -> Write:
        store, fingerprint = snapshot_store(self.suffix.store), self.fingerprint
        return lambda path: save_store(store, path, fingerprint)

    def _snapshot_estimates(self) -> Write:
        estimates, fingerprint = self.chain.snapshot_estimates(), self.fingerprint
        return lambda path: save_estimates(estimates, path, fingerprint)

    def _snapshot(self, kind: str, path: str, take_snapshot: Callable[[], Write]) -> Write | None:
        try:
            return take_snapshot()
        except Exception:
            self.stats.file(kind).failed()
            log.exception("could not take a snapshot to save %s", path)
            return None

    def _write(self, kind: str, path: str, write: Write) -> None:
        """Write one snapshot (writer thread, or the engine thread at shutdown). Never raises."""
        files = self.stats.file(kind)
        t0 = time.perf_counter()
        try:
            write(path)
            n_bytes = os.path.getsize(path)
        except OSError as exc:
            files.failed()
            log.error("could not save %s: %s", path, exc)
            return
        except Exception:
            files.failed()
            log.exception("could not save %s", path)
            return
        files.saved(n_bytes, time.perf_counter() - t0)
