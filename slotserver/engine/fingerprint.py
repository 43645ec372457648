"""A tokenizer fingerprint, so n-gram files built for one vocabulary are refused by another.

sha256 over ``n_vocab`` and every token's text bytes (``llama_vocab_get_text``), read with the
vocab-only model loader. ``vocab_info`` also gives ``n_vocab``, against which the token ids in
learned-state files are checked (an id the model does not have fails ``llama_decode``).
llama_cpp is imported lazily: only callers that fingerprint need it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VocabInfo:
    fingerprint: str  # sha256 hex of the vocabulary
    n_vocab: int  # token ids are 0 .. n_vocab - 1


def vocab_fingerprint(model_path: str | os.PathLike) -> str:
    return vocab_info(model_path).fingerprint


def vocab_info(model_path: str | os.PathLike) -> VocabInfo:
    """The fingerprint and size of the model's vocabulary, from one vocab-only load."""
    import llama_cpp  # lazy: heavy, and only needed here

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(os.fspath(model_path).encode(), params)
    if not model:
        raise ValueError(f"cannot load the vocabulary of {model_path}")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        h = hashlib.sha256(n_vocab.to_bytes(8, "little"))
        for token in range(n_vocab):
            text = llama_cpp.llama_vocab_get_text(vocab, token) or b""
            h.update(len(text).to_bytes(4, "little"))
            h.update(text)
        return VocabInfo(h.hexdigest(), n_vocab)
    finally:
        llama_cpp.llama_model_free(model)
