"""Tokenizer operations on a llama.cpp vocabulary (tokenize, pieces, special tokens)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp as lc

NO_TOKEN = -1  # LLAMA_TOKEN_NULL


@dataclass(frozen=True, slots=True)
class FimTokens:
    """The vocabulary's fill-in-the-middle tokens (``NO_TOKEN`` when absent), for /infill."""

    pre: int = NO_TOKEN
    suf: int = NO_TOKEN
    mid: int = NO_TOKEN
    rep: int = NO_TOKEN  # starts the repository name in the repo-level layout
    sep: int = NO_TOKEN  # starts each file in the repo-level layout

    @property
    def can_infill(self) -> bool:
        return NO_TOKEN not in (self.pre, self.suf, self.mid)


class Vocab:
    def __init__(self, model) -> None:
        self.ptr = lc.llama_model_get_vocab(model)
        self.n_tokens = lc.llama_vocab_n_tokens(self.ptr)
        self.bos = lc.llama_vocab_bos(self.ptr)
        self.eos = lc.llama_vocab_eos(self.ptr)
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.ptr))
        self.add_eos = bool(lc.llama_vocab_get_add_eos(self.ptr))
        self.vocab_type = int(lc.llama_vocab_type(self.ptr))
        self.fim = FimTokens(*(f(self.ptr) for f in (lc.llama_vocab_fim_pre, lc.llama_vocab_fim_suf,
                                                     lc.llama_vocab_fim_mid, lc.llama_vocab_fim_rep,
                                                     lc.llama_vocab_fim_sep)))
        self._eog_tokens: tuple[int, ...] | None = None
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self._eog: dict[int, bool] = {}

    def tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (lc.llama_token * n_max)()
        n = lc.llama_tokenize(self.ptr, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (lc.llama_token * n_max)()
            n = lc.llama_tokenize(self.ptr, data, len(data), buf, n_max, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        key = (token, special)
        out = self._pieces.get(key)
        if out is None:
            buf = ctypes.create_string_buffer(64)
            n = lc.llama_token_to_piece(self.ptr, token, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self.ptr, token, buf, -n, 0, special)
            out = self._pieces[key] = buf.raw[:n]
        return out

    def detokenize(self, tokens: list[int], special: bool = True) -> str:
        return b"".join(self.piece(t, special) for t in tokens).decode("utf-8", errors="replace")

    def text(self, token: int) -> bytes:
        """The token's text as stored in the vocabulary (what llama.cpp's vocabulary check compares)."""
        return lc.llama_vocab_get_text(self.ptr, token) or b""

    def is_eog(self, token: int) -> bool:
        out = self._eog.get(token)
        if out is None:
            out = self._eog[token] = bool(lc.llama_vocab_is_eog(self.ptr, token))
        return out

    def eog_tokens(self) -> tuple[int, ...]:
        """Every end-of-generation token (``ignore_eos`` bans them all, as llama-server). Computed once."""
        if self._eog_tokens is None:
            is_eog = lc.llama_vocab_is_eog
            self._eog_tokens = tuple(t for t in range(self.n_tokens) if is_eog(self.ptr, t))
        return self._eog_tokens

    def is_valid(self, token: int) -> bool:
        return 0 <= token < self.n_tokens
