"""Start-up measurements never make a small configuration fail (issue 34): servers with a small
context, slot or batch measure the KV layout and the verify-cost profile sized to what they hold,
become ready, and answer as a server without speculation does.

At 24272d3 ``-c 512 -np 4 -b 32`` exited 1 (the KV layout timing prefilled the one-cache engine by
the streams' 256 cells a slot, and "failed to find a memory slot"), and ``-c 256 -np 1`` measured a
profile of one row count (every verified row as dear as a whole step); a measurement that failed
stopped the start. Each server gets its own
``--spec-profile-dir``, so nothing is cached between them and every measurement really runs. The
sizing rules themselves are tests/slotserver/engine/test_measure_sizes.py.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from slotserver.engine import calibrate, kv_layout
from tests.conftest import LiveServer
from tests.integration.fim_model import SMOLLM2
from tests.integration.serverproc import ServerProcess

# Measuring on a busy 2-core machine takes minutes; wait for it, polling, rather than guess.
READY_TIMEOUT_S = 900.0
PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5,"


def wait_ready(srv: ServerProcess) -> ServerProcess:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        assert srv.proc.poll() is None, f"server exited {srv.proc.returncode}: {srv.output()[-3000:]}"
        try:
            if srv.request("GET", "/health", timeout=10)[0] == 200:
                return srv
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"server not ready in {READY_TIMEOUT_S:.0f} s: {srv.output()[-3000:]}")


def complete(srv: ServerProcess) -> str:
    status, out = srv.post_json("/completion", {"prompt": PROMPT, "n_predict": 16, "temperature": 0.0,
                                               "ignore_eos": True, "cache_prompt": False})
    assert status == 200, out
    return out["content"]


@pytest.mark.parametrize("flags", [["-c", "512", "-np", "4", "-b", "32"], ["-c", "256", "-np", "1"]],
                         ids=["c512-np4-b32", "c256-np1"])
def test_a_small_configuration_measures_what_fits_and_serves(tmp_path, flags):
    spec = ServerProcess([*flags, "--spec-profile-dir", str(tmp_path / "spec")])
    plain = ServerProcess([*flags, "--spec-type", "none", "--spec-profile-dir", str(tmp_path / "plain")])
    try:
        wait_ready(spec)
        wait_ready(plain)
        assert complete(spec) == complete(plain)
        code, body = spec.request("GET", "/props")
        assert code == 200
        profile = json.loads(body)["speculative"]["verify_profile"]
        # measured, not fallen back from, and sized to the slot rather than cut to one row count
        assert profile is not None and len(profile["rows_ms"]) >= 32, profile
        assert list((tmp_path / "spec").glob("verify-profile-*.json"))
        assert "Traceback" not in plain.output()
        log = spec.output()
        assert "Traceback" not in log and "failed to find a memory slot" not in log, log[-3000:]
        assert not [line for line in log.splitlines() if "WARNING" in line and "failed" in line], log[-3000:]
        if flags[flags.index("-np") + 1] != "1":
            assert "KV layout (measured)" in log  # the layouts were timed
    finally:
        spec.stop()
        plain.stop()


def broken(*_args, **_kwargs):
    raise RuntimeError("llama_decode failed with code 1")


async def test_failed_measurements_only_warn_and_fall_back(monkeypatch, tmp_path, caplog):
    # The real models; only the two start-up measurements fail, as a decode that does not fit would.
    monkeypatch.setattr(kv_layout, "time_steps", broken)
    monkeypatch.setattr(calibrate, "measure", broken)
    caplog.set_level(logging.WARNING)
    srv = await LiveServer(["-c", "512", "-np", "2", "-md", SMOLLM2, "--spec-draft-n-max", "8",
                            "--spec-profile-dir", str(tmp_path)]).start()
    try:
        status, props = await srv.get("/props")
        assert status == 200
        spec = props["speculative"]
        # llama-server's layout, drafts verified whole, the draft model drafting without a cost gate
        assert props["kv_layout"] == "streams" and spec["verify_profile"] is None
        assert spec["draft_model"] is not None and spec["draft_model"]["costs"] is None
        warnings = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        assert "timing the KV layouts failed" in warnings and "verify-cost profile failed" in warnings
        assert "no verify-cost profile" in warnings
        assert not list(tmp_path.glob("*.json"))  # a fallback is not cached: the next start measures
        body = {"prompt": PROMPT, "n_predict": 16, "temperature": 0.0, "ignore_eos": True, "cache_prompt": False}
        drafted = await srv.complete(**body)
        plain = await srv.complete(**body, **{"speculative.type": "none"})
        assert drafted["content"] == plain["content"]
        assert drafted["timings"].get("draft_n", 0) > 0  # the fallbacks still draft
    finally:
        await srv.stop()
