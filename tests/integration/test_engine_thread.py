"""Every llama.cpp decode of a server runs on its one engine thread: loading, calibrating, serving.

llama.cpp's CPU backend keeps a team of worker threads per calling thread; once decodes had run on
two threads that stay alive, every decode on either is about 60% slower
(``benchmarks/decode_threads.py``). The start-up calibration used to run in a worker of the default
executor, so a server that measured its profile at start served slowly until restarted.
"""

from __future__ import annotations

import threading

from slotserver.engine.engine import Engine
from tests.conftest import LiveServer

ARGS = ["-c", "2048", "-np", "1", "-b", "512", "--spec-type", "ngram-mod"]
BODY = {"prompt": "Repeat: a b c d e f a b c d e f a b c d e f", "n_predict": 16, "temperature": 0.0,
        "cache_prompt": False}


async def test_calibration_warm_up_and_serving_decode_on_the_engine_thread(tmp_path, monkeypatch):
    threads: list[str] = []
    decode = Engine.decode

    def recording(self, plan):
        threads.append(threading.current_thread().name)
        return decode(self, plan)

    monkeypatch.setattr(Engine, "decode", recording)
    for source in ("measured", "cached"):  # an empty profile directory first: the profile is measured
        srv = await LiveServer(ARGS + ["--spec-profile-dir", str(tmp_path)]).start()
        try:
            n_start = len(threads)
            assert n_start > 0  # measuring (or, cached, the warm-up decode) ran before serving
            out = await srv.complete(**BODY)
            assert out["tokens_predicted"] == 16 and len(threads) > n_start
        finally:
            await srv.stop()
        assert list(tmp_path.glob("verify-profile-*.json")), source
    assert threads and {name.split("_")[0] for name in threads} == {"engine"}, sorted(set(threads))
