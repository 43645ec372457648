"""Sample one token through a request's sampler chain and keep the candidates the chain left.

llama-server's ``post_sampling_probs`` reports the probabilities of the candidates still standing
after the request's sampler chain (logit bias, penalties, top_k, top_p, min_p, temperature): the
distribution the token was really drawn from. ``llama_sampler_sample`` keeps that array to itself,
so this does the same work in the open: a ``llama_token_data_array`` over the row's logits (ids in
order, p = 0, unsorted, nothing selected), ``llama_sampler_apply``, the token at ``selected``, then
``llama_sampler_accept``. That is exactly what ``llama_sampler_sample`` does inside llama.cpp, so the
token and the sampler's RNG state are the same and speculation stays lossless.

Only requests that ask for post-sampling probabilities come here; every other path keeps
``llama_sampler_sample`` (or the plain-greedy argmax), which skips filling the array in Python.
"""

from __future__ import annotations

import ctypes

import llama_cpp as lc
import numpy as np

# llama_token_data as numpy sees it: filling 262k rows is three vectorised column writes.
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class CandidateSampler:
    """One reusable ``llama_token_data_array`` for the engine thread (it alone samples)."""

    def __init__(self, n_vocab: int) -> None:
        assert TOKEN_DATA.itemsize == ctypes.sizeof(lc.llama_token_data), "llama_token_data layout changed"
        self.n_vocab = n_vocab
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._buf = np.zeros(n_vocab, dtype=TOKEN_DATA)
        self._ptr = self._buf.ctypes.data_as(lc.llama_token_data_p)
        self._array = lc.llama_token_data_array(data=self._ptr, size=n_vocab, selected=-1, sorted=False)

    def load(self, logits: np.ndarray) -> None:
        """Fill the array from ``logits``: ids in order, p = 0, unsorted, nothing selected."""
        buf = self._buf
        buf["id"] = self._ids
        buf["logit"] = logits
        buf["p"] = 0.0
        arr = self._array
        arr.data, arr.size, arr.selected, arr.sorted = self._ptr, self.n_vocab, -1, False

    def apply(self, sampler) -> None:
        """Run ``sampler`` (a chain, or a grammar) over the loaded candidates, in place."""
        lc.llama_sampler_apply(sampler, ctypes.byref(self._array))
        # Every llama.cpp sampler filters and sorts in place; were one to point ``data`` elsewhere, the
        # candidates could not be read safely, and this request (alone) fails rather than misreport.
        assert ctypes.cast(self._array.data, ctypes.c_void_p).value == self._buf.ctypes.data, \
            "sampler moved the candidates"

    def selected(self) -> int:
        """The token the last chain applied picked."""
        arr = self._array
        assert 0 <= arr.selected < arr.size, "the sampler chain selected no token"
        return int(self._buf["id"][arr.selected])

    def probs(self, token: int, n: int, greedy: bool) -> tuple[float, list[tuple[int, float]]]:
        """The selected ``token``'s probability and the top ``n`` (id, p) the candidates hold.

        The top list holds the candidates left with p > 0, most likely first (ties in the order the
        chain left them), as llama-server lists them. A greedy chain leaves one candidate with p = 1: llama.cpp's
        greedy sampler only selects, and llama-server's temperature <= 0 keeps the argmax alone.
        """
        if greedy:
            return 1.0, [(token, 1.0)][:n]
        cand = self._buf[: self._array.size]
        return float(cand["p"][self._array.selected]), top_candidates(cand["id"], cand["p"], n)

    def sample(self, sampler, logits: np.ndarray, n: int, greedy: bool) -> tuple[int, float, list[tuple[int, float]]]:
        """Sample and accept a token from ``logits``; returns (token, its probability, top ``n`` (id, p))."""
        self.load(logits)
        self.apply(sampler)
        token = self.selected()
        lc.llama_sampler_accept(sampler, token)
        return token, *self.probs(token, n, greedy)


def top_candidates(ids: np.ndarray, ps: np.ndarray, n: int) -> list[tuple[int, float]]:
    """At most ``n`` (id, p) with p > 0, by p descending; equal p keep their order in the array."""
    if n <= 0 or len(ps) == 0:
        return []
    if n < len(ps):
        part = np.argpartition(-ps, n - 1)[:n]
        # argpartition's cut can split equal p arbitrarily: take every candidate tied with the n-th
        kth = ps[part].min()
        part = np.flatnonzero(ps >= kth)
    else:
        part = np.arange(len(ps))
    order = part[np.argsort(-ps[part], kind="stable")][:n]
    return [(int(ids[i]), float(ps[i])) for i in order if ps[i] > 0.0]
