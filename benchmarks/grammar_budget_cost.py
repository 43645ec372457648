"""Micro-benchmark: what a grammar at ``grammar_budget``'s limits costs per token on Gemma 3's vocabulary.

The worst a grammar does on the engine thread is the whole-vocabulary pass (``grammar_sampler``'s slow
path, when the chain's pick does not fit): llama.cpp walks every live parse stack for every one of the
262k tokens. This prints that pass's time (thread CPU time, so other jobs on the machine count less;
the fastest of 5) for one stack of each shape and for 32 alternatives of it (the cost per stack that
``NARROW_WEIGHT`` and ``WIDE_WEIGHT`` stand for), then for grammars at the stack-weight limit and for
typical schema grammars, with the weight ``grammar_budget.measure`` gives each.

    python -m benchmarks.grammar_budget_cost
"""

from __future__ import annotations

import json
import time

import llama_cpp as lc
import numpy as np
from llama_cpp.llama_grammar import json_schema_to_gbnf

from slotserver.engine.model_files import default_model_path
from slotserver.engine.vocab import Vocab
from slotserver.sampling.candidates import CandidateSampler
from slotserver.sampling.grammar_budget import MAX_STACK_WEIGHT, measure
from slotserver.sampling.grammar_sampler import new_grammar

# Shapes of one alternative (a stack's head and what follows it), as GBNF.
SHAPES = {
    "one letter": '"a"',
    "quote (enum)": '"\\""',
    "space": '" "',
    "[a-z]": "[a-z]",
    "[0-9]": "[0-9]",
    "[^\"]": '[^"]',
    "[^\"] x4": '[^"] [^"] [^"] [^"]',
    ". x4": ". . . .",
    "[^...] 256": "[^" + "".join(chr(0x100 + i) for i in range(256)) + "]",
}
N_ALTS = 32


def alternatives(head: str, n: int) -> str:
    return "root ::= " + " | ".join(f'{head} "\\x01{i}"' for i in range(n))


class Bench:
    def __init__(self) -> None:
        params = lc.llama_model_default_params()
        params.vocab_only = True
        self.vocab = Vocab(lc.llama_model_load_from_file(default_model_path().encode(), params))
        self.cands = CandidateSampler(self.vocab.n_tokens)
        self.logits = np.random.default_rng(0).normal(size=self.vocab.n_tokens).astype(np.float32)

    def whole_vocab_ms(self, text: str, prefix: str = "") -> float:
        grammar = new_grammar(self.vocab.ptr, text)
        for token in self.vocab.tokenize(prefix, False, False):
            lc.llama_sampler_accept(grammar, token)
        times = []
        for _ in range(5):
            self.cands.load(self.logits)
            t0 = time.thread_time()
            self.cands.apply(grammar)
            times.append(time.thread_time() - t0)
        lc.llama_sampler_free(grammar)
        return 1e3 * min(times)


def main() -> None:
    bench = Bench()
    print(f"{'shape':<16} {'1 stack ms':>10} {f'{N_ALTS} stacks ms':>13} {'per stack ms':>12} {'weight':>6}")
    for name, head in SHAPES.items():
        one = bench.whole_vocab_ms(alternatives(head, 1))
        many = bench.whole_vocab_ms(alternatives(head, N_ALTS))
        weight = measure(alternatives(head, 1)).stack_weight
        print(f"{name:<16} {one:>10.1f} {many:>13.1f} {(many - one) / (N_ALTS - 1):>12.2f} {weight:>6}", flush=True)
    at_limit = {
        f"{MAX_STACK_WEIGHT} letters": alternatives('"a"', MAX_STACK_WEIGHT),
        f"{MAX_STACK_WEIGHT} quotes": alternatives('"\\""', MAX_STACK_WEIGHT),
        f"{MAX_STACK_WEIGHT // 8} x [^\"] x4": alternatives('[^"] [^"] [^"] [^"]', MAX_STACK_WEIGHT // 8),
        f"{MAX_STACK_WEIGHT // 8} x . x4": alternatives(". . . .", MAX_STACK_WEIGHT // 8),
        f"{MAX_STACK_WEIGHT // 8} x space": alternatives('" " . . .', MAX_STACK_WEIGHT // 8),
        "enum of 100": json_schema_to_gbnf(json.dumps({"enum": [f"value{i}" for i in range(100)]})),
        "any JSON value": json_schema_to_gbnf("{}"),
        "100 optional properties": json_schema_to_gbnf(json.dumps(
            {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(100)}})),
    }
    print(f"\n{'grammar':<28} {'weight':>6} {'whole vocab ms':>14}")
    for name, text in at_limit.items():
        print(f"{name:<28} {measure(text).stack_weight:>6} {bench.whole_vocab_ms(text):>14.1f}", flush=True)
    deep = json_schema_to_gbnf(json.dumps({"type": "string", "maxLength": 1000}))
    deep_ms = bench.whole_vocab_ms(deep, '"' + "a" * 990)
    print(f"{'maxLength 1000, 990 read':<28} {measure(deep).stack_weight:>6} {deep_ms:>14.1f}")


if __name__ == "__main__":
    main()
