"""Which post-sampling candidates are reported: p > 0, most likely first, ties in array order, at most n."""

import ctypes

import llama_cpp as lc
import numpy as np

from slotserver.sampling.candidates import TOKEN_DATA, top_candidates


def test_the_numpy_record_is_llama_token_data():
    assert TOKEN_DATA.itemsize == ctypes.sizeof(lc.llama_token_data)
    assert [TOKEN_DATA.fields[name][1] for name in ("id", "logit", "p")] == [
        getattr(lc.llama_token_data, name).offset for name in ("id", "logit", "p")]


def test_most_likely_first_and_zero_probabilities_dropped():
    ids = np.array([7, 3, 9, 4], dtype=np.int32)
    ps = np.array([0.1, 0.0, 0.6, 0.3], dtype=np.float32)
    assert [t for t, _ in top_candidates(ids, ps, 10)] == [9, 4, 7]
    assert [t for t, _ in top_candidates(ids, ps, 2)] == [9, 4]
    assert top_candidates(ids, ps, 0) == []


def test_equal_probabilities_keep_their_order_in_the_array_even_across_the_cut():
    ids = np.arange(1000, dtype=np.int32)[::-1].copy()  # array order is not id order
    ps = np.full(1000, 0.001, dtype=np.float32)
    ps[500] = 0.5
    got = top_candidates(ids, ps, 4)
    assert [t for t, _ in got] == [int(ids[500]), 999, 998, 997]
    assert got[0][1] == float(np.float32(0.5))
