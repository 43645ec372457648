"""Connection limits (slotserver/api/peers.py) and request_limit's exemptions, on a tiny app with raw
sockets: the body deadline, the per-peer caps, probes that never wait. No model; about a second."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from slotserver.api import peers
from slotserver.api.middleware import error_middleware, request_limit
from slotserver.api.peers import PeerCounts, connection_limits, peer_key
from slotserver.limits import LimitsConfig

BODY_TIMEOUT_S = 0.3
MAX_READING = 2
MAX_BODY = 1000


@pytest.mark.parametrize("remote, key", [
    ("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("::ffff:10.0.0.7", "10.0.0.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"), ("2001:db8:1:2::9", "2001:db8:1:2::/64"),
    ("fe80::1%eth0", "fe80::/64"), (None, ""), ("", ""), ("/run/slot.sock", "/run/slot.sock"),
])
def test_peer_key(remote, key):
    assert peer_key(remote) == key


def test_peer_counts_cap_and_forget():
    counts = PeerCounts(2)
    assert counts.try_enter("a") and counts.try_enter("a") and not counts.try_enter("a")
    assert counts.try_enter("b") and counts.count("a") == 2 and len(counts) == 2
    counts.leave("a")
    assert counts.try_enter("a")
    for _ in range(2):
        counts.leave("a")
    counts.leave("b")
    assert len(counts) == 0  # a peer with nothing in progress takes no memory


class App:
    """The middlewares as create_app orders them (security aside) around three handlers; ``release``
    lets held /hold requests finish."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.n_handled = 0

    async def echo(self, request: web.Request) -> web.Response:
        self.n_handled += 1
        return web.json_response({"n_bytes": len(await request.read())})

    async def hold(self, request: web.Request) -> web.Response:
        await self.release.wait()
        return web.json_response({})

    @staticmethod
    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def build(self, *, max_places: int = 100, max_peer_requests: int = 100,
              body_timeout_s: float = BODY_TIMEOUT_S) -> web.Application:
        limits = LimitsConfig(body_timeout_s=body_timeout_s, max_peer_reading=MAX_READING,
                              max_peer_requests=max_peer_requests)
        app = web.Application(middlewares=[error_middleware, connection_limits(limits), request_limit(max_places)],
                              client_max_size=MAX_BODY)
        app.router.add_post("/echo", self.echo)
        app.router.add_post("/hold", self.hold)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.health)
        return app


@contextlib.asynccontextmanager
async def serve(**limits):
    state = App()
    async with TestClient(TestServer(state.build(**limits))) as client:
        try:
            yield state, client
        finally:
            state.release.set()


@pytest.fixture
async def served():
    async with serve() as pair:
        yield pair


async def stalled(client, path: str = "/echo", length: int = 100):
    """A connection that sent its headers and part of a ``Content-Length`` body it never finishes."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n\r\n{{".encode())
    await writer.drain()
    return reader, writer


async def answer(reader) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of the next response on a raw connection."""
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in head[1:] if line)
    body = await asyncio.wait_for(reader.readexactly(int(headers["Content-Length"])), 10)
    return int(head[0].split()[1]), headers, json.loads(body)


async def test_a_stalled_body_gets_408_after_the_deadline(served):
    _, client = served
    reader, writer = await stalled(client)
    t0 = asyncio.get_running_loop().time()
    status, headers, body = await answer(reader)
    assert status == 408 and body["error"]["type"] == "timeout_error" and "--body-timeout" in body["error"]["message"]
    assert asyncio.get_running_loop().time() - t0 >= BODY_TIMEOUT_S * 0.9
    assert headers["Connection"] == "close"  # aiohttp closes it within its lingering time (10 s)
    writer.close()


async def test_past_the_reading_cap_stalled_bodies_get_429_and_whole_ones_pass(monkeypatch):
    monkeypatch.setattr(peers, "ARRIVAL_GRACE_S", 0.2)
    async with serve(body_timeout_s=30) as (_, client):
        held = [await stalled(client) for _ in range(MAX_READING)]
        await asyncio.sleep(0.05)  # the server has seen both
        reader, writer = await stalled(client)
        status, headers, body = await answer(reader)  # after the grace
        assert status == 429 and body["error"]["type"] == "rate_limit_error"
        assert "--max-peer-reading" in body["error"]["message"]
        assert headers["Retry-After"] == "30" and headers["Connection"] == "close"
        writer.close()
        # Same address, body already whole: never refused by the cap, even while it is full.
        for _ in range(3):
            resp = await client.post("/echo", data=b'{"prompt": "hi"}')
            assert resp.status == 200 and (await resp.json())["n_bytes"] == 16
        # A body written just after its headers (a client that sends them apart) arrives within the grace.
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"{}")
        status, _, body = await answer(reader)
        assert status == 200 and body == {"n_bytes": 2}
        writer.close()
        for _, w in held:
            w.close()


async def until_status(client, status: int) -> None:
    """Poll /echo until it answers ``status`` (the held requests have reached their handlers)."""
    deadline = asyncio.get_running_loop().time() + 10
    while (await client.post("/echo", data=b"{}")).status != status:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


async def test_stalled_bodies_take_no_request_limit_place_and_health_never_waits():
    async with serve(max_places=2, body_timeout_s=30) as (state, client):
        held = [await stalled(client) for _ in range(MAX_READING)]
        assert (await client.post("/echo", data=b"{}")).status == 200  # stalled bodies take no place
        holds = [asyncio.create_task(client.post("/hold", data=b"{}")) for _ in range(2)]
        await until_status(client, 503)  # the places are taken by handlers that work
        for path in ("/health", "/metrics"):  # never refused, never counted
            assert (await client.get(path)).status == 200, path
        state.release.set()
        assert [(await h).status for h in holds] == [200, 200]
        assert (await client.post("/echo", data=b"{}")).status == 200
        for _, w in held:
            w.close()


async def test_a_peer_past_its_request_cap_gets_429_but_health_answers():
    async with serve(max_peer_requests=3) as (state, client):
        holds = [asyncio.create_task(client.post("/hold", data=b"{}")) for _ in range(3)]
        await until_status(client, 429)
        resp = await client.post("/echo", data=b"{}")
        out = await resp.json()
        assert resp.status == 429 and out["error"]["type"] == "rate_limit_error"
        assert "--max-peer-requests" in out["error"]["message"] and resp.headers["Retry-After"] == "1"
        assert (await client.get("/health")).status == 200
        state.release.set()
        assert [(await h).status for h in holds] == [200] * 3
        assert (await client.post("/echo", data=b"{}")).status == 200


async def test_bodies_still_arriving_do_not_count_against_the_peer_request_cap():
    async with serve(max_peer_requests=1, body_timeout_s=30) as (_, client):
        held = [await stalled(client) for _ in range(MAX_READING + 1)]  # the last one in its arrival grace
        await asyncio.sleep(0.05)
        assert (await client.post("/echo", data=b"{}")).status == 200
        for _, w in held:
            w.close()


async def test_a_declared_body_over_the_cap_is_refused_unread(served):
    state, client = served
    reader, writer = await stalled(client, length=MAX_BODY + 1)
    status, _, body = await answer(reader)  # at once: no deadline to wait for
    assert status == 413 and body["error"]["code"] == 413
    writer.close()
    assert state.n_handled == 0
