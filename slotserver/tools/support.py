"""What the offline n-gram tools share: a progress bar on stderr and a model's tokenizer.

``ngram_tool`` (the cache files) and ``ngram_tool_suffix`` (the suffix drafter's global structure)
both tokenize text files with the model's vocabulary alone and report progress on long builds.
llama_cpp is imported only when a ``ModelVocab`` is made: the commands that read files need no model.
"""

from __future__ import annotations

import os
from typing import Sequence, TextIO

from slotserver.engine.fingerprint import VocabInfo, vocab_info

BAR_WIDTH = 40


def progress(done: int, total: int, out: TextIO) -> None:
    """Redraw the bar in place (``\\r``); the last call (``done >= total``) ends the line."""
    filled = BAR_WIDTH * done // max(total, 1)
    out.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} tokens")
    if done >= total:
        out.write("\n")
    out.flush()


class ModelVocab:
    """A model's tokenizer, loaded vocab-only (no weights): text to token ids and back.

    Special-token text (``<start_of_turn>``) is parsed as the special token, as in a rendered
    chat prompt.
    """

    def __init__(self, model_path: str | os.PathLike) -> None:
        import llama_cpp  # lazy: only the commands that tokenize need it

        self.model_path = os.fspath(model_path)
        self._llm = llama_cpp.Llama(model_path=self.model_path, vocab_only=True, verbose=False)

    def tokenize(self, text: bytes, add_bos: bool) -> list[int]:
        return self._llm.tokenize(text, add_bos=add_bos, special=True)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._llm.detokenize(list(tokens), special=True).decode("utf-8", errors="replace")

    def info(self) -> VocabInfo:
        """The fingerprint files built with this vocabulary carry, and its size."""
        return vocab_info(self.model_path)
