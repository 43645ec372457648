"""Limits that keep one client, or too many, from taking the server down: queue, requests, time, body.

Checked at the edges: ``Runner.submit`` (queue), the API middleware (concurrent requests, shutdown),
the engine step (deadlines), the stream writer (write timeout, unread events). Defaults suit a
machine serving a handful of users; every value has a flag (``slotserver --help``, group "limits").
"""

from __future__ import annotations

from dataclasses import dataclass

# Tokens of KV room a request must find free beyond its prompt to be admitted: room to generate
# for a while without pushing another request out of a full cache.
KV_RESERVE = 256
# Partial events a streaming job may have waiting for its client; a client that stops reading is
# cancelled past this (its slot freed) instead of buffering output forever.
MAX_UNREAD_EVENTS = 256
# Bytes of request body per token of context: far above any real prompt's (a token is a few bytes,
# JSON escapes at most 6x), so only bodies that cannot fit the context are refused unread.
BODY_BYTES_PER_CTX_TOKEN = 64
MIN_BODY_BYTES = 1 << 20
# Prompt text longer than this many characters per token of context cannot fit: refused before
# tokenizing (tokenization of a huge string would hold a thread for seconds).
MAX_PROMPT_CHARS_PER_TOKEN = 32


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_waiting: int = 256  # requests queued beyond the busy slots; more get 503 + Retry-After
    max_requests: int = 512  # HTTP requests handled at once (all endpoints); more get 503
    timeout_s: float = 600.0  # a request's deadline (queue + generation) and a stream write's timeout
    shutdown_timeout_s: float = 8.0  # SIGTERM: time in-flight requests get to finish (container grace: 10 s)
    max_body_bytes: int = 0  # 0: sized to the context (BODY_BYTES_PER_CTX_TOKEN per token)
    # Hardening (issue 31; docs/operations.md "Limits" lists each with its test):
    step_timeout_s: float = 30.0  # watchdog: an engine step longer than this turns /health and new requests to 503
    body_timeout_s: float = 10.0  # a request body must arrive within this, before the request takes a place
    max_peer_reading: int = 32  # requests one peer may have whose body is still arriving; more get 429
    max_peer_requests: int = 256  # requests one peer may have handled at once; more get 429
    slot_save_max_files: int = 64  # slot files --slot-save-path may hold; a save past it gets 400
    slot_save_max_bytes: int = 8 << 30  # bytes --slot-save-path's slot files may hold together

    def __post_init__(self) -> None:
        if self.max_waiting < 0 or self.max_requests < 1:
            raise ValueError("--max-queue must be >= 0 and --max-requests >= 1")
        if self.timeout_s <= 0 or self.shutdown_timeout_s < 0:
            raise ValueError("--timeout must be > 0 and --shutdown-timeout >= 0")
        if self.step_timeout_s <= 0 or self.body_timeout_s <= 0:
            raise ValueError("--step-timeout and --body-timeout must be > 0")
        if self.max_peer_reading < 1 or self.max_peer_requests < 1:
            raise ValueError("--max-peer-reading and --max-peer-requests must be >= 1")
        if self.slot_save_max_files < 1 or self.slot_save_max_bytes < 1:
            raise ValueError("--slot-save-max-files and --slot-save-max-bytes must be >= 1")

    def body_bytes(self, n_ctx: int) -> int:
        if self.max_body_bytes > 0:
            return self.max_body_bytes
        return max(MIN_BODY_BYTES, BODY_BYTES_PER_CTX_TOKEN * n_ctx)
