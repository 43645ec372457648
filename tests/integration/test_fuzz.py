"""Property test: generated JSON on every endpoint gets a 2xx or 4xx answer, never a 5xx, crash or
hang, and afterwards the server answers a fixed greedy completion exactly as before.

The server runs in its own process (hypothesis drives a synchronous client), with ``-n 8`` so
that valid requests without ``n_predict`` stay short, and ``--timeout 30`` as a backstop.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.serverproc import ServerProcess

INT_MAX = 2**31 - 1
ENDPOINTS = ["/completion", "/completions", "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"]
FIELDS = [
    "prompt", "n_predict", "max_tokens", "max_completion_tokens", "temperature", "top_k", "top_p", "min_p",
    "repeat_last_n", "repeat_penalty", "presence_penalty", "frequency_penalty", "seed", "stop", "n_probs",
    "stream", "id_slot", "cache_prompt", "response_fields", "return_tokens", "n_indent", "t_max_predict_ms",
    "speculative", "speculative.n_max", "speculative.n_min", "speculative.p_min", "speculative.type",
    "ignore_eos", "messages", "content", "tokens", "with_pieces", "add_special", "parse_special",
    "post_sampling_probs", "return_progress", "timings_per_token", "logprobs", "top_logprobs",
]
HUGE = ["x" * 300_000, list(range(70_000)), [262_144] * 3, [-1], "\U0001F600" * 5000, 10**30, -(10**30),
        2**31, 2**63, 1e308, -1e308, 5e-324, 262_144, 262_143]
GENERATION = ("n_predict", "max_tokens", "max_completion_tokens")

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40), st.sampled_from(HUGE),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(
    st.text(max_size=12), inner, max_size=5), max_leaves=25)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "bot", 5]),
                                           "content": st.one_of(st.text(max_size=40), values)}), max_size=4)
token_lists = st.lists(st.integers(min_value=-10, max_value=300_000), max_size=20)
bodies = st.dictionaries(st.sampled_from(FIELDS), st.one_of(values, messages, token_lists), max_size=10)
# A valid request with one to three fields replaced: each field's validation meets otherwise good input.
VALID = {"prompt": "Hello there", "n_predict": 4, "messages": [{"role": "user", "content": "Hi"}],
         "content": "Hello", "tokens": [1, 2, 3]}
mutated = st.dictionaries(st.sampled_from(FIELDS), st.one_of(values, token_lists, st.sampled_from(HUGE)),
                          min_size=1, max_size=3).map(lambda changes: {**VALID, **changes})
raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b'{"prompt": NaN}', b'{"prompt": "a", "temperature": Infinity}', b'{"prompt": "\\ud800"}',
                     b'{"prompt": "a", "stop": ["\\udfff"]}', b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe{}",
                     b'{"prompt": 1e999}', b'"just a string"', b"null", b"{}", b'{"prompt": "' + b"7" * 5000 + b'"}']),
)


def bounded(body: dict) -> dict:
    """Keep valid generation lengths short so the run stays fast; invalid ones stay as generated."""
    for key in GENERATION:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 8 < value <= INT_MAX:
            body[key] = 8
    return body


@pytest.fixture(scope="module")
def proc():
    srv = ServerProcess(["-c", "2048", "-np", "2", "-n", "8", "--timeout", "30"]).wait_ready()
    yield srv
    assert srv.stop() == 0  # SIGTERM: a clean exit after all this


FIXED = {"prompt": "The capital of France is", "n_predict": 12, "temperature": 0.0, "cache_prompt": False,
         "speculative.type": "none", "return_tokens": True}


@pytest.fixture(scope="module")
def fixed_before(proc):
    status, out = proc.post_json("/completion", FIXED)
    assert status == 200
    return out["tokens"]


def check(status: int, data: bytes, label) -> None:
    assert status < 500, f"{label}: {status} {data[:300]!r}"
    if status >= 400:
        err = json.loads(data)["error"]
        assert err["code"] == status and err["message"], label


SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def post_json_and_check(proc, endpoint: str, body: dict) -> None:
    data = json.dumps(bounded(body)).encode()
    status, out = proc.request("POST", endpoint, data, {"Content-Type": "application/json"})
    check(status, out, (endpoint, data[:300]))


@SETTINGS
@given(endpoint=st.sampled_from(ENDPOINTS), body=bodies)
def test_generated_json_gets_2xx_or_4xx(proc, fixed_before, endpoint, body):
    post_json_and_check(proc, endpoint, body)


@SETTINGS
@given(endpoint=st.sampled_from(ENDPOINTS), body=mutated)
def test_valid_requests_with_bad_fields_get_2xx_or_4xx(proc, fixed_before, endpoint, body):
    post_json_and_check(proc, endpoint, body)


@SETTINGS
@given(endpoint=st.sampled_from(ENDPOINTS), raw=raw_bodies)
def test_raw_bytes_get_2xx_or_4xx(proc, fixed_before, endpoint, raw):
    status, out = proc.request("POST", endpoint, raw, {"Content-Type": "text/plain"})
    check(status, out, (endpoint, raw[:100]))


def test_afterwards_the_server_is_healthy_and_answers_as_before(proc, fixed_before):
    assert proc.request("GET", "/health")[0] == 200
    status, out = proc.post_json("/completion", FIXED)
    assert status == 200 and out["tokens"] == fixed_before
