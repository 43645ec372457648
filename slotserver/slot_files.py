"""Slot save, restore and erase (llama-server's ``POST /slots/{id}?action=...``, ``--slot-save-path``).

A slot's KV state and its tokens go to one file through llama.cpp's per-sequence state API
(``llama_state_seq_save_file`` / ``_load_file``), written to a temporary name and renamed, so a
crash never leaves half a file under the real name. File names are plain names inside the save
directory: no separators, no ``..``, no absolute paths. Every operation runs on the engine
thread (``Runner.on_engine_thread``), between steps, on an idle slot.
"""

from __future__ import annotations

import ctypes
import os
import re
import time

import llama_cpp as lc

from slotserver.errors import BadRequest, Unavailable
from slotserver.runner import Runner

# A plain file name: letters, digits and . _ - only, not starting with a dot (so never "." or "..").
FILENAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,254}")
ACTIONS = ("save", "restore", "erase")


def check_filename(name) -> str:
    if not isinstance(name, str) or not FILENAME.fullmatch(name):
        raise BadRequest("'filename' must be a plain file name (letters, digits, '.', '_', '-'; "
                         "no path separators, no leading dot)")
    return name


class SlotFiles:
    def __init__(self, runner: Runner, directory: str) -> None:
        self.runner = runner
        self.directory = directory

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
        path = os.path.join(self.directory, filename)
        t0 = time.perf_counter()
        if action == "save":
            return self._save(id_slot, filename, path, t0)
        return self._restore(id_slot, filename, path, t0)

    def _save(self, id_slot: int, filename: str, path: str, t0: float) -> dict:
        slot = self.runner.slots[id_slot]
        tokens = (lc.llama_token * max(len(slot.cache), 1))(*slot.cache)
        tmp = f"{path}.{os.getpid()}.tmp"
        n_written = lc.llama_state_seq_save_file(self.runner.engine.ctx, tmp.encode(), id_slot, tokens,
                                                 len(slot.cache))
        if n_written == 0:
            raise Unavailable(f"could not write {filename}")
        with open(tmp, "rb+") as f:  # on disk before it takes the real name
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return {"id_slot": id_slot, "filename": filename, "n_saved": len(slot.cache), "n_written": n_written,
                "timings": {"save_ms": (time.perf_counter() - t0) * 1e3}}

    def _restore(self, id_slot: int, filename: str, path: str, t0: float) -> dict:
        if not os.path.isfile(path):
            raise BadRequest(f"no saved slot file named {filename}")
        runner = self.runner
        slot = runner.slots[id_slot]
        runner.lifecycle.forget(slot)
        capacity = runner.engine.n_ctx_slot
        tokens = (lc.llama_token * capacity)()
        n_tokens = ctypes.c_size_t(0)
        n_read = lc.llama_state_seq_load_file(runner.engine.ctx, path.encode(), id_slot, tokens, capacity,
                                              ctypes.byref(n_tokens))
        if n_read == 0:
            runner.lifecycle.forget(slot)
            raise BadRequest(f"{filename} cannot be restored (not a slot file of this model and context)")
        slot.cache[:] = tokens[: n_tokens.value]
        return {"id_slot": id_slot, "filename": filename, "n_restored": n_tokens.value, "n_read": n_read,
                "timings": {"restore_ms": (time.perf_counter() - t0) * 1e3}}
