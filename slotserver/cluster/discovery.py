"""Prometheus file-based service discovery for replicas (``slotserver cluster --metrics-sd-dir DIR``).

Each replica writes ``DIR/slotserver-<replica>.json``: its server's loopback address and labels
(``replica``: Ray's replica id, ``process``: host:pid), in the format of Prometheus' ``file_sd_configs``
(``files: [DIR/*.json]``), atomically (temp file, then rename), and removes it when it stops. A
replica killed with SIGKILL cannot remove its own: the next replica to start on that host removes
every file whose process no longer exists, so Prometheus stops scraping the dead one.

One host: targets are loopback addresses, for a Prometheus on the same machine.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

PREFIX = "slotserver-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead(directory: str | os.PathLike) -> list[str]:
    """Remove the files of replicas of this host whose process is gone; returns their names."""
    host, removed = socket.gethostname(), []
    for path in Path(directory).glob(PREFIX + "*.json"):
        try:
            labels = json.loads(path.read_text())[0]["labels"]
            where, pid = labels["process"].rsplit(":", 1)
            if where == host and not _alive(int(pid)):
                path.unlink(missing_ok=True)
                removed.append(path.name)
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue  # not ours, or being written: leave it
    return removed


def write_target(directory: str | os.PathLike, replica: str, address: str, process: str) -> Path:
    """Write this replica's target file; returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{PREFIX}{replica}.json"
    body = json.dumps([{"targets": [address], "labels": {"replica": replica, "process": process}}])
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
