"""What the HTTP handlers share: ``State`` and every typed application key, in one place."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry

from slotserver.config import ServerConfig
from slotserver.errors import EngineStopped, ShuttingDown, Unavailable
from slotserver.serving.runner import Runner
from slotserver.serving.service import CompletionService


@dataclass(slots=True)
class State:
    """Set up by the app's engine context; ``runner`` and ``service`` are None while the model loads.

    Event-loop owned: handlers read it; only the engine context (``app.py``, which gets ``runner`` and
    ``service`` from ``serving/build.py``) and the drain (``shutdown.py``) assign its fields.
    """

    config: ServerConfig
    runner: Runner | None = None
    service: CompletionService | None = None
    load_error: str = ""
    loaded: asyncio.Event = field(default_factory=asyncio.Event)  # set once loading ended, either way
    shutting_down: bool = False  # set by shutdown.drain: new requests get 503
    # Why the engine thread was left behind at shutdown (a stuck step): the process then exits
    # non-zero without waiting for it (cli.main). Set by shutdown.drain or the engine context.
    engine_stuck: str = ""

    def ready(self) -> Runner:
        """The runner, or 503 while loading, while shutting down, once the engine loop has stopped,
        and while the engine is stalled in one step (``slotserver/serving/watchdog.py``)."""
        if self.runner is None:
            raise Unavailable(self.load_error or "Loading model")
        if self.runner.failure:
            raise EngineStopped(self.runner.failure)
        if self.shutting_down:
            raise ShuttingDown()
        stall = self.runner.watchdog.check()
        if stall:
            raise Unavailable(f"{stall}; retry later")
        return self.runner

    def ready_service(self) -> CompletionService:
        self.ready()
        return self.service


@dataclass(slots=True)
class Metrics:
    registry: CollectorRegistry
    t_start: float  # Unix time the metrics were set up (Process-Start-Time-Unix header)


STATE = web.AppKey("state", State)
# Request key: the id of the API key a request was authorised with (set by the security middleware).
TENANT = web.RequestKey("tenant", str)
METRICS = web.AppKey("metrics", Metrics)
