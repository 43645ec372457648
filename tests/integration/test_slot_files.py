"""Slot save, restore and erase (POST /slots/{id}?action=...), across a restart, on the real model."""

from __future__ import annotations

import os
import time

import pytest

from tests.conftest import LiveServer
from tests.integration.serverproc import ServerProcess

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
    save_dir = tmp_path_factory.mktemp("slots")
    srv = await LiveServer(["-c", "512", "-np", "1", "--spec-type", "none", "--slot-save-path", str(save_dir)]).start()
    srv.save_dir = save_dir
    yield srv
    await srv.stop()


SHORT = {"prompt": "Karl Drais rode his running machine in 1817.", "n_predict": 2, "temperature": 0.0, "id_slot": 0}


async def cached_tokens(srv: LiveServer) -> int:
    _, slots = await srv.get("/slots")
    return slots[0]["n_cached_tokens"]


async def test_restore_refuses_a_symlink_planted_in_the_directory(slot_server, tmp_path):
    """llama.cpp#26315's class: a link in the save directory must not make the server read a slot
    file (another tenant's, say) from outside it."""
    await slot_server.complete(**SHORT)
    assert (await slot_server.post("/slots/0?action=save", {"filename": "theirs.bin"}))[0] == 200
    outside = tmp_path / "theirs.bin"
    os.replace(slot_server.save_dir / "theirs.bin", outside)  # a valid slot file, outside the directory
    (slot_server.save_dir / "planted.bin").symlink_to(outside)
    assert (await slot_server.post("/slots/0?action=erase", {}))[0] == 200
    status, out = await slot_server.post("/slots/0?action=restore", {"filename": "planted.bin"})
    assert status == 400 and "planted.bin" in out["error"]["message"]
    assert await cached_tokens(slot_server) == 0  # nothing was read from it


async def test_save_refuses_to_replace_a_planted_symlink_and_writes_nothing_through_it(slot_server, tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"precious")
    (slot_server.save_dir / "victim.bin").symlink_to(outside)
    await slot_server.complete(**SHORT)
    status, out = await slot_server.post("/slots/0?action=save", {"filename": "victim.bin"})
    assert status == 400 and "victim.bin" in out["error"]["message"]
    assert outside.read_bytes() == b"precious" and (slot_server.save_dir / "victim.bin").is_symlink()


async def test_the_temporary_file_is_not_a_predictable_name_a_symlink_can_wait_at(slot_server, tmp_path):
    """The old temporary name was ``NAME.<pid>.tmp`` (pid 1 in every container sharing a volume);
    a link planted there made llama.cpp write the slot through it."""
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"precious")
    for pid in {os.getpid(), 1}:
        (slot_server.save_dir / f"bicycle2.bin.{pid}.tmp").symlink_to(outside)
    await slot_server.complete(**SHORT)
    status, saved = await slot_server.post("/slots/0?action=save", {"filename": "bicycle2.bin"})
    assert status == 200 and saved["n_written"] > 0
    saved_file = slot_server.save_dir / "bicycle2.bin"
    assert outside.read_bytes() == b"precious"
    assert not saved_file.is_symlink() and saved_file.stat().st_size == saved["n_written"]
    assert not [p for p in slot_server.save_dir.iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.fixture(scope="module")
async def quota_server(tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("quota")
    srv = await LiveServer(["-c", "512", "-np", "1", "--spec-type", "none", "--slot-save-path", str(save_dir),
                            "--slot-save-max-files", "3", "--slot-save-max-bytes", str(QUOTA_BYTES)]).start()
    srv.save_dir = save_dir
    yield srv
    await srv.stop()


QUOTA_BYTES = 64 << 20


def clear(directory) -> None:
    for p in directory.iterdir():
        p.unlink()


async def test_a_save_past_the_file_count_is_refused_and_an_overwrite_is_not(quota_server):
    clear(quota_server.save_dir)
    await quota_server.complete(**SHORT)
    for name in ("a.bin", "b.bin", "c.bin"):
        assert (await quota_server.post("/slots/0?action=save", {"filename": name}))[0] == 200
    status, out = await quota_server.post("/slots/0?action=save", {"filename": "d.bin"})
    assert status == 400 and "--slot-save-max-files 3" in out["error"]["message"], out
    assert (await quota_server.post("/slots/0?action=save", {"filename": "a.bin"}))[0] == 200  # replaces a.bin
    assert sorted(p.name for p in quota_server.save_dir.iterdir()) == ["a.bin", "b.bin", "c.bin"]


async def test_a_save_past_the_byte_quota_is_refused_counting_a_replaced_file_out(quota_server):
    clear(quota_server.save_dir)
    await quota_server.complete(**SHORT)
    status, saved = await quota_server.post("/slots/0?action=save", {"filename": "a.bin"})
    assert status == 200
    size = saved["n_written"]
    with open(quota_server.save_dir / "operator.dat", "wb") as f:  # another file in the directory (sparse)
        f.truncate(QUOTA_BYTES - size - size // 2)
    assert (await quota_server.post("/slots/0?action=save", {"filename": "a.bin"}))[0] == 200  # fits once
    status, out = await quota_server.post("/slots/0?action=save", {"filename": "b.bin"})
    assert status == 400 and f"--slot-save-max-bytes {QUOTA_BYTES}" in out["error"]["message"], out
    assert sorted(p.name for p in quota_server.save_dir.iterdir()) == ["a.bin", "operator.dat"]


@pytest.mark.parametrize("own", [["--spec-ngram-mod-file", "{dir}/pool.bin"], ["--spec-profile-dir", "{dir}"]])
def test_a_save_directory_holding_the_servers_own_files_is_refused_at_start(own, tmp_path):
    """A client could otherwise overwrite the server's learned pool (or its verify profiles) by naming it."""
    argv = ["-c", "512", "-np", "1", "--spec-type", "none", "--slot-save-path", str(tmp_path),
            *(a.format(dir=tmp_path) for a in own)]
    proc = ServerProcess(argv)
    try:
        deadline = time.monotonic() + 120
        while proc.proc.poll() is None and time.monotonic() < deadline:
            try:
                assert proc.request("GET", "/health", timeout=5)[0] != 200, "the server started"
            except OSError:
                pass
            time.sleep(0.2)
        output = proc.output()
        assert proc.proc.returncode not in (None, 0), output
        assert "--slot-save-path" in output and "own" in output, output
    finally:
        proc.stop()
