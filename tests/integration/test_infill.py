"""/infill as llama.vim uses it, replayed with its exact request bodies (llama.vim a1c8e6e, autoload/llama.vim).

The server runs a copy of SmolLM2-135M whose metadata declares FIM tokens (fim_model.py).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import LiveServer
from tests.integration.fim_model import SMOLLM2, write_fim_copy

FUNCS = "".join(f'def op_{n}(a, b):\n    """Apply {n} to a and b."""\n    return OPS["{n}"](a, b)\n\n\n'
                for n in ("add", "sub", "mul", "div", "mod", "pow", "min", "max"))
HELPERS = "".join(f"def helper_{i}(x):\n    return x * {i} + {i * i}\n\n\n" for i in range(12))
CONFIG = "".join(f"SETTING_{i} = {i * 7} + OFFSET  # setting number {i}\n" for i in range(40))
CURRENT = "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\n\ndef perimeter(r):\n"

# llama.vim's response_fields for a FIM request (s:fim, l.701-892)
FIM_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
              "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
              "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached"]


def ring(*texts_and_names) -> list[dict]:
    """llama.vim's ring chunks: text, the Vim reltime() list (ignored by servers) and the file name."""
    return [{"text": text, "time": [1732000000, 1234], "filename": name} for text, name in texts_and_names]


def warmup(extra: list[dict]) -> dict:
    """Request B: extra-context warm-up (s:ring_update)."""
    return {"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "",
            "n_predict": 0, "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 1, "t_max_predict_ms": 1, "response_fields": [""], "model": ""}


def fim(prefix: str, middle: str, suffix: str, extra: list[dict], t_max_predict_ms: int = 250) -> dict:
    """Request A: the FIM completion (llama#fim); 1000 ms for the speculative follow-up."""
    indent = len(middle) - len(middle.lstrip(" \t"))
    return {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": extra,
            "prompt": middle, "n_predict": 128, "stop": [], "n_indent": indent, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 500, "t_max_predict_ms": t_max_predict_ms, "response_fields": FIM_FIELDS,
            "model": ""}


@pytest.fixture(scope="module")
async def fim_server(tmp_path_factory):
    model = write_fim_copy(SMOLLM2, tmp_path_factory.mktemp("fim") / "smollm2-fim.gguf")
    # -b 1024 as llama-server's --fim-qwen-* presets (it also keeps the long-prompt test short)
    srv = await LiveServer(["-m", str(model), "-c", "8192", "-b", "1024", "-ub", "1024", "--cache-reuse", "32",
                            "--spec-type", "ngram-mod"]).start()
    yield srv
    await srv.stop()


async def raw_post(srv: LiveServer, path: str, body: dict) -> tuple[int, str]:
    async with srv.http.post(srv.url + path, data=json.dumps(body)) as resp:
        return resp.status, await resp.text()


def cached_share(out: dict) -> float:
    """Share of the prompt served from the KV cache, from the fields llama.vim asks for."""
    n_cache = out["tokens_cached"] - out["timings/prompt_n"] - out["timings/predicted_n"]
    return n_cache / (n_cache + out["timings/prompt_n"])


async def test_llama_vim_sequence_warmup_fim_and_speculative_follow_up(fim_server):
    extra = ring((FUNCS, "ops.py"), (HELPERS, "helpers.py"))
    status, text = await raw_post(fim_server, "/infill", warmup(extra))
    assert status == 200 and json.loads(text) == {}

    prefix, middle, suffix = CURRENT, "    ", "\n\ndef volume(r):\n    return 0\n"
    status, text = await raw_post(fim_server, "/infill", fim(prefix, middle, suffix, extra))
    # llama.vim accepts a reply only if it matches both patterns (s:fim_on_response)
    assert status == 200 and re.match(r"^\s*{", text) and re.search(r'"content"\s*:"', text)
    first = json.loads(text)
    assert set(first) == set(FIM_FIELDS)
    assert cached_share(first) > 0.9, first  # the warm-up cached the extra context

    # llama.vim then asks for what follows if the suggestion is accepted (s:fim_try_hint / speculative FIM)
    lines = (middle + first["content"]).split("\n")
    follow = fim(prefix + "\n".join(lines[:-1]) + ("\n" if len(lines) > 1 else ""), lines[-1], suffix, extra, 1000)
    status, text = await raw_post(fim_server, "/infill", follow)
    second = json.loads(text)
    assert status == 200 and set(second) == set(FIM_FIELDS)
    assert cached_share(second) > 0.9, second


async def test_a_ring_chunk_leaving_is_reused_by_shifting_the_rest(fim_server):
    """--cache-reuse: the first chunk leaves the ring; the chunks after it are moved, not decoded again."""
    old = ring((CONFIG, "config.py"), (FUNCS, "ops.py"), (HELPERS, "helpers.py"))
    await fim_server.post("/infill", {**warmup(old), "t_max_prompt_ms": -1})  # all of it cached
    status, out = await fim_server.post("/infill", {**warmup(old[1:]), "response_fields": []})
    assert status == 200
    t = out["timings"]
    assert t["cache_n"] > 0.9 * out["tokens_evaluated"], t
    assert t["prompt_n"] < 0.1 * out["tokens_evaluated"], t


async def test_t_max_prompt_ms_ends_a_long_prompt_after_the_chunk_in_flight(fim_server):
    big = ring(*((CONFIG.replace("setting", f"value {k}"), f"c{k}.py") for k in range(3)))
    body = {**warmup(big), "response_fields": []}
    status, out = await fim_server.post("/infill", body)  # -b 1024: one chunk, then 1 ms is long gone
    assert status == 200 and out["stop_type"] == "limit" and out["tokens_evaluated"] > 1024
    assert out["timings"]["prompt_n"] == 1024
    n_cached = out["timings"]["cache_n"] + 1024  # what the slot held before, plus the chunk
    status, out = await fim_server.post("/infill", {**body, "t_max_prompt_ms": -1})
    assert out["timings"]["cache_n"] == n_cached and out["timings"]["prompt_n"] == out["tokens_evaluated"] - n_cached


async def test_a_repeated_edit_is_drafted_and_stays_lossless(fim_server):
    """The file being edited repeats code from the ring: ngram-mod drafts it, output equals no speculation."""
    extra = ring((FUNCS, "ops.py"))
    cut = FUNCS.index("def op_mod")
    body = {**fim(FUNCS[:cut], "", "\n", extra), "samplers": ["top_k", "temperature"], "temperature": 0.0,
            "t_max_predict_ms": -1, "n_predict": 48, "response_fields": []}
    status, spec = await fim_server.post("/infill", body)
    assert status == 200 and spec["timings"].get("draft_n_accepted", 0) > 0, spec["timings"]
    status, plain = await fim_server.post("/infill", {**body, "speculative.type": "none"})
    assert plain["content"] == spec["content"] and "draft_n" not in plain["timings"]


async def test_llama_vim_sampling_with_a_seed_is_the_same_with_and_without_drafts(fim_server):
    """llama.vim's chain (top_k, top_p, infill; no temperature sampler: T = 1) through verification.

    At T = 1 whether the model copies (and so drafts) depends on the seed: seeds are tried until one
    drafted; every one must give the same tokens with and without speculation.
    """
    extra = ring((FUNCS, "ops.py"))
    cut = FUNCS.index("def op_pow")
    n_drafted = 0
    for seed in range(1, 9):
        body = {**fim(FUNCS[:cut], "", "\n", extra), "seed": seed, "t_max_predict_ms": -1, "n_predict": 40,
                "cache_prompt": False, "response_fields": ["tokens", "timings"], "return_tokens": True}
        status, spec = await fim_server.post("/infill", body)
        status, plain = await fim_server.post("/infill", {**body, "speculative.type": "none"})
        assert status == 200 and spec["tokens"] == plain["tokens"], seed
        n_drafted += spec["timings"].get("draft_n_accepted", 0)
        if n_drafted > 0:
            break
    assert n_drafted > 0  # the drafts were really verified


@pytest.mark.parametrize("chunk", [{}, {"filename": "ok"}, {"filename": 123}, {"filename": 123, "text": "abc"},
                                   {"filename": 123, "text": 456}])
async def test_invalid_extra_chunks_get_400_as_llama_server(fim_server, chunk):
    status, out = await fim_server.post("/infill", {"input_prefix": "a", "input_suffix": "b", "input_extra": [chunk]})
    assert status == 400 and "extra_context chunk" in out["error"]["message"]


async def test_id_slot_wraps_modulo_the_slot_count(fim_server):
    status, out = await fim_server.post("/infill", {"input_prefix": "x = 1\n", "input_suffix": "", "n_predict": 2,
                                                    "id_slot": 6, "temperature": 0.0})
    assert status == 200 and out["id_slot"] == 6 % 4


async def test_a_model_without_fim_tokens_gets_501(server):
    status, out = await server.post("/infill", {"input_prefix": "def f():\n", "input_suffix": ""})
    assert status == 501 and "Infill is not supported" in out["error"]["message"]
