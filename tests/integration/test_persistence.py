"""Learned structures survive restarts, and bad files stop the start without being overwritten."""

from __future__ import annotations

import struct

import pytest

from slotserver.speculation.persistence import StartupFileError
from tests.conftest import LiveServer, greedy_request, load_workloads

SMALL = ["-c", "2048", "-np", "1"]
FREE = {**next(w for w in load_workloads() if w["name"] == "free"), "n_predict": 128}
# Free text whose greedy continuation a fresh server never drafts (measured: 0 drafts), so any
# accepted draft after a restart comes from the saved pool.
GOLDCOIN = {**next(w for w in load_workloads() if w["name"] == "goldcoin"), "n_predict": 128}


async def run_once(argv: list[str], wl: dict) -> dict:
    srv = await LiveServer(argv).start()
    try:
        return await srv.complete(**greedy_request(wl, "ngram-mod"))
    finally:
        await srv.stop()  # saves the pool when a file is configured


async def test_restart_with_pool_file_drafts_from_the_first_request(tmp_path):
    pool = tmp_path / "pool.ssngmod"
    pool_only = SMALL + ["--spec-ngram-mod-n-match-cold", "0"]  # drafts from the pool alone
    first = await run_once(pool_only + ["--spec-ngram-mod-file", str(pool)], GOLDCOIN)
    assert pool.stat().st_size > 16 * 1024 * 1024  # the 4M-entry pool was saved at shutdown
    again = await run_once(pool_only + ["--spec-ngram-mod-file", str(pool)], GOLDCOIN)
    fresh = await run_once(pool_only, GOLDCOIN)
    print(f"restarted {again['timings']}\nfresh {fresh['timings']}\nfirst {first['timings']}")
    # The restarted server knows this text from before the restart: it drafts it from the start.
    # (Draft lengths start short and grow with the evidence, so not a whole pool chain at once.)
    assert again["timings"]["draft_n_accepted"] >= fresh["timings"].get("draft_n_accepted", 0) + 12


async def test_corrupt_pool_file_stops_the_start_and_is_never_overwritten(tmp_path):
    bad = tmp_path / "pool.ssngmod"
    bad.write_bytes(b"SSNGMOD" + b"\x93garbage")
    original = bad.read_bytes()
    with pytest.raises(StartupFileError, match=r"pool\.ssngmod: byte offset \d+"):
        await LiveServer(SMALL + ["--spec-ngram-mod-file", str(bad)]).start()
    out = await run_once(SMALL + ["--spec-ngram-mod-file", str(bad), "--spec-ignore-bad-files"], FREE)
    assert out["tokens_predicted"] == 128
    assert bad.read_bytes() == original


async def test_truncated_llamacpp_static_cache_names_file_and_offset(tmp_path):
    lcs = tmp_path / "static.bin"
    record = struct.pack("<4ii", 5, 6, -1, -1, 2) + struct.pack("<ii", 7, 3) + struct.pack("<ii", 8, 1)
    lcs.write_bytes(record + record[:-6])  # the second record is cut short
    with pytest.raises(StartupFileError, match=r"static\.bin: byte offset \d+"):
        await LiveServer(SMALL + ["--spec-type", "ngram-cache", "-lcs", str(lcs)]).start()


async def test_dynamic_cache_is_learned_and_saved_in_llamacpp_format(tmp_path):
    from ngram.cachefile import load_cache

    lcd = tmp_path / "dynamic.bin"
    srv = await LiveServer(SMALL + ["--spec-type", "ngram-cache", "-lcd", str(lcd)]).start()
    try:
        await srv.complete(**greedy_request(FREE, "ngram-cache"))
    finally:
        await srv.stop()
    loaded = load_cache(lcd)
    assert loaded.format == "llamacpp" and loaded.cache.n_ngrams > 100


async def test_restart_with_estimates_file_starts_from_the_learned_acceptance(tmp_path):
    path = tmp_path / "est.ssestim"
    argv = SMALL + ["--spec-select", "expected", "--spec-estimates-file", str(path)]
    repeat = {**next(w for w in load_workloads() if w["name"] == "repeat"), "n_predict": 128}

    async def acceptance(srv: LiveServer) -> dict:
        async with srv.http.get(srv.url + "/props") as resp:
            return (await resp.json())["speculative"]["acceptance"]

    srv = await LiveServer(argv).start()
    try:
        assert await acceptance(srv) == {}  # nothing verified yet: every estimate is the prior
        out = await srv.complete(**greedy_request(repeat, "ngram-mod"))
        assert out["timings"]["draft_n_accepted"] > 0
        learned = await acceptance(srv)
    finally:
        await srv.stop()  # saves the estimates
    assert learned and path.stat().st_size > 0
    again = await LiveServer(argv).start()
    try:
        assert await acceptance(again) == learned  # before its first request
    finally:
        await again.stop()
