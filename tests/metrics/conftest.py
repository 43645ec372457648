"""A live server with metrics on (both families: slotserver_* and llama-server's llamacpp:*), shared
by the metrics tests.

Same pattern as the suite's ``LiveServer``: the real app and model in-process on a loopback port.
"""

from __future__ import annotations

import pytest

from tests.conftest import LiveServer
from tests.metrics.promtext import Samples, parse

# Greedy and repetitive, so ngram-mod drafts get accepted after the first repetition.
REPEAT_PROMPT = "Repeat this sentence 10 times: This is a test prompt.\n"


class MetricsServer(LiveServer):
    """The suite's live server plus helpers for repetitive requests and scrapes."""

    async def repeat(self, n_predict: int = 128, **body) -> dict:
        return await self.complete(prompt=REPEAT_PROMPT, n_predict=n_predict, temperature=0, **body)

    async def scrape(self) -> Samples:
        async with self.http.get(self.url + "/metrics") as resp:
            assert resp.status == 200, await resp.text()
            return parse(await resp.text())


@pytest.fixture(scope="session")
async def metrics_server():
    """2 slots over a 4k context, ngram-mod on, ``--metrics`` (which exports llamacpp:* too).

    One decode thread: on a small, shared CI machine llama.cpp's thread barrier makes ``-t 2``
    several times slower than ``-t 1`` as soon as another process competes for a core.
    """
    argv = ["-c", "4096", "-np", "2", "-t", "1", "--metrics"]
    srv = await MetricsServer(argv).start()
    yield srv
    await srv.stop()
