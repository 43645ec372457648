"""A slotserver in its own process (``python -m slotserver``) on a free loopback port, for tests
that need real signals or a synchronous client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``env`` adds variables to this process's environment (PYTHONPATH included, so the child runs
    the same slotserver); ``port_in_env`` passes the port as ``LLAMA_ARG_PORT`` instead of ``--port``;
    ``command``: a subcommand (``("cluster",)``) before the flags."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, port_in_env: bool = False,
                 command: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # A file, not a pipe: a full pipe would block the server. Opened to append: the child shares
        # this file's offset, and ``output`` seeking to 0 must not make the child write over the start.
        self.log = tempfile.TemporaryFile(mode="a+")
        environ = {**os.environ, **(env or {})}
        port = [] if port_in_env else ["--port", str(self.port)]
        if port_in_env:
            environ["LLAMA_ARG_PORT"] = str(self.port)
        self.proc = subprocess.Popen([sys.executable, "-m", "slotserver", *command, *port, *argv], env=environ,
                                     stdout=self.log, stderr=subprocess.STDOUT, text=True)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> "ServerProcess":
        """Poll /health until it answers 200 (or the process ends, or ``timeout`` passes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"server exited {self.proc.returncode}: {self.output()}"
            try:
                if self.request("GET", "/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("server did not become ready")

    def request(self, method: str, path: str, data: bytes | None = None,
                headers: dict | None = None, timeout: float = 120.0) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def post_json(self, path: str, body) -> tuple[int, dict]:
        status, data = self.request("POST", path, json.dumps(body).encode())
        return status, json.loads(data)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()
        self.log.close()
        return self.proc.returncode
