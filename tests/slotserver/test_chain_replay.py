"""benchmarks/chain_replay.py: the offline replay of the chain that judges selection policies."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from slotserver.chain import DraftChain
from slotserver.config import SpecConfig
from tests.slotserver.test_spec_select import GEMMA

spec = importlib.util.spec_from_file_location(
    "chain_replay", Path(__file__).resolve().parents[2] / "benchmarks" / "chain_replay.py")
chain_replay = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chain_replay)


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
