"""suffix-build and suffix-inspect without a model: texts of numbers, tokenized by a fake vocabulary."""

import io

import numpy as np
import pytest

from ngram.suffix import MIB, SuffixConfig
from ngram.suffix_store import SuffixStore
from ngram.suffixfile import load_store, save_store
from slotserver.engine.fingerprint import VocabInfo
from slotserver.tools.ngram_tool import main
from slotserver.tools.ngram_tool_suffix import add_texts, top_contexts

FP = "ab" * 32
N_VOCAB = 100
SMALL = ["--depth", "4", "--n-max", "8"]
SPAN = SuffixConfig(depth=4, n_max=8).span


class FakeVocab:
    """Token ids written as numbers: ``b"1 2 3"`` is [1, 2, 3]; token t reads as ``wt``."""

    def __init__(self, fingerprint=FP):
        self.fingerprint = fingerprint

    def tokenize(self, text, add_bos):
        assert not add_bos  # stored requests are outputs: no BOS
        return [int(w) for w in text.split()]

    def detokenize(self, tokens):
        return " ".join(f"w{t}" for t in tokens)

    def info(self):
        return VocabInfo(self.fingerprint, N_VOCAB)


@pytest.fixture
def vocab(monkeypatch):
    fake = FakeVocab()
    monkeypatch.setattr("slotserver.tools.ngram_tool_suffix.open_vocab", lambda path: fake)
    return fake


def texts(tmp_path, *contents):
    paths = []
    for i, content in enumerate(contents):
        path = tmp_path / f"t{i}.txt"
        path.write_text(content)
        paths += ["-f", str(path)]
    return paths


def test_build_saves_what_the_server_would_and_it_reloads_identical(tmp_path, vocab, capsys):
    out = tmp_path / "global.sssuffix"
    argv = ["suffix-build", "-m", "model.gguf", *texts(tmp_path, "1 2 3 4 5", "6 7 8 1 2 3 9"), "-o", str(out)]
    assert main(argv + SMALL) == 0
    assert "2 requests, 12 tokens (2 requests added, 0 evicted, 0 over the budget)" in capsys.readouterr().out
    loaded = load_store(out, SPAN, SuffixConfig().max_bytes, FP, n_vocab=N_VOCAB)
    built = SuffixStore(SPAN, SuffixConfig().max_bytes)  # the server adds finished requests one by one
    built.add([1, 2, 3, 4, 5])
    built.add([6, 7, 8, 1, 2, 3, 9])
    assert loaded.requests() == built.requests() == [[1, 2, 3, 4, 5], [6, 7, 8, 1, 2, 3, 9]]
    for name in ("vals", "sa", "lcp"):
        assert np.array_equal(getattr(loaded.index, name), getattr(built.index, name)), name


def test_chunk_splits_each_file_into_requests(tmp_path, vocab):
    out = tmp_path / "global.sssuffix"
    argv = ["suffix-build", "-m", "m", *texts(tmp_path, "1 2 3 4 5", "6 7 8 1 2 3 9"), "-o", str(out), "--chunk", "3"]
    assert main(argv + SMALL) == 0
    assert load_store(out, SPAN, 1 << 20).requests() == [[1, 2, 3], [4, 5], [6, 7, 8], [1, 2, 3], [9]]


def test_append_extends_the_file_and_without_it_the_file_is_replaced(tmp_path, vocab):
    out = str(tmp_path / "global.sssuffix")
    assert main(["suffix-build", "-m", "m", *texts(tmp_path, "1 2 3"), "-o", out] + SMALL) == 0
    assert main(["suffix-build", "-m", "m", "-f", str(tmp_path / "t0.txt"), "-o", out, "--append"] + SMALL) == 0
    assert load_store(out, SPAN, 1 << 20).requests() == [[1, 2, 3], [1, 2, 3]]
    assert main(["suffix-build", "-m", "m", *texts(tmp_path, "4 5"), "-o", out] + SMALL) == 0
    assert load_store(out, SPAN, 1 << 20).requests() == [[4, 5]]


def test_append_refuses_a_file_of_another_vocabulary(tmp_path, vocab, capsys):
    out = tmp_path / "global.sssuffix"
    store = SuffixStore(SPAN, 1 << 20)
    store.add([1, 2])
    save_store(store, out, "00" * 32)
    assert main(["suffix-build", "-m", "m", *texts(tmp_path, "3 4"), "-o", str(out), "--append"] + SMALL) == 2
    assert "tokenizer fingerprint" in capsys.readouterr().err
    assert load_store(out, SPAN, 1 << 20).requests() == [[1, 2]]  # left as it was


def test_a_corpus_over_the_budget_keeps_its_newest_chunks(tmp_path, vocab, capsys):
    # Requests of 3 tokens cost 8 x (3 + 12) + 5 x 3 + 8 = 143 bytes: 430 bytes hold three at most.
    out = tmp_path / "global.sssuffix"
    argv = ["suffix-build", "-m", "m", *texts(tmp_path, "1 2 3 4 5 6 7 8 9 10 11 12"), "-o", str(out),
            "--chunk", "3", "--max-mb", str(430 / MIB)]
    assert main(argv + SMALL) == 0
    kept = load_store(out, SPAN, 430).requests()
    assert kept[-1] == [10, 11, 12] and len(kept) < 4
    assert f"({4} requests added, {4 - len(kept)} evicted, 0 over the budget)" in capsys.readouterr().out


def test_add_texts_draws_progress_and_skips_requests_over_the_budget(monkeypatch):
    monkeypatch.setattr("slotserver.tools.ngram_tool_suffix.PROGRESS_EVERY", 4)
    store = SuffixStore(SPAN, 8 * (5 + SPAN) + 5 * 5 + 8)  # room for one request of 5 tokens
    err = io.StringIO()
    stats = add_texts(store, [np.arange(1, 13, dtype=np.int32)], 5, err)
    assert (stats.n_added, stats.n_too_large, stats.n_tokens) == (3, 0, 12)
    assert store.requests() == [[11, 12]]  # FIFO: only the newest fits
    assert err.getvalue() == "".join(f"\r[{'#' * (40 * d // 12)}{'.' * (40 - 40 * d // 12)}] {d}/12 tokens"
                                     for d in (5, 10, 12)) + "\n"
    stats = add_texts(store, [np.arange(1, 9, dtype=np.int32)], 0, io.StringIO())
    assert (stats.n_added, stats.n_too_large) == (0, 1)


def test_top_contexts_count_runs_and_leave_out_request_ends():
    # [1, 2] occurs four times: 3 came after it twice, 4 once, and one [1, 2] ends its request.
    store = SuffixStore(SPAN, 1 << 20)
    for request in ([1, 2, 3, 1, 2], [7, 1, 2, 3], [1, 2, 4]):
        store.add(request)
    top = top_contexts(store.index, 2, 2)
    assert top == [([1, 2], 4, [(3, 2), (4, 1)]), ([2, 3], 2, [(1, 1)])]
    # Three-token contexts: [1, 2] + a request's end is none of them.
    assert ([1, 2, 3], 2, [(1, 1)]) in top_contexts(store.index, 3, 10)
    assert all(len(c) == 3 for c, _, _ in top_contexts(store.index, 3, 10))


def test_inspect_prints_the_counts_and_top_contexts(tmp_path, vocab, capsys):
    path = tmp_path / "global.sssuffix"
    store = SuffixStore(SPAN, 1 << 20)
    store.add([5, 6, 7, 5, 6, 8, 5, 6, 7])
    save_store(store, path, FP)
    assert main(["suffix-inspect", str(path), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert f"fingerprint: {FP}\n" in out and "span:        12 " in out
    assert "requests:    1 (tokens each: min 9, median 9, max 9)" in out and "tokens:      9\n" in out
    assert "[5, 6] 3: 7 x2, 8 x1" in out
    assert main(["suffix-inspect", str(path), "--top", "1", "-m", "model.gguf"]) == 0
    out = capsys.readouterr().out
    assert f"fingerprint: {FP} (the model's)" in out
    assert "[5, 6] 'w5 w6' 3: 7 'w7' x2, 8 'w8' x1" in out


def test_inspect_reports_a_bad_file(tmp_path, capsys):
    path = tmp_path / "not.sssuffix"
    path.write_bytes(b"SSNGRAM\x00")
    assert main(["suffix-inspect", str(path)]) == 2
    assert "bad magic" in capsys.readouterr().err
