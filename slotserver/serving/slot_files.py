"""Slot save, restore and erase (llama-server's ``POST /slots/{id}?action=...``, ``--slot-save-path``).

A slot's KV state and its tokens go to one file through llama.cpp's per-sequence state API
(``llama_state_seq_save_file`` / ``_load_file``). Every operation runs on the engine thread
(``Runner.on_engine_thread``), between steps, on an idle slot. The directory may be shared (a volume
several containers mount, a directory other local users can write), so nothing in it is trusted:

- **Names.** A file name is a plain name inside the save directory: no separators, no ``..``, no
  absolute path, no leading dot (so a client never names a temporary file). A name whose resolved
  path leaves the directory, or that is one of the server's own files (``own_files``: the models,
  the learned-state files, the verify profile cache), is refused; a directory that holds one of
  them is refused at start (``check_save_dir``), so a client cannot overwrite or read them.
- **No symlinks, for reading or writing.** llama.cpp opens the path it is given with ``fopen``,
  which follows symbolic links (llama.cpp#26315's class: a link planted in the directory makes the
  server read or write outside it). So llama.cpp never gets a name in the directory: we open the
  file ourselves and hand it ``/proc/self/fd/N``, which reopens exactly the file we opened, whatever
  the name points to by then. Restore opens the name with ``O_NOFOLLOW | O_NONBLOCK`` (a link fails
  with ELOOP, a FIFO does not block) and reads only a regular file with no other hard link. Save
  writes a fresh temporary file created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (``tempfile.mkstemp``:
  random name, mode 0600), never opening the target name, then renames it over the target:
  ``rename`` replaces a link itself and never writes through it; a target that is not a regular
  file (a link, a directory) is refused anyway. Where ``/proc/self/fd`` is missing, llama.cpp gets
  the path, checked with ``lstat`` against the opened file just before the call (a small race left).
- **Unique temporary names.** ``.slot-XXXXXXXX.tmp`` from ``mkstemp`` is unique across processes
  and containers sharing the directory (``O_EXCL``; a pid alone is 1 in every container), and is
  removed when the save fails.
- **Quota.** The directory's regular files may number at most ``--slot-save-max-files`` and hold at
  most ``--slot-save-max-bytes`` together (``check_quota``, before writing with the size llama.cpp
  will write, and again with the size written); a save past either gets 400 naming the limit.
  Overwriting a file counts its old size out. Every regular file counts, whoever wrote it.

Erase touches no file: it forgets the slot's cache.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass

import llama_cpp as lc

from slotserver.config import ServerConfig
from slotserver.engine.calibrate import profile_dir
from slotserver.engine.engine import EngineConfig
from slotserver.errors import BadRequest, Unavailable
from slotserver.serving.runner import Runner
from slotserver.speculation.config import SpecConfig

# A plain file name: letters, digits and . _ - only, not starting with a dot (so never "." or "..").
FILENAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,254}")
ACTIONS = ("save", "restore", "erase")
TEMP_PREFIX, TEMP_SUFFIX = ".slot-", ".tmp"  # a leading dot: no client can name one
# What llama_state_seq_save_file writes before the state: magic, version, token count, then the tokens.
HEADER_BYTES = 3 * 4
PROC_FD = "/proc/self/fd"


def check_filename(name) -> str:
    if not isinstance(name, str) or not FILENAME.fullmatch(name):
        raise BadRequest("'filename' must be a plain file name (letters, digits, '.', '_', '-'; "
                         "no path separators, no leading dot)")
    return name


@dataclass(frozen=True, slots=True)
class Quota:
    max_files: int  # --slot-save-max-files
    max_bytes: int  # --slot-save-max-bytes


def check_quota(usage: dict[str, int], name: str, new_size: int, quota: Quota) -> None:
    """BadRequest unless the directory (``usage``: each regular file's size) can take ``name`` at
    ``new_size`` bytes; the file ``name`` already has, if any, is replaced and counts out."""
    old = usage.get(name)
    n_files = len(usage) + (old is None)
    if n_files > quota.max_files:
        raise BadRequest(f"'filename': the slot save directory would hold {n_files} files, more than "
                         f"--slot-save-max-files {quota.max_files}; remove old slot files or raise the limit")
    n_bytes = sum(usage.values()) - (old or 0) + new_size
    if n_bytes > quota.max_bytes:
        raise BadRequest(f"'filename': the slot save directory would hold {n_bytes} bytes, more than "
                         f"--slot-save-max-bytes {quota.max_bytes}; remove old slot files or raise the limit")


def usage(directory: str, skip: str = "") -> dict[str, int]:
    """The size of each regular file in ``directory`` (links and directories are not followed or
    counted), but ``skip`` (a temporary file being written)."""
    out: dict[str, int] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name != skip and entry.is_file(follow_symlinks=False):
                try:
                    out[entry.name] = entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:  # removed meanwhile (another process sharing the directory)
                    pass
    return out


def own_files(engine: EngineConfig, spec: SpecConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files, directories) the server reads or writes itself, from an ``EngineConfig`` and a
    ``SpecConfig``: the model and draft model, the learned-state files and the verify profile cache."""
    files = (engine.model_path, spec.draft.path, spec.mod_file, spec.lookup_dynamic, spec.lookup_static,
             spec.suffix_file, spec.estimates_file)
    return tuple(f for f in files if f), (str(profile_dir(spec)),)


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def check_save_dir(save_dir: str, files: tuple[str, ...], dirs: tuple[str, ...]) -> None:
    """ValueError if ``save_dir`` holds one of the server's own ``files`` or is one of its ``dirs``:
    a client naming the file could overwrite it (save) or load it (restore). Checked at start."""
    real = _real(save_dir)
    for f in files:  # the directory of its name, and of the file a link there points to
        if real in (_real(os.path.dirname(os.path.abspath(f))), _real(os.path.dirname(_real(f)))):
            raise ValueError(f"--slot-save-path {save_dir} holds the server's own file {f}: a client could "
                             "overwrite it with a slot file; give slot files a directory of their own")
    for d in dirs:
        if _real(d) == real:
            raise ValueError(f"--slot-save-path {save_dir} is the server's own directory {d} (the verify "
                             "profile cache): give slot files a directory of their own")


class SlotDir:
    """The save directory's file operations, without the model (tested in milliseconds)."""

    def __init__(self, directory: str, quota: Quota, own: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.real = _real(directory)
        self.quota = quota
        self.own = own  # the server's own files (never read or written here)

    def path(self, name: str) -> str:
        """The path of plain name ``name``; BadRequest if it resolves outside the directory or to
        one of the server's own files."""
        path = os.path.join(self.directory, check_filename(name))
        real = _real(path)
        if os.path.dirname(real) != self.real:
            raise BadRequest(f"'filename' {name} resolves outside the slot save directory (a link?)")
        if any(real == _real(f) for f in self.own):
            raise BadRequest(f"'filename' {name} is one of the server's own files")
        return path

    def open_for_restore(self, name: str) -> int:
        """A read-only descriptor of the regular file ``name``, opened without following a link."""
        path = self.path(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise BadRequest(f"no saved slot file named {name}") from None
        except OSError as exc:  # ELOOP: a symbolic link; EACCES, EISDIR...
            raise BadRequest(f"'filename' {name} is not a regular file this server may read "
                             f"({os.strerror(exc.errno or 0)}); slot files are never read through links") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadRequest(f"'filename' {name} is not a regular file")
            if st.st_nlink != 1:
                raise BadRequest(f"'filename' {name} has other hard links: slot files are never read through links")
            if any(_same_file(st, f) for f in self.own):
                raise BadRequest(f"'filename' {name} is one of the server's own files")
        except BadRequest:
            os.close(fd)
            raise
        return fd

    def existing_size(self, name: str) -> int | None:
        """The size of ``name`` if it exists (it will be replaced); BadRequest unless it is a regular file."""
        try:
            st = os.lstat(self.path(name))
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise BadRequest(f"'filename' {name} exists and is not a regular file (a link?): it is not replaced")
        return st.st_size

    def check_room(self, name: str, size: int, skip: str = "") -> None:
        check_quota(usage(self.directory, skip), name, size, self.quota)

    def new_temp(self) -> tuple[int, str]:
        """A new, empty, exclusively created temporary file: (descriptor, name in the directory)."""
        fd, path = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=self.directory)
        return fd, os.path.basename(path)

    def commit(self, fd: int, temp: str, name: str) -> None:
        """Flush the written temporary file and rename it to ``name`` (atomic; a link there is replaced,
        not followed)."""
        os.fsync(fd)
        os.replace(os.path.join(self.directory, temp), os.path.join(self.directory, name))
        try:
            dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(dfd)  # the rename itself on disk
        except OSError:
            pass
        finally:
            os.close(dfd)

    def discard(self, temp: str) -> None:
        try:
            os.unlink(os.path.join(self.directory, temp))
        except FileNotFoundError:
            pass


def _same_file(st: os.stat_result, other: str) -> bool:
    """Whether the file of ``st`` is ``other`` (under any name: a hard link of it included)."""
    try:
        o = os.stat(other)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (o.st_dev, o.st_ino)


def fd_path(fd: int, path: str) -> str:
    """A path that opens exactly the file behind ``fd``: ``/proc/self/fd/N``, or, without /proc,
    ``path`` after checking it still names that file (not a link planted since)."""
    if os.path.isdir(PROC_FD):
        return f"{PROC_FD}/{fd}"
    st, now = os.fstat(fd), os.lstat(path)
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise BadRequest("the slot file changed while it was being opened; retry")
    return path


class SlotFiles:
    def __init__(self, runner: Runner, directory: str, quota: Quota, own: tuple[str, ...] = ()) -> None:
        self.runner = runner
        self.dir = SlotDir(directory, quota, own)

    @classmethod
    def from_config(cls, runner: Runner, config: ServerConfig) -> "SlotFiles":
        """The save directory, quota and own files of a ``ServerConfig``."""
        lim = config.limits
        files, _ = own_files(config.engine, config.spec)
        return cls(runner, config.slot_save_path, Quota(lim.slot_save_max_files, lim.slot_save_max_bytes), files)

    def run(self, id_slot: int, action: str, filename: str | None) -> dict:
        """One action on the engine thread's state; call it through ``runner.on_engine_thread``."""
        runner = self.runner
        if not 0 <= id_slot < len(runner.slots):
            raise BadRequest("Invalid slot ID")
        slot = runner.slots[id_slot]
        if not slot.is_idle:
            raise Unavailable(f"slot {id_slot} is processing a request; retry when it is idle")
        if action == "erase":
            n_erased = len(slot.cache)
            runner.lifecycle.forget(slot)
            return {"id_slot": id_slot, "n_erased": n_erased}
        t0 = time.perf_counter()
        if action == "save":
            return self._save(id_slot, filename, t0)
        return self._restore(id_slot, filename, t0)

    def _save(self, id_slot: int, filename: str, t0: float) -> dict:
        slot, ctx, d = self.runner.slots[id_slot], self.runner.engine.ctx, self.dir
        d.existing_size(filename)  # refuses a link or a directory under the name
        n_tokens = len(slot.cache)
        d.check_room(filename, HEADER_BYTES + 4 * n_tokens + lc.llama_state_seq_get_size(ctx, id_slot))
        tokens = (lc.llama_token * max(n_tokens, 1))(*slot.cache)
        fd, temp = d.new_temp()
        done = False
        try:
            target = fd_path(fd, os.path.join(d.directory, temp))
            n_written = lc.llama_state_seq_save_file(ctx, target.encode(), id_slot, tokens, n_tokens)
            if n_written == 0:
                raise Unavailable(f"could not write {filename}")
            d.check_room(filename, os.fstat(fd).st_size, skip=temp)  # what was written, in case it differs
            d.existing_size(filename)  # still not a link or a directory
            d.commit(fd, temp, filename)
            done = True
        finally:
            os.close(fd)
            if not done:
                d.discard(temp)
        return {"id_slot": id_slot, "filename": filename, "n_saved": n_tokens, "n_written": n_written,
                "timings": {"save_ms": (time.perf_counter() - t0) * 1e3}}

    def _restore(self, id_slot: int, filename: str, t0: float) -> dict:
        runner = self.runner
        slot = runner.slots[id_slot]
        fd = self.dir.open_for_restore(filename)
        try:
            source = fd_path(fd, os.path.join(self.dir.directory, filename))
            runner.lifecycle.forget(slot)
            capacity = runner.engine.n_ctx_slot
            tokens = (lc.llama_token * capacity)()
            n_tokens = ctypes.c_size_t(0)
            n_read = lc.llama_state_seq_load_file(runner.engine.ctx, source.encode(), id_slot, tokens, capacity,
                                                  ctypes.byref(n_tokens))
        finally:
            os.close(fd)
        if n_read == 0:
            runner.lifecycle.forget(slot)
            raise BadRequest(f"{filename} cannot be restored (not a slot file of this model and context)")
        slot.cache[:] = tokens[: n_tokens.value]
        return {"id_slot": id_slot, "filename": filename, "n_restored": n_tokens.value, "n_read": n_read,
                "timings": {"restore_ms": (time.perf_counter() - t0) * 1e3}}

