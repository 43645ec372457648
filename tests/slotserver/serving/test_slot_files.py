"""Slot files without the model: names, quota, links, temporary files and the save directory check."""

from __future__ import annotations

import os
import threading

import pytest

from slotserver.engine.calibrate import default_dir
from slotserver.engine.engine import EngineConfig
from slotserver.errors import BadRequest
from slotserver.serving.slot_files import (
    FILENAME,
    Quota,
    SlotDir,
    check_quota,
    check_save_dir,
    fd_path,
    own_files,
    usage,
)
from slotserver.speculation.config import SpecConfig

BIG = Quota(max_files=64, max_bytes=1 << 30)


def test_a_new_file_past_the_file_count_is_refused_naming_the_limit():
    check_quota({"a": 1, "b": 1}, "c", 1, Quota(3, 100))
    with pytest.raises(BadRequest, match=r"--slot-save-max-files 2\b"):
        check_quota({"a": 1, "b": 1}, "c", 1, Quota(2, 100))


def test_bytes_past_the_limit_are_refused_naming_the_limit():
    check_quota({"a": 40}, "b", 60, Quota(8, 100))
    with pytest.raises(BadRequest, match=r"101 bytes, more than --slot-save-max-bytes 100"):
        check_quota({"a": 40}, "b", 61, Quota(8, 100))


def test_overwriting_a_file_counts_its_old_size_and_its_place_out():
    check_quota({"a": 60, "b": 1}, "a", 99, Quota(2, 100))  # 1 + 99: fits although 60 + 1 + 99 would not
    with pytest.raises(BadRequest, match="--slot-save-max-bytes"):
        check_quota({"a": 60, "b": 1}, "a", 100, Quota(2, 100))


def test_usage_counts_regular_files_only_and_never_follows_links(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x" * 1000)
    d = tmp_path / "slots"
    d.mkdir()
    (d / "a.bin").write_bytes(b"12345")
    (d / "sub").mkdir()
    (d / "link.bin").symlink_to(outside)
    assert usage(str(d)) == {"a.bin": 5}
    assert usage(str(d), skip="a.bin") == {}


@pytest.fixture
def slots(tmp_path):
    d = tmp_path / "slots"
    d.mkdir()
    return d


def test_restore_never_opens_a_symlink_even_to_a_file_inside(tmp_path, slots):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"secret")
    (slots / "evil.bin").symlink_to(secret)
    (slots / "real.bin").write_bytes(b"ok")
    (slots / "alias.bin").symlink_to(slots / "real.bin")
    d = SlotDir(str(slots), BIG)
    with pytest.raises(BadRequest, match="'filename' evil.bin resolves outside the slot save directory"):
        d.open_for_restore("evil.bin")
    with pytest.raises(BadRequest, match="'filename' alias.bin .*never read through links"):
        d.open_for_restore("alias.bin")
    fd = d.open_for_restore("real.bin")
    try:
        assert os.read(fd, 10) == b"ok"
    finally:
        os.close(fd)


def test_restore_refuses_a_hard_link_a_fifo_and_a_directory_without_blocking(tmp_path, slots):
    other = tmp_path / "other-tenant.bin"
    other.write_bytes(b"state")
    os.link(other, slots / "hard.bin")
    os.mkfifo(slots / "pipe.bin")
    (slots / "dir.bin").mkdir()
    d = SlotDir(str(slots), BIG)
    result: list[str] = []

    def run() -> None:  # a FIFO opened for reading without O_NONBLOCK would block here forever
        for name in ("hard.bin", "pipe.bin", "dir.bin"):
            try:
                d.open_for_restore(name)
            except BadRequest as exc:
                result.append(str(exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert len(result) == 3, result
    assert "hard links" in result[0] and "not a regular file" in result[1] and "dir.bin" in result[2]
    with pytest.raises(BadRequest, match="no saved slot file named missing.bin"):
        d.open_for_restore("missing.bin")


def test_save_refuses_to_replace_a_link_or_a_directory(tmp_path, slots):
    (slots / "link.bin").symlink_to(tmp_path / "anywhere")
    (slots / "dir.bin").mkdir()
    (slots / "old.bin").write_bytes(b"1234")
    d = SlotDir(str(slots), BIG)
    with pytest.raises(BadRequest, match="'filename' link.bin resolves outside"):
        d.existing_size("link.bin")
    (slots / "inside.bin").symlink_to(slots / "old.bin")
    for name in ("inside.bin", "dir.bin"):
        with pytest.raises(BadRequest, match=f"'filename' {name} exists and is not a regular file"):
            d.existing_size(name)
    assert d.existing_size("old.bin") == 4 and d.existing_size("new.bin") is None


def test_names_of_the_servers_own_files_are_refused(tmp_path, slots):
    pool = slots / "pool.bin"
    d = SlotDir(str(slots), BIG, own=(str(pool),))
    with pytest.raises(BadRequest, match="'filename' pool.bin is one of the server's own files"):
        d.path("pool.bin")
    pool.write_bytes(b"pool")
    os.link(pool, slots / "copy.bin")  # the same file under another name: never read
    with pytest.raises(BadRequest, match="copy.bin"):
        d.open_for_restore("copy.bin")
    assert d.path("mine.bin") == os.path.join(str(slots), "mine.bin")


def test_temporary_files_are_unique_exclusive_and_never_a_client_name(slots, monkeypatch):
    monkeypatch.setattr(os, "getpid", lambda: 1)  # every container's server is pid 1
    d = SlotDir(str(slots), BIG)
    made = [d.new_temp() for _ in range(20)]
    try:
        names = [name for _, name in made]
        assert len(set(names)) == 20
        for name in names:
            st = os.lstat(slots / name)
            assert st.st_size == 0 and st.st_mode & 0o077 == 0  # created by us, for us only
            assert not FILENAME.fullmatch(name)  # a leading dot: no request can name it
    finally:
        for fd, name in made:
            os.close(fd)
            d.discard(name)
    assert not list(slots.iterdir())


def test_the_path_given_to_llama_cpp_opens_the_file_we_opened_even_if_the_name_changes(tmp_path, slots):
    d = SlotDir(str(slots), BIG)
    fd, temp = d.new_temp()
    try:
        path = fd_path(fd, str(slots / temp))
        outside = tmp_path / "outside.bin"
        outside.write_bytes(b"untouched")
        os.unlink(slots / temp)
        (slots / temp).symlink_to(outside)  # planted between our open and llama.cpp's fopen
        with open(path, "wb") as f:  # what llama.cpp does with the path
            f.write(b"slot state")
        assert outside.read_bytes() == b"untouched"
        assert os.pread(fd, 100, 0) == b"slot state"
    finally:
        os.close(fd)


def test_a_save_directory_holding_the_servers_own_files_is_refused(tmp_path):
    slots, state = tmp_path / "slots", tmp_path / "state"
    slots.mkdir()
    state.mkdir()
    engine = EngineConfig(model_path=str(tmp_path / "model.gguf"))
    spec = SpecConfig(mod_file=str(slots / "pool.bin"), profile_dir=str(state))
    with pytest.raises(ValueError, match=r"--slot-save-path .* holds the server's own file .*pool\.bin"):
        check_save_dir(str(slots), *own_files(engine, spec))
    spec = SpecConfig(suffix_file=str(state / "suffix.bin"), profile_dir=str(slots))
    with pytest.raises(ValueError, match="verify profile cache"):
        check_save_dir(str(slots), *own_files(engine, spec))
    (slots / "model.gguf").symlink_to(tmp_path / "model.gguf")  # a link to the model under the save directory
    with pytest.raises(ValueError, match="holds the server's own file"):
        check_save_dir(str(slots), *own_files(EngineConfig(model_path=str(slots / "model.gguf")),
                                              SpecConfig(profile_dir=str(state))))
    (tmp_path / "alias").symlink_to(tmp_path)  # the same directory under another name
    with pytest.raises(ValueError, match="model.gguf"):
        check_save_dir(str(tmp_path / "alias"), *own_files(engine, SpecConfig(profile_dir=str(state))))
    check_save_dir(str(slots), *own_files(engine, SpecConfig(suffix_file=str(state / "s.bin"), profile_dir=str(state))))


def test_the_default_profile_cache_counts_as_the_servers_own_directory():
    files, dirs = own_files(EngineConfig(model_path="m.gguf"), SpecConfig())
    assert files == ("m.gguf",) and dirs == (str(default_dir()),)
