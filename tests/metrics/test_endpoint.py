"""GET /metrics wiring: 501 without --metrics, the exposition format, headers, flags and llama-server's names."""

from __future__ import annotations

import contextlib
import time

import aiohttp
import pytest
from aiohttp import web

from slotserver.api.app import create_app
from slotserver.flags.command_line import build_parser, config_from_args
from tests.metrics.promtext import parse, total


@contextlib.asynccontextmanager
async def modelless(*flags: str):
    """The app with a model path that cannot load: routes answer, /health stays 503."""
    config = config_from_args(build_parser().parse_args(["-m", "/nonexistent/model.gguf", *flags]))
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        async with aiohttp.ClientSession() as http:
            yield http, url
    finally:
        await runner.cleanup()


def test_flags():
    args = build_parser().parse_args
    assert not config_from_args(args([])).metrics
    both = config_from_args(args(["--metrics"]))
    assert both.metrics and both.metrics_series == ("slotserver", "llamacpp")  # llama-server's by default
    compat = config_from_args(args(["--metrics-series", "slotserver", "--metrics-compat", "llamacpp"]))
    assert compat.metrics and compat.metrics_series == ("slotserver", "llamacpp")
    with pytest.raises(SystemExit):
        args(["--metrics-compat", "vllm"])


async def test_each_family_can_be_switched_off():
    """While loading, only the HTTP counter has samples; its family goes with ``slotserver``."""
    for series, has_http in (("llamacpp", False), ("slotserver", True)):
        async with modelless("--metrics", "--metrics-series", series) as (http, url):
            await http.get(url + "/health")
            async with http.get(url + "/metrics") as resp:
                assert resp.status == 200
                samples = parse(await resp.text())
        assert (total(samples, "slotserver_http_requests_total") > 0) == has_http, series


async def test_disabled_is_501():
    async with modelless() as (http, url):
        async with http.get(url + "/metrics") as resp:
            assert resp.status == 501
            assert (await resp.json())["error"]["type"] == "not_supported_error"


async def test_enabled_while_loading():
    """Served before the model is ready: the HTTP counters only, in the text format 0.0.4."""
    async with modelless("--metrics") as (http, url):
        async with http.get(url + "/health") as resp:
            assert resp.status == 503
        async with http.get(url + "/metrics") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert abs(int(resp.headers["Process-Start-Time-Unix"]) - time.time()) < 600
            samples = parse(await resp.text())
        assert total(samples, "slotserver_http_requests_total", endpoint="/health", outcome="server_error") == 1
        async with http.get(url + "/no/such/path") as resp:
            assert resp.status == 404
        async with http.get(url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}) as r:
            samples = parse(await r.text())  # still the classic format: OpenMetrics would need "# EOF"
        assert total(samples, "slotserver_http_requests_total", endpoint="other", outcome="client_error") == 1
        assert not any(name.endswith("_created") for name, _ in samples)


async def test_exposition(metrics_server):
    async with metrics_server.http.get(metrics_server.url + "/metrics") as resp:
        text = await resp.text()
        assert "Process-Start-Time-Unix" in resp.headers
    samples = parse(text)
    names = {name for name, _ in samples}
    assert not any(n.endswith("_created") for n in names)
    assert all(n.startswith(("slotserver_", "llamacpp:")) for n in names)
    # llama-server's series (digest 5.11), colon names verbatim, with their types
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE llamacpp:"))
    for name in ("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total", "tokens_predicted_total",
                 "tokens_predicted_seconds_total", "n_decode_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total", "spec_decode_num_drafts_total"):
        assert types["llamacpp:" + name] == "counter", name
    for name in ("n_tokens_max", "prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing",
                 "requests_deferred", "n_busy_slots_per_decode"):
        assert types["llamacpp:" + name] == "gauge", name
    assert samples[("slotserver_slots", ())] == 2
    assert samples[("slotserver_kv_cache_size_cells", ())] == 4096
    assert samples[("slotserver_ngram_mod_pool_size_entries", ())] > 0
    status, props = await metrics_server.get("/props")
    assert props["endpoint_metrics"] is True
