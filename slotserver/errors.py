"""Domain errors raised below the HTTP layer; the API's error middleware translates them once into JSON.

Every message here is safe to show to a client: internal exception text never goes into one.
"""

from __future__ import annotations


class ServerError(Exception):
    """An error with an HTTP status and llama.cpp's error ``type``."""

    status = 500
    type = "server_error"
    headers: dict[str, str] = {}  # extra response headers (e.g. Retry-After)

    def to_json(self) -> dict:
        return {"error": {"code": self.status, "message": str(self), "type": self.type}}


class BadRequest(ServerError):
    status = 400
    type = "invalid_request_error"


class PromptTooLong(BadRequest):
    type = "exceed_context_size_error"

    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"the request exceeds the available context size ({n_prompt_tokens} prompt tokens, "
            f"context of {n_ctx} tokens)"
        )
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx

    def to_json(self) -> dict:
        body = super().to_json()
        body["error"].update(n_prompt_tokens=self.n_prompt_tokens, n_ctx=self.n_ctx)
        return body


class Forbidden(ServerError):
    """The request is understood and authenticated, but this server does not let it do that."""

    status = 403
    type = "permission_error"


class NotSupported(ServerError):
    status = 501
    type = "not_supported_error"


class Unavailable(ServerError):
    status = 503
    type = "unavailable_error"


class GenerationFailed(ServerError):
    """The engine hit an internal error on this request's work; other requests were not affected."""

    def __init__(self) -> None:
        super().__init__("internal error while processing this request; it was ended (other requests were not affected)")


class KvCacheFull(ServerError):
    """The shared KV cache cannot hold this request's next tokens, even after evicting idle caches."""

    status = 503
    type = "unavailable_error"

    def __init__(self) -> None:
        super().__init__("the KV cache is full: this request was ended to let the others continue; retry later")


class EngineStopped(Unavailable):
    def __init__(self, reason: str) -> None:
        super().__init__(f"the engine stopped ({reason}); the server is shutting down")


class QueueFull(Unavailable):
    def __init__(self, n_waiting: int, retry_after_s: int) -> None:
        super().__init__(f"the server is busy ({n_waiting} requests waiting); retry later")
        self.headers = {"Retry-After": str(retry_after_s)}


class ShuttingDown(Unavailable):
    def __init__(self) -> None:
        super().__init__("the server is shutting down")


class DeadlineExceeded(Unavailable):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the request waited longer than the server's timeout ({timeout_s:g} s) for a slot")
