"""Models whose vocabulary has no BOS or no EOS load, answer /props and generate, on a real server.

llama.cpp aborts the whole process on two uses of a missing special token: ``llama_token_to_piece(-1)``
(an uncaught C++ exception; /props did it for ``bos_token``) and ``llama_tokenize`` with specials for
a model that asks for a BOS it lacks (a GGML_ASSERT). The fixtures are copies of SmolLM2-135M made
with the ``gguf`` package (weights untouched, written to a temporary directory: too big to commit):

- ``rwkv``: the vocabulary rewritten as an RWKV one (each token's bytes, RWKV-escaped), which has
  neither BOS nor EOS, as real RWKV models. BPE vocabularies cannot lose them: llama.cpp falls back to
  token 11 when the metadata names none.
- ``glm``: glm4's ``chatglm-bpe`` pre-tokenizer, which drops the BOS, with ``add_bos_token`` true (a
  model asking for the BOS it lacks) and FIM tokens, so /infill runs too.

Each server runs in its own process, so a crash is seen as one instead of ending the test run.
"""

from __future__ import annotations

import json

import gguf
import llama_cpp as lc
import pytest
from gguf.scripts.gguf_new_metadata import MetadataDetails

from tests.integration import fim_model
from tests.integration.fim_model import FIM_TOKENS, SMOLLM2
from tests.integration.serverproc import ServerProcess

SPECIAL_IDS = ("bos", "eos", "unknown")
ARGS = ["-c", "1024", "-np", "1", "--spec-type", "none", "-n", "16"]


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character a BPE token text uses -> its byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out = {chr(b): b for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in keep):
        out[chr(256 + n)] = b
    return out


def rwkv_escape(data: bytes) -> str:
    """A token's bytes as llama.cpp's RWKV vocabulary stores them (``\\xNN`` escapes, lowercase hex)."""
    return "".join("\\\\" if b == 0x5C else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data)


def write_copy(dst, new: dict[str, MetadataDetails], remove: list[str]) -> str:
    return str(fim_model.write_copy(SMOLLM2, dst, new, remove))


def rwkv_copy(dst) -> str:
    reader = gguf.GGUFReader(SMOLLM2, "r")
    tokens = reader.get_field("tokenizer.ggml.tokens").contents()
    types = reader.get_field("tokenizer.ggml.token_type").contents()
    decode = byte_decoder()
    tokens = [t if kind != gguf.TokenType.NORMAL else rwkv_escape(bytes(decode[c] for c in t))
              for t, kind in zip(tokens, types)]
    new = {"tokenizer.ggml.model": MetadataDetails(gguf.GGUFValueType.STRING, "rwkv"),
           "tokenizer.ggml.tokens": MetadataDetails(gguf.GGUFValueType.ARRAY, tokens,
                                                    sub_type=gguf.GGUFValueType.STRING)}
    remove = [f"tokenizer.ggml.{name}_token_id" for name in SPECIAL_IDS] + ["tokenizer.ggml.merges",
                                                                           "tokenizer.ggml.pre"]
    return write_copy(dst, new, remove)


def glm_copy(dst) -> str:
    new = {"tokenizer.ggml.pre": MetadataDetails(gguf.GGUFValueType.STRING, "chatglm-bpe"),
           "tokenizer.ggml.add_bos_token": MetadataDetails(gguf.GGUFValueType.BOOL, True),
           **{f"tokenizer.ggml.{name}_token_id": MetadataDetails(gguf.GGUFValueType.UINT32, token)
              for name, token in FIM_TOKENS.items()}}
    return write_copy(dst, new, ["tokenizer.ggml.bos_token_id"])


def special_ids(path: str) -> tuple[int, int, bool]:
    """(BOS, EOS, add_bos) as llama.cpp reads them."""
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(path.encode(), params)
    assert model, path
    try:
        vocab = lc.llama_model_get_vocab(model)
        return lc.llama_vocab_bos(vocab), lc.llama_vocab_eos(vocab), bool(lc.llama_vocab_get_add_bos(vocab))
    finally:
        lc.llama_model_free(model)


@pytest.fixture(scope="module")
def rwkv_server(tmp_path_factory):
    path = rwkv_copy(tmp_path_factory.mktemp("rwkv") / "smollm2-rwkv-vocab.gguf")
    assert special_ids(path) == (-1, -1, False)  # no BOS, no EOS
    proc = ServerProcess(["-m", path, *ARGS]).wait_ready()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def glm_server(tmp_path_factory):
    path = glm_copy(tmp_path_factory.mktemp("glm") / "smollm2-glm-pre.gguf")
    assert special_ids(path) == (-1, 2, True)  # asks for a BOS it does not have
    proc = ServerProcess(["-m", path, *ARGS]).wait_ready()
    yield proc
    proc.stop()


def get_json(proc: ServerProcess, path: str) -> tuple[int, dict]:
    status, data = proc.request("GET", path)
    return status, json.loads(data)


def assert_alive(proc: ServerProcess) -> None:
    assert proc.proc.poll() is None, proc.output()[-3000:]
    assert proc.request("GET", "/health")[0] == 200


def test_a_model_without_bos_and_eos_serves_props_completions_tokenize_and_chat(rwkv_server):
    try:
        status, props = get_json(rwkv_server, "/props")
        assert status == 200 and props["bos_token"] == "" and props["eos_token"] == ""
        status, out = rwkv_server.post_json("/completion", {"prompt": "Once upon a time", "n_predict": 8,
                                                            "temperature": 0.0})
        assert status == 200 and out["tokens_predicted"] > 0 and out["tokens_evaluated"] >= 4, out
        status, out = rwkv_server.post_json("/tokenize", {"content": "Hello world", "add_special": True,
                                                          "with_pieces": True})
        assert status == 200 and "".join(t["piece"] for t in out["tokens"]) == "Hello world", out
        status, out = rwkv_server.post_json("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, "temperature": 0.0})
        assert status == 200 and out["choices"][0]["message"]["content"] is not None, out
        status, out = rwkv_server.post_json("/completion", {"prompt": "1, 2, 3,", "n_predict": 4, "ignore_eos": True})
        assert status == 200 and out["tokens_predicted"] == 4, out
    finally:
        assert_alive(rwkv_server)


def test_a_model_asking_for_a_bos_it_lacks_tokenizes_generates_and_infills(glm_server):
    try:
        status, props = get_json(glm_server, "/props")
        assert status == 200 and props["bos_token"] == "" and props["eos_token"] == "<|im_end|>", props
        with_special = glm_server.post_json("/tokenize", {"content": "Hello world", "add_special": True})
        without = glm_server.post_json("/tokenize", {"content": "Hello world", "add_special": False})
        assert with_special[0] == 200 and with_special == without, (with_special, without)
        status, out = glm_server.post_json("/completion", {"prompt": "Once upon a time", "n_predict": 8,
                                                           "temperature": 0.0})
        assert status == 200 and out["tokens_predicted"] > 0, out
        status, out = glm_server.post_json("/infill", {"input_prefix": "def add(a, b):\n    return ",
                                                       "input_suffix": "\n", "n_predict": 4, "temperature": 0.0})
        assert status == 200 and out["tokens_evaluated"] > 0, out
    finally:
        assert_alive(glm_server)
