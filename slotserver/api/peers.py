"""Connections: a request's body arrives under a deadline before the request takes a place, and no
single client address holds more than its share.

Measured at 24272d3: 600 connections that sent their headers and a ``Content-Length`` body they
never finished held every ``--max-requests`` place (``request_limit`` took one before the handler
read the body, and the read had no deadline), so ``/health`` and every new request got 503.
``connection_limits`` runs between the security middleware (refusals there read nothing) and
``request_limit``:

* ``/health``, ``/v1/health`` and ``/metrics`` (``NEVER_WAIT``) pass straight through: a probe is
  never queued or refused behind generation work, nor counted against anyone's cap.
* **Body deadline.** A request with a body has it read whole here, within ``body_timeout_s`` of
  reaching this point (408 after, with ``Connection: close``). aiohttp's ``request.read()`` caches
  the bytes, so the handlers' own ``read()`` returns them. A ``Content-Length`` above the body cap
  (``client_max_size``) gets 413 at once, unread.
* **Bodies arriving per peer.** While a body is still arriving the request counts against its peer's
  ``max_peer_reading``; past it, 429 with ``Retry-After`` and ``Connection: close``. A body that
  has arrived whole never counts and is never refused: aiohttp's parser calls ``feed_eof`` on the
  request's ``StreamReader`` when it has the body's last byte (``is_eof()``), before the handler
  runs when the body came with the headers. So a loopback client's ordinary request passes while
  stalled bodies from the same address are open. A body sent just after its headers gets
  ``ARRIVAL_GRACE_S`` to arrive before the cap refuses it.
* **Requests per peer.** Once its body is here, a request counts against its peer's
  ``max_peer_requests`` until its answer ends (streamed ones too); past it, 429. A peer is
  ``peer_key``: the connection's address, never a header; an IPv6 address by its /64, which one
  host usually holds whole. Bodies still arriving never count here, so stalled ones cannot lock
  their own address out.

Behind a reverse proxy every request has the proxy's address: the per-peer caps are then caps on
the whole server (set them to the proxy's own limits or higher).

What aiohttp itself bounds (3.14): a request line and each header line 8,190 bytes, 128 header lines
(400 past either); an idle keep-alive connection closes after 75 s (``run_app``'s default); since
3.14.5 (aio-libs/aiohttp#13681) so does a new connection that has not finished a request's headers
by then, however slowly it trickles them (3.14.3 kept it open for good); after an answer to a request
whose body was not read whole (a 408, 429 or 413 here), it reads and discards the rest for up to
10 s (``lingering_time``), then closes the connection. Not capped: open connections per peer. No
request exists for a middleware to see before the headers are complete, and aiohttp has no hook
short of replacing its protocol factory. Such a connection costs one file descriptor and a few KB,
but no place, no handler and no body buffer; the fd limit or a reverse proxy in front bounds them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math

from aiohttp import web

from slotserver.api.security import route_path
from slotserver.errors import ServerError
from slotserver.limits import LimitsConfig

log = logging.getLogger(__name__)

# Never queued, refused or counted for their peer: probes and scrapes must always answer.
NEVER_WAIT = frozenset({"/health", "/v1/health", "/metrics"})
# An IPv6 client is counted by its /64: a host is usually given a whole /64 and can use any of it.
IPV6_PEER_PREFIX = 64
# Time a body that did not come with its headers gets to arrive when its peer's reading places are
# all taken (a client that writes headers and body separately); then 429.
ARRIVAL_GRACE_S = 1.0
RETRY_AFTER_BUSY_S = 1  # Retry-After of the per-peer request cap's 429


class ClosesConnection(ServerError):
    """An error after which the connection is closed: the body was not read, none of it is wanted."""


class BodyTimeout(ClosesConnection):
    status = 408
    type = "timeout_error"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the request body did not arrive within {timeout_s:g} s (--body-timeout)")


class PeerReadingLimit(ClosesConnection):
    status = 429
    type = "rate_limit_error"

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__(f"{limit} requests from this address are still sending their bodies, its limit "
                         "(--max-peer-reading); retry later")
        self.headers = {"Retry-After": str(retry_after_s)}


class PeerRequestLimit(ServerError):
    status = 429
    type = "rate_limit_error"

    def __init__(self, limit: int) -> None:
        super().__init__(f"this address has {limit} requests in progress, its limit (--max-peer-requests); "
                         "retry later")
        self.headers = {"Retry-After": str(RETRY_AFTER_BUSY_S)}


def peer_key(remote: str | None) -> str:
    """Whose share a request counts against: its connection's IP address (an IPv4-mapped IPv6
    address as IPv4), an IPv6 address by its /64; anything else (a Unix socket) as given."""
    if not remote:
        return ""
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])  # a link-local zone is not part of it
    except ValueError:
        return remote
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        if not address.is_loopback:
            return str(ipaddress.IPv6Network((address, IPV6_PEER_PREFIX), strict=False))
    return str(address)


class PeerCounts:
    """How many requests each peer has in some state, with a cap; a peer at 0 is forgotten, so the
    table holds only peers with requests in progress."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: dict[str, int] = {}

    def try_enter(self, peer: str) -> bool:
        n = self._counts.get(peer, 0)
        if n >= self.limit:
            return False
        self._counts[peer] = n + 1
        return True

    def leave(self, peer: str) -> None:
        n = self._counts[peer] - 1
        if n:
            self._counts[peer] = n
        else:
            del self._counts[peer]

    def count(self, peer: str) -> int:
        return self._counts.get(peer, 0)

    def __len__(self) -> int:
        return len(self._counts)


async def read_body(request: web.Request, peer: str, reading: PeerCounts, timeout_s: float) -> None:
    """Read the body whole into aiohttp's cache, under the deadline and the peer's reading cap."""
    max_size = request.client_max_size
    length = request.content_length
    if max_size and length is not None and length > max_size:
        raise web.HTTPRequestEntityTooLarge(max_size=max_size, actual_size=length)
    if request.content.is_eof():  # arrived whole: reading it takes no time and no place
        await request.read()
        return
    if not reading.try_enter(peer):
        try:
            await asyncio.wait_for(request.read(), min(ARRIVAL_GRACE_S, timeout_s))
            return
        except asyncio.TimeoutError:
            log.debug("refused a request from %s: %d bodies arriving", peer, reading.limit)
            raise PeerReadingLimit(reading.limit, math.ceil(timeout_s)) from None
    try:
        await asyncio.wait_for(request.read(), timeout_s)
    except asyncio.TimeoutError:
        raise BodyTimeout(timeout_s) from None
    finally:
        reading.leave(peer)


def connection_limits(limits: LimitsConfig):
    """The middleware described in the module docstring; one per application (its own counts)."""
    reading = PeerCounts(limits.max_peer_reading)
    handling = PeerCounts(limits.max_peer_requests)

    @web.middleware
    async def middleware(request: web.Request, handler):
        if route_path(request) in NEVER_WAIT:
            return await handler(request)
        peer = peer_key(request.remote)
        if request.body_exists:
            await read_body(request, peer, reading, limits.body_timeout_s)
        if not handling.try_enter(peer):  # only once the body is here: stalled ones never take these
            raise PeerRequestLimit(handling.limit)
        try:
            return await handler(request)
        finally:
            handling.leave(peer)

    return middleware
