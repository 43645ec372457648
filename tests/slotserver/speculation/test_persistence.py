"""Persistence without a model: the vocabulary check at load, saves on the writer thread.

``maybe_save()`` (engine thread) only snapshots and queues; the writer thread encodes, writes and
fsyncs; ``save()`` (shutdown) waits for it and writes synchronously. Writes are gated with an
event where the order matters, so nothing here depends on timing to pass.
"""

from __future__ import annotations

import logging
import re
import struct
import threading

import numpy as np
import pytest

import slotserver.speculation.persistence as persist_mod
from ngram.cache import NgramCacheConfig, NgramCacheDrafter
from ngram.cache_data import NgramCache
from ngram.cachefile import FORMAT_MSGPACK, load_cache, save_cache
from ngram.fileio import stale_temp_files
from ngram.mod import NgramMod, NgramModConfig
from ngram.pool import HashPool
from ngram.poolfile import load_pool, save_pool
from ngram.suffix import MIB, SuffixConfig, SuffixDrafter
from ngram.suffix_store import SuffixStore
from ngram.suffixfile import save_store
from slotserver.engine.fingerprint import VocabInfo
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import SpecConfig
from slotserver.speculation.persistence import (
    KIND_DYNAMIC,
    KIND_POOL,
    KIND_SUFFIX,
    WRITER_THREAD_NAME,
    Persistence,
    StartupFileError,
)
from slotserver.stats import ServerStats

FP = "ef" * 32
N_VOCAB = 500
POOL_SIZE = 256
GATE_TIMEOUT_S = 10  # a gated write gives up after this: a failing test must not hang


class Setup:
    def __init__(self, tmp_path, vocab=None, config: NgramCacheConfig | None = None, **spec_kw) -> None:
        spec_kw.setdefault("mod_file", str(tmp_path / "mod.pool"))
        spec_kw.setdefault("lookup_dynamic", str(tmp_path / "dynamic.bin"))
        self.spec = SpecConfig(types=("ngram-mod", "ngram-cache"), save_interval_s=0.0, **spec_kw)
        self.mod = NgramMod(NgramModConfig(n_match=3, n_min=1, n_max=8), pool_size=POOL_SIZE)
        self.cache = NgramCacheDrafter(config or NgramCacheConfig())
        self.stats = ServerStats()
        chain = DraftChain([("ngram-mod", self.mod), ("ngram-cache", self.cache)])
        self.p = Persistence(self.spec, chain, self.stats, vocab or (lambda: VocabInfo(FP, N_VOCAB)))

    def learn(self, tokens: list[int]) -> None:
        self.mod.pool.add_all(tokens)
        self.cache.dynamic.update(tokens, 1, 4)


@pytest.fixture
def made(tmp_path):
    made = []

    def make(**kw) -> Setup:
        made.append(Setup(tmp_path, **kw))
        return made[-1]

    yield make
    for s in made:
        s.p.close()


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WRITER_THREAD_NAME)]


# ---- the vocabulary check at start --------------------------------------------------------------

def pool_file(path, token: int) -> None:
    pool = HashPool(3, POOL_SIZE)
    pool.entries[17] = token
    pool.n_used = 1
    save_pool(pool, path, FP)


def llamacpp_file(path, token: int) -> None:
    path.write_bytes(struct.pack("<4ii", 5, 6, -1, -1, 1) + struct.pack("<ii", token, 3))


def msgpack_file(path, token: int) -> None:
    save_cache(NgramCache({(5, 6, -1, -1): {token: 3}}), path, FORMAT_MSGPACK, FP)


CASES = {  # which file, how to write it, and where its one follower token lands
    "pool": ("mod_file", "mod.pool", pool_file),
    "static llama.cpp": ("lookup_static", "static.bin", llamacpp_file),
    "dynamic llama.cpp": ("lookup_dynamic", "dynamic.bin", llamacpp_file),
    "dynamic msgpack": ("lookup_dynamic", "dynamic.ssngram", msgpack_file),
}


@pytest.mark.parametrize("case", CASES)
def test_out_of_vocabulary_file_stops_the_start_naming_file_and_offset(tmp_path, made, case):
    field, name, write = CASES[case]
    path = tmp_path / name
    write(path, N_VOCAB)
    s = made(**{field: str(path)})
    pattern = rf"{name}: byte offset (\d+): [a-z -:]*token id {N_VOCAB} is out of range"
    with pytest.raises(StartupFileError, match=pattern) as info:
        s.p.load()
    offset = int(re.search(pattern, str(info.value)).group(1))
    assert struct.unpack_from("<i", path.read_bytes(), offset)[0] == N_VOCAB  # names the bad id


@pytest.mark.parametrize("case", CASES)
def test_file_within_the_vocabulary_loads(tmp_path, made, case):
    field, name, write = CASES[case]
    path = tmp_path / name
    write(path, N_VOCAB - 1)
    s = made(**{field: str(path)})
    s.p.load()
    if field == "mod_file":
        assert s.mod.pool.entries[17] == N_VOCAB - 1
    else:
        loaded = s.cache.static if field == "lookup_static" else s.cache.dynamic
        assert loaded.get((5, 6, -1, -1)) == {N_VOCAB - 1: 3}


def test_ignored_out_of_vocabulary_file_is_logged_and_never_overwritten(tmp_path, made, caplog):
    path = tmp_path / "mod.pool"
    pool_file(path, N_VOCAB + 7)
    original = path.read_bytes()
    s = made(ignore_bad_files=True)
    with caplog.at_level(logging.WARNING):
        s.p.load()
    assert "ignoring" in caplog.text and "out of range" in caplog.text
    s.learn(list(range(50)))
    s.p.maybe_save()
    assert s.p.wait_for_writes(GATE_TIMEOUT_S)
    s.p.save()
    assert path.read_bytes() == original
    assert s.stats.file(KIND_POOL).n_saves == 0
    assert s.stats.file(KIND_DYNAMIC).n_saves == 2  # the other file is saved as usual


def test_dynamic_cache_file_over_the_budget_is_trimmed_at_load(tmp_path, made):
    big = NgramCache()
    big.update(list(np.random.default_rng(0).integers(0, N_VOCAB, 20_000)), 1, 4)
    save_cache(big, tmp_path / "dynamic.bin")
    s = made(config=NgramCacheConfig(dynamic_max_bytes=1024 * 1024))
    s.p.load()
    assert s.cache.dynamic.size_bytes() <= 1024 * 1024 < big.size_bytes()


def test_stale_temp_files_are_removed_at_load(tmp_path, made):
    stale = tmp_path / ".mod.pool.abc_1234.tmp"
    stale.write_bytes(b"half a pool")
    other = tmp_path / ".mod.pool.not-ours.tmp"
    other.write_bytes(b"x")
    s = made()
    s.p.load()
    assert not stale.exists() and other.exists()
    assert stale_temp_files(tmp_path / "mod.pool") == []


# ---- saves on the writer thread -----------------------------------------------------------------

class Gate:
    """Wraps a save function: records calls; the first ``n_gated`` wait until ``open()``."""

    def __init__(self, fn, n_gated: int = 1) -> None:
        self.fn = fn
        self.n_gated = n_gated
        self.event = threading.Event()
        self.calls: list[str] = []  # thread name per call, in order
        self.done: list[str] = []

    def __call__(self, *args, **kwargs):
        gated = len(self.calls) < self.n_gated
        self.calls.append(threading.current_thread().name)
        if gated:
            assert self.event.wait(GATE_TIMEOUT_S), "the gate was never opened"
        self.fn(*args, **kwargs)
        self.done.append(threading.current_thread().name)

    def open(self) -> None:
        self.event.set()


def test_background_save_writes_the_snapshot_and_never_blocks_the_engine(tmp_path, made, monkeypatch):
    pool_gate, cache_gate = Gate(save_pool), Gate(save_cache)
    monkeypatch.setattr(persist_mod, "save_pool", pool_gate)
    monkeypatch.setattr(persist_mod, "save_cache", cache_gate)
    s = made()
    s.p.load()
    s.learn([1, 2, 3, 4, 1, 2, 3, 5])
    entries_then = s.mod.pool.entries.copy()
    cache_then = s.cache.learned()

    s.p.maybe_save()  # returns although both writes are held at the gate: it never waits for I/O
    assert not pool_gate.event.is_set() and len(pool_gate.done) == 0
    s.learn([1, 2, 3, 4, 7, 8, 9, 10] * 3)  # the live structures move on, old counts too
    assert not np.array_equal(s.mod.pool.entries, entries_then)
    assert s.cache.dynamic.get((1, 2, 3, -1))[4] > cache_then.get((1, 2, 3, -1))[4]
    s.p.maybe_save()  # due again, but both files still have a write in flight: skipped
    assert len(pool_gate.calls) <= 1 and len(cache_gate.calls) <= 1

    pool_gate.open()
    cache_gate.open()
    assert s.p.wait_for_writes(GATE_TIMEOUT_S)
    assert pool_gate.calls == [pool_gate.done[0]] and pool_gate.done[0].startswith(WRITER_THREAD_NAME)
    assert np.array_equal(load_pool(tmp_path / "mod.pool", FP).entries, entries_then)
    assert load_cache(tmp_path / "dynamic.bin").cache == cache_then
    assert s.stats.file(KIND_POOL).n_saves == 1 and s.stats.file(KIND_DYNAMIC).n_saves == 1
    assert len(writer_threads()) == 1


def test_writer_exception_is_counted_not_raised(tmp_path, made, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("encoder bug")

    monkeypatch.setattr(persist_mod, "save_pool", broken)
    s = made(lookup_dynamic=str(tmp_path / "no such dir" / "dynamic.bin"))  # OSError in the writer
    s.p.load()
    s.learn(list(range(40)))
    with caplog.at_level(logging.ERROR):
        s.p.maybe_save()
        assert s.p.wait_for_writes(GATE_TIMEOUT_S)
        s.p.maybe_save()  # the writer thread survived its failures
        assert s.p.wait_for_writes(GATE_TIMEOUT_S)
        s.p.save()  # shutdown save: counted too, not raised
    assert s.stats.file(KIND_POOL).n_save_errors == 3
    assert s.stats.file(KIND_DYNAMIC).n_save_errors == 3
    assert s.stats.file(KIND_POOL).n_saves == 0
    assert "encoder bug" in caplog.text and "no such dir" in caplog.text


def test_save_waits_for_the_write_in_flight_then_writes_the_latest_state(tmp_path, made, monkeypatch):
    pool_gate = Gate(save_pool)
    monkeypatch.setattr(persist_mod, "save_pool", pool_gate)
    s = made()
    s.p.load()
    s.learn([1, 2, 3, 4])
    s.p.maybe_save()  # held at the gate
    s.learn([5, 6, 7, 8, 9])
    latest = s.mod.pool.entries.copy()

    shutdown = threading.Thread(target=s.p.save, name="engine")
    shutdown.start()
    shutdown.join(0.5)  # a correct save() cannot finish before the gate opens; a wrong one would
    assert shutdown.is_alive(), "save() did not wait for the write in flight"
    pool_gate.open()
    shutdown.join(GATE_TIMEOUT_S)
    assert not shutdown.is_alive()
    assert pool_gate.done[0].startswith(WRITER_THREAD_NAME) and pool_gate.done[1] == "engine"
    assert np.array_equal(load_pool(tmp_path / "mod.pool", FP).entries, latest)  # complete and newest
    assert s.stats.file(KIND_POOL).n_saves == 2


def test_close_stops_the_writer_and_save_still_works(tmp_path, made):
    s = made()
    s.p.load()
    s.learn([1, 2, 3, 4])
    s.p.maybe_save()
    s.p.close()
    assert writer_threads() == []
    assert s.stats.file(KIND_POOL).n_saves == 1  # close() let the queued write finish
    s.p.maybe_save()  # after close: nothing
    assert s.stats.file(KIND_POOL).n_saves == 1 and writer_threads() == []
    s.learn([9, 8, 7, 6])
    s.p.save()  # synchronous, no thread needed
    assert s.stats.file(KIND_POOL).n_saves == 2 and writer_threads() == []
    assert np.array_equal(load_pool(tmp_path / "mod.pool", FP).entries, s.mod.pool.entries)
    s.p.close()  # idempotent


def test_maybe_save_waits_for_the_interval(tmp_path, made):
    s = made()
    s.p = Persistence(SpecConfig(types=("ngram-mod",), mod_file=s.spec.mod_file, save_interval_s=3600.0),
                      DraftChain([("ngram-mod", s.mod)]), s.stats, lambda: VocabInfo(FP, N_VOCAB))
    s.p.load()
    s.p.maybe_save()
    assert s.stats.file(KIND_POOL).n_saves == 0 and writer_threads() == []


# ---- the suffix drafter's global structure -------------------------------------------------------

def suffix_setup(tmp_path, **spec_kw):
    spec_kw.setdefault("suffix_file", str(tmp_path / "global.sssuffix"))
    spec_kw.setdefault("suffix", SuffixConfig(depth=4, n_max=8))
    spec = SpecConfig(types=("suffix",), save_interval_s=0.0, **spec_kw)
    drafter = SuffixDrafter(spec.suffix)
    p = Persistence(spec, DraftChain([("suffix", drafter)]), ServerStats(), lambda: VocabInfo(FP, N_VOCAB))
    return spec, drafter, p


def test_suffix_store_is_saved_at_shutdown_and_loaded_at_start(tmp_path):
    spec, drafter, p = suffix_setup(tmp_path)
    p.load()  # no file yet: an empty store
    assert p.is_active and drafter.store.n_tokens == 0
    drafter.store.add([1, 2, 3, 4, 5])
    drafter.store.add([6, 7, 8])
    p.save()
    p.close()
    assert p.stats.file(KIND_SUFFIX).n_saves == 1
    _, again, p2 = suffix_setup(tmp_path)
    p2.load()
    assert again.store.requests() == [[1, 2, 3, 4, 5], [6, 7, 8]]
    again.begin(0, [9])
    assert again.draft(0, [9, 1, 2], 3, 8) == [4, 5]  # the reloaded store drafts
    p2.close()


def test_suffix_file_with_a_token_outside_the_vocabulary_stops_the_start(tmp_path):
    path = tmp_path / "global.sssuffix"
    store = SuffixStore(SuffixConfig(depth=4, n_max=8).span, 1 << 20)
    store.add([1, N_VOCAB + 5])
    save_store(store, path, FP)
    _, _, p = suffix_setup(tmp_path)
    with pytest.raises(StartupFileError, match="global.sssuffix"):
        p.load()


def test_suffix_file_built_for_other_flags_loads_with_a_warning(tmp_path, caplog):
    # A prebuilt file (ngram_tool suffix-build) with another depth + n_max, over the server's budget.
    store = SuffixStore(SuffixConfig(depth=6, n_max=8).span, 1 << 20)
    for request in ([1, 2, 3, 4, 5], [6, 7, 8], [1, 2, 3, 4, 9]):
        store.add(request)
    save_store(store, tmp_path / "global.sssuffix", FP)
    budget = SuffixStore(SuffixConfig(depth=4, n_max=8).span, 1 << 20)
    budget.add([1, 2, 3, 4, 9])  # the server's budget holds the newest request only
    _, drafter, p = suffix_setup(tmp_path, suffix=SuffixConfig(depth=4, n_max=8, max_mb=budget.memory_bytes / MIB))
    with caplog.at_level(logging.WARNING):
        p.load()
    assert drafter.store.requests() == [[1, 2, 3, 4, 9]]
    assert "built for --spec-suffix-depth + --spec-suffix-n-max = 14, the server has 12" in caplog.text
    assert "its 2 oldest requests were left out" in caplog.text
    p.close()
