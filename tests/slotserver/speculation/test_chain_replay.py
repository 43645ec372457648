"""benchmarks/chain_replay.py: the offline replay of the chain that judges selection policies."""

from __future__ import annotations

import pytest

from benchmarks import chain_replay
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import SpecConfig
from tests.slotserver.speculation.test_selection import GEMMA


def test_a_repetitive_output_is_drafted_and_the_oracle_is_the_ceiling():
    sentence = list(range(1000, 1012))
    prompt, out = [1, 2] + sentence, sentence * 12
    chain = DraftChain.from_spec(SpecConfig(types=("suffix",), select="expected"), profile=GEMMA)
    t, t_oracle, log = chain_replay.replay(chain, GEMMA, prompt, out)
    t_plain = (len(out) - 1) * GEMMA.step(1)
    assert t_oracle <= t < t_plain / 2  # copies pay, and nothing beats knowing the output
    assert log and all(entry.startswith("suffix:") for entry in log)
    accepted = sum(int(e.split(":")[1].split("/")[0]) for e in log)
    assert accepted > len(out) * 0.8


def test_an_output_nothing_predicts_costs_about_plain_decoding():
    prompt, out = [1, 2, 3], list(range(5000, 5200))  # every token new: no drafter has a draft
    chain = DraftChain.from_spec(SpecConfig(types=("ngram-mod", "suffix"), select="expected"), profile=GEMMA)
    t, t_oracle, log = chain_replay.replay(chain, GEMMA, prompt, out)
    assert log == [] and t == pytest.approx((len(out) - 1) * GEMMA.step(1)) and t_oracle < t / 2


def test_the_copy_length_follows_copies_and_repetitions_but_nothing_new():
    assert chain_replay.copy_length([5, 1, 2, 3, 9], [1, 2, 3, 4], 8) == 3  # a copy of the context, then new
    assert chain_replay.copy_length([7, 1, 2], [1, 2, 1, 2, 1, 2], 8) == 6  # a repetition overlaps its own end
    assert chain_replay.copy_length([1, 2, 3], [1, 2, 3, 1, 2], 4) == 4  # at most cap
    assert chain_replay.copy_length([1, 2, 3], [4, 1, 2], 8) == 0


def test_the_copy_oracle_lies_between_the_oracle_and_plain_decoding():
    sentence = list(range(1000, 1012))
    prompt = [1, 2] + sentence
    out = sentence * 3 + list(range(2000, 2040)) + sentence * 3  # a copy, something new, a copy again
    t_plain = (len(out) - 1) * GEMMA.step(1)
    t_oracle = chain_replay.ceiling_time(GEMMA, prompt, out, copy=False)
    t_copy = chain_replay.ceiling_time(GEMMA, prompt, out, copy=True)
    assert t_oracle < t_copy < t_plain
    new_part = chain_replay.ceiling_time(GEMMA, prompt, out[:36] + list(range(3000, 3080)), copy=True)
    assert new_part > chain_replay.ceiling_time(GEMMA, prompt, out[:36], copy=True) + 78 * GEMMA.step(1) * 0.99
