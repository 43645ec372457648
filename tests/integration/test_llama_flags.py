"""A llama-server service file works unchanged: the same command line, or the same LLAMA_ARG_*
variables, start slotserver; it answers /completion with the command line's defaults and /metrics
with llama-server's llamacpp:* counters equal to what the requests reported.

One server process at a time (module scope, one per way of configuring it).
"""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slotserver.engine.model_files import default_model_path
from tests.integration.serverproc import ServerProcess

REPEAT = "Repeat this sentence 10 times: This is a test prompt.\n"
IGNORED = ("-fa on", "-ngl 99", "--mlock", "--jinja")  # as the warnings name them
ARGV = ["-m", default_model_path(), "-c", "2048", "-np", "2", "-t", "1", "--temp", "0.7", "--top-k", "20",
        "-fa", "on", "-ngl", "99", "--mlock", "--jinja", "--metrics", "--spec-type", "ngram-mod",
        "--draft-max", "16", "--host", "127.0.0.1"]
# The same service through the environment. llama-server has no variable for --temp: it stays 0.8.
ENV = {"LLAMA_ARG_MODEL": default_model_path(), "LLAMA_ARG_CTX_SIZE": "2048", "LLAMA_ARG_N_PARALLEL": "2",
       "LLAMA_ARG_THREADS": "1", "LLAMA_ARG_TOP_K": "20", "LLAMA_ARG_FLASH_ATTN": "on",
       "LLAMA_ARG_N_GPU_LAYERS": "99", "LLAMA_ARG_MLOCK": "1", "LLAMA_ARG_JINJA": "true",
       "LLAMA_ARG_ENDPOINT_METRICS": "enabled", "LLAMA_ARG_SPEC_TYPE": "ngram-mod", "LLAMA_ARG_DRAFT_MAX": "16",
       "LLAMA_ARG_HOST": "127.0.0.1"}
TEMPERATURE = {"argv": 0.7, "env": 0.8}


@pytest.fixture(scope="module", params=["argv", "env"])
def srv(request):
    if request.param == "argv":
        proc = ServerProcess(ARGV)
    else:
        proc = ServerProcess([], env=ENV, port_in_env=True)
    proc.wait_ready()
    proc.kind = request.param
    proc.timings = []  # every /completion's timings, to compare with the counters
    yield proc
    assert proc.stop() == 0


def complete(srv: ServerProcess, **body) -> dict:
    status, out = srv.post_json("/completion", body)
    assert status == 200, out
    srv.timings.append(out["timings"])
    return out


def scrape(srv: ServerProcess) -> dict[str, float]:
    status, text = srv.request("GET", "/metrics")
    assert status == 200
    return {s.name: s.value for family in text_string_to_metric_families(text.decode())
            for s in family.samples if not s.labels}


def test_starts_and_warns_once_per_ignored_flag(srv):
    log = srv.output()
    for flag in IGNORED:
        assert log.count(f"ignoring {flag}:") == 1, log
    assert "error" not in log.lower()


def test_completion_takes_the_command_line_defaults(srv):
    out = complete(srv, prompt="Once upon a time", n_predict=8)
    settings = out["generation_settings"]
    assert settings["temperature"] == pytest.approx(TEMPERATURE[srv.kind])
    assert settings["top_k"] == 20
    assert out["tokens_predicted"] == 8
    sent = complete(srv, prompt="Once upon a time", n_predict=4, temperature=0.0, top_k=5)
    assert sent["generation_settings"]["temperature"] == 0.0 and sent["generation_settings"]["top_k"] == 5
    status, props = srv.request("GET", "/props")
    params = json.loads(props)["default_generation_settings"]["params"]
    assert params["speculative.n_max"] == 16 and params["top_k"] == 20


def test_llamacpp_counters_equal_the_requests_totals(srv):
    for _ in range(2):  # the second one hits the prompt cache, and ngram-mod drafts from the first
        complete(srv, prompt=REPEAT, n_predict=96, temperature=0.0)
    samples = scrape(srv)
    t = srv.timings
    assert sum(x.get("draft_n_accepted", 0) for x in t) > 0, "the repetitive prompt should get drafts accepted"
    assert sum(x["cache_n"] for x in t) > 0
    expected = {
        "llamacpp:prompt_tokens_total": sum(x["prompt_n"] for x in t),
        "llamacpp:prompt_tokens_cached_total": sum(x["cache_n"] for x in t),
        "llamacpp:tokens_predicted_total": sum(x["predicted_n"] for x in t),
        "llamacpp:spec_decode_num_draft_tokens_total": sum(x.get("draft_n", 0) for x in t),
        "llamacpp:spec_decode_num_accepted_tokens_total": sum(x.get("draft_n_accepted", 0) for x in t),
    }
    assert {name: samples.get(name) for name in expected} == expected
    assert samples["llamacpp:requests_processing"] == 0
    assert samples["slotserver_generated_tokens_total"] == expected["llamacpp:tokens_predicted_total"]
