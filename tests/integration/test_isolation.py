"""One request's failure never touches another's, and no job is lost between the event loop and
the engine thread. Faults are injected into the real server's step on the real model."""

from __future__ import annotations

import asyncio
import logging
import random
import subprocess
import sys

import pytest

from tests.conftest import LiveServer
from tests.integration.ties import TIE_PROBS, check_same_or_tie

GOOD = ["The capital of France is", "Once upon a time, in a small village,", "def fibonacci(n):"]
FAULTY = "Write a list of fruits:"
N_GOOD, N_FAULTY = 24, 8
FAULT_AT = 5  # the faulty request breaks while it holds this many generated tokens


@pytest.fixture(scope="module")
async def iso():
    srv = await LiveServer(["-c", "2048", "-np", "4", "-kvu", "--spec-type", "ngram-mod", "--max-queue", "4096"]).start()
    yield srv
    await srv.stop()


def body(prompt: str, n_predict: int, id_slot: int) -> dict:
    return {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "id_slot": id_slot, "n_probs": TIE_PROBS,
            "cache_prompt": False, "speculative.type": "none", "return_tokens": True}


async def four_at_once(srv) -> list[tuple[int, dict]]:
    bodies = [body(p, N_GOOD, i) for i, p in enumerate(GOOD)] + [body(FAULTY, N_FAULTY, 3)]
    return await asyncio.gather(*(srv.post("/completion", b) for b in bodies))


def is_faulty(job) -> bool:
    return job is not None and job.request.prompt == [FAULTY] and job.n_gen == FAULT_AT


@pytest.mark.parametrize("where", ["apply", "draft"])
async def test_a_fault_in_one_slot_ends_that_request_alone(iso, monkeypatch, caplog, where):
    runner = iso.state.runner
    baseline = await four_at_once(iso)
    assert [s for s, _ in baseline] == [200] * 4

    if where == "apply":
        apply_entry = runner.apply.entry

        def entry(slot, batch_entry, rows):
            if batch_entry.is_decode and is_faulty(slot.job):
                raise RuntimeError("injected fault with internal detail /secret/path")
            return apply_entry(slot, batch_entry, rows)

        monkeypatch.setattr(runner.apply, "entry", entry)
    else:
        chain_draft = runner.chain.draft

        def draft(slot, history, last_token, limits):
            if is_faulty(runner.slots[slot].job):
                raise RuntimeError("injected fault with internal detail /secret/path")
            return chain_draft(slot, history, last_token, limits)

        monkeypatch.setattr(runner.chain, "draft", draft)

    with caplog.at_level(logging.ERROR, logger="slotserver.serving.runner"):
        results = await four_at_once(iso)
    (status, err) = results[3]
    assert status == 500 and err["error"]["type"] == "server_error"
    assert "secret" not in err["error"]["message"] and "injected" not in err["error"]["message"]
    assert any("slot 3" in r.getMessage() for r in caplog.records)  # the cause is logged, not shown
    for prompt, (ref_status, ref), (status, out) in zip(GOOD, baseline, results):
        assert status == 200 and out["tokens_predicted"] == N_GOOD
        check_same_or_tie(ref, out["tokens"], prompt)

    monkeypatch.undo()
    status, out = await iso.post("/completion", body(FAULTY, N_FAULTY, 3))
    assert status == 200 and out["id_slot"] == 3 and out["tokens_predicted"] == N_FAULTY
    assert await iso.get("/health") == (200, {"status": "ok"})
    assert not runner.failure and not iso.fatal


async def final_event(job):
    while not (event := await job.events.get()).final:
        pass
    return event


async def test_submit_and_cancel_hammer_loses_no_job(iso, caplog):
    """2,000 submits, 40% of them cancelled (at once or a little later), while steps run (each
    submit awaits its tokenization in a worker thread, so the engine thread steps meanwhile)."""
    runner, service = iso.state.runner, iso.state.service
    loop = asyncio.get_running_loop()
    rng = random.Random(7)
    prompts = ["The capital of France is", "One, two, three,", "def add(a, b):"]
    jobs, want_cancel = [], set()
    with caplog.at_level(logging.WARNING, logger="slotserver"):
        for i in range(2000):
            job = await service.submit({"prompt": rng.choice(prompts), "n_predict": rng.randint(0, 2),
                                        "temperature": 0})
            jobs.append(job)
            r = rng.random()
            if r < 0.2:
                runner.cancel(job)  # usually still in the inbox or waiting
                want_cancel.add(job.id)
            elif r < 0.4:
                loop.call_later(rng.random() * 0.05, runner.cancel, job)  # maybe generating, maybe done
                want_cancel.add(job.id)
        events = await asyncio.wait_for(asyncio.gather(*(final_event(j) for j in jobs)), timeout=600)
        await asyncio.sleep(0.1)  # let the late cancels land: they must be no-ops
    n_cancelled = 0
    for job, event in zip(jobs, events):
        assert event.error is None, event.error
        assert job.events.empty()  # exactly one final event, nothing after it
        if event.is_cancelled:
            assert job.id in want_cancel
            n_cancelled += 1
        else:
            assert job.n_gen == job.request.n_predict or job.stop_type == "eos"
    assert n_cancelled > 200  # the hammer really cancelled jobs in flight
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not runner.failure and runner.n_busy == 0 and not runner.waiting
    _, slots = await iso.get("/slots")
    assert not any(s["is_processing"] for s in slots)


async def test_engine_loop_death_answers_503_and_reports_why():
    srv = await LiveServer(["-c", "512", "-np", "1", "--spec-type", "none"]).start()
    try:
        def broken_step():
            raise RuntimeError("injected: the step itself broke")

        srv.state.runner._step = broken_step
        status, out = await srv.post("/completion", {"prompt": "hi", "n_predict": 4})
        assert status == 503 and out["error"]["type"] == "unavailable_error"
        assert "injected" not in out["error"]["message"]
        status, out = await srv.get("/health")
        assert status == 503 and "engine" in out["error"]["message"]
        assert srv.fatal == ["engine loop failed: RuntimeError"]
        assert (await srv.post("/completion", {"prompt": "hi", "n_predict": 4}))[0] == 503
    finally:
        await srv.stop()


def test_the_process_exits_non_zero_when_the_engine_cannot_run(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF not really")
    proc = subprocess.run([sys.executable, "-m", "slotserver", "-m", str(bad), "--port", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "could not load the model" in proc.stderr
