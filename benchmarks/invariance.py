"""Exact-mode experiment (issue 12 item 5): is a token's logit row the same bits whether it is
decoded alone or as a row of a verify batch, and with another sequence in the batch?

python invariance.py UNIFIED(0|1) EXTRA_BUFTS(0|1) FLASH(0|1) UBATCH
"""
import sys

import llama_cpp as lc
import numpy as np

from slotserver.engine.model_files import default_model_path

unified, extra, flash, ubatch = (int(a) for a in sys.argv[1:5])
lc.llama_backend_init()
mp = lc.llama_model_default_params(); mp.n_gpu_layers = 0; mp.use_extra_bufts = bool(extra)
model = lc.llama_model_load_from_file(default_model_path().encode(), mp)
cp = lc.llama_context_default_params()
cp.n_ctx = 4096; cp.n_batch = 512; cp.n_ubatch = ubatch; cp.n_seq_max = 2; cp.n_threads = cp.n_threads_batch = 2
cp.kv_unified = bool(unified); cp.swa_full = True; cp.flash_attn_type = 1 if flash else 0
ctx = lc.llama_init_from_model(model, cp)
vocab = lc.llama_model_get_vocab(model); n_vocab = lc.llama_vocab_n_tokens(vocab)
mem = lc.llama_get_memory(ctx)
batch = lc.llama_batch_init(512, 0, 1)

def decode(entries):
    """entries: (seq, pos0, tokens, all_outputs) -> list of logits rows for output rows."""
    i = 0
    for seq, pos0, toks, outs in entries:
        for k, t in enumerate(toks):
            batch.token[i] = t; batch.pos[i] = pos0 + k; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if (outs or k == len(toks) - 1) else 0
            i += 1
    batch.n_tokens = i
    assert lc.llama_decode(ctx, batch) == 0
    n_out = sum(batch.logits[j] for j in range(i))
    arr = np.ctypeslib.as_array(lc.llama_get_logits(ctx), shape=(n_out, n_vocab)).copy()
    return arr

def tok(text):
    buf = (lc.llama_token * 512)()
    n = lc.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, 512, True, False)
    return list(buf[:n])

P = tok("The quick brown fox jumps over the lazy dog. Then the fox said to the dog: 'Let us count: one, two, three,")
Q = tok("def fibonacci(n):\n    if n < 2:\n        return n\n")
N = 24
# 1. one sequence, one token per decode
lc.llama_memory_clear(mem, True)
rows = decode([(0, 0, P, False)])
gen, single = [], []
last = int(rows[-1].argmax())
for k in range(N):
    gen.append(last)
    r = decode([(0, len(P) + k, [last], True)])[0]
    single.append(r); last = int(r.argmax())
single = np.stack(single)
# 2. the same tokens verified in one batch of N rows
lc.llama_memory_clear(mem, True)
decode([(0, 0, P, False)])
import time

t0 = time.perf_counter(); batched = decode([(0, len(P), gen, True)]); t_batch = time.perf_counter() - t0
lc.llama_memory_seq_rm(mem, 0, len(P), -1)
t0 = time.perf_counter(); decode([(0, len(P), gen[:1], True)]); t_one = time.perf_counter() - t0
lc.llama_memory_seq_rm(mem, 0, len(P), -1)
t0 = time.perf_counter(); batched = decode([(0, len(P), gen, True)]); t_batch = min(t_batch, time.perf_counter() - t0)
print(f"verify {N} rows: {t_batch*1e3:.1f} ms, one row: {t_one*1e3:.1f} ms, a perfect draft gains {N / (t_batch / t_one):.2f}x")
# 3. batched with another sequence's rows in the same decode
lc.llama_memory_clear(mem, True)
decode([(0, 0, P, False), (1, 0, Q, False)])
mixed = decode([(0, len(P), gen, True), (1, len(Q), [Q[-1]] * 4, True)])[:N]
for name, other in (("batched", batched), ("with another seq", mixed)):
    d = np.abs(other - single)
    print(f"unified={unified} extra_bufts={extra} flash={flash} ubatch={ubatch} {name}: "
          f"bit-identical rows {int((d.max(axis=1) == 0).sum())}/{N}, max |diff| {d.max():.3g}")
