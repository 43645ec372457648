"""Slot save, restore and erase (POST /slots/{id}?action=...), across a restart, on the real model."""

from __future__ import annotations

import pytest

from tests.conftest import LiveServer

PROMPT = "The history of the bicycle begins in 1817, when Karl Drais rode his running machine. " * 6
BODY = {"prompt": PROMPT, "n_predict": 8, "temperature": 0.0}


def args(save_dir) -> list[str]:
    return ["-c", "2048", "-np", "2", "--spec-type", "none", "--slot-save-path", str(save_dir)]


async def test_save_restart_restore_into_another_slot_reuses_the_whole_prompt(tmp_path):
    srv = await LiveServer(args(tmp_path)).start()
    try:
        first = await srv.complete(**BODY, id_slot=1)
        status, saved = await srv.post("/slots/1?action=save", {"filename": "bicycle.bin"})
        assert status == 200 and saved["n_saved"] == first["tokens_evaluated"] + first["tokens_predicted"] - 1
        assert saved["filename"] == "bicycle.bin" and saved["n_written"] > 0 and (tmp_path / "bicycle.bin").exists()
        assert not list(tmp_path.glob("*.tmp"))
    finally:
        await srv.stop()

    srv = await LiveServer(args(tmp_path)).start()  # a restart: nothing cached
    try:
        status, restored = await srv.post("/slots/0?action=restore", {"filename": "bicycle.bin"})
        assert status == 200 and restored["n_restored"] == saved["n_saved"] and restored["n_read"] > 0
        again = await srv.complete(**BODY, id_slot=0)
        assert again["timings"]["prompt_n"] <= 1 and again["timings"]["cache_n"] == again["tokens_evaluated"] - 1
        assert again["content"] == first["content"]
        status, erased = await srv.post("/slots/0?action=erase", {})
        assert status == 200 and erased["n_erased"] > 0
        _, slots = await srv.get("/slots")
        assert slots[0]["n_cached_tokens"] == 0
    finally:
        await srv.stop()


@pytest.mark.parametrize("filename", ["../escape.bin", "/etc/passwd", "a/b.bin", ".hidden", "", 7, "a\\b"])
async def test_file_names_must_stay_in_the_save_directory(filename, slot_server):
    status, out = await slot_server.post("/slots/0?action=save", {"filename": filename})
    assert status == 400 and "filename" in out["error"]["message"]


async def test_bad_slot_and_action_are_400(slot_server):
    assert (await slot_server.post("/slots/9?action=save", {"filename": "x.bin"}))[0] == 400
    assert (await slot_server.post("/slots/0?action=fly", {"filename": "x.bin"}))[0] == 400
    assert (await slot_server.post("/slots/0?action=restore", {"filename": "missing.bin"}))[0] == 400


async def test_without_a_save_path_the_actions_are_refused():
    srv = await LiveServer(["-c", "512", "-np", "1", "--spec-type", "none"]).start()
    try:
        status, out = await srv.post("/slots/0?action=save", {"filename": "x.bin"})
        assert status == 501 and "--slot-save-path" in out["error"]["message"]
    finally:
        await srv.stop()


@pytest.fixture(scope="module")
async def slot_server(tmp_path_factory):
    srv = await LiveServer(["-c", "512", "-np", "1", "--spec-type", "none", "--slot-save-path",
                            str(tmp_path_factory.mktemp("slots"))]).start()
    yield srv
    await srv.stop()
