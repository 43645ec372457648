"""The engine: one llama.cpp model and context, one batch, one ``llama_decode`` per step.

Only the engine thread calls into this class. It computes; the scheduler decides what to compute.
Each slot is a sequence id in one context. As in llama-server, the sequences share one KV cache
with ``--kv-unified`` (the default without ``-np``) and otherwise each may hold ``n_ctx / n_parallel``
tokens: in its own KV stream (llama-server's layout; a slot's attention spans only its own cells)
or in one cache holding every slot's share (every step one graph; ``kv_layout.py`` says which is
faster for a model). The SWA cache is kept full size so that rejected draft positions and old
prefixes can be removed and reused exactly.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass

import llama_cpp as lc
import numpy as np

from slotserver.engine.batch import BatchPlan, reusable_prefix
from slotserver.engine.cpu_kernels import use_extra_bufts
from slotserver.engine.token_probs import TokenProbs
from slotserver.engine.vocab import Vocab
from slotserver.sampling.candidates import CandidateSampler
from slotserver.sampling.grammar_sampler import NO_TOKEN, GrammarSampler

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    model_path: str
    n_ctx: int = 0  # 0: the model's training context
    n_parallel: int = 4
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 0  # 0: all cores
    # llama-server's context model: each slot may use n_ctx / n_parallel tokens, unless the slots
    # share the whole cache (--kv-unified; also llama-server's default when -np is not given).
    kv_unified: bool = False
    # How the cells are laid out when each slot has its share (--kv-streams): a KV stream per slot
    # (llama-server's layout) or one cache holding every slot's share. None: not decided yet
    # (``kv_layout.resolve`` measures both at start-up). Ignored with kv_unified: one cache.
    kv_streams: bool | None = True

    @property
    def threads(self) -> int:
        """The threads llama.cpp is given (``n_threads`` 0: every core)."""
        return self.n_threads or os.cpu_count() or 1

    @property
    def streams(self) -> bool:
        """Each slot has its own KV stream (llama.cpp's cache without ``kv_unified``)."""
        return not self.kv_unified and bool(self.kv_streams)

    def __post_init__(self) -> None:
        if self.n_parallel < 1:
            raise ValueError("-np must be at least 1")
        if self.n_batch < self.n_parallel or self.n_ubatch < 1:
            raise ValueError("-b must be >= -np and -ub >= 1")

    @property
    def layout(self) -> str:
        """How the slots hold their cells (``/props``): ``unified`` (one cache, every slot may use
        all of it), ``streams`` (a KV stream per slot) or ``one-cache`` (one cache, a share each)."""
        return "unified" if self.kv_unified else "streams" if self.streams else "one-cache"


class DecodeError(RuntimeError):
    def __init__(self, code: int) -> None:
        super().__init__(f"llama_decode failed with code {code}")
        self.code = code


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        if config.kv_streams is None and not config.kv_unified:
            raise ValueError("the KV layout is not decided (kv_layout.resolve)")
        self.config = config
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.use_extra_bufts = use_extra_bufts()
        self.model = lc.llama_model_load_from_file(config.model_path.encode(), mparams)
        if not self.model:
            raise RuntimeError(f"could not load model {config.model_path}")
        self.vocab = Vocab(self.model)
        self.candidates = CandidateSampler(self.vocab.n_tokens)
        self.constrained = GrammarSampler(self.candidates)
        self.n_ctx_train = lc.llama_model_n_ctx_train(self.model)
        self.n_swa = lc.llama_model_n_swa(self.model)  # sliding-window attention span, 0 = none
        self.n_embd = lc.llama_model_n_embd(self.model)
        self.n_params = lc.llama_model_n_params(self.model)
        self.size = lc.llama_model_size(self.model)  # bytes of weights
        n_threads = config.threads
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = config.n_ctx or self.n_ctx_train
        cparams.n_batch = config.n_batch
        cparams.n_ubatch = min(config.n_ubatch, config.n_batch)
        cparams.n_seq_max = config.n_parallel
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.kv_unified = not config.streams
        cparams.swa_full = True
        self.ctx = lc.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("could not create the llama context")
        self.n_ctx = lc.llama_n_ctx(self.ctx)
        # A slot's share; in one cache without kv_unified the runner holds each slot to it as the
        # streams do, so the slots together never need more cells than the cache has.
        self.n_ctx_slot = self.n_ctx if config.kv_unified else lc.llama_n_ctx_seq(self.ctx) if config.streams \
            else self.n_ctx // config.n_parallel
        self.memory = lc.llama_get_memory(self.ctx)
        # Whether KV entries can be moved to other positions (context shift, --cache-reuse).
        self.can_shift = bool(lc.llama_memory_can_shift(self.memory))
        self.n_threads = n_threads
        self._batch = lc.llama_batch_init(config.n_batch, 0, 1)
        self._tokens = np.ctypeslib.as_array(self._batch.token, shape=(config.n_batch,))
        self._pos = np.ctypeslib.as_array(self._batch.pos, shape=(config.n_batch,))
        self._n_seq = np.ctypeslib.as_array(self._batch.n_seq_id, shape=(config.n_batch,))
        self._logits = np.ctypeslib.as_array(self._batch.logits, shape=(config.n_batch,))
        self._n_seq[:] = 1
        self._seq_ptrs = [self._batch.seq_id[i] for i in range(config.n_batch)]
        desc = ctypes.create_string_buffer(256)
        lc.llama_model_desc(self.model, desc, 256)
        self.description = desc.value.decode(errors="replace")

    def close(self) -> None:
        if self.ctx:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self.ctx)
            lc.llama_model_free(self.model)
            self.ctx = self.model = None

    def decode(self, plan: BatchPlan) -> list[list[int]]:
        """Run one ``llama_decode`` over the plan; per entry, the batch rows holding its outputs."""
        i = 0
        rows: list[list[int]] = []
        for e in plan.entries:
            n = len(e.tokens)
            self._tokens[i : i + n] = e.tokens
            self._pos[i : i + n] = np.arange(e.pos0, e.pos0 + n, dtype=np.int32)
            seq_ptrs = self._seq_ptrs
            for k in range(i, i + n):
                seq_ptrs[k][0] = e.slot_id
            if e.is_decode:
                self._logits[i : i + n] = 1
                rows.append(list(range(i, i + n)))
            else:
                self._logits[i : i + n] = 0
                if e.ends_prompt:
                    self._logits[i + n - 1] = 1
                rows.append([i + n - 1] if e.ends_prompt else [])
            i += n
        self._batch.n_tokens = i
        code = lc.llama_decode(self.ctx, self._batch)
        if code != 0:
            raise DecodeError(code)
        # llama_get_logits holds the output rows in batch order: row r is output _out_index[r]
        self._out_index = np.cumsum(self._logits[:i], dtype=np.int64) - 1
        self._n_outputs = int(self._out_index[-1]) + 1 if i else 0
        return rows

    def argmax(self, rows: list[int]) -> list[int]:
        """Greedy tokens at consecutive output ``rows``: one numpy pass instead of one sampler call per row.

        Equal to llama.cpp's greedy sampler, which also keeps the first of equal maxima.
        """
        return self._output_logits(rows).argmax(axis=1).tolist()

    def top1(self, rows: list[int]) -> tuple[list[int], list[float]]:
        """Most likely token and its softmax probability at consecutive output ``rows`` (a draft model's pick)."""
        logits = self._output_logits(rows)
        best = logits.argmax(axis=1)
        top = logits[np.arange(len(rows)), best]
        # In float64: in float32 a tail mass under 6e-8 rounds away and a probability becomes exactly 1.
        p = 1.0 / np.exp((logits - top[:, None]).astype(np.float64)).sum(axis=1)
        return best.tolist(), p.tolist()

    def _output_logits(self, rows: list[int]) -> np.ndarray:
        """The logits at consecutive output ``rows`` of the last decode, read in place, one row each."""
        first, last = int(self._out_index[rows[0]]), int(self._out_index[rows[-1]])
        assert last - first == len(rows) - 1, "rows must be consecutive outputs"
        ptr = lc.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(self._n_outputs, self.vocab.n_tokens))[first : last + 1]

    def sample(self, sampler, row: int, grammar=None, argmax: bool = False) -> int:
        """Sample (and accept into the sampler, and the grammar if any) the token at output ``row`` of
        the last decode; NO_TOKEN if the grammar allows nothing the chain leaves. ``argmax``: the
        chain picks the argmax (``SamplingParams.picks_argmax``), which a grammar can find faster."""
        if grammar is None:
            return lc.llama_sampler_sample(sampler, self.ctx, row)
        return self.constrained.sample(sampler, grammar, self._logits_view(row), argmax)

    def _logits_view(self, row: int) -> np.ndarray:
        """The logits at output ``row`` of the last decode, read in place (valid until the next decode)."""
        ptr = lc.llama_get_logits_ith(self.ctx, row)
        return np.ctypeslib.as_array(ptr, shape=(self.vocab.n_tokens,))

    def logits(self, row: int) -> np.ndarray:
        return self._logits_view(row).copy()

    def sample_post(self, sampler, row: int, n: int, greedy: bool, grammar=None,
                    argmax: bool = False) -> TokenProbs | None:
        """Sample (and accept) at ``row`` as ``sample`` does, keeping the post-sampling probabilities
        (None where ``sample`` gives NO_TOKEN)."""
        if grammar is None:
            token, p, top = self.candidates.sample(sampler, self._logits_view(row), n, greedy)
            return TokenProbs(token, p, tuple(top))
        token = self.constrained.sample(sampler, grammar, self._logits_view(row), argmax)
        if token == NO_TOKEN:
            return None
        p, top = self.candidates.probs(token, n, greedy)
        return TokenProbs(token, p, tuple(top))

    def top_logprobs(self, row: int, n: int, token: int) -> TokenProbs:
        """``token``'s and the ``n`` most likely tokens' log-softmax of the raw logits at ``row``."""
        logits = self._logits_view(row).astype(np.float64)
        m = logits.max()
        lse = m + np.log(np.exp(logits - m).sum())
        top = np.argpartition(-logits, n)[:n]
        top = top[np.argsort(-logits[top], kind="stable")]
        return TokenProbs(token, float(logits[token] - lse), tuple((int(t), float(logits[t] - lse)) for t in top))

    def chat_prompt(self, messages: list[tuple[str, str]]) -> str:
        """Render (role, content) messages with the model's chat template (ChatML if it has none),
        ending with the assistant's turn, as llama.cpp's ``llama_chat_apply_template``.

        A last message from the assistant is a prefill, as in llama-server: the prompt opens the
        assistant's turn with that text, and generation continues it.
        """
        if messages and messages[-1][0] == "assistant":
            return self._render(messages[:-1]) + messages[-1][1]
        return self._render(messages)

    def _render(self, messages: list[tuple[str, str]]) -> str:
        template = lc.llama_model_chat_template(self.model, None)
        arr = (lc.llama_chat_message * len(messages))()
        keep = []  # the C strings must outlive the call
        for i, (role, content) in enumerate(messages):
            keep += [role.encode(), content.encode()]
            arr[i].role, arr[i].content = keep[-2], keep[-1]
        size = 4096 + 2 * sum(len(c) for c in keep)
        buf = ctypes.create_string_buffer(size)
        n = lc.llama_chat_apply_template(template, arr, len(messages), True, buf, size)
        if n < 0:
            raise ValueError("the model's chat template is not supported")
        if n > size:
            buf = ctypes.create_string_buffer(n)
            n = lc.llama_chat_apply_template(template, arr, len(messages), True, buf, n)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def reusable_prefix(self, slot_id: int, n_keep: int) -> int:
        """How much of the slot's first ``n_keep`` cached positions can really be reused.

        llama.cpp recycles sliding-window cells that fell out of the window of the sequence's newest
        token, so a long sequence loses its oldest SWA entries. Continuing after ``n_keep`` needs the
        last ``n_swa`` of them; if they are gone, the prefix must be decoded again.
        """
        if n_keep <= 0 or self.n_swa <= 0:
            return n_keep
        return reusable_prefix(n_keep, lc.llama_memory_seq_pos_min(self.memory, slot_id), self.n_swa)

    def shift(self, slot_id: int, p0: int, p1: int, delta: int) -> None:
        """Move the KV entries of ``slot_id`` at positions [p0, p1) by ``delta`` (needs ``can_shift``)."""
        assert self.can_shift, "this model's KV cache cannot be shifted"
        lc.llama_memory_seq_add(self.memory, slot_id, p0, p1, delta)

    def copy(self, src: int, dst: int, n: int) -> None:
        """Let sequence ``dst`` use ``src``'s KV entries at positions [0, n); ``dst`` must hold
        nothing. The unified cache shares the cells (no copy, no extra room); between streams
        llama.cpp copies only whole streams (at the next decode), so ``dst`` gets all of ``src``'s
        and drops what follows ``n``."""
        if not self.config.streams:
            lc.llama_memory_seq_cp(self.memory, src, dst, 0, n)
            return
        lc.llama_memory_seq_cp(self.memory, src, dst, -1, -1)
        self.remove(dst, n)

    def remove(self, slot_id: int, p0: int, p1: int = -1) -> None:
        """Drop KV entries of ``slot_id`` at positions [p0, p1) (p1 = -1: to the end)."""
        ok = lc.llama_memory_seq_rm(self.memory, slot_id, p0, p1)
        assert ok, "partial KV removal failed"
