"""Micro-benchmark: what a grammar costs per token on the bundled Gemma 3 vocabulary (262k tokens).

Only the vocabulary is loaded; logits are random. Per grammar state (after accepting a prefix of a
JSON text): the grammar applied to every candidate (what llama.cpp's resampling does), one token
checked alone, and the greedy scan ``GrammarSampler`` uses (the best tokens checked one by one).

    python -m benchmarks.grammar_cost
"""

from __future__ import annotations

import json
import statistics
import time

import llama_cpp as lc
import numpy as np
from llama_cpp.llama_grammar import json_schema_to_gbnf

from slotserver.engine.model_files import default_model_path
from slotserver.engine.vocab import Vocab
from slotserver.sampling.candidates import CandidateSampler
from slotserver.sampling.grammar_sampler import GrammarSampler, new_grammar

SCHEMA = {"type": "array", "minItems": 8, "maxItems": 8, "items": {
    "type": "object", "properties": {"task": {"type": "string", "maxLength": 24}, "done": {"type": "boolean"}},
    "required": ["task", "done"]}}
PREFIXES = ["", '[{"task":"', '[{"task":"Wash the', '[{"task":"Wash the dishes","done":']


def ms(f, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    params = lc.llama_model_default_params()
    params.vocab_only = True
    vocab = Vocab(lc.llama_model_load_from_file(default_model_path().encode(), params))
    cands = CandidateSampler(vocab.n_tokens)
    gs = GrammarSampler(cands)
    logits = np.random.default_rng(0).normal(size=vocab.n_tokens).astype(np.float32)
    greedy = lc.llama_sampler_init_greedy()
    text = json_schema_to_gbnf(json.dumps(SCHEMA))
    print(f"{'state':<40} {'whole vocab ms':>14} {'one token us':>12} {'greedy scan ms':>14}")
    for prefix in PREFIXES:
        grammar = new_grammar(vocab.ptr, text)
        for t in vocab.tokenize(prefix, False, False):
            lc.llama_sampler_accept(grammar, t)

        def whole():
            cands.load(logits)
            cands.apply(grammar)

        one = ms(lambda: gs.allows(grammar, 0), 2000) * 1e3
        scan = ms(lambda: gs._best_allowed(greedy, grammar, logits), 10)
        print(f"{prefix!r:<40} {ms(whole, 5):>14.1f} {one:>12.1f} {scan:>14.1f}", flush=True)
        lc.llama_sampler_free(grammar)


if __name__ == "__main__":
    main()
