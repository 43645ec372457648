"""Atomic saves survive kill -9: the file at the path always loads, with the old or the new content.

A child process saves a large structure to one path in a loop, each generation ``g`` filled with
``g``; the test kills it (SIGKILL) at varied moments: before its first save, right after a save
it reported, as soon as a temporary file appears (mid-write), once that file holds data. After
each kill the path must load completely, with a generation the child could have renamed into
place, and the temporary files a kill leaves behind must not disturb loading or the next writer.
The llama.cpp format has no header, so a torn file cut at a record boundary would even parse:
the n-gram count proves it is whole.

Every wait is on something observable (a line the child printed, a file in the directory) and
bounded by one deadline.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ngram.cachefile import load_cache
from ngram.fileio import remove_stale_temps, stale_temp_files
from ngram.pool import HashPool
from ngram.poolfile import load_pool, save_pool

FP = "9a" * 32
POOL_ENTRIES = 4 * 1024 * 1024  # the real pool size: 16 MiB per save
CACHE_NGRAMS = 30_000  # llama.cpp format, 28 bytes per record: 840 KB per save
ROUNDS = 10
TEST_DEADLINE_S = 20.0  # everything, per test
POLL_S = 0.0002

CHILD = r"""
import sys
kind, path, gen = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == "pool":
    from ngram.pool import HashPool
    from ngram.poolfile import save_pool
    pool = HashPool(3, int(sys.argv[4]))
    pool.n_used = pool.size
    def save(g):
        pool.entries.fill(g)
        save_pool(pool, path, sys.argv[5])
else:
    from ngram.cache_data import NgramCache
    from ngram.cachefile import save_cache
    keys = [(1000 + i % 1000, 2000 + i // 1000, -1, -1) for i in range(int(sys.argv[4]))]
    def save(g):
        save_cache(NgramCache({k: {7: g} for k in keys}), path)
print("ready", flush=True)
while True:
    save(gen)
    print(f"saved {gen}", flush=True)
    gen += 1
"""

# How each round picks its moment to kill (cycled through the rounds).
MOMENTS = ("before the first save", "as the temp file appears", "right after a save",
           "once the temp file holds data", "mid-write after a save")


class Child:
    def __init__(self, kind: str, path, gen: int, deadline: float) -> None:
        size = POOL_ENTRIES if kind == "pool" else CACHE_NGRAMS
        self.path = path
        self.deadline = deadline
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, kind, str(path), str(gen), str(size), FP],
            stdout=subprocess.PIPE, text=True, cwd=path.parent,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reported: list[int] = []  # generations the child said it saved
        self.old_temps = set(stale_temp_files(path))  # left by earlier rounds
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def next_line(self) -> str:
        try:
            line = self.lines.get(timeout=max(self.deadline - time.monotonic(), 0.001))
        except queue.Empty:
            raise AssertionError("the child printed nothing before the deadline") from None
        return self._note(line)

    def _note(self, line: str) -> str:
        if line.startswith("saved "):
            self.reported.append(int(line.split()[1]))
        return line

    def wait_saved(self) -> None:
        while not self.next_line().startswith("saved "):
            pass

    def wait_temp(self, min_bytes: int = 0) -> None:
        """Until this child's temporary file exists (and holds ``min_bytes``)."""
        while True:
            for tmp in set(stale_temp_files(self.path)) - self.old_temps:
                try:
                    if os.path.getsize(tmp) >= min_bytes:
                        return
                except FileNotFoundError:  # renamed meanwhile
                    pass
            assert time.monotonic() < self.deadline, "the child never started a save"
            time.sleep(POLL_S)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=max(self.deadline - time.monotonic(), 0.001))
        assert self.proc.returncode == -signal.SIGKILL
        self.reader.join(max(self.deadline - time.monotonic(), 0.001))  # EOF: the child is gone
        while not self.lines.empty():  # whatever it printed before dying
            self._note(self.lines.get_nowait())
        self.proc.stdout.close()


def run_rounds(kind: str, path, load_generation, on_disk: int) -> None:
    """``on_disk``: the generation the test saved at ``path`` first."""
    deadline = time.monotonic() + TEST_DEADLINE_S
    next_gen = on_disk + 1
    n_left_temps = 0
    for r in range(ROUNDS):
        moment = MOMENTS[r % len(MOMENTS)]
        child = Child(kind, path, next_gen, deadline)
        try:
            assert child.next_line() == "ready"
            if moment == "as the temp file appears":
                child.wait_temp()
            elif moment == "right after a save":
                child.wait_saved()
            elif moment == "once the temp file holds data":
                child.wait_temp(min_bytes=1)
            elif moment == "mid-write after a save":
                child.wait_saved()
                child.wait_temp(min_bytes=1)
        finally:
            child.kill()
        temps = stale_temp_files(path)
        n_left_temps = len(temps)
        # The path holds the last generation renamed into place: the last one reported, or one
        # more whose rename landed before its line was printed; never anything torn.
        newest_reported = max(child.reported, default=on_disk)
        possible = {newest_reported, child.reported[-1] + 1 if child.reported else next_gen}
        got = load_generation(path)
        assert got in possible, f"round {r} ({moment}): generation {got}, expected one of {possible}"
        print(f"round {r}: killed {moment}; file has generation {got}; {len(temps)} temp files left")
        on_disk = got
        next_gen = max(possible) + 1
    # Some kills landed mid-write (their temp files are still there); they never disturbed a
    # load or a later writer, and the next start removes them.
    assert n_left_temps >= 1, "no kill landed while a save was being written"
    removed = remove_stale_temps(path)
    assert stale_temp_files(path) == [] and len(removed) == n_left_temps
    assert load_generation(path) == on_disk


def pool_generation(path) -> int:
    pool = load_pool(path, FP)
    assert pool.size == POOL_ENTRIES and pool.n_used == POOL_ENTRIES
    values = np.unique(pool.entries)
    assert values.size == 1, f"mixed generations {values[:5]}"
    return int(values[0])


def cache_generation(path) -> int:
    cache = load_cache(path).cache
    assert cache.n_ngrams == CACHE_NGRAMS  # a file cut at a record boundary would parse, shorter
    counts = {count for part in cache.parts.values() for count in part.values()}
    assert len(counts) == 1, f"mixed generations {sorted(counts)[:5]}"
    return counts.pop()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_pool_file_survives_kill_9_during_saves(tmp_path):
    path = tmp_path / "mod.pool"
    pool = HashPool(3, POOL_ENTRIES)
    pool.entries.fill(0)
    pool.n_used = POOL_ENTRIES
    save_pool(pool, path, FP)
    del pool
    run_rounds("pool", path, pool_generation, on_disk=0)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_llamacpp_cache_file_survives_kill_9_during_saves(tmp_path):
    from ngram.cache_data import NgramCache
    from ngram.cachefile import save_cache

    path = tmp_path / "dynamic.bin"
    keys = [(1000 + i % 1000, 2000 + i // 1000, -1, -1) for i in range(CACHE_NGRAMS)]
    save_cache(NgramCache({k: {7: 1} for k in keys}), path)  # generation = count, and counts are > 0
    run_rounds("cache", path, cache_generation, on_disk=1)
