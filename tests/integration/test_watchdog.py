"""The engine watchdog and SIGTERM against a real server process, with a really long engine step.

No test hook makes the step long: one prompt of thousands of tokens in a single batch (``-b`` as
large as the context) is one step, one ``llama_decode`` call, lasting seconds on this 2-core
machine (``-ub 2048``, measured while other tests ran: 3,490 tokens 12 s, 6,640 tokens 35 s; a
larger ``-ub`` is not much faster and needs a compute buffer of 8 GiB). While it runs, the engine
thread is inside one C call, exactly as when a sampler or a decode hangs.
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.integration.serverproc import ServerProcess

# One prompt, one batch: the whole prompt is decoded in a single step.
ARGV = ["-c", "8192", "-b", "8192", "-ub", "2048", "-np", "1", "--spec-type", "none"]
SHUTDOWN_TIMEOUT_S = 1.0
EXIT_BOUND_S = SHUTDOWN_TIMEOUT_S + 5.0 + 3.0  # --shutdown-timeout + the hard-exit grace + a margin


def long_prompt(n_words: int) -> dict:
    """About 4.3 Gemma tokens per word; prefilled in one step, then one token generated."""
    return {"prompt": " ".join(f"w{i}" for i in range(n_words)), "n_predict": 1, "cache_prompt": False,
            "temperature": 0.0}


SHORT = {"prompt": "Once upon a time", "n_predict": 4, "temperature": 0.0}


def post_in_background(pool: ThreadPoolExecutor, srv: ServerProcess, body: dict) -> Future:
    return pool.submit(srv.request, "POST", "/completion", json.dumps(body).encode(), None, 600.0)


def error_message(data: bytes) -> str:
    return json.loads(data)["error"]["message"]


def wait_for(what: str, check, deadline_s: float, stop_if=lambda: False):
    """Poll ``check()`` until it returns something truthy; fail after ``deadline_s`` or once ``stop_if()``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and not stop_if():
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def metric(srv: ServerProcess, name: str) -> float:
    status, data = srv.request("GET", "/metrics")
    assert status == 200, data
    return next(float(line.split()[-1]) for line in data.decode().splitlines() if line.startswith(name + " "))


def test_a_long_step_turns_health_and_new_requests_to_503_until_it_returns():
    srv = ServerProcess(ARGV + ["--step-timeout", "0.5", "--metrics"])
    try:
        srv.wait_ready()
        assert srv.post_json("/completion", SHORT)[0] == 200
        with ThreadPoolExecutor(1) as pool:
            long = post_in_background(pool, srv, long_prompt(600))  # ~2,300 tokens: one step of several seconds

            def health_503():
                status, data = srv.request("GET", "/health")
                return status == 503 and error_message(data)

            reason = wait_for("/health 503 during the long step", health_503, 120, stop_if=long.done)
            assert "the engine has been in one step for" in reason and "(--step-timeout 0.5)" in reason
            status, data = srv.request("POST", "/completion", json.dumps(SHORT).encode())
            assert status == 503 and "in one step for" in error_message(data)
            assert metric(srv, "slotserver_engine_stalled") == 1  # /metrics answers during the stall

            status, data = long.result(timeout=600)
            assert status == 200, data  # the long request itself completes
        wait_for("/health 200 after the step returned", lambda: srv.request("GET", "/health")[0] == 200, 60)
        assert srv.post_json("/completion", SHORT)[0] == 200
        assert metric(srv, "slotserver_engine_stalled") == 0 and metric(srv, "slotserver_engine_stalls_total") == 1
        log = srv.output()
        stalls = [line for line in log.splitlines() if " ERROR slotserver.serving.watchdog: " in line]
        assert len(stalls) == 1 and "until it returns" in stalls[0], log  # one line per incident
        assert "the engine recovered after" in log
        srv.proc.send_signal(signal.SIGTERM)  # a recovered server drains as usual
        assert srv.proc.wait(timeout=60) == 0, srv.output()
    finally:
        srv.stop()


@pytest.mark.parametrize("step_timeout", ["0.5", "600"], ids=["stalled", "not-yet-stalled"])
def test_sigterm_during_a_stuck_step_exits_nonzero_within_the_shutdown_timeout(step_timeout):
    """Stalled: the drain sees the watchdog's stall and the process exits at once after it. Not yet
    stalled (the step timeout far away): the saves give up and the hard-exit timer ends it."""
    srv = ServerProcess(ARGV + ["--step-timeout", step_timeout, "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)])
    try:
        srv.wait_ready()
        with ThreadPoolExecutor(1) as pool:
            long = post_in_background(pool, srv, long_prompt(1550))  # ~6,640 tokens: one step of 30 s or so

            def in_the_step():
                status, data = srv.request("GET", "/slots")
                if status == 503:  # stalled: /slots, like every endpoint, says so
                    return "in one step" in error_message(data)
                return status == 200 and json.loads(data)[0].get("n_prompt_tokens_processed") == 0
            wait_for("the long step running", in_the_step, 120, stop_if=long.done)
            if step_timeout == "0.5":
                wait_for("/health 503", lambda: srv.request("GET", "/health")[0] == 503, 60, stop_if=long.done)
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            rc = srv.proc.wait(timeout=EXIT_BOUND_S)
            elapsed = time.monotonic() - t0
            finished = long.done() and long.exception() is None and long.result()[0] == 200
            assert not finished  # the step did not end: its request got no answer
        assert rc == 3, srv.output()
        assert elapsed < EXIT_BOUND_S
        assert "exiting 3 without waiting for the engine thread" in srv.output()
    finally:
        srv.stop()
