"""A real Prometheus scrapes the live test server; every dashboard expression must return data.

Prometheus (Debian package ``prometheus``, installed by .ci/run) runs on loopback with a temp
config (1 s scrapes) and temp storage, and is always killed at teardown. Nothing sleeps and
hopes: every wait polls Prometheus' HTTP API against a deadline.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
DEADLINE_S = 60
# Grafana template variables -> what they mean for one server and a 1 s scrape interval.
SUBSTITUTIONS = {"$__rate_interval": "1m", "$instance": ".*", "$impl": ".*"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expr) for every target of every panel."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((path.name, panel["title"], target["expr"]))
    return out


def substitute(expr: str) -> str:
    for var, val in SUBSTITUTIONS.items():
        expr = expr.replace(var, val)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


class Prometheus:
    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url = url
        self.http = http

    async def query(self, expr: str) -> dict:
        async with self.http.get(self.url + "/api/v1/query", params={"query": expr}) as resp:
            return await resp.json()

    async def wait_for(self, expr: str, ok, what: str) -> list:
        """Poll an instant query until ``ok(result)``; fail with the last answer at the deadline."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answer = await self.query(expr)
            result = answer.get("data", {}).get("result", [])
            if answer.get("status") == "success" and ok(result):
                return result
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {answer}"
            await asyncio.sleep(0.2)


@pytest.fixture
async def prometheus(tmp_path, metrics_server):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (apt-get install prometheus; .ci/run does it)")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: slotserver\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_server.port}']\n")
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + DEADLINE_S
            while True:  # ready to serve queries
                assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
                try:
                    async with http.get(url + "/-/ready") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                assert time.monotonic() < deadline, "prometheus did not become ready"
                await asyncio.sleep(0.1)
            yield Prometheus(url, http)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def test_dashboard_queries_return_data(metrics_server, prometheus):
    srv = metrics_server
    await prometheus.wait_for('up{job="slotserver"} == 1', bool, "the target to be up")
    # Traffic while Prometheus scrapes: both slots, a prompt-cache hit, a rejected request.
    await asyncio.gather(srv.repeat(n_predict=96, seed=21), srv.repeat(n_predict=96, seed=22))
    await srv.repeat(n_predict=32)
    async with srv.http.post(srv.url + "/completion", data="{not json") as resp:
        assert resp.status == 400
    # Stand-in for the cache-file writers (not merged yet): they report through these counters.
    srv.state.runner.stats.file("ngram_mod_pool").saved(4096, 0.001)
    # Wait until Prometheus holds the final counts and several samples of them.
    generated = srv.state.runner.stats.n_gen_tokens
    await prometheus.wait_for(f"slotserver_generated_tokens_total == {generated}", bool, "the final count")
    await prometheus.wait_for("count_over_time(slotserver_cache_file_saves_total[1m]) >= 2", bool, "two samples")
    # llama-server's colon names survive Prometheus' scrape (it asks for OpenMetrics first).
    result = await prometheus.wait_for("llamacpp:tokens_predicted_total", bool, "the llamacpp: series")
    assert float(result[0]["value"][1]) == generated

    queries = dashboard_queries()
    assert len(queries) > 40
    failures = []
    for board, title, expr in queries:
        answer = await prometheus.query(substitute(expr))
        if answer.get("status") != "success":
            failures.append(f"{board} / {title}: {expr}\n  invalid: {answer.get('error')}")
        elif not answer["data"]["result"]:
            failures.append(f"{board} / {title}: {expr}\n  no data")
    assert not failures, "\n".join(failures)


def test_promtool_accepts_shipped_config():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (it comes with the prometheus package)")
    done = subprocess.run([promtool, "check", "config", str(DASHBOARDS / "prometheus.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"SUCCESS", done.stdout + done.stderr)
