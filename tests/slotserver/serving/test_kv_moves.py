"""Context-shift and chunk-reuse plans (llama-server's rules), checked against a direct simulation."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from slotserver.serving.kv_moves import Shift, chunk_reuse_steps, plan_chunk_reuse, plan_context_shift


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


# --- the scan is linear: same moves as llama-server's walk, without its O(cache x n_min) -----------


def walk_chunk_reuse(cache, prompt, n_past: int, n_min: int) -> tuple[list[tuple[int, int, int]], int]:
    """llama-server's walk (slotserver's own scan up to 24272d3), as (src, dst, n) moves and the
    token comparisons it made."""
    moves, compared = [], 0
    head_c = head_p = n_past
    while head_c < len(cache) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cache) and head_p + n < len(prompt) and cache[head_c + n] == prompt[head_p + n]:
            n += 1
        compared += n + 1
        if n >= n_min:
            moves.append((head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return moves, compared


def moves_of(cache, prompt, n_past, n_min):
    return [(m.src, m.dst, m.n) for m in plan_chunk_reuse(cache, prompt, n_past, n_min)]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=80), st.lists(st.integers(0, 3), max_size=80), st.integers(1, 12),
       st.integers(0, 80))
def test_the_scan_gives_exactly_the_walks_moves(cache, prompt, n_min, n_past):
    n_past = min(n_past, len(cache), len(prompt))
    assert moves_of(cache, prompt, n_past, n_min) == walk_chunk_reuse(cache, prompt, n_past, n_min)[0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=30), st.integers(1, 40), st.integers(1, 40),
       st.integers(1, 10), st.randoms())
def test_the_scan_agrees_on_long_repeated_runs(unit, n_cache, n_prompt, n_min, rnd: random.Random):
    """Runs repeated many times (llama.vim's ring of similar chunks), with random edits in the prompt."""
    cache = (unit * n_cache)[:400]
    prompt = (unit * n_prompt)[:400]
    for _ in range(rnd.randint(0, 4)):
        if prompt:
            prompt[rnd.randrange(len(prompt))] = rnd.randint(0, 2)
    n_past = rnd.randint(0, min(len(cache), len(prompt)))
    assert moves_of(cache, prompt, n_past, n_min) == walk_chunk_reuse(cache, prompt, n_past, n_min)[0]


def worst_case(length: int) -> tuple[list[int], list[int], int]:
    """One repeated token in the cache, and a prompt that differs from it just before every match
    reaches n_min (half the cache): the walk compares ~n_min tokens at each of the cache's positions."""
    n_min = length // 2
    cache = [7] * length
    prompt = [7] * (n_min - 1) + [8] + [7] * (length - n_min)
    return cache, prompt, n_min


def test_the_scans_work_grows_linearly_where_the_walks_grows_quadratically():
    small, large = 1024, 4096
    walk = [walk_chunk_reuse(*worst_case(n)[:2], 0, worst_case(n)[2])[1] for n in (small, large)]
    scan = [chunk_reuse_steps(*worst_case(n)[:2], 0, worst_case(n)[2])[1] for n in (small, large)]
    assert walk[1] / walk[0] > 12  # 4x the tokens, ~16x the work: 1.37 s at 4k tokens on the engine thread
    assert scan[1] / scan[0] < 4.5
    cache, prompt, n_min = worst_case(large)
    assert scan[1] <= 3 * (len(cache) + len(prompt))
    assert chunk_reuse_steps(cache, prompt, 0, n_min)[0] == []


def test_many_reused_chunks_are_found_in_linear_work():
    """The cache's blocks with a dropped token before each; the prompt is the blocks: one move per block."""
    rnd = random.Random(5)
    for n_blocks in (16, 64):
        blocks = [[rnd.randrange(1000) for _ in range(32)] for _ in range(n_blocks)]
        cache = [t for b in blocks for t in [1001] + b]
        prompt = [t for b in blocks for t in b]
        moves, steps = chunk_reuse_steps(cache, prompt, 0, 16)
        assert [(m.src, m.dst, m.n) for m in moves] == [(33 * i + 1, 32 * i, 32) for i in range(n_blocks)]
        assert moves == plan_chunk_reuse(cache, prompt, 0, 16)
        assert steps <= 4 * (len(cache) + len(prompt))
