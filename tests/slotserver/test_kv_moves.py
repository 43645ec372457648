"""Context-shift and chunk-reuse plans (llama-server's rules), checked against a direct simulation."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from slotserver.kv_moves import Shift, plan_chunk_reuse, plan_context_shift


def test_context_shift_keeps_n_keep_plus_bos_and_drops_half_the_rest():
    assert plan_context_shift(256, 40, n_keep=10, n_discard=0, n_ctx=256, add_bos=True) == Shift(11, 122)
    assert plan_context_shift(256, 40, n_keep=-1, n_discard=0, n_ctx=256, add_bos=True) == Shift(40, 108)
    assert plan_context_shift(256, 40, n_keep=0, n_discard=30, n_ctx=256, add_bos=False) == Shift(0, 30)


def test_context_shift_never_drops_everything_and_gives_up_when_nothing_can_go():
    assert plan_context_shift(256, 40, n_keep=0, n_discard=1000, n_ctx=256, add_bos=False) == Shift(0, 255)
    assert plan_context_shift(256, 300, n_keep=-1, n_discard=0, n_ctx=256, add_bos=False) == Shift(252, 2)
    assert plan_context_shift(253, 300, n_keep=-1, n_discard=0, n_ctx=256, add_bos=False) is None


def apply_moves(cache: list[int], prompt: list[int], n_past: int, n_min: int) -> list[int]:
    """What the slot holds after the moves: positions -> tokens, as the KV cache would."""
    kv = dict(enumerate(cache))
    moves = plan_chunk_reuse(cache, prompt, n_past, n_min)
    for m in moves:
        for p in range(m.dst, m.src):
            kv.pop(p, None)
        moved = {p + m.dst - m.src: kv.pop(p) for p in range(m.src, m.src + m.n)}
        kv.update(moved)
    end = moves[-1].dst + moves[-1].n if moves else n_past
    return [kv[p] for p in range(end)]


def test_a_chunk_dropped_from_the_middle_reuses_the_tail():
    """llama.vim's ring: a chunk of extra context leaves, what follows it is still cached."""
    cache = list(range(100))
    prompt = list(range(40)) + list(range(45, 100)) + [7]
    moves = plan_chunk_reuse(cache, prompt, 40, n_min=8)
    assert [(m.src, m.dst, m.n) for m in moves] == [(45, 40, 55)]
    assert apply_moves(cache, prompt, 40, 8) == prompt[:95]


def test_runs_shorter_than_n_min_are_not_reused():
    cache = list(range(50))
    prompt = list(range(10)) + list(range(20, 50))
    assert [(m.src, m.dst, m.n) for m in plan_chunk_reuse(cache, prompt, 10, n_min=30)] == [(20, 10, 30)]
    assert plan_chunk_reuse(cache, prompt, 10, n_min=31) == []


@given(st.lists(st.integers(0, 3), max_size=60), st.lists(st.integers(0, 3), max_size=60),
       st.integers(1, 6), st.randoms())
def test_the_slot_always_holds_a_prefix_of_the_new_prompt(cache, prompt, n_min, rnd: random.Random):
    n = 0
    while n < min(len(cache), len(prompt)) and cache[n] == prompt[n]:
        n += 1
    n_past = rnd.randint(0, n)
    held = apply_moves(cache, prompt, n_past, n_min)
    assert held == prompt[: len(held)] and len(held) >= n_past
    for m in plan_chunk_reuse(cache, prompt, n_past, n_min):
        assert m.n >= n_min and m.dst <= m.src
