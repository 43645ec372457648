"""Grammar and JSON-schema budgets on a real server process (slotserver/sampling/grammar_budget.py, issue 31).

At 24272d3 a 64 KB grammar of nested groups killed the process (llama.cpp's parser recursed past the
C stack), a left recursion hidden behind an empty rule made it allocate until it aborted, and a grammar
of 6,000 alternatives held every other slot for ~12 s per token. Here each is a 400 naming the limit,
the process lives, and a request sent at the same time takes its normal time. Hypothesis then sends
grammars and schemas near every budget: each gets a 4xx or an answer in bounded time, and the
server's resident memory stays within 256 MiB of what it was (the failures this guards against
allocate gigabytes; glibc's per-thread arenas in the worker threads that prepare requests alone move
RSS by 100-160 MiB from run to run). One process, ``-c 2048 -np 2``, no
speculation, requests of at most 16 tokens.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.integration.serverproc import ServerProcess
from tests.slotserver.sampling.grammar_cases import (
    BACKWARDS_COUNT,
    CRASH,
    HIDDEN_LEFT_RECURSION,
    SIX_THOUSAND,
    schemas,
    structural,
)

# Another request may take this much longer than alone while a budget case is refused beside it.
SLACK_S = 2.0
# A grammar at the stack-weight limit costs ~0.5 s of CPU per token at worst; a few tokens, on a
# loaded 2-core machine, stay far below this.
ANSWER_S = 30.0
RSS_GROWTH_KIB = 256 * 1024
OTHER = {"prompt": "The capital of France is", "n_predict": 16, "temperature": 0.0, "ignore_eos": True,
         "cache_prompt": False}


@pytest.fixture(scope="module")
def proc():
    srv = ServerProcess(["-c", "2048", "-np", "2", "--spec-type", "none", "--timeout", "60"]).wait_ready()
    yield srv
    srv.stop()


def rss_kib(proc: ServerProcess) -> int:
    with open(f"/proc/{proc.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def assert_alive(proc: ServerProcess) -> None:
    assert proc.proc.poll() is None, f"the server died: {proc.output()[-2000:]}"
    assert proc.request("GET", "/health")[0] == 200


def timed_other(proc: ServerProcess) -> float:
    start = time.monotonic()
    status, out = proc.post_json("/completion", OTHER)
    assert status == 200 and out["tokens_predicted"] == OTHER["n_predict"], out
    return time.monotonic() - start


@pytest.fixture(scope="module")
def rss_before(proc):
    timed_other(proc)  # warm: the first request's allocations are not growth
    status, _ = proc.post_json("/completion", {**OTHER, "n_predict": 2, "json_schema": {"type": "object"}})
    assert status == 200  # ... nor the first constrained one's (converter, grammar sampler)
    return rss_kib(proc)


def test_what_crashed_the_server_is_a_400_and_it_lives(proc, rss_before):
    cases = [
        ({"grammar": CRASH}, "'grammar' nests groups '(...)' more than 1024 deep"),
        ({"grammar": HIDDEN_LEFT_RECURSION}, "'grammar' is left recursive"),
        ({"grammar": BACKWARDS_COUNT}, "whose largest count is below its smallest"),
        ({"json_schema": {"enum": [f"v{i}" for i in range(300)]}},
         "'json_schema': the schema's grammar would make parse stacks of weight 300"),
        ({"json_schema": {"$ref": "https://127.0.0.1:9/schema.json"}}, "'json_schema': '$ref' must point inside"),
    ]
    for fields, needle in cases:
        status, out = proc.post_json("/completion", {"prompt": "hi", "n_predict": 1, **fields})
        assert status == 400 and needle in out["error"]["message"], (needle, status, out)
        assert_alive(proc)
    timed_other(proc)


def test_six_thousand_alternatives_do_not_hold_up_another_request(proc, rss_before):
    normal = max(timed_other(proc) for _ in range(2))
    answers: list[tuple[int, dict]] = []
    sender = threading.Thread(target=lambda: answers.append(proc.post_json("/completion", {
        "prompt": "hi", "n_predict": 4, "grammar": SIX_THOUSAND, "seed": 1})))
    sender.start()
    elapsed = timed_other(proc)
    sender.join(timeout=120)
    assert not sender.is_alive() and answers
    assert elapsed <= normal + SLACK_S, f"{elapsed:.2f} s beside the grammar, {normal:.2f} s alone"
    status, out = answers[0]
    assert status == 400 and "would make parse stacks of weight 6000" in out["error"]["message"], out


cases = st.one_of(structural.map(lambda g: {"grammar": g}), schemas().map(lambda s: {"json_schema": s}))


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(fields=cases)
@example(fields={"grammar": CRASH})
@example(fields={"grammar": HIDDEN_LEFT_RECURSION})
def test_grammars_and_schemas_near_the_budgets_get_a_4xx_or_an_answer(proc, rss_before, fields):
    body = {"prompt": "Write something:", "n_predict": 2, "temperature": 0.8, "seed": 7, "cache_prompt": False,
            **fields}
    start = time.monotonic()
    status, data = proc.request("POST", "/completion", json.dumps(body).encode(), timeout=ANSWER_S + 30)
    elapsed = time.monotonic() - start
    assert status == 200 or 400 <= status < 500, (status, data[:300])
    if status >= 400:
        assert json.loads(data)["error"]["message"]
    assert elapsed < ANSWER_S, f"{elapsed:.1f} s: {json.dumps(fields)[:200]}"
    assert_alive(proc)
    growth = rss_kib(proc) - rss_before
    assert growth < RSS_GROWTH_KIB, f"RSS grew {growth / 1024:.1f} MiB"
