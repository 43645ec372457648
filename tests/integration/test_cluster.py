"""``slotserver cluster``: two replicas of the real server on Ray Serve behind one port.

Through the cluster, outputs equal a single server's (greedy, streaming and not, and through the
official ``openai`` client); a session key always reaches the same replica; random keys reach
both; a key whose owner has no idle slot spills to the other replica; the response says which
replica served it. One cluster for the module (Ray and two model loads take tens of seconds).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.integration.serverproc import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
# Two slots per replica, no speculation: outputs are then exactly a single server's (no drafter
# verifies in a batch whose rounding could flip a near tie), and no replica measures a profile.
ARGV = ["-c", "2048", "-np", "2", "--spec-type", "none", "--metrics", "--replicas", "2", "--replica-cpus", "1"]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "1, 2, 3, 4, 5,"]


@pytest.fixture(scope="module")
def sd_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sd")


@pytest.fixture(scope="module")
def cluster(sd_dir):
    env = {"PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
    proc = ServerProcess([*ARGV, "--metrics-sd-dir", str(sd_dir)], env=env, command=("cluster",))
    try:
        proc.wait_ready(timeout=600)
        yield proc
    finally:
        output = proc.output()
        assert proc.stop() == 0, output[-4000:]


@pytest.fixture(scope="module")
def single():
    proc = ServerProcess(["-c", "2048", "-np", "2", "--spec-type", "none"]).wait_ready()
    yield proc
    assert proc.stop() == 0


def post(srv: ServerProcess, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(srv.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return resp.status, dict(resp.headers), json.loads(resp.read())


def stream_text(srv: ServerProcess, body: dict) -> str:
    req = urllib.request.Request(srv.url + "/completion", data=json.dumps({**body, "stream": True}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    text = ""
    with urllib.request.urlopen(req, timeout=300) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        for line in resp:
            if line.startswith(b"data: "):
                text += json.loads(line[6:]).get("content", "")
    return text


def greedy(prompt: str) -> dict:
    return {"prompt": prompt, "n_predict": 24, "temperature": 0.0, "cache_prompt": False}


def test_outputs_equal_a_single_servers_streaming_and_not(cluster, single):
    for prompt in PROMPTS:
        want = post(single, "/completion", greedy(prompt))[2]["content"]
        status, headers, got = post(cluster, "/completion", greedy(prompt))
        assert status == 200 and got["content"] == want
        assert headers["x-slotserver-replica"] and headers["x-slotserver-route"] == "prefix"
        assert stream_text(cluster, greedy(prompt)) == want


def test_the_openai_client_works_through_the_cluster(cluster, single):
    want = post(single, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0.0})[2]
    client = openai.OpenAI(base_url=cluster.url + "/v1", api_key="unused", max_retries=0)
    got = client.completions.create(model="any", prompt=PROMPTS[0], max_tokens=16, temperature=0.0)
    assert got.choices[0].text == want["choices"][0]["text"]
    chunks = client.completions.create(model="any", prompt=PROMPTS[0], max_tokens=16, temperature=0.0, stream=True)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want["choices"][0]["text"]


def test_bad_input_gets_the_replicas_json_error(cluster):
    req = urllib.request.Request(cluster.url + "/completion", data=b"{not json", method="POST")
    try:
        urllib.request.urlopen(req, timeout=60)
        raise AssertionError("expected an error")
    except urllib.error.HTTPError as err:
        assert err.code == 400 and "error" in json.loads(err.read())


def replica_of(cluster: ServerProcess, session: str, timeout: float = 300) -> str:
    body = json.dumps({**greedy("Hello"), "n_predict": 1}).encode()
    req = urllib.request.Request(cluster.url + "/completion", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "x-session-id": session})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.headers["x-slotserver-replica"]


def test_a_session_always_reaches_the_same_replica_and_random_sessions_reach_both(cluster):
    for session in ("alpha", "beta", "gamma"):
        assert len({replica_of(cluster, session) for _ in range(4)}) == 1
    owners = [replica_of(cluster, f"random-{i}") for i in range(24)]
    counts = {r: owners.count(r) for r in set(owners)}
    assert len(counts) == 2 and min(counts.values()) >= 4  # fails by chance about once in 10,000 runs


def test_a_session_whose_owner_is_full_spills_to_the_other_replica(cluster):
    owner = replica_of(cluster, "busy")
    long_body = {**greedy("Count slowly from one to one thousand: one, two,"), "n_predict": 1000}

    def occupy() -> str:
        return post(cluster, "/completion", long_body, {"x-session-id": "busy"})[1]["x-slotserver-replica"]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        holders = [pool.submit(occupy) for _ in range(2)]  # the owner's two slots, for a while
        # The router learns the owner is full from its next slot report (every 0.5 s): until then a
        # request may still queue at the owner. Ask until one spills, within the holders' lifetime.
        # A probe that queued at the owner is given up after 2 s (its client goes away, the job is
        # cancelled) and the next one asks again.
        spilled = None
        while spilled is None and not all(h.done() for h in holders):
            try:
                served = replica_of(cluster, "busy", timeout=2)
            except TimeoutError:
                continue
            if served != owner:
                spilled = served
        assert [h.result() for h in holders] == [owner, owner]
    assert spilled is not None and spilled != owner


def sd_targets(sd_dir: Path) -> dict[str, str]:
    """replica -> address, from the discovery files the replicas wrote."""
    out = {}
    for path in sd_dir.glob("slotserver-*.json"):
        entry = json.loads(path.read_text())[0]
        out[entry["labels"]["replica"]] = entry["targets"][0]
    return out


def test_prometheus_finds_every_replica_through_the_discovery_files(cluster, sd_dir, tmp_path):
    served = {replica_of(cluster, f"sd-{i}") for i in range(4)}
    targets = sd_targets(sd_dir)
    assert len(targets) == 2 and served <= set(targets) and len(set(targets.values())) == 2
    replicas = set(targets)
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed (scripts/test.sh installs it)"
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: slotserver\n"
        f"    file_sd_configs:\n      - files: ['{sd_dir}/*.json']\n        refresh_interval: 1s\n")
    prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        query = urllib.parse.urlencode({"query": "sum by (replica) (slotserver_slots)"})
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5) as resp:
                    result = json.loads(resp.read())["data"]["result"]
            except OSError:
                result = []
            if {r["metric"]["replica"]: float(r["value"][1]) for r in result} == {r: 2.0 for r in replicas}:
                break  # both replicas scraped, each with its 2 slots
            assert time.monotonic() < deadline, f"Prometheus did not scrape both replicas: {result}"
            time.sleep(0.2)
    finally:
        prom.kill()
        prom.wait()


def test_a_killed_replica_ends_its_stream_with_an_error_and_ray_brings_it_back(cluster, sd_dir):
    body = {**greedy("Count slowly from one to one thousand: one, two,"), "n_predict": 800, "stream": True}
    req = urllib.request.Request(cluster.url + "/completion", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "x-session-id": "victim"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        victim = resp.headers["x-slotserver-replica"]
        pid = int(resp.headers["x-slotserver-replica-process"].rsplit(":", 1)[1])
        assert resp.readline().startswith(b"data: ")  # it is generating
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        events = [json.loads(line[6:]) for line in resp if line.startswith(b"data: ")]
    assert time.monotonic() - t_kill < 30
    assert not any(e.get("stop") for e in events)  # it never finished
    assert events and events[-1]["error"]["type"] == "unavailable_error"
    # The next requests are served at once, by the replica left (and later by the restarted one).
    survivors = {replica_of(cluster, f"after-{i}") for i in range(6)}
    assert victim not in survivors
    # Ray restarts the killed replica: a new replica id answers within the bound (a model load).
    deadline = time.monotonic() + 300
    seen = set(survivors)
    while len(seen) < 2:
        assert time.monotonic() < deadline, "the killed replica did not come back within 300 s"
        seen.add(replica_of(cluster, f"restart-{time.monotonic()}"))
    assert victim not in seen
    # ... and the discovery files list the live replicas only: the new one removed the victim's file.
    assert victim not in sd_targets(sd_dir) and len(sd_targets(sd_dir)) == 2
