"""The verify-cost profile and expected-value drafting on the real model: the profile is measured
(or read from the cache) and shown, the oracle drafter reaches full acceptance without changing the
output, and ``slotserver calibrate`` writes the profile the server then reads."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slotserver.engine.batch import BatchEntry, BatchPlan
from slotserver.engine.calibrate import load_or_measure
from slotserver.engine.engine import Engine, EngineConfig
from slotserver.engine.model_files import default_model_path
from tests.conftest import LiveServer, greedy_request, load_workloads
from tests.integration.ties import TIE_PROBS, check_same_or_tie
from tests.metrics.promtext import parse, value

WORKLOADS = {w["name"]: w for w in load_workloads()}


@pytest.fixture(scope="module")
async def oracle_server():
    srv = await LiveServer(["-c", "4096", "-np", "2", "--spec-oracle", "--metrics"]).start()
    yield srv
    await srv.stop()


async def test_profile_is_shown_in_props_and_metrics(oracle_server):
    await oracle_server.complete(**greedy_request(WORKLOADS["repeat"], "ngram-mod"))
    status, props = await oracle_server.get("/props")  # serving refines the profile: read both after it
    spec = props["speculative"]
    assert status == 200 and spec["select"] == "expected"  # the default: measured the faster
    profile = spec["verify_profile"]
    assert profile["rows_ms"]["1"] > 0 and profile["ceiling"]["rows"] >= 1
    async with oracle_server.http.get(oracle_server.url + "/metrics") as resp:
        metrics = parse(await resp.text())
    assert value(metrics, "slotserver_verify_cost_seconds", rows="1") == pytest.approx(profile["rows_ms"]["1"] / 1e3,
                                                                                abs=1e-6)
    step, decode = value(metrics, "slotserver_step_seconds_total"), value(metrics, "slotserver_decode_seconds_total")
    assert step >= decode > 0


@pytest.mark.parametrize("name", ["repeat", "humaneval0"])
async def test_oracle_drafts_the_known_continuation_losslessly(oracle_server, name):
    wl = WORKLOADS[name]
    plain = await oracle_server.complete(**greedy_request(wl, "none", n_probs=TIE_PROBS))
    out = await oracle_server.complete(**greedy_request(wl, "none", **{"speculative.oracle": plain["tokens"]}))
    same = check_same_or_tie(plain, out["tokens"], f"oracle {name}")  # a difference must be a near-tie
    t = out["timings"]
    assert t["draft_n"] > 0, t
    if same:  # after a tie flips, the rest of that draft is rejected and the oracle stops drafting
        assert t["draft_n_accepted"] >= 0.9 * t["draft_n"], t


async def test_oracle_needs_the_flag_and_valid_ids(server, oracle_server):
    body = {"prompt": "a", "n_predict": 2, "speculative.oracle": [1, 2]}
    status, out = await server.post("/completion", body)
    assert status == 400 and "--spec-oracle" in out["error"]["message"]
    status, out = await oracle_server.post("/completion", {**body, "speculative.oracle": [1, 10**9]})
    assert status == 400 and "vocabulary" in out["error"]["message"]
    status, out = await oracle_server.post("/completion", {**body, "speculative.oracle": "1,2"})
    assert status == 400 and "speculative.oracle" in out["error"]["message"]


def test_calibrate_command_writes_the_profile_the_server_reads(tmp_path):
    argv = ["-c", "2048", "-np", "1", "-b", "512", "--spec-profile-dir", str(tmp_path)]
    out = subprocess.run([sys.executable, "-m", "slotserver", "calibrate", *argv], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert "verify-cost profile of" in out and "tokens/s if all accepted" in out
    assert len(list(tmp_path.glob("verify-profile-*.json"))) == 1
    engine = Engine(EngineConfig(model_path=default_model_path(), n_ctx=2048, n_parallel=1, n_batch=512))
    try:
        _, source = load_or_measure(engine, tmp_path)  # a cached profile: a warm-up decode instead of measuring
        engine.decode(BatchPlan([BatchEntry(0, 0, [2, 3], True)]))  # ...which left the sequence empty
    finally:
        engine.close()
    assert source.startswith("cached ")
