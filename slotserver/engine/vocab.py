"""Tokenizer operations on a llama.cpp vocabulary (tokenize, pieces, special tokens).

A vocabulary may lack BOS or EOS (``NO_TOKEN``): RWKV's has neither, T5's and glm4's no BOS. llama.cpp
aborts the process on both ways of using a missing one: ``llama_token_to_piece(-1)`` throws a C++
exception no caller can catch, and ``llama_tokenize`` with ``add_special`` asserts when the model asks
for a BOS/EOS it does not have. So here ``add_bos``/``add_eos`` say what is really added, ``piece`` and
``text`` of an id outside the vocabulary are empty, and ``token_text`` names a special token or "".
"""

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
        wants_bos, wants_eos = bool(lc.llama_vocab_get_add_bos(self.ptr)), bool(lc.llama_vocab_get_add_eos(self.ptr))
        self.add_bos = wants_bos and self.bos != NO_TOKEN
        self.add_eos = wants_eos and self.eos != NO_TOKEN
        # The model asks for a BOS/EOS it lacks: llama_tokenize(add_special) would abort, so it is never
        # asked to add specials; ``tokenize`` adds the ones that exist.
        self._add_specials_here = (wants_bos and not self.add_bos) or (wants_eos and not self.add_eos)
        self.vocab_type = int(lc.llama_vocab_type(self.ptr))
        self.fim = FimTokens(*(f(self.ptr) for f in (lc.llama_vocab_fim_pre, lc.llama_vocab_fim_suf,
                                                     lc.llama_vocab_fim_mid, lc.llama_vocab_fim_rep,
                                                     lc.llama_vocab_fim_sep)))
        self._eog_tokens: tuple[int, ...] | None = None
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self._eog: dict[int, bool] = {}

    def tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        if add_special and self._add_specials_here:
            tokens = self._tokenize(text, False, parse_special)
            return [self.bos] * self.add_bos + tokens + [self.eos] * self.add_eos
        return self._tokenize(text, add_special, parse_special)

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
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
        """The token's bytes; empty for an id outside the vocabulary (``NO_TOKEN`` included)."""
        key = (token, special)
        out = self._pieces.get(key)
        if out is None:
            if not self.is_valid(token):
                return b""
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
        if not self.is_valid(token):
            return b""
        return lc.llama_vocab_get_text(self.ptr, token) or b""

    def token_text(self, token: int) -> str:
        """A special token as text (``/props``' ``bos_token``, ``eos_token``); "" if the model has none,
        as llama-server's chat templates get."""
        return self.piece(token, True).decode(errors="replace")

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
