"""Learned drafter structures that outlive the process: the ngram-mod pool and the n-gram caches.

Loaded once at start (a file that cannot be read stops the start unless the user asked to ignore
bad files; an ignored file is then never overwritten), saved atomically (temp file, fsync,
rename) every ``save_interval_s`` and at shutdown, on the engine thread that owns the drafters.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

from ngram.cache import NgramCacheDrafter
from ngram.cachefile import load_cache, save_cache
from ngram.fileio import CacheFileError
from ngram.mod import NgramMod
from ngram.poolfile import load_pool, save_pool
from slotserver.chain import DraftChain
from slotserver.config import SpecConfig
from slotserver.stats import ServerStats

log = logging.getLogger(__name__)


class StartupFileError(RuntimeError):
    """A configured cache file cannot be used; the message names the file and the byte offset."""


def _find(chain: DraftChain, kind: type):
    return next((d for _, d in chain.drafters if isinstance(d, kind)), None)


class Persistence:
    def __init__(self, spec: SpecConfig, chain: DraftChain, stats: ServerStats, fingerprint: Callable[[], str]):
        self.spec = spec
        self.stats = stats
        self.mod: NgramMod | None = _find(chain, NgramMod)
        self.cache: NgramCacheDrafter | None = _find(chain, NgramCacheDrafter)
        self._fingerprint_fn = fingerprint
        self._fingerprint: str | None = None
        self._no_write: set[str] = set()  # files we failed to read: never overwrite them
        self.t_last_save = time.monotonic()

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._fingerprint_fn()
        return self._fingerprint

    @property
    def is_active(self) -> bool:
        return bool((self.mod and self.spec.mod_file) or (self.cache and self.spec.lookup_dynamic))

    def load(self) -> None:
        spec = self.spec
        if self.mod is not None and spec.mod_file and os.path.exists(spec.mod_file):
            pool = self._read(spec.mod_file, lambda p: load_pool(p, self.fingerprint))
            if pool is not None:
                if pool.n != self.mod.pool.n:
                    self._bad(spec.mod_file, f"{spec.mod_file}: pool hashes {pool.n}-grams, "
                                             f"the server is configured for {self.mod.pool.n}")
                else:
                    self.mod.pool = pool
                    log.info("loaded the ngram-mod pool from %s (%d entries used)", spec.mod_file, pool.n_used)
        if self.cache is not None and spec.lookup_static:
            loaded = self._read(spec.lookup_static, lambda p: load_cache(p, self.fingerprint))
            if loaded is not None:
                self.cache.static = loaded.cache
        if self.cache is not None and spec.lookup_dynamic and os.path.exists(spec.lookup_dynamic):
            loaded = self._read(spec.lookup_dynamic, lambda p: load_cache(p, self.fingerprint))
            if loaded is not None:
                self.cache.dynamic = loaded.cache

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
        if self.is_active and time.monotonic() - self.t_last_save >= self.spec.save_interval_s:
            self.save()

    def save(self) -> None:
        self.t_last_save = time.monotonic()
        spec = self.spec
        if self.mod is not None and spec.mod_file:
            self._write("ngram_mod_pool", spec.mod_file, lambda p: save_pool(self.mod.pool, p, self.fingerprint))
        if self.cache is not None and spec.lookup_dynamic:
            learned = self.cache.learned()
            self._write("ngram_cache_dynamic", spec.lookup_dynamic, lambda p: save_cache(
                learned, p, spec.lookup_format, self.fingerprint))

    def _write(self, kind: str, path: str, writer) -> None:
        if path in self._no_write:
            return
        files = self.stats.file(kind)
        t0 = time.perf_counter()
        try:
            writer(path)
        except OSError as exc:
            files.failed()
            log.error("could not save %s: %s", path, exc)
            return
        files.saved(os.path.getsize(path), time.perf_counter() - t0)
