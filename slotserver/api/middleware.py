"""Middlewares of every request: errors become JSON once, and a cap on requests handled at once
(probes and scrapes exempt: ``slotserver/api/peers.py`` says why)."""

from __future__ import annotations

import asyncio
import logging
import re

from aiohttp import web

from slotserver.api.bodies import error_body, json_response
from slotserver.api.peers import NEVER_WAIT, ClosesConnection
from slotserver.api.security import route_path
from slotserver.errors import ServerError, Unavailable

log = logging.getLogger(__name__)


_FIELD = re.compile(r"^'([^']+)'")  # our messages about one field start with its quoted name


def _shaped(request: web.Request, body: dict) -> dict:
    """On /v1/* the error also carries OpenAI's ``param``: the field at fault, or null."""
    if request.path.startswith("/v1/"):
        match = _FIELD.match(body["error"]["message"])
        body["error"]["param"] = match.group(1) if match else None
    return body


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Translate errors into JSON once; the server keeps serving. Internal details are only logged."""
    try:
        return await handler(request)
    except ServerError as exc:
        response = json_response(_shaped(request, exc.to_json()), exc.status)
        response.headers.update(exc.headers)
        if isinstance(exc, ClosesConnection):
            response.force_close()  # no keep-alive: the rest of an unread body is not wanted
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        return json_response(_shaped(request, error_body(exc.status, exc.reason, kind)), exc.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return json_response(_shaped(request, error_body(500, "internal server error", "server_error")), 500)


def request_limit(max_requests: int):
    """Refuse (503) a request while ``max_requests`` others are being handled, on any endpoint but
    ``NEVER_WAIT``'s (``/health``, ``/metrics``: never refused, never counted).

    Installed inside ``peers.connection_limits``, so the body has arrived whole before a place is
    taken: a place is held only while a handler works. Each connection carries one request at a
    time, so this also caps busy connections; idle keep-alive connections cost no handler and
    aiohttp closes them after its keep-alive timeout. Installed inside the error middleware, so the
    refusal is a JSON error like any other.
    """
    n_active = 0

    @web.middleware
    async def middleware(request: web.Request, handler):
        nonlocal n_active
        if route_path(request) in NEVER_WAIT:
            return await handler(request)
        if n_active >= max_requests:
            raise Unavailable(f"the server is handling {n_active} requests, its limit; retry later")
        n_active += 1
        try:
            return await handler(request)
        finally:
            n_active -= 1

    return middleware
