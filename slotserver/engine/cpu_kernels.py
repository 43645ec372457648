"""Which of llama.cpp's CPU weight layouts are safe to use here.

llama.cpp repacks weights into "extra buffer types" at load time when its CPU backend was built
with kernels for them. On a CPU with Intel AMX (Sapphire Rapids and later), llama-cpp-python's
default source build (``GGML_NATIVE``) compiles the AMX kernels in, and with them the vendored
llama.cpp of llama-cpp-python 0.3.36 crashes (SIGSEGV) in the first ``llama_decode`` of more than
one row of Gemma 3's Q4_K weights: a prompt of 16 tokens is enough. Loading the model without
extra buffer types keeps the plain CPU kernels, which are correct (their timings on that machine:
docs/measurements.md).

So: extra buffer types stay on (the default, weight repacking for AVX2 and ARM) unless the
loaded ggml CPU backend reports AMX support. ``SLOTSERVER_EXTRA_BUFTS=1`` or ``=0`` overrides it.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import logging
import os

import llama_cpp

log = logging.getLogger(__name__)

ENV = "SLOTSERVER_EXTRA_BUFTS"


def ggml_has_amx() -> bool:
    """Whether llama-cpp-python's ggml CPU backend was compiled with AMX kernels (False if unknown)."""
    libs = sorted(glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu*")))
    for path in libs:
        try:
            fn = ctypes.CDLL(path).ggml_cpu_has_amx_int8
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int
        return bool(fn())
    return False


@functools.cache
def use_extra_bufts() -> bool:
    """Whether models load with llama.cpp's extra buffer types (weight repacking); see the module doc.
Decided (and warned about) once per process."""
    forced = os.environ.get(ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if ggml_has_amx():
        log.warning("llama.cpp was built with AMX kernels, which crash in decoding Q4_K weights; loading "
                    "without weight repacking (%s=1 forces it on)", ENV)
        return False
    return True
