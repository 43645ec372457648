"""The pure parts of the cache-file tool: merge, inspect, the static builder and the replay."""

import io

from ngram.cache_data import NgramCache, make_ngram
from ngram.cachefile import FORMAT_MSGPACK, load_cache, save_cache
from ngram.map_state import NgramMapConfig
from ngram.simple import NgramSimple
from slotserver.tools.ngram_replay import replay
from slotserver.tools.ngram_tool import build_static, main

FP = "ef" * 32


def write(tmp_path, name, tokens, fmt="llamacpp", fingerprint=None):
    c = NgramCache()
    c.update(tokens, 2, 2)
    path = tmp_path / name
    save_cache(c, path, fmt, fingerprint)
    return str(path)


def test_merge_sums_counts(tmp_path, capsys):
    a = write(tmp_path, "a.bin", [1, 2, 3])
    b = write(tmp_path, "b.bin", [1, 2, 3, 1, 2, 4])
    out = tmp_path / "m.bin"
    assert main(["merge", a, b, str(out)]) == 0
    merged = load_cache(out).cache
    assert merged.get(make_ngram([1, 2])) == {3: 2, 4: 1}
    assert "2 files" in capsys.readouterr().out


def test_merge_keeps_fingerprint_and_refuses_mixed(tmp_path):
    a = write(tmp_path, "a.ss", [1, 2, 3], FORMAT_MSGPACK, FP)
    b = write(tmp_path, "b.ss", [1, 2, 3], FORMAT_MSGPACK, "00" * 32)
    out = tmp_path / "m.ss"
    assert main(["merge", a, a, str(out), "--format", "msgpack"]) == 0
    assert load_cache(out).fingerprint == FP
    assert main(["merge", a, b, str(out)]) == 2


def test_inspect(tmp_path, capsys):
    path = write(tmp_path, "a.bin", [5, 6, 7, 5, 6, 8, 5, 6, 7])
    assert main(["inspect", path, "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "format:      llamacpp" in out and "n-grams:     5" in out and "n=2: 5" in out
    assert "[5, 6] 3: 7x2, 8x1" in out


def test_build_static_counts_bigrams_with_progress(monkeypatch):
    # Chunked counting (chunk 4) equals one pass, including 2-grams across chunk borders.
    monkeypatch.setattr("slotserver.tools.ngram_tool.PROGRESS_CHUNK", 4)
    tokens = [1, 2, 3, 1, 2, 3, 4, 1, 2]
    err = io.StringIO()
    whole = NgramCache()
    whole.update(tokens, 2, 2)
    assert build_static(tokens, err) == whole
    assert err.getvalue().endswith("9/9 tokens\n")


def test_replay_counts_drafted_and_accepted():
    # A repeated 6-token phrase: ngram-simple (n=2, m=3) drafts on the repeat and is accepted.
    tokens = [1, 2, 3, 4, 5, 6, 9, 9, 1, 2, 3, 4, 5, 6]
    st = replay(NgramSimple(NgramMapConfig(2, 3)), tokens, n_ctx=64, n_draft=8)
    assert st.n_tokens == len(tokens) and st.n_drafted > 0 and st.n_accepted == st.n_drafted
