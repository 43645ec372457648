"""Stalled bodies against a real server process (slotserver/api/peers.py), over raw sockets.

At 24272d3, 600 connections that sent headers and part of a ``Content-Length`` body held every
``--max-requests`` place: ``/health`` and every new request got 503 while they stayed open. Two
servers, one slot each: ``default`` (default body deadline of 10 s, 32 bodies arriving per peer)
and ``quick`` (``--body-timeout 2``). Every client here is 127.0.0.1, the attacker's address too.
"""

from __future__ import annotations

import json
import selectors
import socket
import time

import pytest

from tests.integration.serverproc import ServerProcess

COMMON = ["-c", "1024", "-np", "1", "-t", "1", "--spec-type", "none"]
DEFAULT_BODY_TIMEOUT_S = 10.0
MAX_PEER_READING = 32  # the default
QUICK_BODY_TIMEOUT_S = 2.0
N_STALLED = 600
TINY = {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0.0}


@pytest.fixture(scope="module")
def default():
    srv = ServerProcess(COMMON).wait_ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def quick():
    srv = ServerProcess(COMMON + ["--body-timeout", str(QUICK_BODY_TIMEOUT_S)]).wait_ready()
    yield srv
    srv.stop()


def stall(srv: ServerProcess, n: int) -> list[socket.socket]:
    """``n`` connections that each send a request's headers and 10 of its 1,000 body bytes, then nothing."""
    head = (f"POST /completion HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: 1000\r\n\r\n").encode()
    socks = []
    try:
        for _ in range(n):
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            socks.append(sock)
            sock.sendall(head + b'{"prompt":')
    except BaseException:
        close(socks)
        raise
    return socks


def close(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def answers(socks: list[socket.socket], within_s: float,
            n_expected: int | None = None) -> dict[socket.socket, tuple[int, dict, float]]:
    """The (status, headers, seconds from now) of each connection answered within ``within_s``
    (sooner once ``n_expected`` have answered)."""
    t0 = time.monotonic()
    pending = {sock: b"" for sock in socks}
    out = {}
    with selectors.DefaultSelector() as sel:
        for sock in socks:
            sel.register(sock, selectors.EVENT_READ)
        while pending and len(out) != n_expected and (left := t0 + within_s - time.monotonic()) > 0:
            for key, _ in sel.select(left):
                sock = key.fileobj
                data = sock.recv(65536)
                pending[sock] += data
                if b"\r\n\r\n" in pending[sock] or not data:
                    head = pending.pop(sock).split(b"\r\n\r\n")[0].decode().split("\r\n")
                    sel.unregister(sock)
                    if not data and not head[0]:
                        out[sock] = (0, {}, time.monotonic() - t0)  # closed without an answer
                        continue
                    headers = dict(line.split(": ", 1) for line in head[1:])
                    out[sock] = (int(head[0].split()[1]), headers, time.monotonic() - t0)
    return out


def complete(srv: ServerProcess) -> dict:
    status, out = srv.post_json("/completion", TINY)
    assert status == 200, out
    return out


def test_past_the_reading_cap_stalled_bodies_get_429_while_whole_ones_pass(default):
    socks = stall(default, MAX_PEER_READING + 8)
    try:
        # The 8 beyond the cap are refused after the arrival grace (1 s); the 32 wait for their deadline.
        got = answers(socks, DEFAULT_BODY_TIMEOUT_S / 2, n_expected=8)
        assert sorted(status for status, _, _ in got.values()) == [429] * 8
        for _, headers, _ in got.values():
            assert headers["Retry-After"] == "10" and headers["Connection"] == "close"
        assert set(got) == set(socks[MAX_PEER_READING:])  # the first 32 hold the reading places
        assert answers(socks[:MAX_PEER_READING], 0.5) == {}  # and wait for their bodies
        # Meanwhile, from the same address, a request whose body is whole is never refused by the cap.
        assert complete(default)["tokens_predicted"] == 4
    finally:
        close(socks)


def test_600_stalled_bodies_leave_health_and_completions_served(default):
    t_first = time.monotonic()
    socks = stall(default, N_STALLED)
    try:
        t0 = time.monotonic()
        status, body = default.request("GET", "/health", timeout=30)
        t_health = time.monotonic() - t0
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        assert t_health < 1.0, f"/health took {t_health:.2f} s"
        out = complete(default)
        assert out["tokens_predicted"] == 4 and out["content"]
        for sock in socks[:MAX_PEER_READING]:  # still stalled: nothing answered them yet
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
        assert time.monotonic() - t_first < DEFAULT_BODY_TIMEOUT_S, "too slow to show anything: deadlines passed"
    finally:
        close(socks)


def test_a_stalled_body_gets_408_after_the_body_timeout(quick):
    socks = stall(quick, 2)
    try:
        got = answers(socks, QUICK_BODY_TIMEOUT_S * 10, n_expected=2)
        assert [status for status, _, _ in got.values()] == [408, 408]
        for _, headers, elapsed in got.values():
            assert elapsed >= QUICK_BODY_TIMEOUT_S * 0.8 and headers["Connection"] == "close"
        assert complete(quick)["tokens_predicted"] == 4
    finally:
        close(socks)
