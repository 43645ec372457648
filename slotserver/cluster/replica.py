"""One replica: a whole slotserver (its model, its slots, its engine thread) inside a Ray Serve
replica actor, answering on a loopback port that only its actor uses.

Why in-process rather than a sidecar process per replica: Ray restarts an actor that dies, and with
it everything in it; a sidecar would outlive a killed actor (an orphan holding the model's memory)
unless reaped by hand. The hop from the actor to its own server is one loopback HTTP exchange on the
actor's event loop (docs/cluster.md has its measured cost).

``forward`` streams one request through: first a head (status, headers, which replica), then the body
in chunks as the server writes them, so SSE streams stay streams; if the caller goes away, Ray
cancels the generator, the loopback connection closes and the server cancels the job, as for any
client that disconnects. ``record_routing_stats`` tells the router how many slots are idle;
``check_health`` is the server's own ``/health`` (engine loaded, not failed, not stalled by the
watchdog), so Ray restarts a replica whose engine is gone.

Owner: Ray Serve owns the actor; the actor owns its server (``LocalServer``) and its client session.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import AsyncIterator

import aiohttp
from aiohttp import web

from slotserver.api.app import create_app
from slotserver.api.state import STATE
from slotserver.cluster.discovery import remove_dead, write_target
from slotserver.flags.command_line import build_parser, config_from_args

log = logging.getLogger(__name__)

REPLICA_HEADER = "x-slotserver-replica"  # on every response: which replica served it (Ray's replica id)
PROCESS_HEADER = "x-slotserver-replica-process"  # and where it runs: host:pid, for operators' logs
# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the next hop sets itself.
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "transfer-encoding", "upgrade", "host", "content-length"})


class LocalServer:
    """A slotserver on a loopback port of this process, started from the command line's flags (also
    the test suite's server, ``tests/conftest.py``). ``fatal``: the reasons the engine reported through
    ``on_fatal``."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.fatal: list[str] = []

    async def start(self) -> LocalServer:
        config = config_from_args(build_parser().parse_args([*self.argv, "--host", "127.0.0.1", "--port", "0"]))
        self.app = create_app(config, on_fatal=self.fatal.append)
        self.runner = web.AppRunner(self.app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        await self.app[STATE].loaded.wait()
        if self.app[STATE].runner is None:
            raise RuntimeError(self.app[STATE].load_error or "the model did not load")
        return self

    def slots(self) -> tuple[int, int]:
        """(slots, idle slots not already promised to a waiting request)."""
        runner = self.app[STATE].runner
        if runner is None:
            return 0, 0
        idle = sum(s.is_idle for s in runner.slots) - len(runner.waiting)
        return len(runner.slots), max(idle, 0)

    async def stop(self) -> None:
        await self.runner.cleanup()


class SlotReplica:
    """The Ray Serve deployment class: ``SlotReplica.bind(argv)`` (``cluster/app.py``)."""

    async def __init__(self, argv: list[str], metrics_sd_dir: str = "") -> None:
        self.name = _replica_name()
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        self.server = await LocalServer(argv).start()
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                                          auto_decompress=False)
        self.target = None
        if metrics_sd_dir:  # Prometheus finds this replica's /metrics (discovery.py)
            for name in remove_dead(metrics_sd_dir):
                log.info("removed the discovery file of a replica that is gone: %s", name)
            self.target = write_target(metrics_sd_dir, self.name, self.server.url.removeprefix("http://"),
                                       self.process)
        log.info("replica %s serving %s", self.name, self.server.url)

    async def forward(self, key: str, method: str, path_qs: str, headers: list[tuple[str, str]],
                      body: bytes) -> AsyncIterator[dict | bytes]:
        """The response to one request: a head dict, then body chunks. ``key`` is the router's."""
        sent = [(k, v) for k, v in headers if k.lower() not in HOP_HEADERS]
        async with self.http.request(method, self.server.url + path_qs, headers=sent, data=body,
                                     allow_redirects=False) as resp:
            out = [(k, v) for k, v in resp.headers.items() if k.lower() not in HOP_HEADERS]
            out += [(REPLICA_HEADER, self.name), (PROCESS_HEADER, self.process)]
            yield {"status": resp.status, "headers": out}
            async for chunk in resp.content.iter_any():
                yield chunk

    def record_routing_stats(self) -> dict:
        n_slots, n_idle = self.server.slots()
        return {"name": self.name, "n_slots": n_slots, "n_idle": n_idle}

    async def check_health(self) -> None:
        async with self.http.get(self.server.url + "/health") as resp:
            if resp.status != 200:
                raise RuntimeError(f"replica {self.name}: /health {resp.status}: {await resp.text()}")

    async def __del__(self) -> None:  # Ray Serve awaits an async __del__ at a graceful stop
        if self.target is not None:
            self.target.unlink(missing_ok=True)
        await self.http.close()
        await self.server.stop()


def _replica_name() -> str:
    from ray import serve  # only inside a replica: the module imports without Ray

    return serve.get_replica_context().replica_id.unique_id
