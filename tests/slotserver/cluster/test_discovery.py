"""Prometheus discovery files of replicas, without Ray: written whole, and those of processes that
are gone (on this host) removed, everything else left alone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from slotserver.cluster.discovery import remove_dead, write_target


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_target_file_is_prometheus_file_sd_and_written_atomically(tmp_path):
    path = write_target(tmp_path / "sd", "abc123", "127.0.0.1:9000", "host:42")
    assert path.name == "slotserver-abc123.json"
    assert json.loads(path.read_text()) == [{"targets": ["127.0.0.1:9000"],
                                             "labels": {"replica": "abc123", "process": "host:42"}}]
    write_target(tmp_path / "sd", "abc123", "127.0.0.1:9001", "host:42")  # replaced, never half-written
    assert json.loads(path.read_text())[0]["targets"] == ["127.0.0.1:9001"]
    assert sorted(p.name for p in (tmp_path / "sd").iterdir()) == ["slotserver-abc123.json"]


def test_only_files_of_gone_processes_on_this_host_are_removed(tmp_path):
    host = socket.gethostname()
    write_target(tmp_path, "dead", "127.0.0.1:1", f"{host}:{dead_pid()}")
    write_target(tmp_path, "alive", "127.0.0.1:2", f"{host}:{os.getpid()}")
    write_target(tmp_path, "elsewhere", "10.0.0.2:3", f"not-{host}:{dead_pid()}")
    (tmp_path / "slotserver-garbage.json").write_text("{not json")
    (tmp_path / "other.json").write_text("[]")
    assert remove_dead(tmp_path) == ["slotserver-dead.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.json", "slotserver-alive.json", "slotserver-elsewhere.json", "slotserver-garbage.json"]
