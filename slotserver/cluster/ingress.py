"""The cluster's HTTP entry: Ray Serve's proxy hands every request to this deployment, which reads
the body (bounded), derives the routing key (``affinity.routing_key``) and streams the chosen
replica's answer back unchanged, status and headers included, plus which replica served it and why.

A replica that dies before the first byte is a 503 in llama.cpp's error shape, so a client retries.
One that dies mid-answer ends the answer at once: an event stream gets a last ``data: {"error": ...}``
event (llama-server's way of failing a stream), any other body ends short, which every HTTP client
reports as an error. Never a hang: Ray fails the call as soon as the replica's process is gone.
The body cap is the single server's (``LimitsConfig.body_bytes``).
"""

from __future__ import annotations

import json
import logging
from typing import AsyncIterator

from ray.serve.handle import DeploymentHandle
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from slotserver.cluster.affinity import routing_key

log = logging.getLogger(__name__)

ROUTE_HEADER = "x-slotserver-route"  # session | user | prefix: what the routing key came from
REPLICA_LOST = b'data: ' + json.dumps({"error": {"code": 503, "message": "the replica serving this stream stopped",
                                                "type": "unavailable_error"}}).encode() + b"\n\n"


def error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"code": status, "message": message, "type": kind}}, status_code=status)


class ClusterIngress:
    def __init__(self, replicas: DeploymentHandle, max_body: int) -> None:
        self.replicas = replicas
        self.max_body = max_body

    async def _body(self, request: Request) -> bytes | None:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def __call__(self, request: Request) -> Response:
        try:
            body = await self._body(request)
        except ClientDisconnect:
            return Response(status_code=499)
        if body is None:
            return error(413, f"request body larger than {self.max_body} bytes", "invalid_request_error")
        try:
            parsed = json.loads(body) if body else None
        except (ValueError, RecursionError):
            parsed = None  # the replica answers the parse error in its own words
        kind, key = routing_key(request.headers, parsed)
        path_qs = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        stream = self.replicas.options(stream=True).forward.remote(
            key, request.method, path_qs, list(request.headers.items()), body)
        try:
            head = await stream.__anext__()
        except Exception as exc:  # the replica died or refused before answering
            stream.cancel()
            log.warning("no replica answered %s %s: %s", request.method, path_qs, exc)
            return error(503, f"no replica could serve the request: {type(exc).__name__}", "unavailable_error")
        headers = dict(head["headers"])
        headers[ROUTE_HEADER] = kind

        is_sse = headers.get("Content-Type", headers.get("content-type", "")).startswith("text/event-stream")

        async def rest() -> AsyncIterator[bytes]:
            try:
                async for chunk in stream:
                    yield chunk
            except Exception as exc:  # the replica died mid-answer: end the answer now, say why
                log.warning("replica stream of %s %s ended early: %s", request.method, path_qs, exc)
                if is_sse:
                    yield REPLICA_LOST
            finally:
                stream.cancel()  # the client went away (or we are done): stop the replica's job

        return StreamingResponse(rest(), status_code=head["status"], headers=headers)
